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
/// the config the checkpoint stored. Frozen models are read only where the objective needs them.
ExportResult export_run(const std::string& run_dir, int64_t step, const std::string& out_dir);

}  // namespace tandem
