#include "tandem/models/load.h"

#include <ATen/ATen.h>

#include <set>
#include <sstream>

#include "tandem/core/error.h"
#include "tandem/dist/sharding.h"

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

void load_parameters(torch::nn::Module& module, const HfCheckpoint& checkpoint,
                     c10::ScalarType dtype, const RunContext& run, bool tied_embeddings) {
  at::NoGradGuard no_grad;
  std::set<std::string> used;
  std::vector<std::string> missing;
  for (auto& param : module.named_parameters(/*recurse=*/true)) {
    const std::string& name = param.key();
    if (!checkpoint.contains(name)) {
      missing.push_back(name);
      continue;
    }
    const auto& info = checkpoint.info(name);
    check(info.shape == param.value().sizes().vec(), "[checkpoint] ", checkpoint.dir(),
          ": tensor '", name, "' has shape ", at::IntArrayRef(info.shape),
          " but the config implies ", param.value().sizes());
    at::Tensor value = run.dry_run  // shapes checked above; nothing read
                           ? at::empty(info.shape, at::TensorOptions().dtype(dtype).device(at::kMeta))
                           : checkpoint.read(name).to(run.device, dtype);
    param.value().set_data(value);
    shard_on_load(run.shard_on_load, param.value());  // sharded training: split on arrival
    used.insert(name);
  }
  check(missing.empty(), "[checkpoint] ", checkpoint.dir(), ": missing tensors ",
        join_first(missing, 5));
  std::vector<std::string> unexpected;
  for (const std::string& name : checkpoint.names())
    if (!used.count(name) && !carries_no_weights(name, tied_embeddings)) unexpected.push_back(name);
  check(unexpected.empty(), "[checkpoint] ", checkpoint.dir(),
        ": tensors the config does not account for: ", join_first(unexpected, 5),
        " (a different architecture or config?)");
}

CausalLM load_causal_lm(const std::string& dir, c10::ScalarType dtype, const RunContext& run) {
  const DecoderConfig config = DecoderConfig::from_dir(dir);
  const HfCheckpoint checkpoint = HfCheckpoint::open(dir, run.rank_zero);
  // Parameters start uninitialised (at::empty: on the CPU, pages untouched until filled); load
  // replaces each with its checkpoint tensor, so at most one tensor's host copy exists at a time.
  CausalLM model(config, at::TensorOptions().dtype(dtype).device(run.placement()));
  load_parameters(*model, checkpoint, dtype, run, config.tie_word_embeddings);
  return model;
}

}  // namespace tandem
