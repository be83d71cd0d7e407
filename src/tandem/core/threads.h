#pragma once
// One intra-op thread pool sized to the machine (or a flag), and no inter-op pool fighting it.

namespace tandem {

/// Sets libtorch's intra-op threads to `requested` (> 0) or, when 0, to $TANDEM_THREADS or the
/// number of cores this process may run on divided by $LOCAL_WORLD_SIZE (the processes torchrun
/// started on this machine); inter-op parallelism is set to 1. Returns the count.
int configure_threads(int requested);

}  // namespace tandem
