#include "tandem/train/export_run.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "tandem/core/config.h"
#include "tandem/core/config_schema.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/models/frozen.h"
#include "tandem/objectives/objective.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/sharded_model.h"

namespace tandem {

ExportResult export_run(const std::string& run_dir, int64_t step, const std::string& out_dir,
                        const std::string& dtype, const std::string& verifier_name) {
  std::optional<c10::ScalarType> cast;  // checked before anything is read
  if (!dtype.empty()) cast = parse_compute_dtype(dtype, "tandem export --dtype");
  std::optional<CheckpointReader> reader;
  if (step < 0) {
    CheckpointSearch search = find_latest_valid(run_dir);
    for (const std::string& warning : search.warnings) std::cerr << warning << "\n";
    check(search.checkpoint.has_value(), "[export] ", run_dir, ": no valid checkpoint");
    reader.emplace(std::move(*search.checkpoint));
  } else {
    reader.emplace(CheckpointReader::open(run_dir + "/" + checkpoint_dir_name(step)));
  }
  std::vector<std::string> overrides;
  if (!verifier_name.empty()) overrides.push_back("target.name=" + verifier_name);
  const Config config =
      Config::parse(reader->read_text("config.yaml"), reader->dir() + "/config.yaml", overrides);
  // On the CPU whatever device the run trained on: checkpoints hold device-independent tensors,
  // and an export needs no GPU.
  std::unique_ptr<Objective> objective = make_objective(config, RunContext(at::kCPU));
  const auto stored = read_full_checkpoint_tensors(*reader, "model");  // either layout
  torch::nn::Module& model = objective->trainable();
  {
    at::NoGradGuard no_grad;
    auto restore = [&](const std::string& name, at::Tensor tensor) {
      auto found = stored.find(name);
      check(found != stored.end(), "[export] ", reader->dir(), ": the model has no '", name, "'");
      check(found->second.sizes() == tensor.sizes(), "[export] ", reader->dir(), ": model tensor '",
            name, "' has shape ", found->second.sizes(),
            ", the model built from its config.yaml has ", tensor.sizes());
      tensor.copy_(found->second);
    };
    for (const auto& [name, tensor] : model_state(model)) restore(name, tensor);
  }
  if (cast) {
    // Floating tensors only: libtorch's Module::to(dtype) would also convert integer and bool
    // buffers (an EAGLE-3 draft's d2t offsets and t2d mask), which must keep their types.
    at::NoGradGuard no_grad;
    for (auto& parameter : model.parameters())
      if (parameter.is_floating_point()) parameter.set_data(parameter.to(*cast));
    for (auto& buffer : model.buffers())
      if (buffer.is_floating_point()) buffer.set_data(buffer.to(*cast));
  }
  objective->export_model(out_dir);
  const std::string tokenizer_dir = keys::data::tokenizer.read(config);
  if (!tokenizer_dir.empty()) copy_tokenizer_files(tokenizer_dir, out_dir);
  ExportResult result;
  result.checkpoint_dir = reader->dir();
  result.out_dir = out_dir;
  result.step = reader->step();  // the manifest's step, checked against the directory name
  return result;
}

void copy_tokenizer_files(const std::string& tokenizer_dir, const std::string& export_dir) {
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}) {
    const std::filesystem::path source = std::filesystem::path(tokenizer_dir) / name;
    if (std::filesystem::exists(source))
      std::filesystem::copy_file(source, std::filesystem::path(export_dir) / name,
                                 std::filesystem::copy_options::overwrite_existing);
  }
}

}  // namespace tandem
