// The binary itself: `tandem forward` end to end against transformers' reference, --help, and
// option errors naming what is wrong.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <sstream>

#include "tandem/io/safetensors.h"
#include "tandem/io/tensor_io.h"
#include "test_util.h"

namespace {

using tandem::testing::run_command;
using tandem::testing::ScratchDir;
using tandem::testing::tandem_binary;

at::Tensor read(const std::string& path, const std::string& name) {
  const auto file = tandem::safetensors::File::open(path);
  return tandem::read_tensor(file, file.info(name));
}

std::string ids_argument(const at::Tensor& ids) {  // (B, T) -> "1,2;3,4"
  std::ostringstream text;
  for (int64_t b = 0; b < ids.size(0); ++b) {
    if (b) text << ';';
    for (int64_t t = 0; t < ids.size(1); ++t) text << (t ? "," : "") << ids[b][t].item<int64_t>();
  }
  return text.str();
}

TEST(Cli, ForwardMatchesTransformers) {
  ScratchDir dir;
  const std::string model = tandem::testing::model_fixture("qwen3");
  const std::string reference = model + "/reference.safetensors";
  const at::Tensor ids = read(reference, "input_ids");
  const auto result = run_command(tandem_binary() + " --threads 1 forward --model " + model +
                                  " --input-ids '" + ids_argument(ids) +
                                  "' --layers 0,2 --dtype fp32 --out " + (dir / "out.safetensors"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const at::Tensor logits = read(dir / "out.safetensors", "logits");
  EXPECT_LE((logits - read(reference, "logits")).abs().max().item<double>(), 1e-4);
  const at::Tensor hidden = read(dir / "out.safetensors", "hidden.2");
  EXPECT_LE((hidden - read(reference, "hidden.2")).abs().max().item<double>(), 1e-4);
}

TEST(Cli, HelpListsEverySubcommand) {
  const auto result = run_command(tandem_binary() + " --help");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  for (const char* name : {"train", "export", "eval", "capture", "forward", "tokenize", "data"})
    EXPECT_NE(result.output.find(name), std::string::npos) << name << " missing from:\n"
                                                           << result.output;
}

TEST(Cli, EvalNamesItsMissingOptions) {
  const auto result = run_command(tandem_binary() + " eval --draft x");
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("--target is required"), std::string::npos) << result.output;
}

TEST(Cli, ForwardRejectsOutOfRangeIds) {
  ScratchDir dir;
  const auto result =
      run_command(tandem_binary() + " forward --model " + tandem::testing::model_fixture("llama3") +
                  " --input-ids 1,2,99999 --out " + (dir / "x.safetensors"));
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("token id 99999 is outside the vocabulary"), std::string::npos)
      << result.output;
}

TEST(Cli, ForwardNamesAMissingCheckpoint) {
  ScratchDir dir;
  const auto result = run_command(tandem_binary() + " forward --model " + (dir / "nowhere") +
                                  " --input-ids 1,2 --out " + (dir / "x.safetensors"));
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("nowhere/config.json: cannot open"), std::string::npos)
      << result.output;
}

}  // namespace
