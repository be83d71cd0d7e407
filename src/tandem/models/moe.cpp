#include "tandem/models/moe.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tandem/core/device.h"
#include "tandem/core/error.h"
#include "tandem/core/host_read.h"
#include "tandem/dist/sharding.h"
#include "tandem/models/kernel_choice.h"
#include "tandem/models/lean_layers.h"

namespace tandem {

void RouterLoad::add(const at::Tensor& router_logits, int64_t top_k) {
  // As transformers' load_balancing_loss_func: the softmax of the logits and its top-k, whatever
  // the family's own scoring.
  const at::Tensor probabilities_now = at::softmax(router_logits.to(at::kFloat), -1);  // (N, E)
  const at::Tensor chosen = std::get<1>(at::topk(probabilities_now.detach(), top_k, -1));
  const int64_t experts = router_logits.size(-1);
  at::Tensor weights = token_weights.defined()
                           ? to_device(token_weights, probabilities_now.device()).to(at::kFloat)
                           : at::ones({router_logits.size(0)}, probabilities_now.options());
  check(weights.numel() == router_logits.size(0), "[moe] router load: ", weights.numel(),
        " token weights for ", router_logits.size(0), " tokens");
  const at::Tensor picks =
      at::zeros({experts}, probabilities_now.options())
          .index_add_(0, chosen.reshape(-1),
                      weights.unsqueeze(1).expand({-1, top_k}).reshape(-1));  // (E,)
  const at::Tensor weighted_probabilities = (probabilities_now * weights.unsqueeze(1)).sum(0);
  const at::Tensor tokens = weights.sum();
  if (layers == 0) {
    num_experts = experts;
    assignments = picks;
    probabilities = weighted_probabilities;
    rows = tokens;
  } else {
    check(experts == num_experts, "[moe] router load: layers with ", num_experts, " and ", experts,
          " experts");
    assignments = assignments + picks;
    probabilities = probabilities + weighted_probabilities;
    rows = rows + tokens;
  }
  ++layers;
}

at::Tensor RouterLoad::loss() const {
  if (layers == 0) return at::zeros({}, at::kFloat);
  const at::Tensor share = assignments / rows;               // f_e (summed over the k picks)
  const at::Tensor mean_probability = probabilities / rows;  // P_e
  return (share * mean_probability).sum() * static_cast<double>(num_experts);
}

ExpertsImpl::ExpertsImpl(int64_t num_experts, int64_t hidden_size, int64_t intermediate_size,
                         const at::TensorOptions& options, bool biases) {
  // transformers' order (gpt-oss: gate_up_proj, its bias, down_proj, its bias).
  gate_up_proj = register_parameter(
      "gate_up_proj", at::empty({num_experts, 2 * intermediate_size, hidden_size}, options));
  if (biases)
    gate_up_proj_bias = register_parameter(
        "gate_up_proj_bias", at::empty({num_experts, 2 * intermediate_size}, options));
  down_proj = register_parameter("down_proj",
                                 at::empty({num_experts, hidden_size, intermediate_size}, options));
  if (biases)
    down_proj_bias =
        register_parameter("down_proj_bias", at::empty({num_experts, hidden_size}, options));
}

SparseMoeImpl::SparseMoeImpl(const DecoderConfig& config, const at::TensorOptions& options)
    : moe(config.moe) {
  check(moe.enabled(), "[moe] a sparse MLP needs num_experts > 0");
  const bool gpt_oss = moe.gpt_oss_experts.enabled();
  gate = register_module(gpt_oss ? "router" : "gate",
                         Linear(config.hidden_size, moe.num_experts, gpt_oss, options));
  experts = register_module("experts", Experts(moe.num_experts, config.hidden_size,
                                               moe.expert_intermediate_size, options, gpt_oss));
  if (moe.scoring == RouterScoring::SigmoidWithBias)
    e_score_correction_bias =
        register_buffer("e_score_correction_bias", at::zeros({moe.num_experts}, options));
  // DeepSeek-V3's layout: the bias lives under the router and stays fp32 in every model dtype
  // (transformers keeps it so); loading reads a buffer in its own dtype.
  if (moe.scoring == RouterScoring::GroupedSigmoid)
    e_score_correction_bias = gate->register_buffer(
        "e_score_correction_bias", at::zeros({moe.num_experts}, options.dtype(at::kFloat)));
  if (moe.shared_expert_intermediate_size > 0 && !moe.shared_expert_gated) {
    shared_experts = register_module(
        "shared_experts",
        Mlp(config.hidden_size, moe.shared_expert_intermediate_size, false, options));
  } else if (moe.shared_expert_intermediate_size > 0) {
    shared_expert = register_module(
        "shared_expert",
        Mlp(config.hidden_size, moe.shared_expert_intermediate_size, false, options));
    shared_expert_gate =
        register_module("shared_expert_gate", Linear(config.hidden_size, 1, false, options));
  }
}

std::pair<at::Tensor, at::Tensor> route_tokens(const at::Tensor& router_logits,
                                               const at::Tensor& bias, const MoeConfig& moe) {
  const int64_t k = moe.experts_per_token;
  if (moe.scoring == RouterScoring::SoftmaxOfTopK) {
    // gpt-oss: the k best logits, then a softmax over those k in the logits' dtype.
    auto [top, indices] = at::topk(router_logits, k, -1);
    return {indices, at::softmax(top, -1)};
  }
  if (moe.scoring == RouterScoring::GroupedSigmoid) {
    const at::Tensor scores = at::sigmoid(router_logits.to(at::kFloat));  // (N, E)
    const at::Tensor choice = scores + bias;                              // (N, E)
    const int64_t tokens = choice.size(0), per_group = moe.num_experts / moe.groups;
    // Each group scores by its two best experts; the top_groups best groups stay open.
    const at::Tensor group_scores =
        std::get<0>(choice.view({tokens, moe.groups, per_group}).topk(2, -1)).sum(-1);  // (N, G)
    const at::Tensor open_groups =
        std::get<1>(group_scores.topk(moe.top_groups, -1, true, false));  // (N, top_groups)
    const at::Tensor open = at::zeros_like(group_scores, at::kBool)
                                .scatter_(1, open_groups, true)
                                .unsqueeze(-1)
                                .expand({tokens, moe.groups, per_group})
                                .reshape({tokens, moe.num_experts});  // (N, E)
    const at::Tensor indices = std::get<1>(
        choice.masked_fill(open.logical_not(), -INFINITY).topk(k, -1, true, false));  // (N, k)
    at::Tensor weights = scores.gather(1, indices);
    if (moe.normalize_top_k) weights = weights / (weights.sum(-1, true) + 1e-20);
    return {indices, weights * moe.routed_scaling_factor};
  }
  if (moe.scoring == RouterScoring::SigmoidWithBias) {
    // MiniMax-M2: experts chosen by sigmoid + bias, weighted by the sigmoids alone.
    const at::Tensor scores = at::sigmoid(router_logits.to(at::kFloat));  // (N, E)
    const at::Tensor indices = std::get<1>(at::topk(scores + bias, k, -1, true, false));
    at::Tensor weights = scores.gather(1, indices);
    weights = weights / weights.sum(-1, true);
    return {indices, weights};
  }
  const at::Tensor probabilities = at::softmax(router_logits, -1, at::kFloat);  // (N, E)
  auto [weights, indices] = at::topk(probabilities, k, -1);
  if (moe.normalize_top_k) weights = weights / weights.sum(-1, true);
  if (moe.weights_in_model_dtype) weights = weights.to(router_logits.scalar_type());
  return {indices, weights};
}

namespace {

// The experts' rows through one grouped matmul each (ATen's _grouped_mm): `rows` (P, H) sorted
// by expert, `per_expert` (E,) int64 on the device; each expert's rows end at the running sum of
// the counts. No host wait: the offsets stay on the device.
at::Tensor grouped_expert_rows(const at::Tensor& rows, const at::Tensor& per_expert,
                               const at::Tensor& expert_of_row, const at::Tensor& gate_up_proj,
                               const at::Tensor& down_proj, const ExpertExtras& extras) {
  const at::Tensor ends = per_expert.cumsum(0).to(at::kInt);  // (E,)
  // a (P, K) x each expert's b (E, K, N) -> (P, N). On the meta device (a planned run; ATen's
  // grouped matmul reads the offsets there) one matmul of the same shapes stands in for it.
  const auto grouped_matmul = [&](const at::Tensor& a, const at::Tensor& b) {
    return a.is_meta() ? at::matmul(a, b[0]) : at::_grouped_mm(a, b, ends);
  };
  // Each row's expert's bias, (P, 2I) and (P, H), where the experts have them.
  const auto biased = [&](at::Tensor out, const at::Tensor& bias) {
    return bias.defined() ? out + bias.index_select(0, expert_of_row) : out;
  };
  const at::Tensor gate_up =
      biased(grouped_matmul(rows, gate_up_proj.transpose(1, 2)), extras.gate_up_bias);  // (P, 2I)
  const at::Tensor hidden = expert_activation(gate_up, extras.swiglu);                  // (P, I)
  return biased(grouped_matmul(hidden, down_proj.transpose(1, 2)), extras.down_bias);   // (P, H)
}

// The same, one expert at a time, sized by the counts read on the host: the one device wait of
// a MoE layer. On the meta device there is no routing to count: every pair is planned for
// expert 0.
at::Tensor looped_expert_rows(const at::Tensor& rows, const at::Tensor& per_expert,
                              const at::Tensor& gate_up_proj, const at::Tensor& down_proj,
                              const ExpertExtras& extras) {
  const int64_t experts = gate_up_proj.size(0);
  at::Tensor stand_in;
  if (rows.is_meta()) {
    stand_in = at::zeros({experts}, at::kLong);
    stand_in[0] = rows.size(0);
  }
  const at::Tensor counts = read_on_host(per_expert, HostRead::MoeExpertCounts, stand_in);
  const int64_t* count = counts.data_ptr<int64_t>();
  std::vector<at::Tensor> outputs;
  int64_t start = 0;
  for (int64_t e = 0; e < experts; ++e) {
    if (count[e] == 0) continue;
    const auto bias_of = [e](const at::Tensor& bias) {
      return bias.defined() ? std::optional<at::Tensor>(bias[e]) : std::nullopt;
    };
    const at::Tensor mine = rows.narrow(0, start, count[e]);  // (n_e, H)
    const at::Tensor gate_up =
        at::linear(mine, gate_up_proj[e], bias_of(extras.gate_up_bias));             // (n_e, 2I)
    const at::Tensor hidden = expert_activation(gate_up, extras.swiglu);             // (n_e, I)
    outputs.push_back(at::linear(hidden, down_proj[e], bias_of(extras.down_bias)));  // (n_e, H)
    start += count[e];
  }
  check(start == rows.size(0), "[moe] expert rows ", start, " != tokens x top-k ", rows.size(0));
  return at::cat(outputs, 0);
}

}  // namespace

at::Tensor expert_activation(const at::Tensor& gate_up, const ClampedSwiglu& clamped) {
  const int64_t intermediate = gate_up.size(-1) / 2;
  const at::Tensor gate = gate_up.narrow(-1, 0, intermediate);
  const at::Tensor up = gate_up.narrow(-1, intermediate, intermediate);
  if (!clamped.enabled()) return swiglu(gate, up);
  // gpt-oss, in the activations' dtype as transformers computes it.
  const at::Tensor g = gate.clamp_max(clamped.limit);
  const at::Tensor u = up.clamp(-clamped.limit, clamped.limit);
  return (u + 1) * (g * at::sigmoid(g * clamped.alpha));
}

ExpertGemm choose_expert_gemm(c10::DeviceType device, c10::ScalarType dtype, int64_t hidden_size,
                              int64_t intermediate_size, bool cuda_verified) {
  // The grouped kernel takes rows of whole 16-byte units, on every device.
  const bool float_type = dtype == c10::kFloat || dtype == c10::kBFloat16 || dtype == c10::kHalf;
  const int64_t bytes = float_type ? static_cast<int64_t>(c10::elementSize(dtype)) : 0;
  const bool aligned =
      float_type && (hidden_size * bytes) % 16 == 0 && (intermediate_size * bytes) % 16 == 0;
  if (device == c10::kCPU) return aligned ? ExpertGemm::Grouped : ExpertGemm::PerExpert;
  // CUDA (and the meta device, which plans a GPU run): the grouped kernel takes bf16; the meta
  // device has no kernel to verify.
  const bool cuda_shapes = aligned && dtype == c10::kBFloat16;
  if (device == c10::kMeta) return cuda_shapes ? ExpertGemm::Grouped : ExpertGemm::PerExpert;
  return device == c10::kCUDA && cuda_shapes && cuda_verified ? ExpertGemm::Grouped
                                                              : ExpertGemm::PerExpert;
}

at::Tensor run_experts(const at::Tensor& x, const at::Tensor& indices, const at::Tensor& weights,
                       const at::Tensor& gate_up_proj, const at::Tensor& down_proj, ExpertGemm gemm,
                       const ExpertExtras& extras) {
  const int64_t tokens = x.size(0), k = indices.size(1), experts = gate_up_proj.size(0);
  // The (token, expert) pairs sorted by expert: pair p of the sorted order is token
  // token_of[p] sent to its expert with weight sorted_weights[p].
  const at::Tensor flat = indices.reshape(-1);                                      // (N*k,)
  const at::Tensor order = std::get<1>(at::sort(flat, /*stable=*/true, 0, false));  // (N*k,)
  const at::Tensor token_of = at::div(order, k, "floor");
  const at::Tensor sorted_weights = weights.reshape(-1).index_select(0, order);
  const at::Tensor per_expert =
      flat.is_meta() ? at::empty({experts}, flat.options()) : at::bincount(flat, {}, experts);
  const at::Tensor rows = x.index_select(0, token_of);  // (N*k, H)
  const at::Tensor expert_out =
      gemm == ExpertGemm::Grouped
          ? grouped_expert_rows(rows, per_expert, flat.index_select(0, order), gate_up_proj,
                                down_proj, extras)
          : looped_expert_rows(rows, per_expert, gate_up_proj, down_proj, extras);  // (N*k, H)
  // Weighted in the weights' dtype (fp32 for Mixtral and MiniMax-M2, the model's for Qwen3-MoE),
  // back in token order, then each token's k outputs summed at once (fp32 accumulation) and
  // rounded to the model's dtype: what transformers' grouped experts do, and deterministic on
  // every device (no scattered adds).
  const at::Tensor weighted = expert_out * sorted_weights.unsqueeze(1);  // (N*k, H)
  const at::Tensor inverse =
      at::empty_like(order).scatter_(0, order, at::arange(order.numel(), order.options()));
  return weighted.index_select(0, inverse).view({tokens, k, x.size(1)}).sum(1).to(x.scalar_type());
}

bool grouped_expert_gemm_verified(const c10::Device& device, c10::ScalarType dtype) {
  return remembered_check(check_kind("grouped expert gemm", device, dtype), [&] {
    // 24 tokens, top-2 of 4 experts (one expert left without tokens), hidden 64, intermediate 32.
    const at::TensorOptions options = at::TensorOptions().dtype(dtype).device(device);
    const at::Generator generator = at::detail::createCPUGenerator(20261126);
    auto random = [&](std::vector<int64_t> sizes) {
      return at::randn(sizes, generator).to(options).requires_grad_(true);
    };
    const std::vector<at::Tensor> inputs = {random({24, 64}), random({4, 64, 64}),
                                            random({4, 64, 32})};
    const at::Tensor indices = to_device(
        at::randint(0, 3, {24, 2}, generator, at::TensorOptions().dtype(at::kLong)), device);
    const at::Tensor weights = to_device(at::rand({24, 2}, generator), device);
    const at::Tensor probe = at::randn({24, 64}, generator).to(options);
    auto run = [&](ExpertGemm gemm) {
      const at::Tensor out = run_experts(inputs[0], indices, weights, inputs[1], inputs[2], gemm);
      return output_and_gradients_on_host(out, inputs, probe);
    };
    return kernels_agree(run(ExpertGemm::Grouped), run(ExpertGemm::PerExpert),
                         dtype == at::kFloat ? 1e-4 : 3e-2);
  });
}

at::Tensor SparseMoeImpl::forward(const at::Tensor& x, RouterLoad* load) const {
  const int64_t batch = x.size(0), length = x.size(1), hidden = x.size(2);
  const MoeConfig config = moe;
  const at::Tensor bias = e_score_correction_bias;
  // The router's weight, the experts' two projections, then (gpt-oss) the router's bias and the
  // experts' biases.
  std::vector<at::Tensor> parameters = {gate->weight, experts->gate_up_proj, experts->down_proj};
  const bool biased = experts->gate_up_proj_bias.defined();
  if (biased)
    parameters.insert(parameters.end(),
                      {gate->bias, experts->gate_up_proj_bias, experts->down_proj_bias});
  const std::vector<at::Tensor> out = with_full_parameters(
      parameters, {x.reshape({-1, hidden})}, [config, bias, biased](const auto& in, const auto& w) {
        // (N, E): in the model's dtype, or in fp32 from fp32 copies (GroupedSigmoid)
        const at::Tensor router_logits =
            config.scoring == RouterScoring::GroupedSigmoid
                ? at::linear(in[0].to(at::kFloat), w[0].to(at::kFloat))
                : at::linear(in[0], w[0], biased ? std::optional<at::Tensor>(w[3]) : std::nullopt);
        auto [indices, weights] = route_tokens(router_logits, bias, config);
        const ExpertGemm gemm = choose_expert_gemm(
            in[0].device().type(), w[1].scalar_type(), w[1].size(2), w[2].size(2),
            in[0].is_cuda() && grouped_expert_gemm_verified(in[0].device(), w[1].scalar_type()));
        ExpertExtras extras;
        if (biased) extras = {w[4], w[5], config.gpt_oss_experts};
        return std::vector<at::Tensor>{
            run_experts(in[0], indices, weights, w[1], w[2], gemm, extras), router_logits};
      });
  if (load) load->add(out[1], moe.experts_per_token);
  const at::Tensor routed = out[0].view({batch, length, hidden});
  if (shared_experts) return routed + shared_experts->forward(x);
  if (!shared_expert) return routed;
  return routed + at::sigmoid(shared_expert_gate->forward(x)) * shared_expert->forward(x);
}

}  // namespace tandem
