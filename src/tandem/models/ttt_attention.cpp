#include "tandem/models/ttt_attention.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "tandem/core/device.h"
#include "tandem/core/error.h"
#include "tandem/models/banded_attention.h"
#include "tandem/models/decoder.h"
#include "tandem/models/fused_ttt_attention.h"
#include "tandem/models/kernel_choice.h"

namespace tandem {

namespace {

// (B, kv_heads, T, d) -> (B, heads, T, d): kv head j serves query heads j*g .. j*g+g-1.
at::Tensor expand_kv(const at::Tensor& kv, int64_t heads) {
  const int64_t groups = heads / kv.size(1);
  return groups == 1 ? kv : kv.repeat_interleave(groups, 1);
}

// The dense reference: the causal block (B, heads, Tq, Tk) of scores plus one column per later
// step, one softmax, autograd keeping the probabilities.
at::Tensor dense_ttt_attention(const at::Tensor& q, const at::Tensor& context_k,
                               const at::Tensor& context_v, const at::Tensor& context_mask,
                               const std::vector<at::Tensor>& step_k,
                               const std::vector<at::Tensor>& step_v) {
  const int64_t heads = q.size(1), length = context_k.size(2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  const at::Tensor q32 = q.to(at::kFloat);
  std::vector<at::Tensor> scores;
  scores.push_back(at::matmul(q32, expand_kv(context_k, heads).to(at::kFloat).transpose(2, 3))
                       .mul_(scale)
                       .masked_fill(context_mask.logical_not(), -INFINITY));
  for (const at::Tensor& key : step_k)
    scores.push_back((q32 * expand_kv(key, heads).to(at::kFloat)).sum(-1, true).mul_(scale));
  const at::Tensor probabilities = at::softmax(at::cat(scores, -1), -1);  // (B, h, Tq, Tk + i)

  at::Tensor out =
      at::matmul(probabilities.narrow(-1, 0, length), expand_kv(context_v, heads).to(at::kFloat));
  for (size_t j = 0; j < step_v.size(); ++j)
    out = out + probabilities.narrow(-1, length + static_cast<int64_t>(j), 1) *
                    expand_kv(step_v[j], heads).to(at::kFloat);
  return out.to(q.scalar_type());
}

}  // namespace

bool fused_ttt_attention_verified(const c10::Device& device, c10::ScalarType dtype,
                                  int64_t head_dim) {
  return remembered_check(check_kind("fused ttt", device, dtype, head_dim), [&] {
    // Two rows of 24 tokens, row 0 as documents [0, 10) and [10, 24); 4 query heads on 2; the
    // context plus two steps' keys.
    const int64_t rows = 2, length = 24;
    at::Tensor documents = at::zeros({rows, length}, at::kLong);
    documents[0].narrow(0, 10, 14).fill_(1);
    const AttentionLayout layout{to_device(at::zeros({rows, length}, at::kLong), device),
                                 to_device(documents, device), documents};
    const KeyBands bands = causal_key_bands(layout);
    const at::TensorOptions options = at::TensorOptions().dtype(dtype).device(device);
    const at::Generator generator = at::detail::createCPUGenerator(20261126);
    auto random = [&](int64_t heads) {
      return at::randn({rows, heads, length, head_dim}, generator).to(options).requires_grad_(true);
    };
    const std::vector<at::Tensor> inputs = {random(4), random(2), random(2), random(2),
                                            random(2), random(2), random(2)};
    const at::Tensor weights = at::randn({rows, 4, length, head_dim}, generator).to(options);
    const std::vector<at::Tensor> step_k = {inputs[3], inputs[4]}, step_v = {inputs[5], inputs[6]};
    auto run = [&](bool fused) {
      const at::Tensor out =
          fused ? fused_ttt_attention(inputs[0], inputs[1], inputs[2],
                                      causal_document_segments(bands), step_k, step_v)
                : dense_ttt_attention(inputs[0], inputs[1], inputs[2],
                                      bands.dense_mask(length).unsqueeze(1), step_k, step_v);
      return output_and_gradients_on_host(out, inputs, weights);
    };
    return kernels_agree(run(true), run(false), dtype == at::kFloat ? 1e-4 : 3e-2);
  });
}

at::Tensor ttt_attention(const at::Tensor& q, const at::Tensor& context_k,
                         const at::Tensor& context_v, const KeyBands& context_bands,
                         const std::vector<at::Tensor>& step_k,
                         const std::vector<at::Tensor>& step_v, const AttentionOptions& options) {
  check(q.dim() == 4 && context_k.dim() == 4 && context_v.sizes() == context_k.sizes(),
        "[ttt_attention] q must be (B, heads, Tq, d) and keys/values (B, kv_heads, Tk, d); got ",
        q.sizes(), " and ", context_k.sizes());
  check(step_k.size() == step_v.size(), "[ttt_attention] ", step_k.size(), " step keys but ",
        step_v.size(), " step values");
  check(q.size(1) % context_k.size(1) == 0, "[ttt_attention] ", q.size(1),
        " query heads are not a multiple of ", context_k.size(1), " key/value heads");
  for (size_t j = 0; j < step_k.size(); ++j)
    check(step_k[j].sizes() ==
                  at::IntArrayRef({context_k.size(0), context_k.size(1), q.size(2), q.size(3)}) &&
              step_v[j].sizes() == step_k[j].sizes(),
          "[ttt_attention] the keys of step ", j + 1, " are ", step_k[j].sizes(),
          ", expected (B, kv_heads, Tq, d) aligned with the queries ", q.sizes());
  check(context_bands.rows() == q.size(0) && context_bands.queries() == q.size(2),
        "[ttt_attention] the bands cover (", context_bands.rows(), ", ", context_bands.queries(),
        ") queries, the queries are ", q.sizes());
  const auto choose = [&](bool cuda_flash) {
    return choose_ttt_kernel(options.kernel, q.device().type(), q.scalar_type(), q.size(3),
                             cuda_flash);
  };
  KernelChoice choice = choose(true);  // the GPU probes run only where the policy would say yes
  if (q.is_cuda() && choice.kernel == AttentionKernel::Fused &&
      !(cuda_flash_attention_runs(q.device()) &&
        fused_ttt_attention_verified(q.device(), q.scalar_type(), q.size(3))))
    choice = choose(false);
  at::Tensor segments;
  if (choice.kernel == AttentionKernel::Fused) {
    segments = causal_document_segments(context_bands);
    if (!segments.defined())
      choice = {AttentionKernel::Blockwise, "bands that are not causal within documents"};
  }
  if (q.is_cuda())
    log_kernel_choice_once("TTT", q, choice);  // as SDPA's choice is (models/causal_attention.h)
  if (choice.kernel == AttentionKernel::Fused)
    return fused_ttt_attention(q, context_k, context_v, segments, step_k, step_v);
  if (choice.kernel == AttentionKernel::Dense)
    return dense_ttt_attention(q, context_k, context_v,
                               context_bands.dense_mask(context_k.size(2)).unsqueeze(1), step_k,
                               step_v);
  // Each query's own key per later step: the local keys of a group of one query.
  return banded_attention_with_step_keys(q, context_k, context_v, context_bands, step_k, step_v,
                                         options);
}

}  // namespace tandem
