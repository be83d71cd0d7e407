#pragma once
// How the attention of a run is computed (config section `attention`, docs/long-context.md).
// Built once into the run context and handed to every model that attends; the results do not
// depend on it beyond rounding.
#include <cstdint>

namespace tandem {

enum class AttentionKernel {
  // ATen's fused attention where it applies, the blockwise kernel elsewhere: EAGLE-3's TTT as one
  // fused causal call per document merged by log-sum-exp with the earlier steps' keys
  // (models/fused_ttt_attention.h; choose_ttt_kernel says where), DFlash's blocks as one masked
  // fused call per chunk of blocks merged with each block's own keys
  // (models/fused_dflash_attention.h; choose_dflash_kernel). Otherwise as Blockwise.
  Fused,
  // Memory linear in the sequence length: SDPA per document for the decoders, the blockwise
  // kernel with a hand-written backward (models/banded_attention.h) for TTT and DFlash blocks.
  Blockwise,
  // The earlier kernels: one dense (T, T) mask or score block per call, kept by autograd. For
  // comparison (bench/bench_long_context.cpp) and as the tests' reference; memory grows with T^2.
  Dense,
};

struct AttentionOptions {
  AttentionKernel kernel = AttentionKernel::Fused;
  int64_t query_chunk = 512;  // queries per tile of the blockwise kernel and per fused DFlash call
  int64_t key_chunk = 1024;   // keys per tile
  // Tokens per chunk of the chunked gated delta rule (the Gated DeltaNet layers of hybrid
  // targets, models/gated_delta_rule.h): memory is linear in T, each chunk solves a (C, C) system.
  int64_t linear_chunk = 64;
};

}  // namespace tandem
