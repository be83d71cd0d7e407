#include "tandem/train/sharded_model.h"

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include "tandem/core/error.h"
#include "tandem/core/json_parse.h"
#include "tandem/dist/process_group.h"
#include "tandem/io/tensor_io.h"
#include "tandem/models/frozen.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/data_parallel.h"
#include "tandem/train/optimizer.h"

namespace tandem {

namespace {

std::string shard_file(const std::string& kind, int64_t shard, int64_t shards) {
  return kind + ".shard-" + std::to_string(shard) + "-of-" + std::to_string(shards) +
         ".safetensors";
}

// "exp_avg.model.layers.0.mlp.up_proj.weight" -> "model.layers.0.mlp.up_proj.weight"; "" for
// entries that belong to no parameter ("step").
std::string state_parameter(const std::string& state_name) {
  for (const char* prefix : {"master.", "exp_avg.", "exp_avg_sq."}) {
    const std::string p = prefix;
    if (state_name.rfind(p, 0) == 0) return state_name.substr(p.size());
  }
  return "";
}

// This rank's part of a padded slice: what its shard file stores.
at::Tensor stored_part(const at::Tensor& slice, const ShardLayout& layout, int64_t shard) {
  return slice.narrow(0, 0, layout.count(shard));
}

// `slice` (padded) becomes this rank's part of `full`, zeros after it.
void fill_slice(at::Tensor slice, const at::Tensor& full, const ShardLayout& layout,
                int64_t shard) {
  slice.zero_();
  stored_part(slice, layout, shard)
      .copy_(full.reshape({-1}).narrow(0, layout.begin(shard), layout.count(shard)));
}

}  // namespace

std::map<std::string, at::Tensor> read_full_checkpoint_tensors(const CheckpointReader& reader,
                                                               const std::string& kind) {
  if (reader.contains(kind + ".safetensors")) return reader.read_tensors(kind + ".safetensors");
  check(reader.contains("shards.json"), "[checkpoint] ", reader.dir(), ": has neither ", kind,
        ".safetensors nor shards.json (not a tandem training checkpoint?)");
  nlohmann::json meta;
  int64_t shards = 0;
  try {
    meta = parse_json_text(reader.read_text("shards.json"));
    shards = meta.at("shards").get<int64_t>();
    for (const auto& [name, shape] : meta.at(kind).items()) (void)shape.get<std::vector<int64_t>>();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // malformed JSON, a missing or mistyped field
    throw Error("[checkpoint] ", reader.dir(), "/shards.json: ", e.what());
  }
  check(shards > 0 && shards <= 1 << 20, "[checkpoint] ", reader.dir(), "/shards.json: ", shards,
        " shards");
  std::map<std::string, std::vector<at::Tensor>> pieces;  // in shard order
  for (int64_t s = 0; s < shards; ++s) {
    const std::string file = shard_file(kind, s, shards);
    check(reader.contains(file), "[checkpoint] ", reader.dir(), ": shards.json says ", shards,
          " shards but the manifest lists no ", file);
    for (auto& [name, tensor] : reader.read_tensors(file)) pieces[name].push_back(tensor);
  }
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, shape_json] : meta.at(kind).items()) {
    const std::vector<int64_t> shape = shape_json.get<std::vector<int64_t>>();
    auto found = pieces.find(name);
    check(found != pieces.end(), "[checkpoint] ", reader.dir(), ": '", name,
          "' is listed in shards.json but in none of the ", kind, " shard files");
    at::Tensor flat = found->second.size() == 1 ? found->second.front().reshape({-1})
                                                : at::cat(found->second).reshape({-1});
    int64_t numel = 1;
    for (int64_t size : shape) {
      check(size >= 0 && size <= (int64_t{1} << 40), "[checkpoint] ", reader.dir(),
            "/shards.json: '", name, "' has a dimension of ", size);
      numel *= size;
    }
    check(flat.numel() == numel, "[checkpoint] ", reader.dir(), ": the ", kind, " shards of '",
          name, "' hold ", flat.numel(), " elements; shards.json gives shape ",
          at::IntArrayRef(shape), " (", numel, ")");
    out[name] = flat.view(shape);
  }
  return out;
}

ShardedModel::ShardedModel(torch::nn::Module& trainable,
                           std::shared_ptr<dist::ProcessGroup> shard_group, ParameterShards& frozen)
    : module_(trainable), group_(shard_group), trainable_(shard_group) {
  for (const auto& parameter : module_.named_parameters(/*recurse=*/true)) {
    if (is_frozen(parameter.value())) continue;  // sharded below, with the frozen weights
    const bool trains = parameter.value().requires_grad();
    at::Tensor slice = trainable_.shard(parameter.value(), trains);
    if (!trains) continue;
    optimizer_parameters_.emplace_back(parameter.key(), slice);
    decays_.push_back(MixedPrecisionAdamW::decays(parameter.value()));
  }
  for (const at::Tensor& weight : frozen_weights()) frozen.shard(weight, /*trainable=*/false);
  state_ = model_state(module_);
  for (const auto& [name, tensor] : state_) state_by_name_[name] = tensor;
}

std::vector<at::Tensor> ShardedModel::full_parameters() const {
  std::vector<at::Tensor> out;
  for (const auto& parameter : module_.named_parameters(/*recurse=*/true))
    out.push_back(parameter.value());
  return out;
}

void ShardedModel::write_shard(const std::string& staging_dir,
                               const MixedPrecisionAdamW& optimizer) const {
  const int64_t shard = group_->rank(), shards = group_->size();
  NamedTensors model;
  for (const auto& [name, tensor] : state_) {
    if (!is_sharded(tensor)) {
      if (shard == 0) model.emplace_back(name, tensor);  // buffers: whole, in shard 0
      continue;
    }
    const ShardLayout layout = trainable_.layout(tensor);
    if (layout.count(shard) > 0)
      model.emplace_back(name, stored_part(trainable_.local_shard(tensor), layout, shard));
  }
  NamedTensors state;
  for (const auto& [name, value] : optimizer.state()) {
    if (state_parameter(name).empty()) {
      if (shard == 0) state.emplace_back(name, value);  // the step count: whole, in shard 0
      continue;
    }
    const ShardLayout layout = trainable_.layout(state_by_name_.at(state_parameter(name)));
    if (layout.count(shard) > 0) state.emplace_back(name, stored_part(value, layout, shard));
  }
  write_tensors(staging_dir + "/" + shard_file("model", shard, shards), model);
  write_tensors(staging_dir + "/" + shard_file("optimizer", shard, shards), state);
}

void ShardedModel::finish_checkpoint(CheckpointWriter& writer,
                                     const MixedPrecisionAdamW& optimizer) const {
  const int64_t shards = group_->size();
  for (int64_t s = 0; s < shards; ++s) {
    writer.adopt_file(shard_file("model", s, shards));
    writer.adopt_file(shard_file("optimizer", s, shards));
  }
  nlohmann::json meta;
  meta["format"] = "tandem sharded checkpoint";
  meta["shards"] = shards;
  meta["model"] = nlohmann::json::object();
  for (const auto& [name, tensor] : state_) meta["model"][name] = tensor.sizes().vec();
  meta["optimizer"] = nlohmann::json::object();
  for (const auto& [name, value] : optimizer.state()) {
    const std::string parameter = state_parameter(name);
    meta["optimizer"][name] =
        parameter.empty() ? value.sizes().vec() : state_by_name_.at(parameter).sizes().vec();
  }
  writer.write_text("shards.json", meta.dump(2) + "\n");
}

void ShardedModel::restore(dist::ProcessGroup& world,
                           const std::map<std::string, at::Tensor>& model,
                           const std::map<std::string, at::Tensor>& optimizer_state,
                           MixedPrecisionAdamW& optimizer) const {
  at::NoGradGuard no_grad;
  const int64_t shard = group_->rank();
  // Rank 0 has the full tensor `name` (checked against `like`); every rank receives it.
  auto receive = [&](const std::map<std::string, at::Tensor>& from, const std::string& name,
                     const at::Tensor& like, const char* file) {
    std::vector<at::Tensor> one(1);
    if (world.rank() == 0) {
      auto found = from.find(name);
      check(found != from.end(), "[train] the checkpoint's ", file, " has no '", name, "'");
      check(found->second.sizes() == like.sizes() &&
                found->second.scalar_type() == like.scalar_type(),
            "[train] the checkpoint's ", file, " '", name, "' is ", found->second.sizes(), " ",
            found->second.scalar_type(), "; the run being trained has ", like.sizes(), " ",
            like.scalar_type(), " (shape or dtype changed?)");
      one[0] = found->second.to(like.device()).contiguous();  // every rank on the same device
    } else {
      one[0] = at::empty(like.sizes(), like.options().requires_grad(false));
    }
    broadcast_tensors_from_rank0(world, one, "the checkpoint tensor '" + name + "'");
    return one[0];
  };
  for (const auto& [name, tensor] : state_) {
    const at::Tensor full = receive(model, name, tensor, "model");
    if (is_sharded(tensor))
      fill_slice(trainable_.local_shard(tensor).detach(), full, trainable_.layout(tensor), shard);
    else
      tensor.detach().copy_(full);
  }
  std::map<std::string, at::Tensor> local_state;
  for (const auto& [name, value] : optimizer.state()) {
    const std::string parameter = state_parameter(name);
    if (parameter.empty()) {
      local_state[name] = receive(optimizer_state, name, value, "optimizer state");
      continue;
    }
    const at::Tensor& owner = state_by_name_.at(parameter);
    const at::Tensor full = receive(optimizer_state, name,
                                    at::empty(owner.sizes(), value.options()), "optimizer state");
    at::Tensor slice = at::empty_like(value);
    fill_slice(slice, full, trainable_.layout(owner), shard);
    local_state[name] = slice;
  }
  optimizer.load_state(local_state, "the checkpoint's optimizer state");
}

}  // namespace tandem
