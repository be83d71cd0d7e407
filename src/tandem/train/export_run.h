#pragma once
// `tandem export`: the trained model of a run's checkpoint, written in its serving format.
#include <cstdint>
#include <string>

namespace tandem {

struct ExportResult {
  std::string checkpoint_dir;  // the checkpoint exported
  int64_t step = 0;
  std::string out_dir;
};

/// Exports the checkpoint of `step` (-1: the newest valid one) of `run_dir` into `out_dir`, using
/// the config the checkpoint stored, with the run's tokenizer files (data.tokenizer) beside it.
/// Frozen models are read only where the objective needs them. `dtype` ("" = as trained, or
/// fp32 | bf16 | fp16) casts the trained weights before they are written, e.g. to ship a model
/// trained in fp32 at half the size. `verifier_name` (a draft's) sets target.name for this
/// export: the verifier's hub id its speculators config records.
ExportResult export_run(const std::string& run_dir, int64_t step, const std::string& out_dir,
                        const std::string& dtype = "", const std::string& verifier_name = "");

/// Copies tokenizer.json, tokenizer_config.json and special_tokens_map.json (those that exist)
/// from `tokenizer_dir` into `export_dir`, as serving engines expect them beside the weights.
void copy_tokenizer_files(const std::string& tokenizer_dir, const std::string& export_dir);

}  // namespace tandem
