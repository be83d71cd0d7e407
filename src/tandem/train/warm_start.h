#pragma once
// Warm start (draft.init_from, model.init_from): the trained model's weights taken from an earlier
// run before step 1, where resume would continue that run. Only the weights (and buffers, such as
// an EAGLE-3 draft's vocabulary map) are taken: the optimizer starts fresh, the data from the
// first record, the step count from 0, and the schedule from its warmup.
//
// The source is one of:
//   - a tandem checkpoint (`RUN_DIR/step-N`), or a run directory (its newest valid checkpoint);
//     sharded checkpoints are reassembled;
//   - an export: an HF causal LM (`RUN_DIR/export` of sft, distill, dpo, grpo, gspo, or any HF
//     checkpoint of the same architecture), or a draft's export in the format `tandem eval`
//     loads (EAGLE-3's SGLang export, DFlash's z-lab one, DSpark's; a run's `export/` finds it).
// Every parameter and buffer of the trained model must be there with its shape; what is missing
// or differs is named with the file, and nothing is changed.
#include <string>

namespace torch::nn {
class Module;
}

namespace tandem {

class Config;
struct ObjectiveDescription;

/// draft.init_from for objectives with a draft, else model.init_from ("" when unset); `where`
/// receives the key's location for messages.
std::string read_init_from(const Config& config, const ObjectiveDescription& objective,
                           std::string& where);

/// Copies the weights of `source` (above) into `trained`; `where` names the key in messages.
/// Returns a line for the log: what was read and how many tensors.
std::string warm_start(torch::nn::Module& trained, const std::string& source,
                       const ObjectiveDescription& objective, const std::string& where);

}  // namespace tandem
