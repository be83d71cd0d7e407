#pragma once
// `tandem train --dry-run CONFIG`: everything a run would do before its first step, without
// training and without reading a weight. The config is validated (every key understood, every
// value in range), the data is read (and tokenized into its cache), the models are built on
// the meta device and checked against their checkpoints' headers (names, shapes), and what
// would run is printed: the device and ranks, each model with its dtype and parameter count,
// the memory each rank would hold for weights and optimizer state, the data and its epochs.
#include <ostream>

#include "tandem/core/config.h"

namespace tandem {

/// Writes the plan of `config` to `out`; throws the Error a real run would, before its work.
void dry_run(const Config& config, std::ostream& out);

}  // namespace tandem
