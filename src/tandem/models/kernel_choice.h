#pragma once
// Which attention kernel a kind of call runs, and why: the answer of the pure policy functions
// (choose_ttt_kernel, choose_dflash_kernel), logged once per kind of call on a GPU so a run shows
// what ran without a profiler.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tandem/models/attention_options.h"

namespace tandem {

struct KernelChoice {
  AttentionKernel kernel = AttentionKernel::Blockwise;
  std::string reason;
};

/// What every kernel policy answers the same way: `dense` and `blockwise` when asked for, and the
/// blockwise kernel for a dtype no fused kernel takes (anything but fp32, bf16 and fp16); nullopt
/// where the policy itself decides.
std::optional<KernelChoice> asked_or_unsupported(AttentionKernel asked, c10::ScalarType dtype);

/// The self-checks' comparison: each of `got` is finite and within `bound` of `want`, relative to
/// the larger of 1 and want's largest magnitude. Host tensors, in the same order.
bool kernels_agree(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want,
                   double bound);

/// Runs `check` the first time `kind` (what is checked and where: "dflash cuda:0 BFloat16 128")
/// is asked about and remembers its answer; a check that throws answers false. Gradients are on
/// while it runs (a caller may hold a no-grad guard). The GPU self-checks of the fused kernels
/// use it.
bool remembered_check(const std::string& kind, const std::function<bool()>& check);

/// The kind a self-check is remembered under: "<what> <device> <dtype>[ <head_dim>]" (head_dim
/// left out when negative).
std::string check_kind(const std::string& what, const c10::Device& device, c10::ScalarType dtype,
                       int64_t head_dim = -1);

/// The self-checks' view of one kernel run: `out` and the gradients of sum(out * weights) in fp32
/// with respect to each of `inputs`, all as fp32 host tensors (what kernels_agree compares).
std::vector<at::Tensor> output_and_gradients_on_host(const at::Tensor& out,
                                                     const std::vector<at::Tensor>& inputs,
                                                     const at::Tensor& weights);

/// "fused", "blockwise" or "dense".
const char* kernel_name(AttentionKernel kernel);

/// Logs `[attention] <attention> on cuda:0 (BFloat16, head_dim 128): fused kernel, <reason>` the
/// first time this (attention, device, dtype, head dim, kernel) is seen. q (B, heads, T, d).
void log_kernel_choice_once(const char* attention, const at::Tensor& q, const KernelChoice& choice);

/// Whether ATen's CUDA flash attention runs forward and backward on `device` (a tiny causal bf16
/// call, tried once per device and remembered). False on GPUs older than Ampere and on builds
/// without flash attention.
bool cuda_flash_attention_runs(const c10::Device& device);

}  // namespace tandem
