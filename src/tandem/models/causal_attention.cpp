#include "tandem/models/causal_attention.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <iostream>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>

#include "tandem/core/error.h"
#include "tandem/models/attention_sinks.h"
#include "tandem/models/banded_attention.h"
#include "tandem/models/decoder.h"
#include "tandem/models/kernel_choice.h"

namespace tandem {

bool sdpa_repeats_kv(const SdpaCall& call) {
  if (call.kv_heads == call.heads || call.device != c10::kCUDA) return false;
  const bool flash_dtype = call.dtype == c10::kBFloat16 || call.dtype == c10::kHalf;
  const bool flash_head = call.head_dim <= 256 && call.head_dim % 8 == 0;
  return call.masked || !flash_dtype || !flash_head;
}

SdpaOperands sdpa_operands(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& mask) {
  const SdpaCall call{q.device().type(), q.scalar_type(), q.size(1),
                      k.size(1),         q.size(3),       mask.defined()};
  if (!sdpa_repeats_kv(call)) return {k, v, call.kv_heads != call.heads};
  const int64_t repeats = q.size(1) / k.size(1);
  return {k.repeat_interleave(repeats, 1), v.repeat_interleave(repeats, 1), false};
}

std::string sdpa_backend(const at::Tensor& q, const SdpaOperands& operands,
                         const at::Tensor& mask) {
  const int64_t choice = at::_fused_sdp_choice(
      q, operands.k, operands.v, mask.defined() ? std::optional<at::Tensor>(mask) : std::nullopt,
      /*dropout_p=*/0.0, /*is_causal=*/!mask.defined(), /*scale=*/std::nullopt,
      /*enable_gqa=*/operands.enable_gqa);
  // sdp::SDPBackend's values (ATen/native/transformers/sdp_utils_cpp.h).
  switch (choice) {
    case 0:
      return "math";
    case 1:
      return "flash";
    case 2:
      return "efficient";
    case 3:
      return "cudnn";
    case 4:
      return "overrideable";
    default:
      return "none (" + std::to_string(choice) + ")";
  }
}

namespace {

// On a GPU, the kernel of each kind of call is logged the first time it is made, so a run shows
// whether flash or the memory-efficient kernel runs (and never math) without a profiler.
// (Called for every SDPA call: the kind is a small key, its text is made only to log it.)
void log_backend_once(const at::Tensor& q, const SdpaOperands& operands, const at::Tensor& mask) {
  using Kind = std::tuple<int, int64_t, int64_t, int64_t, bool, bool>;
  static std::mutex mutex;
  static std::set<Kind> logged;
  const Kind kind{static_cast<int>(q.scalar_type()),
                  q.size(1),
                  operands.k.size(1),
                  q.size(3),
                  operands.enable_gqa,
                  mask.defined()};
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!logged.insert(kind).second) return;
  }
  std::cerr << "[attention] SDPA on " << q.device().str() << " (" << c10::toString(q.scalar_type())
            << ", " << q.size(1) << "/" << operands.k.size(1) << " heads"
            << (operands.enable_gqa ? " (GQA)" : "") << ", head_dim " << q.size(3)
            << (mask.defined() ? ", mask" : ", causal") << "): " << sdpa_backend(q, operands, mask)
            << " kernel\n";
}

// cuDNN's attention builds an execution plan for every new shape. A cached decoding step's keys
// grow by one token per step, so it paid that cost at nearly every step: the demo target's bf16
// regeneration on an H200 ran at 145 tokens/s, its fp32 one (the memory-efficient kernel) at
// 1,094. Masked calls (decoding, speculative verification, the dense reference kernel) therefore
// run with cuDNN's attention switched off for the call; unmasked training calls keep it.
class CudnnAttentionOff {
 public:
  CudnnAttentionOff() : before_(at::globalContext().userEnabledCuDNNSDP()) {
    at::globalContext().setSDPUseCuDNN(false);
  }
  ~CudnnAttentionOff() { at::globalContext().setSDPUseCuDNN(before_); }
  CudnnAttentionOff(const CudnnAttentionOff&) = delete;
  CudnnAttentionOff& operator=(const CudnnAttentionOff&) = delete;

 private:
  bool before_;
};

}  // namespace

at::Tensor sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                const at::Tensor& mask, double scale) {
  const SdpaOperands operands = sdpa_operands(q, k, v, mask);
  std::optional<CudnnAttentionOff> no_cudnn;
  if (q.is_cuda() && mask.defined()) no_cudnn.emplace();
  if (q.is_cuda()) log_backend_once(q, operands, mask);
  return at::scaled_dot_product_attention(
      q, operands.k, operands.v, mask.defined() ? std::optional<at::Tensor>(mask) : std::nullopt,
      /*dropout_p=*/0.0, /*is_causal=*/!mask.defined(),
      /*scale=*/scale > 0 ? std::optional<double>(scale) : std::nullopt, operands.enable_gqa);
}

at::Tensor attention_mask(const AttentionLayout& layout, int64_t sliding_window) {
  if (!layout.document_ids.defined() && sliding_window == 0) return at::Tensor();
  const int64_t length = layout.positions.size(1);
  const auto device = layout.positions.device();
  const at::Tensor index = at::arange(length, at::TensorOptions().dtype(at::kLong).device(device));
  const at::Tensor query = index.view({length, 1});
  const at::Tensor key = index.view({1, length});
  at::Tensor allowed = key <= query;  // (T, T)
  if (sliding_window > 0) allowed = allowed.logical_and(query - key < sliding_window);
  allowed = allowed.unsqueeze(0);  // (1, T, T)
  if (layout.document_ids.defined()) {
    const at::Tensor& doc = layout.document_ids;  // (B, T)
    allowed = allowed.logical_and(doc.unsqueeze(2) == doc.unsqueeze(1));
  }
  return allowed.unsqueeze(1);  // (B or 1, 1, T, T)
}

CausalAttentionPlan plan_causal_attention(const AttentionLayout& layout, int64_t sliding_window,
                                          const AttentionOptions& options, bool sinks) {
  CausalAttentionPlan plan;
  plan.options = options;
  // A window no shorter than the row hides no key (query - key < T <= window): no window, so
  // the flash path runs (Mistral-7B-v0.1's 4096 on rows of up to 4096 tokens).
  if (sliding_window >= layout.positions.size(1)) sliding_window = 0;
  if (options.kernel == AttentionKernel::Dense) {
    plan.dense_mask = attention_mask(layout, sliding_window);
    return plan;
  }
  if (sinks) {  // the blockwise kernel, whose softmax takes the sinks, on every layer
    plan.window_bands = causal_key_bands(layout, sliding_window);
    return plan;
  }
  const int64_t rows = layout.positions.size(0), length = layout.positions.size(1);
  const bool cuda_fused =
      options.kernel == AttentionKernel::Fused && layout.positions.device().is_cuda();
  if (sliding_window > 0) {
    plan.window_bands = causal_key_bands(layout, sliding_window);
    if (cuda_fused) {
      plan.window = sliding_window;
      plan.sequences = packed_sequences(layout.document_ids.defined()
                                            ? document_bounds(layout.host_document_ids())
                                            : std::vector<std::vector<int64_t>>{},
                                        rows, length, layout.positions.device());
    }
    return plan;
  }
  if (!layout.document_ids.defined()) return plan;
  plan.document_bounds = document_bounds(layout.host_document_ids());
  const bool single = std::all_of(plan.document_bounds.begin(), plan.document_bounds.end(),
                                  [](const std::vector<int64_t>& row) { return row.size() == 2; });
  if (single) plan.document_bounds.clear();  // every row one document: plain causal
  if (cuda_fused && !single)
    plan.sequences =
        packed_sequences(plan.document_bounds, rows, length, layout.positions.device());
  return plan;
}

at::Tensor causal_attention(const QueryKeyValue& qkv, const CausalAttentionPlan& plan) {
  if (qkv.sinks.defined()) {
    if (plan.options.kernel == AttentionKernel::Dense) {
      at::Tensor mask = plan.dense_mask;
      if (!mask.defined()) {  // one causal document per row
        const int64_t length = qkv.q.size(2);
        mask = at::ones({length, length}, qkv.q.options().dtype(at::kBool))
                   .tril()
                   .view({1, 1, length, length});
      }
      return masked_attention_with_sinks(qkv.q, qkv.k, qkv.v, mask, qkv.sinks);
    }
    check(plan.window_bands.first.defined(),
          "[attention] a layer with attention sinks needs a plan made for them");
    return banded_attention(qkv.q, qkv.k, qkv.v, plan.window_bands, at::Tensor(), at::Tensor(),
                            at::Tensor(), plan.options, qkv.sinks);
  }
  if (plan.options.kernel == AttentionKernel::Dense)
    return sdpa(qkv.q, qkv.k, qkv.v, plan.dense_mask);
  if (plan.sequences.offsets.defined()) {
    const at::Tensor& q = qkv.q;
    const auto choose = [&](bool verified) {
      return choose_varlen_kernel(plan.options.kernel, q.device().type(), q.scalar_type(),
                                  q.size(3), verified);
    };
    KernelChoice choice = choose(true);  // the probes run only where the policy would say yes
    if (choice.kernel == AttentionKernel::Fused &&
        !(cuda_flash_attention_runs(q.device()) &&
          varlen_attention_verified(q.device(), q.scalar_type(), q.size(3))))
      choice = choose(false);
    log_kernel_choice_once(
        plan.window > 0 ? "decoder, sliding window" : "decoder, packed documents", q, choice);
    if (choice.kernel == AttentionKernel::Fused)
      return varlen_causal_attention(q, qkv.k, qkv.v, plan.sequences, plan.window);
  }
  if (plan.window_bands.first.defined())
    return banded_attention(qkv.q, qkv.k, qkv.v, plan.window_bands, at::Tensor(), at::Tensor(),
                            at::Tensor(), plan.options);
  if (plan.document_bounds.empty()) return sdpa(qkv.q, qkv.k, qkv.v, at::Tensor());
  check(static_cast<int64_t>(plan.document_bounds.size()) == qkv.q.size(0),
        "[attention] the plan covers ", plan.document_bounds.size(), " rows, the batch ",
        qkv.q.size(0));
  // The documents are cut out with split, not narrow: the backward of a split is one cat of the
  // pieces' gradients, where each narrow's backward would write a zero tensor of the whole
  // (B, heads, T, d) input and add it up, once per document (quadratic in documents per batch).
  const std::vector<at::Tensor> q_rows = qkv.q.split(1, 0), k_rows = qkv.k.split(1, 0),
                                v_rows = qkv.v.split(1, 0);  // each (1, heads, T, d)
  std::vector<at::Tensor> rows;
  for (int64_t b = 0; b < qkv.q.size(0); ++b) {
    const std::vector<int64_t>& bounds = plan.document_bounds[static_cast<size_t>(b)];
    std::vector<int64_t> lengths;
    for (size_t i = 0; i + 1 < bounds.size(); ++i) lengths.push_back(bounds[i + 1] - bounds[i]);
    const size_t row = static_cast<size_t>(b);
    const std::vector<at::Tensor> q = q_rows[row].split_with_sizes(lengths, 2),
                                  k = k_rows[row].split_with_sizes(lengths, 2),
                                  v = v_rows[row].split_with_sizes(lengths, 2);
    std::vector<at::Tensor> documents;  // each (1, heads, length, d)
    for (size_t i = 0; i < lengths.size(); ++i)
      documents.push_back(sdpa(q[i], k[i], v[i], at::Tensor()));
    rows.push_back(documents.size() == 1 ? documents[0] : at::cat(documents, 2));
  }
  return at::cat(rows, 0);  // (B, heads, T, d)
}

}  // namespace tandem
