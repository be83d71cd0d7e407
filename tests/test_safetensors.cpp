// The safetensors layer: round trips of every dtype, a file written by HF's python library,
// and one test per malformed layout, each checking the error names the file and the problem.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/io/safetensors.h"
#include "test_util.h"

namespace st = tandem::safetensors;

namespace {

const std::vector<st::Dtype> kAllDtypes = {
    st::Dtype::BOOL, st::Dtype::U8,   st::Dtype::I8,  st::Dtype::I16,     st::Dtype::U16,
    st::Dtype::F16,  st::Dtype::BF16, st::Dtype::I32, st::Dtype::U32,     st::Dtype::F32,
    st::Dtype::F64,  st::Dtype::I64,  st::Dtype::U64, st::Dtype::F8_E4M3, st::Dtype::F8_E5M2};

/// Reads a little-endian T at `bytes` (which need not be aligned).
template <typename T>
T load(const uint8_t* bytes) {
  T value;
  std::memcpy(&value, bytes, sizeof(T));
  return value;
}

/// An IEEE half (1 sign, 5 exponent, 10 mantissa bits) as float; normals and zero only.
float half_to_float(uint16_t bits) {
  const int exponent = (bits >> 10) & 0x1F;
  const float magnitude =
      exponent == 0 ? 0.0f : std::ldexp(1.0f + (bits & 0x3FF) / 1024.0f, exponent - 15);
  return (bits & 0x8000) ? -magnitude : magnitude;
}

/// A bfloat16 (the top half of a float's bits) as float.
float bf16_to_float(uint16_t bits) {
  const uint32_t widened = uint32_t(bits) << 16;
  float value;
  std::memcpy(&value, &widened, sizeof(value));
  return value;
}

class SafetensorsTest : public testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = testing::TempDir() + "tandem_safetensors_XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr) << pattern;
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  /// Path of `name` inside this test's temp dir.
  std::string path_of(const std::string& name) const { return dir_ + "/" + name; }

  /// Writes `bytes` verbatim to `name` in the temp dir and returns its path.
  std::string write_bytes(const std::string& name, const std::string& bytes) const {
    const std::string path = path_of(name);
    std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
    return path;
  }

  /// Writes a file with length field `header_size`, then `header`, then `data_size` zero bytes.
  std::string write_raw(const std::string& name, uint64_t header_size, const std::string& header,
                        size_t data_size) const {
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = char((header_size >> (8 * i)) & 0xFF);
    return write_bytes(name, bytes + header + std::string(data_size, '\0'));
  }

  /// Writes a well-framed file: `header` JSON followed by `data_size` zero bytes.
  std::string write_header(const std::string& name, const std::string& header,
                           size_t data_size) const {
    return write_raw(name, header.size(), header, data_size);
  }

  /// Expects File::open(path) to throw a tandem::Error naming `path` and containing `phrase`.
  static void expect_open_error(const std::string& path, const std::string& phrase) {
    try {
      st::File::open(path);
      ADD_FAILURE() << "no error opening " << path << " (expected '" << phrase << "')";
    } catch (const tandem::Error& error) {
      const std::string message = error.what();
      EXPECT_EQ(message.rfind("[safetensors] " + path + ": ", 0), 0u) << message;
      EXPECT_NE(message.find(phrase), std::string::npos)
          << "message: " << message << "\nexpected phrase: " << phrase;
    }
  }

  std::string dir_;
};

// ---------------------------------------------------------------------------------------------
// Dtypes and round trips

TEST(SafetensorsDtype, NamesSizesAndParsing) {
  for (st::Dtype dtype : kAllDtypes) {
    EXPECT_EQ(st::parse_dtype(st::dtype_name(dtype)), dtype) << st::dtype_name(dtype);
  }
  EXPECT_EQ(st::dtype_size(st::Dtype::BOOL), 1u);
  EXPECT_EQ(st::dtype_size(st::Dtype::BF16), 2u);
  EXPECT_EQ(st::dtype_size(st::Dtype::F32), 4u);
  EXPECT_EQ(st::dtype_size(st::Dtype::U64), 8u);
  EXPECT_EQ(st::dtype_size(st::Dtype::F8_E5M2), 1u);
  EXPECT_STREQ(st::dtype_name(st::Dtype::F8_E4M3), "F8_E4M3");
  EXPECT_EQ(st::parse_dtype("F12"), std::nullopt);
  EXPECT_EQ(st::parse_dtype("f32"), std::nullopt);
  EXPECT_EQ(st::parse_dtype(""), std::nullopt);
}

TEST_F(SafetensorsTest, RoundTripsEveryDtypeAndMetadata) {
  const std::vector<std::vector<int64_t>> shapes = {{2, 3}, {5}, {}, {1, 2, 2}};
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<st::TensorToWrite> tensors;
  for (size_t i = 0; i < kAllDtypes.size(); ++i) {
    const st::Dtype dtype = kAllDtypes[i];
    const std::vector<int64_t>& shape = shapes[i % shapes.size()];
    size_t numel = 1;
    for (int64_t dim : shape) numel *= size_t(dim);
    std::vector<uint8_t> payload(numel * st::dtype_size(dtype));
    for (size_t b = 0; b < payload.size(); ++b) payload[b] = uint8_t(b * 37 + i * 11 + 1);
    payloads.push_back(std::move(payload));
    tensors.push_back({std::string("model.t") + std::to_string(i) + "." + st::dtype_name(dtype),
                       dtype, shape, nullptr, 0});
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    tensors[i].data = payloads[i].data();
    tensors[i].nbytes = payloads[i].size();
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "ünïcode ✓"}};
  const std::string path = path_of("all.safetensors");
  st::write_file(path, tensors, metadata);

  const st::File file = st::File::open(path);
  EXPECT_EQ(file.path(), path);
  EXPECT_EQ(file.header().metadata, metadata);
  EXPECT_EQ(file.header().data_start % 8, 0u);
  ASSERT_EQ(file.header().tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    // Written in the given order, so offset order is the same order.
    const st::TensorInfo& info = file.header().tensors[i];
    EXPECT_EQ(info.name, tensors[i].name);
    ASSERT_TRUE(file.contains(tensors[i].name));
    EXPECT_EQ(&file.info(tensors[i].name), &info);
    EXPECT_EQ(info.dtype, tensors[i].dtype) << info.name;
    EXPECT_EQ(info.shape, tensors[i].shape) << info.name;
    EXPECT_EQ(info.nbytes(), payloads[i].size()) << info.name;
    EXPECT_EQ(size_t(info.numel()) * st::dtype_size(info.dtype), payloads[i].size());
    EXPECT_EQ(std::memcmp(file.data(info), payloads[i].data(), payloads[i].size()), 0) << info.name;
  }
}

TEST_F(SafetensorsTest, WriteReplacesExistingFileAndLeavesNoTempFile) {
  const std::string path = path_of("model.safetensors");
  const float first[2] = {1.0f, 2.0f};
  const float second[3] = {3.0f, 4.0f, 5.0f};
  st::write_file(path, {{"w", st::Dtype::F32, {2}, first, sizeof(first)}});
  st::write_file(path, {{"w", st::Dtype::F32, {3}, second, sizeof(second)}});
  const st::File file = st::File::open(path);
  EXPECT_EQ(file.info("w").shape, std::vector<int64_t>{3});
  EXPECT_EQ(load<float>(file.data(file.info("w")) + 8), 5.0f);
  size_t entries = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir_)) ++entries;
  EXPECT_EQ(entries, 1u);
}

TEST_F(SafetensorsTest, WriteRejectsBadTensors) {
  const std::string path = path_of("bad.safetensors");
  const float values[4] = {};
  const auto expect_write_error = [&](const std::vector<st::TensorToWrite>& tensors,
                                      const std::string& phrase) {
    try {
      st::write_file(path, tensors);
      ADD_FAILURE() << "no error (expected '" << phrase << "')";
    } catch (const tandem::Error& error) {
      EXPECT_NE(std::string(error.what()).find("[safetensors] " + path + ": "), std::string::npos);
      EXPECT_NE(std::string(error.what()).find(phrase), std::string::npos) << error.what();
    }
  };
  expect_write_error({{"w", st::Dtype::F32, {3}, values, sizeof(values)}},
                     "has 16 bytes but shape [3] of F32 needs 12");
  expect_write_error({{"w", st::Dtype::F32, {1}, values, 4}, {"w", st::Dtype::F32, {1}, values, 4}},
                     "duplicate tensor name 'w'");
  expect_write_error({{"w", st::Dtype::F32, {-1}, values, 0}}, "negative dimension");
  expect_write_error({{"__metadata__", st::Dtype::F32, {1}, values, 4}}, "is reserved");
  expect_write_error({{"w", st::Dtype::F32, {1}, nullptr, 4}}, "null data pointer");
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
}

TEST_F(SafetensorsTest, WriteIntoMissingDirectoryNamesPath) {
  const std::string path = path_of("no/such/dir/model.safetensors");
  try {
    st::write_file(path, {});
    ADD_FAILURE() << "no error";
  } catch (const tandem::Error& error) {
    EXPECT_EQ(std::string(error.what()).rfind("[safetensors] " + path + ": cannot create ", 0), 0u)
        << error.what();
  }
}

// ---------------------------------------------------------------------------------------------
// Files from other writers and edge cases that are valid

TEST_F(SafetensorsTest, ReadsFileWrittenByHfPython) {
  // Values from tools/make_safetensors_fixture.py.
  const st::File file = st::File::open(
      tandem::testing::source_path("tests/fixtures/safetensors/hf_written.safetensors"));
  const std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                       {"source", "make_safetensors_fixture.py"}};
  EXPECT_EQ(file.header().metadata, metadata);
  EXPECT_EQ(file.header().tensors.size(), 10u);
  const auto expect_info = [&](const std::string& name, st::Dtype dtype,
                               std::vector<int64_t> shape) -> const uint8_t* {
    EXPECT_TRUE(file.contains(name)) << name;  // info() throws when absent
    EXPECT_EQ(file.info(name).dtype, dtype) << name;
    EXPECT_EQ(file.info(name).shape, shape) << name;
    return file.data(file.info(name));
  };

  const uint8_t* bf16 = expect_info("bf16", st::Dtype::BF16, {2, 3});
  for (int i = 0; i < 6; ++i) EXPECT_EQ(bf16_to_float(load<uint16_t>(bf16 + 2 * i)), i * 0.5f - 1);
  const uint8_t* f16 = expect_info("f16", st::Dtype::F16, {4});
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(half_to_float(load<uint16_t>(f16 + 2 * i)), i * 0.25f - 0.5f);
  const uint8_t* f32 = expect_info("f32", st::Dtype::F32, {3, 2});
  for (int i = 0; i < 6; ++i) EXPECT_EQ(load<float>(f32 + 4 * i), i / 8.0f);
  EXPECT_EQ(load<double>(expect_info("f64", st::Dtype::F64, {})), 3.25);
  const uint8_t* i64 = expect_info("i64", st::Dtype::I64, {5});
  for (int i = 0; i < 5; ++i) EXPECT_EQ(load<int64_t>(i64 + 8 * i), (int64_t(1) << 40) - 3 * i);
  const uint8_t* i32 = expect_info("i32", st::Dtype::I32, {2, 2});
  for (int i = 0; i < 4; ++i) EXPECT_EQ(load<int32_t>(i32 + 4 * i), i - 2);
  const uint8_t* u8 = expect_info("u8", st::Dtype::U8, {3});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(u8[i], 250 + i);
  const uint8_t* flags = expect_info("bool", st::Dtype::BOOL, {5});
  for (int i = 0; i < 5; ++i) EXPECT_EQ(flags[i], i % 2 == 0 ? 1 : 0);
  // E4M3 (bias 7) bit patterns of 0, 0.5, 1, 1.5.
  const uint8_t* f8 = expect_info("f8_e4m3", st::Dtype::F8_E4M3, {4});
  EXPECT_EQ(std::vector<uint8_t>(f8, f8 + 4), (std::vector<uint8_t>{0x00, 0x30, 0x38, 0x3C}));
  expect_info("empty", st::Dtype::F32, {0, 3});
  EXPECT_EQ(file.info("empty").nbytes(), 0u);
}

TEST_F(SafetensorsTest, AcceptsSpacePaddedHeader) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string path = write_header("padded.safetensors", header + std::string(13, ' '), 8);
  const st::File file = st::File::open(path);
  EXPECT_EQ(file.header().data_start, 8 + header.size() + 13);
  EXPECT_EQ(file.info("a").nbytes(), 8u);
}

TEST_F(SafetensorsTest, AcceptsZeroSizeTensors) {
  const std::string path =
      write_header("zero.safetensors",
                   R"({"z0":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]},)"
                   R"("a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},)"
                   R"("z1":{"dtype":"BF16","shape":[3,0],"data_offsets":[8,8]}})",
                   8);
  const st::File file = st::File::open(path);
  ASSERT_EQ(file.header().tensors.size(), 3u);
  EXPECT_EQ(file.info("z0").numel(), 0);
  EXPECT_EQ(file.info("z1").nbytes(), 0u);
  EXPECT_EQ(file.info("a").numel(), 1);
}

TEST_F(SafetensorsTest, AcceptsEmptyHeader) {
  const st::File file = st::File::open(write_header("empty.safetensors", "{}", 0));
  EXPECT_TRUE(file.header().tensors.empty());
  EXPECT_TRUE(file.header().metadata.empty());
}

TEST_F(SafetensorsTest, ParseHeaderWorksOnMemory) {
  const std::string header = R"({"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}})";
  std::string bytes(8, '\0');
  bytes[0] = char(header.size());
  bytes += header + "xyz";
  const st::Header parsed =
      st::parse_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "<memory>");
  ASSERT_EQ(parsed.tensors.size(), 1u);
  EXPECT_EQ(parsed.data_start, 8 + header.size());
  EXPECT_EQ(bytes.substr(parsed.data_start + parsed.tensors[0].begin, 3), "xyz");
}

// ---------------------------------------------------------------------------------------------
// Errors from File itself

TEST_F(SafetensorsTest, MissingFileEmptyFileAndDirectory) {
  expect_open_error(path_of("absent.safetensors"), "cannot open");
  expect_open_error(write_bytes("empty.safetensors", ""), "0 bytes, too short");
  expect_open_error(dir_, "not a regular file");
}

TEST_F(SafetensorsTest, MissingTensorNamesFileAndTensor) {
  const std::string path = write_header("one.safetensors", "{}", 0);
  const st::File file = st::File::open(path);
  EXPECT_FALSE(file.contains("lm_head.weight"));
  try {
    file.info("lm_head.weight");
    ADD_FAILURE() << "no error";
  } catch (const tandem::Error& error) {
    EXPECT_EQ(std::string(error.what()),
              "[safetensors] " + path + ": no tensor named 'lm_head.weight'");
  }
}

TEST_F(SafetensorsTest, MovedFileKeepsMapping) {
  const uint8_t bytes[3] = {7, 8, 9};
  const std::string path = path_of("m.safetensors");
  st::write_file(path, {{"b", st::Dtype::U8, {3}, bytes, 3}});
  st::File first = st::File::open(path);
  st::File second = std::move(first);
  EXPECT_EQ(second.data(second.info("b"))[2], 9);
  first = std::move(second);
  EXPECT_EQ(first.data(first.info("b"))[0], 7);
}

// ---------------------------------------------------------------------------------------------
// Malformed files: one test per way the header can lie

TEST_F(SafetensorsTest, RejectsTruncatedFile) {
  expect_open_error(write_bytes("short.safetensors", std::string(5, '\0')),
                    "5 bytes, too short for the 8-byte header length");
}

TEST_F(SafetensorsTest, RejectsTruncatedHeader) {
  expect_open_error(write_raw("trunc.safetensors", 100, R"({"a":{"dtype":)", 0),
                    "header length 100 is larger than the 14 bytes that follow it");
}

TEST_F(SafetensorsTest, RejectsHeaderOverSizeBound) {
  expect_open_error(write_raw("huge.safetensors", 100'000'001, "{}", 0),
                    "header length 100000001 exceeds the limit of 100000000 bytes");
  expect_open_error(write_raw("max.safetensors", ~uint64_t(0), "{}", 0), "exceeds the limit");
}

TEST_F(SafetensorsTest, RejectsOverlappingOffsets) {
  expect_open_error(write_header("overlap.safetensors",
                                 R"({"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]},)"
                                 R"("a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
                                 24),
                    "tensor 'a' overlaps 'b' (offsets 0..16 and 8..24)");
}

TEST_F(SafetensorsTest, RejectsZeroSizeTensorInsideAnother) {
  expect_open_error(write_header("inside.safetensors",
                                 R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                                 R"("z":{"dtype":"F32","shape":[0],"data_offsets":[8,8]}})",
                                 16),
                    "tensor 'a' overlaps 'z' (offsets 0..16 and 8..8)");
}

TEST_F(SafetensorsTest, RejectsHoleBetweenTensors) {
  expect_open_error(write_header("hole.safetensors",
                                 R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                 R"("b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})",
                                 24),
                    "hole of 8 bytes between tensor 'a' (offsets 0..8) and 'b' (offsets 16..24)");
}

TEST_F(SafetensorsTest, RejectsOffsetsNotStartingAtZero) {
  expect_open_error(write_header("start.safetensors",
                                 R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 16),
                    "first tensor 'a' starts at offset 8, not 0");
}

TEST_F(SafetensorsTest, RejectsTrailingBytesAfterLastTensor) {
  expect_open_error(write_header("trailing.safetensors",
                                 R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 12),
                    "data buffer has 4 trailing bytes after the last tensor 'a'");
  expect_open_error(write_header("trailing_empty.safetensors", "{}", 3),
                    "data buffer has 3 trailing bytes after an empty tensor list");
}

TEST_F(SafetensorsTest, RejectsTensorPastEndOfFile) {
  expect_open_error(write_header("past.safetensors",
                                 R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 12),
                    "tensor 'a' (offsets 0..16) runs past the end of the 12-byte data buffer");
}

TEST_F(SafetensorsTest, RejectsSizeMismatch) {
  expect_open_error(
      write_header("size.safetensors", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
                   8),
      "tensor 'a' size mismatch: data_offsets 0..8 hold 8 bytes but shape [3] of F32 needs 12");
}

TEST_F(SafetensorsTest, RejectsShapeOverflow) {
  expect_open_error(write_header("overflow.safetensors",
                                 R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,0],)"
                                 R"("data_offsets":[0,0]}})",
                                 0),
                    "overflows a 64-bit byte count");
}

TEST_F(SafetensorsTest, RejectsUnknownDtype) {
  expect_open_error(write_header("dtype.safetensors",
                                 R"({"a":{"dtype":"F12","shape":[2],"data_offsets":[0,8]}})", 8),
                    "tensor 'a' has unknown dtype \"F12\"");
  expect_open_error(write_header("dtype_int.safetensors",
                                 R"({"a":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", 8),
                    "tensor 'a' has unknown dtype 4");
}

TEST_F(SafetensorsTest, RejectsDuplicateTensorName) {
  expect_open_error(write_header("dup.safetensors",
                                 R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                 R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                 8),
                    "duplicate tensor name 'a'");
}

TEST_F(SafetensorsTest, RejectsDuplicateKeyInsideEntry) {
  expect_open_error(
      write_header("dupkey.safetensors",
                   R"({"a":{"dtype":"F32","dtype":"F64","shape":[1],"data_offsets":[0,4]}})", 4),
      "duplicate key 'dtype' inside entry 'a'");
}

TEST_F(SafetensorsTest, RejectsInvalidJson) {
  expect_open_error(write_header("json.safetensors", R"({"a":{"dtype":"F32",)", 0),
                    "header is not valid JSON");
  expect_open_error(write_header("trailing_json.safetensors", "{} x", 0),
                    "header is not valid JSON");
  expect_open_error(write_header("array.safetensors", "[1,2]", 0),
                    "header does not start with '{'");
  expect_open_error(write_header("zero_length.safetensors", "", 0),
                    "header does not start with '{'");
}

TEST_F(SafetensorsTest, RejectsNonUtf8Header) {
  expect_open_error(
      write_header("utf8.safetensors",
                   "{\"a\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
      "header is not valid UTF-8 (byte 0xff at header offset 3)");
  // An overlong encoding of '/' is not UTF-8 either.
  expect_open_error(write_header("overlong.safetensors", "{\"\xc0\xaf\":1}", 0),
                    "header is not valid UTF-8 (byte 0xc0 at header offset 2)");
}

TEST_F(SafetensorsTest, RejectsNonObjectEntry) {
  expect_open_error(write_header("entry.safetensors", R"({"a":3})", 0),
                    "entry 'a' is not an object (got 3)");
  expect_open_error(write_header("entry_array.safetensors", R"({"a":["F32"]})", 0),
                    "entry 'a' is not an object");
}

TEST_F(SafetensorsTest, RejectsMissingOrUnexpectedKeys) {
  expect_open_error(write_header("missing.safetensors", R"({"a":{"dtype":"F32","shape":[1]}})", 0),
                    "tensor 'a' is missing 'data_offsets'");
  expect_open_error(write_header("extra.safetensors",
                                 R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],)"
                                 R"("offset":0}})",
                                 4),
                    "tensor 'a' has unexpected key 'offset'");
}

TEST_F(SafetensorsTest, RejectsNegativeOrNonIntegerShape) {
  const std::string phrase = "tensor 'a' shape must be an array of non-negative integers";
  expect_open_error(write_header("neg.safetensors",
                                 R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", 0),
                    phrase + ", got [-1]");
  expect_open_error(write_header("float.safetensors",
                                 R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4),
                    phrase + ", got [1.5]");
  expect_open_error(write_header("string.safetensors",
                                 R"({"a":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", 8),
                    phrase);
  expect_open_error(
      write_header("big.safetensors",
                   R"({"a":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,0]}})",
                   0),
      phrase);
}

TEST_F(SafetensorsTest, RejectsMalformedDataOffsets) {
  expect_open_error(
      write_header("three.safetensors",
                   R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", 1),
      "tensor 'a' data_offsets must be [begin, end] of non-negative integers, got [0,1,2]");
  expect_open_error(write_header("negoff.safetensors",
                                 R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})", 1),
                    "data_offsets must be [begin, end]");
  expect_open_error(write_header("reversed.safetensors",
                                 R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", 4),
                    "tensor 'a' data_offsets end before they begin (4..0)");
}

TEST_F(SafetensorsTest, RejectsMetadataWithNonStringValue) {
  expect_open_error(write_header("meta.safetensors", R"({"__metadata__":{"k":1}})", 0),
                    "__metadata__ value for 'k' is not a string (got 1)");
  expect_open_error(write_header("meta_array.safetensors", R"({"__metadata__":["k"]})", 0),
                    "__metadata__ must be an object of strings, got array");
}

// A header of 200,000 entries: parsing is linear in the entries (it was quadratic: 30,000 took
// 141 s), so this takes about a second; a regression would run past ctest's timeout.
TEST_F(SafetensorsTest, AHeaderOfManyEntriesParsesInLinearTime) {
  constexpr int kEntries = 200000;
  std::string header = "{";
  for (int i = 0; i < kEntries; ++i)
    header += (i ? ",\"t" : "\"t") + std::to_string(i) +
              R"(":{"dtype":"U8","shape":[1],"data_offsets":[)" + std::to_string(i) + "," +
              std::to_string(i + 1) + "]}";
  header += "}";
  const auto start = std::chrono::steady_clock::now();
  const st::File file = st::File::open(write_header("many.safetensors", header, kEntries));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[safetensors] %d entries parsed in %.2f s\n", kEntries, seconds);
  EXPECT_EQ(file.header().tensors.size(), static_cast<size_t>(kEntries));
}

TEST_F(SafetensorsTest, RejectsDeeplyNestedJson) {
  expect_open_error(
      write_header("deep.safetensors",
                   R"({"__metadata__":{"k":[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]}})", 0),
      "header JSON nests deeper than");
}

}  // namespace
