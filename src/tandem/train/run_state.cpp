#include "tandem/train/run_state.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/nn/module.h>

#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>

#include "tandem/core/error.h"
#include "tandem/core/json_parse.h"
#include "tandem/dist/process_group.h"
#include "tandem/models/frozen.h"

namespace tandem {

namespace {

// The device's random generator (CUDA), next to the CPU one that at::manual_seed also seeds.
std::optional<at::Generator> device_generator(const at::Device& device) {
  if (!device.is_cuda()) return std::nullopt;
  return at::detail::getCUDAHooks().getDefaultGenerator(device.index());
}

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> generator_states(const at::Device& device) {
  std::vector<std::pair<std::string, at::Tensor>> states{
      {"cpu_generator", at::detail::getDefaultCPUGenerator().get_state()}};
  if (auto generator = device_generator(device))
    states.emplace_back("cuda_generator", generator->get_state());
  return states;
}

// A checkpoint from another device type keeps this device's generator as seeded (its draws then
// differ from the original run's, which had none).
void restore_generators(const std::map<std::string, at::Tensor>& states, const at::Device& device) {
  at::Generator cpu = at::detail::getDefaultCPUGenerator();  // a handle to the global one
  cpu.set_state(states.at("cpu_generator"));
  auto generator = device_generator(device);
  auto saved = states.find("cuda_generator");
  if (generator && saved != states.end()) generator->set_state(saved->second);
}

namespace {

nlohmann::json counters_json(const Counters& counters, const DataCursor& cursor) {
  nlohmann::json pending = nlohmann::json::array();
  for (const PendingRecord& record : cursor.pending)
    pending.push_back({record.record, record.epoch});
  return {{"step", counters.step},
          {"documents_seen", counters.documents_seen},
          {"tokens_seen", counters.tokens_seen},
          {"skipped_steps", counters.skipped_steps},
          {"consecutive_skips", counters.consecutive_skips},
          {"best_step", counters.best_step},
          {"best_value", counters.best_value},
          {"sampler", cursor.sampler.state()},
          {"pending", pending}};
}

// The counters and data position of a trainer_state.json (or of rank 0's broadcast text).
std::tuple<Counters, SamplerState, std::vector<PendingRecord>> parse_trainer_state(
    const nlohmann::json& state) {
  Counters counters;
  counters.step = state.at("step").get<int64_t>();
  counters.documents_seen = state.at("documents_seen").get<int64_t>();
  counters.tokens_seen = state.at("tokens_seen").get<int64_t>();
  // Absent from checkpoints written before training.on_nonfinite existed: nothing was skipped.
  counters.skipped_steps = state.value("skipped_steps", int64_t{0});
  counters.consecutive_skips = state.value("consecutive_skips", int64_t{0});
  // Absent before validation existed: no best checkpoint.
  counters.best_step = state.value("best_step", int64_t{-1});
  counters.best_value = state.value("best_value", 0.0);
  const SamplerState sampler = state.at("sampler").get<SamplerState>();
  // Absent before best-fit packing existed: nothing drawn ahead.
  std::vector<PendingRecord> pending;
  for (const nlohmann::json& entry : state.value("pending", nlohmann::json::array())) {
    check(entry.is_array() && entry.size() == 2 && entry[0].is_number_integer() &&
              entry[1].is_number_integer(),
          "\"pending\" entries must be [record, epoch] pairs of integers, got ", entry.dump());
    const PendingRecord record{entry[0].get<int64_t>(), entry[1].get<int64_t>()};
    check(record.record >= 0 && record.record < sampler.dataset_size && record.epoch >= 0 &&
              record.epoch <= sampler.epoch + 1,
          "pending record ", entry.dump(), " outside the sampler's ", sampler.dataset_size,
          " records or epochs 0..", sampler.epoch + 1);
    pending.push_back(record);
  }
  return {counters, sampler, pending};
}

Counters counters_from_json(const nlohmann::json& state, DataCursor& cursor) {
  auto [counters, position, pending] = parse_trainer_state(state);
  cursor.sampler.restore(position);
  cursor.pending = std::move(pending);
  return counters;
}

}  // namespace

void save_checkpoint(const TrainingOptions& options, const Config& config,
                     const MixedPrecisionAdamW& optimizer, const torch::nn::Module& model_module,
                     const ShardedModel* sharded, const ParallelGroups& groups,
                     const Counters& counters, const DataCursor& cursor, const at::Device& device) {
  dist::ProcessGroup& world = *groups.world;
  std::optional<CheckpointWriter> staged;
  std::string staging_dir;
  if (world.rank() == 0) {
    staged.emplace(options.run_dir, counters.step);
    staging_dir = staged->staging_dir();
  }
  if (sharded) {
    world.broadcast_text(staging_dir, 0);
    if (groups.replicate->rank() == 0) sharded->write_shard(staging_dir, optimizer);
    world.barrier();  // every shard file is in place (or a rank failed and this throws)
  }
  if (world.rank() != 0) return;
  CheckpointWriter& writer = *staged;
  if (sharded) {
    sharded->finish_checkpoint(writer, optimizer);
  } else {
    writer.write_tensors("model.safetensors", model_state(model_module));
    writer.write_tensors("optimizer.safetensors", optimizer.state());
  }
  writer.write_tensors("rng.safetensors", generator_states(device));
  writer.write_text("trainer_state.json", counters_json(counters, cursor).dump(2) + "\n");
  writer.write_text("config.yaml", config.resolved_yaml() + "\n");
  // The best checkpoint (validation) is kept whatever keep_last says.
  for (const std::string& warning :
       writer.commit(static_cast<int>(options.keep_last), counters.best_step).warnings)
    std::cerr << "[train] warning: " << warning << "\n";
}

RunCheckpoint read_run_checkpoint(const CheckpointReader& reader) {
  RunCheckpoint checkpoint;
  checkpoint.dir = reader.dir();
  checkpoint.model = read_full_checkpoint_tensors(reader, "model");
  checkpoint.optimizer = read_full_checkpoint_tensors(reader, "optimizer");
  checkpoint.rng = reader.read_tensors("rng.safetensors");
  check(checkpoint.rng.contains("cpu_generator"), "[train] ", reader.dir(),
        "/rng.safetensors: no 'cpu_generator' state");
  const std::string path = reader.dir() + "/trainer_state.json";
  try {
    std::tie(checkpoint.counters, checkpoint.sampler, checkpoint.pending) =
        parse_trainer_state(parse_json_text(reader.read_text("trainer_state.json")));
  } catch (const std::exception& e) {  // malformed JSON, a missing or mistyped field
    throw Error("[train] ", path, ": not a trainer state: ", e.what());
  }
  check(checkpoint.counters.step >= 0 && checkpoint.counters.documents_seen >= 0 &&
            checkpoint.counters.tokens_seen >= 0,
        "[train] ", path, ": negative counters");
  return checkpoint;
}

Counters restore_trainer_state(const RunCheckpoint& checkpoint, DataCursor& cursor,
                               const at::Device& device) {
  restore_generators(checkpoint.rng, device);
  cursor.sampler.restore(checkpoint.sampler);
  cursor.pending = checkpoint.pending;
  return checkpoint.counters;
}

Counters restore_checkpoint(const RunCheckpoint& checkpoint, MixedPrecisionAdamW& optimizer,
                            const torch::nn::Module& model_module, DataCursor& cursor,
                            const at::Device& device) {
  const std::string& dir = checkpoint.dir;
  {
    at::NoGradGuard no_grad;
    for (const auto& [name, parameter] : model_state(model_module)) {
      auto found = checkpoint.model.find(name);
      check(found != checkpoint.model.end(), "[train] ", dir, "/model.safetensors: missing '", name,
            "'");
      check(found->second.sizes() == parameter.sizes() &&
                found->second.scalar_type() == parameter.scalar_type(),
            "[train] ", dir, "/model.safetensors: '", name, "' is ", found->second.sizes(), " ",
            c10::toString(found->second.scalar_type()), ", the model being trained has ",
            parameter.sizes(), " ", c10::toString(parameter.scalar_type()),
            " (a dtype left to its default differs between the CPU, fp32, and a GPU, bf16: name "
            "model.dtype / draft.dtype as the run was started)");
      parameter.detach().copy_(found->second);
    }
  }
  optimizer.load_state(checkpoint.optimizer, dir + " optimizer state");
  return restore_trainer_state(checkpoint, cursor, device);
}

Counters share_resumed_state(dist::ProcessGroup& group, MixedPrecisionAdamW& optimizer,
                             const torch::nn::Module& model_module, const Counters& counters,
                             DataCursor& cursor, const at::Device& device) {
  std::vector<at::Tensor> weights;
  for (const auto& [name, tensor] : model_state(model_module)) weights.push_back(tensor.detach());
  broadcast_tensors_from_rank0(group, weights, "the trained model's tensors");
  const MixedPrecisionAdamW::NamedTensors state = optimizer.state();
  std::vector<at::Tensor> values;
  for (const auto& entry : state) values.push_back(entry.second.contiguous().clone());
  broadcast_tensors_from_rank0(group, values, "the optimizer state's tensors");
  if (group.rank() != 0) {
    std::map<std::string, at::Tensor> named;
    for (size_t i = 0; i < state.size(); ++i) named[state[i].first] = values[i];
    optimizer.load_state(named, "rank 0's optimizer state");
  }
  return share_trainer_state(group, counters, cursor, device);
}

Counters share_trainer_state(dist::ProcessGroup& group, const Counters& counters,
                             DataCursor& cursor, const at::Device& device) {
  const auto states = generator_states(device);
  std::vector<at::Tensor> rng;
  for (const auto& entry : states) rng.push_back(entry.second);
  broadcast_tensors_from_rank0(group, rng, "the random generator states");
  std::string text = counters_json(counters, cursor).dump();
  group.broadcast_text(text, 0);
  if (group.rank() == 0) return counters;
  std::map<std::string, at::Tensor> received;
  for (size_t i = 0; i < states.size(); ++i) received[states[i].first] = rng[i];
  restore_generators(received, device);
  return counters_from_json(nlohmann::json::parse(text), cursor);
}

}  // namespace tandem
