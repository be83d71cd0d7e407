#include "tandem/models/load.h"

#include <ATen/ATen.h>
#include <unistd.h>

#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "tandem/core/error.h"
#include "tandem/dist/sharding.h"
#include "tandem/models/stored_weights.h"

namespace tandem {

namespace {

bool carries_no_weights(const std::string& name, bool tied_embeddings) {
  const std::string suffix = "rotary_emb.inv_freq";
  if (name.size() >= suffix.size() &&
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
    return true;
  return tied_embeddings && name == "lm_head.weight";
}

std::string join_first(const std::vector<std::string>& names, size_t limit) {
  std::ostringstream out;
  for (size_t i = 0; i < names.size() && i < limit; ++i) out << (i ? ", " : "") << names[i];
  if (names.size() > limit) out << " ... (" << names.size() << " in all)";
  return out.str();
}

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> checkpoint_tensors(
    const torch::nn::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& param : module.named_parameters(/*recurse=*/true))
    out.emplace_back(param.key(), param.value());
  for (const auto& buffer : module.named_buffers(/*recurse=*/true))
    out.emplace_back(buffer.key(), buffer.value());
  return out;
}

void check_checkpoint_matches(const torch::nn::Module& module, const HfCheckpoint& checkpoint,
                              const DecoderConfig& config) {
  std::vector<std::string> missing, unexpected;
  std::set<std::string> expected;
  for (const auto& [name, value] : checkpoint_tensors(module)) {
    const StoredWeight stored = stored_form(name, config, checkpoint);
    bool complete = true;
    for (const std::string& piece : stored.names()) {
      expected.insert(piece);
      if (!checkpoint.contains(piece)) {
        missing.push_back(piece);
        complete = false;
      } else if (checkpoint.info(piece).dtype == safetensors::Dtype::F8_E4M3) {
        checkpoint.check_fp8(piece);             // from the headers: a dry run checks it too
        expected.insert(fp8_scale_name(piece));  // read with its weight (io/block_fp8.h)
      }
    }
    if (complete) check_stored_shapes(stored, value.sizes(), checkpoint);
  }
  check(missing.empty(), "[checkpoint] ", checkpoint.dir(), ": missing tensors ",
        join_first(missing, 5));
  for (const std::string& name : checkpoint.names())
    if (!expected.count(name) && !carries_no_weights(name, config.tie_word_embeddings) &&
        !outside_decoder(name, config))
      unexpected.push_back(name);
  check(unexpected.empty(), "[checkpoint] ", checkpoint.dir(),
        ": tensors the config does not account for: ", join_first(unexpected, 5),
        " (a different architecture or config?)");
}

void load_parameters(torch::nn::Module& module, const HfCheckpoint& checkpoint,
                     c10::ScalarType dtype, const RunContext& run, const DecoderConfig& config) {
  check_checkpoint_matches(module, checkpoint, config);
  at::NoGradGuard no_grad;
  std::set<std::string> buffers;
  for (const auto& buffer : module.named_buffers(/*recurse=*/true)) buffers.insert(buffer.key());
  for (auto& [name, tensor] : checkpoint_tensors(module)) {
    const StoredWeight stored = stored_form(name, config, checkpoint);
    // A buffer keeps the dtype the model gave it (an fp32 routing bias in a bf16 model).
    const bool buffer = buffers.count(name) > 0;
    const at::TensorOptions options =
        at::TensorOptions().dtype(buffer ? tensor.scalar_type() : dtype).device(run.device);
    at::Tensor value = run.dry_run  // shapes checked above; nothing read
                           ? at::empty(tensor.sizes(), options.device(at::kMeta))
                           : read_stored_weight(stored, tensor.sizes(), checkpoint, options);
    tensor.set_data(value);
    // Sharded training: split on arrival. Buffers (never trained, a few numbers) stay whole.
    if (!buffer) shard_on_load(run.shard_on_load, tensor);
  }
}

CausalLM allocate_causal_lm(const DecoderConfig& config, const at::TensorOptions& options,
                            const std::string& where, const HfCheckpoint* checkpoint) {
  // The model without memory first: its shapes against the checkpoint's (headers only), and its
  // size against the machine, before anything is allocated.
  const CausalLM shapes(config, options.device(at::kMeta));
  if (checkpoint) check_checkpoint_matches(*shapes, *checkpoint, config);
  int64_t count = 0;
  for (const at::Tensor& parameter : shapes->parameters()) count += parameter.numel();
  const double gib =
      static_cast<double>(count) *
      static_cast<double>(c10::elementSize(c10::typeMetaToScalarType(options.dtype()))) /
      double(int64_t{1} << 30);
  if (options.device().is_cpu()) {  // untouched pages would be granted, then fail when filled
    const double host_gib = static_cast<double>(sysconf(_SC_PHYS_PAGES)) *
                            static_cast<double>(sysconf(_SC_PAGE_SIZE)) / double(int64_t{1} << 30);
    check(gib <= host_gib, "[model] ", where, ": the model it describes has ", count,
          " parameters, ", gib, " GiB in ", c10::typeMetaToScalarType(options.dtype()),
          ", more than this machine's ", host_gib, " GiB of memory (are its sizes right?)");
  }
  try {
    return CausalLM(config, options);
  } catch (const c10::Error& e) {
    throw Error("[model] ", where, ": allocating its ", count, " parameters (", gib, " GiB) on ",
                options.device().str(), " failed: ", e.what_without_backtrace());
  }
}

std::string outside_decoder_summary(const HfCheckpoint& checkpoint, const DecoderConfig& config) {
  std::map<std::string, int64_t> counts;
  for (const std::string& name : checkpoint.names())
    if (const char* part = outside_decoder(name, config)) ++counts[part];
  std::ostringstream out;
  for (const auto& [part, count] : counts)
    out << (out.tellp() > 0 ? ", " : "") << count << " tensors of " << part;
  return out.str();
}

CausalLM load_causal_lm(const std::string& dir, c10::ScalarType dtype, const RunContext& run) {
  const DecoderConfig config = DecoderConfig::from_dir(dir);
  const HfCheckpoint checkpoint = HfCheckpoint::open(dir, run.rank_zero);
  const std::string skipped = outside_decoder_summary(checkpoint, config);
  if (!skipped.empty())
    std::cerr << "[model] " << dir << ": not read, not part of the decoder: " << skipped << "\n";
  // A config.json whose sizes disagree with its weights fails before anything is allocated.
  // Parameters start uninitialised (at::empty: on the CPU, pages untouched until filled); load
  // replaces each with its checkpoint tensor, so at most one tensor's host copy exists at a time.
  CausalLM model =
      allocate_causal_lm(config, at::TensorOptions().dtype(dtype).device(run.placement()),
                         dir + "/config.json", &checkpoint);
  load_parameters(*model, checkpoint, dtype, run, config);
  model->attention_options = run.attention;
  return model;
}

}  // namespace tandem
