#include "tandem/io/hf_checkpoint.h"

#include <ATen/ATen.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "tandem/core/error.h"
#include "tandem/core/json_file.h"
#include "tandem/io/tensor_io.h"

namespace tandem {

using nlohmann::json;

namespace {

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string shard_name(size_t index, size_t count) {
  char name[64];
  std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", index, count);
  return name;
}

}  // namespace

HfCheckpoint HfCheckpoint::open(const std::string& dir, CheckpointBroadcast* broadcast) {
  if (!broadcast) return open_files(dir);
  std::string header;
  if (broadcast->reads_files()) {
    std::optional<HfCheckpoint> opened;
    try {
      opened.emplace(open_files(dir));
      header = opened->header_json();
    } catch (const std::exception& error) {
      header = json{{"error", error.what()}}.dump();  // the other ranks fail with the same words
      broadcast->broadcast_text(header);
      throw;
    }
    broadcast->broadcast_text(header);
    for (const std::string& path : opened->file_paths()) broadcast->log("opened " + path);
    opened->broadcast_ = broadcast;
    return std::move(*opened);
  }
  broadcast->broadcast_text(header);
  HfCheckpoint received = from_header(dir, header);
  received.broadcast_ = broadcast;
  broadcast->log("received " + dir + " (" + std::to_string(received.received_.size()) +
                 " tensors) from the reading rank, opening no file");
  return received;
}

std::string HfCheckpoint::header_json() const {
  json tensors = json::array();
  for (const auto& [name, slot] : location_) {
    const safetensors::TensorInfo& stored = files_[slot]->info(name);
    tensors.push_back({{"name", name},
                       {"dtype", safetensors::dtype_name(stored.dtype)},
                       {"shape", stored.shape}});
  }
  return json{{"tensors", tensors},
              {"files", file_paths()},
              {"fp8_block", {fp8_.block_rows, fp8_.block_cols}},
              {"mxfp4", mxfp4_}}
      .dump();
}

HfCheckpoint HfCheckpoint::from_header(const std::string& dir, const std::string& header) {
  const json parsed = json::parse(header);
  if (parsed.contains("error")) throw Error(parsed["error"].get<std::string>());
  HfCheckpoint checkpoint;
  checkpoint.dir_ = dir;
  checkpoint.paths_ = parsed.at("files").get<std::vector<std::string>>();
  checkpoint.fp8_ = {parsed.at("fp8_block").at(0).get<int64_t>(),
                     parsed.at("fp8_block").at(1).get<int64_t>()};
  checkpoint.mxfp4_ = parsed.at("mxfp4").get<bool>();
  for (const json& tensor : parsed.at("tensors")) {
    safetensors::TensorInfo info;
    info.name = tensor.at("name").get<std::string>();
    info.dtype = *safetensors::parse_dtype(tensor.at("dtype").get<std::string>());
    info.shape = tensor.at("shape").get<std::vector<int64_t>>();
    info.begin = 0;
    info.end = 0;  // not stored here: nothing is read from a file on this rank
    checkpoint.location_[info.name] = 0;
    checkpoint.received_.emplace(info.name, std::move(info));
  }
  return checkpoint;
}

HfCheckpoint HfCheckpoint::open_files(const std::string& dir) {
  HfCheckpoint checkpoint;
  checkpoint.dir_ = dir;
  const std::string single = dir + "/model.safetensors";
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (file_exists(index_path)) {
    const json index = read_json_file(index_path, "checkpoint");
    check(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
          "[checkpoint] ", index_path, ": missing 'weight_map' object");
    std::map<std::string, size_t> file_slot;  // shard file name -> index into files_
    for (const auto& [name, file] : index["weight_map"].items()) {
      check(file.is_string(), "[checkpoint] ", index_path, ": weight_map['", name,
            "'] must be a file name");
      const std::string shard = file.get<std::string>();
      check(shard.find('/') == std::string::npos, "[checkpoint] ", index_path, ": shard '", shard,
            "' must be a file name inside the directory");
      auto slot = file_slot.find(shard);
      if (slot == file_slot.end()) {
        const std::string path = dir + "/" + shard;
        check(file_exists(path), "[checkpoint] ", index_path, ": shard '", shard, "' listed for '",
              name, "' does not exist");
        checkpoint.files_.push_back(
            std::make_unique<safetensors::File>(safetensors::File::open(path)));
        slot = file_slot.emplace(shard, checkpoint.files_.size() - 1).first;
      }
      check(checkpoint.files_[slot->second]->contains(name), "[checkpoint] ", index_path, ": '",
            name, "' is mapped to ", shard, " but that file does not contain it");
      checkpoint.location_[name] = slot->second;
    }
    // Every tensor in a shard must be in the index; otherwise the index and files disagree.
    for (size_t i = 0; i < checkpoint.files_.size(); ++i) {
      for (const auto& info : checkpoint.files_[i]->header().tensors) {
        auto where = checkpoint.location_.find(info.name);
        check(where != checkpoint.location_.end() && where->second == i, "[checkpoint] ",
              checkpoint.files_[i]->path(), ": tensor '", info.name,
              "' is not mapped to this file by ", index_path);
      }
    }
  } else if (file_exists(single)) {
    checkpoint.files_.push_back(
        std::make_unique<safetensors::File>(safetensors::File::open(single)));
    for (const auto& info : checkpoint.files_[0]->header().tensors)
      checkpoint.location_[info.name] = 0;
  } else {
    throw Error("[checkpoint] ", dir, ": no model.safetensors or model.safetensors.index.json ",
                "(tandem reads HF safetensors checkpoints; convert .bin files first)");
  }
  const std::string config_path = dir + "/config.json";
  if (file_exists(config_path)) {
    const QuantizationConfig quantization =
        read_quantization_config(read_json_file(config_path, "checkpoint"), config_path);
    checkpoint.fp8_ = quantization.fp8;
    checkpoint.mxfp4_ = quantization.mxfp4;
  }
  return checkpoint;
}

std::vector<std::string> HfCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& entry : location_) out.push_back(entry.first);
  return out;
}

const safetensors::File& HfCheckpoint::file_of(const std::string& name) const {
  auto where = location_.find(name);
  check(where != location_.end(), "[checkpoint] ", dir_, ": missing tensor '", name, "'");
  check(files_.size() > where->second, "[checkpoint] ", dir_,
        ": this rank received the checkpoint from the reading rank and opened no file");
  return *files_[where->second];
}

const safetensors::TensorInfo& HfCheckpoint::info(const std::string& name) const {
  if (!files_.empty()) return file_of(name).info(name);
  auto where = received_.find(name);
  check(where != received_.end(), "[checkpoint] ", dir_, ": missing tensor '", name, "'");
  return where->second;
}

namespace {

// The process groups move bytes: an FP8 tensor travels as its bytes and is viewed back.
void broadcast_as_stored(CheckpointBroadcast& broadcast, at::Tensor& tensor) {
  const c10::ScalarType stored = tensor.scalar_type();
  const bool fp8 = stored == at::kFloat8_e4m3fn || stored == at::kFloat8_e5m2;
  if (fp8) tensor = tensor.view(at::kByte);
  broadcast.broadcast_tensor(tensor);
  if (fp8) tensor = tensor.view(stored);
}

}  // namespace

at::Tensor HfCheckpoint::read(const std::string& name) const {
  if (!files_.empty() || !broadcast_) {
    const safetensors::File& file = file_of(name);
    at::Tensor tensor = read_tensor(file, file.info(name)).contiguous();
    if (broadcast_) broadcast_as_stored(*broadcast_, tensor);
    return tensor;
  }
  const safetensors::TensorInfo& stored = info(name);
  at::Tensor tensor =
      at::empty(stored.shape, at::TensorOptions().dtype(to_scalar_type(stored.dtype, dir_)));
  broadcast_as_stored(*broadcast_, tensor);
  return tensor;
}

void HfCheckpoint::check_fp8(const std::string& name) const {
  if (info(name).dtype != safetensors::Dtype::F8_E4M3) return;
  const std::string where = "[checkpoint] " + dir_ + ": tensor '" + name + "'";
  check(contains(fp8_scale_name(name)), where, " is stored as F8_E4M3 without its scale '",
        fp8_scale_name(name), "' (block-wise FP8 stores one beside each quantized weight)");
  check_block_fp8_shapes(info(name).shape, info(fp8_scale_name(name)).shape, fp8_, where);
}

at::Tensor HfCheckpoint::read_weight(const std::string& name) const {
  const safetensors::Dtype dtype = info(name).dtype;
  using safetensors::Dtype;
  const std::string where = "[checkpoint] " + dir_ + ": tensor '" + name + "'";
  if (dtype == Dtype::F8_E4M3) {
    check_fp8(name);
    return dequantize_block_fp8(read(name), read(fp8_scale_name(name)), fp8_, where);
  }
  check(dtype == Dtype::F32 || dtype == Dtype::F16 || dtype == Dtype::BF16 || dtype == Dtype::F64,
        where, " is stored as ", safetensors::dtype_name(dtype),
        "; a model weight must be F32, F16 or BF16, or block-wise FP8 (F8_E4M3 beside its "
        "_scale_inv)");
  return read(name);
}

std::vector<std::string> HfCheckpoint::file_paths() const {
  if (files_.empty()) return paths_;
  std::vector<std::string> out;
  for (const auto& file : files_) out.push_back(file->path());
  return out;
}

void write_hf_weights(const std::string& dir,
                      const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      int64_t max_shard_bytes) {
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> shards(1);
  int64_t shard_bytes = 0;
  for (const auto& entry : tensors) {
    const int64_t bytes = static_cast<int64_t>(entry.second.nbytes());
    if (shard_bytes > 0 && shard_bytes + bytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(entry);
    shard_bytes += bytes;
  }
  if (shards.size() == 1) {
    write_tensors(dir + "/model.safetensors", shards[0], {{"format", "pt"}});
    return;
  }
  json weight_map = json::object();
  int64_t total = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = shard_name(i + 1, shards.size());
    write_tensors(dir + "/" + name, shards[i], {{"format", "pt"}});
    for (const auto& [tensor_name, tensor] : shards[i]) {
      weight_map[tensor_name] = name;
      total += static_cast<int64_t>(tensor.nbytes());
    }
  }
  const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  const std::string index_path = dir + "/model.safetensors.index.json";
  const std::string temp = index_path + ".tmp";
  {
    std::ofstream out(temp);
    out << index.dump(2) << "\n";
    check(out.good(), "[checkpoint] ", temp, ": write failed");
  }
  check(std::rename(temp.c_str(), index_path.c_str()) == 0, "[checkpoint] ", index_path,
        ": rename failed");
}

}  // namespace tandem
