#pragma once
// The reads of device values on the host that tandem's computations make on purpose: each one is
// a wait for the device on a GPU, so each goes through read_on_host with its reason, and the
// reasons form a short, reviewed list (docs/gpu.md). Everything else stays on the device.
//
// On the meta device (shapes and dtypes only: dry runs and the tests that run a whole training
// or decoding step there to prove it reads nothing else) a read has no value: read_on_host then
// returns the caller's stand-in (zeros unless given) and counts the reason, so those tests can
// check which waits a step makes. Any other read of a meta tensor (.item(), .cpu()) throws.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>

namespace tandem {

/// The reasons, one per kind of intended wait.
enum class HostRead {
  MoeExpertCounts,  // tokens per expert, sizing each expert's matmuls (one per MoE layer)
  GradientFlags,    // data parallel: which parameters any rank has a gradient for (one per step)
  StepMetrics,      // the step's metrics, loss and gradient norm (one per step)
  DecodedTokens,    // generation and speculative decoding: the chosen tokens (one per step)
  SaveChecks,       // before a checkpoint: whether the trained state is finite
  DraftVocabMap,    // speculative decoding: the draft vocabulary's target ids (once per decode)
};

const char* host_read_name(HostRead why);

/// `tensor` on the host (a copy; the tensor itself when already there). On the meta device:
/// `stand_in` (a host tensor of tensor's shape), or zeros of tensor's shape and dtype, and the
/// read is counted (meta_host_reads).
at::Tensor read_on_host(const at::Tensor& tensor, HostRead why, const at::Tensor& stand_in = {});

/// Reads of meta tensors through read_on_host since the last reset, by reason name.
std::map<std::string, int64_t> meta_host_reads();
void reset_meta_host_reads();

}  // namespace tandem
