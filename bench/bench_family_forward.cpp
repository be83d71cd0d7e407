// Frozen forward of the 2026 target families against dense targets of equal active size: a
// DeepSeek-V3-shaped model (multi-head latent attention on every layer; a dense first layer,
// then group-routed experts with a shared expert) and a dense Qwen3 whose attention projections
// and MLP do about the same matmul work per token (its MLP as wide as the top-k experts plus the
// shared one; printed as GFLOP per token); a gpt-oss-shaped model (attention sinks, sliding-window
// layers of 128 alternating with full ones, biased top-4 experts with the clamped SwiGLU) and a
// dense Llama with the same attention, windows and an MLP as wide as its top-4 experts, but no
// sinks and no biases (what the sinks cost shows there). All are built in memory from their
// config.json and
// run as a frozen target runs (forward, every layer's output kept for a draft, logits), at 2K
// tokens by default. Prints parameters, tokens/s, model FLOP utilisation against the matmul peak
// measured in the same run, and the forward's peak resident memory (the rise over the loaded
// model; each model runs in a process of its own); never pass/fail.
//
// Model FLOPs: models/flops.h (latent attention counts its five projections and QK^T over
// qk_nope + qk_rope dims, PV over v_head_dim; a sparse layer its router, top-k experts and the
// shared expert). Weights are random: random routers spread tokens over the experts about evenly.
#include <ATen/ATen.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "bench_frozen_forward.h"
#include "tandem/core/threads.h"

using namespace tandem;
using nlohmann::json;

namespace {

// DeepSeek-V3 (hidden 7168, 128 heads, q_lora_rank 1536, kv_lora_rank 512, qk 128 + 64, v 128,
// 256 experts of 2048, top-8 in 4 of 8 groups, 1 shared expert, 3 dense layers) scaled down.
struct Shape {
  int64_t hidden = 1024, layers = 8, heads = 8, q_lora_rank = 768, kv_lora_rank = 512,
          qk_nope = 128, qk_rope = 64, v_dim = 128, vocab = 32000;
  int64_t experts = 32, top_k = 8, expert_intermediate = 256, groups = 4, top_groups = 2;
};

// The dense MLP's width: the top-k experts plus the shared one.
int64_t active_intermediate(const Shape& s) { return (s.top_k + 1) * s.expert_intermediate; }

// A dense Qwen3 of the same hidden size, layers and heads (head_dim 128, one key/value head per
// query head, as latent attention has), its MLP as wide as the active experts.
json dense_config(const Shape& s) {
  return {{"model_type", "qwen3"},
          {"vocab_size", s.vocab},
          {"hidden_size", s.hidden},
          {"intermediate_size", active_intermediate(s)},
          {"num_hidden_layers", s.layers},
          {"num_attention_heads", s.heads},
          {"num_key_value_heads", s.heads},
          {"head_dim", 128},
          {"rope_theta", 1e6}};
}

// gpt-oss-20b (hidden 2880, 64 query and 8 key/value heads of 64, 32 experts of 2880, top-4,
// windows of 128 on every other layer) scaled down.
struct OssShape {
  int64_t hidden = 1024, layers = 8, heads = 16, kv_heads = 2, experts = 32, top_k = 4,
          expert_intermediate = 512, window = 128, vocab = 32000;
};

// A dense Llama with gpt-oss's attention and windows, its MLP as wide as the top-k experts.
json oss_dense_config(const OssShape& s) {
  json types = json::array();
  for (int64_t i = 0; i < s.layers; ++i)
    types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
  return {{"model_type", "llama"},
          {"vocab_size", s.vocab},
          {"hidden_size", s.hidden},
          {"intermediate_size", s.top_k * s.expert_intermediate},
          {"num_hidden_layers", s.layers},
          {"num_attention_heads", s.heads},
          {"num_key_value_heads", s.kv_heads},
          {"head_dim", 64},
          {"rope_theta", 150000.0},
          {"sliding_window", s.window},
          {"layer_types", types}};
}

json gpt_oss_config(const OssShape& s) {
  json config = oss_dense_config(s);
  config.update({{"model_type", "gpt_oss"},
                 {"num_local_experts", s.experts},
                 {"num_experts_per_tok", s.top_k},
                 {"intermediate_size", s.expert_intermediate},
                 {"rope_scaling",
                  {{"rope_type", "yarn"},
                   {"factor", 32.0},
                   {"beta_fast", 32.0},
                   {"beta_slow", 1.0},
                   {"truncate", false},
                   {"original_max_position_embeddings", 4096}}}});
  return config;
}

// The same widths with latent attention and group-routed experts after a dense first layer.
json deepseek_v3_config(const Shape& s) {
  json config = dense_config(s);
  config.erase("head_dim");  // the latent attention's dims below
  config.update({{"model_type", "deepseek_v3"},
                 {"q_lora_rank", s.q_lora_rank},
                 {"kv_lora_rank", s.kv_lora_rank},
                 {"qk_nope_head_dim", s.qk_nope},
                 {"qk_rope_head_dim", s.qk_rope},
                 {"v_head_dim", s.v_dim},
                 {"n_routed_experts", s.experts},
                 {"num_experts_per_tok", s.top_k},
                 {"moe_intermediate_size", s.expert_intermediate},
                 {"n_shared_experts", 1},
                 {"n_group", s.groups},
                 {"topk_group", s.top_groups},
                 {"routed_scaling_factor", 2.5},
                 {"norm_topk_prob", true},
                 {"first_k_dense_replace", 1},
                 {"num_nextn_predict_layers", 0},
                 {"rope_theta", 10000.0}});
  return config;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "bench_family_forward: a DeepSeek-V3-shaped target (latent attention, group-routed "
      "experts) vs a dense Qwen3 of equal active size, and a gpt-oss-shaped one (attention sinks, "
      "alternating windows, clamped-SwiGLU experts) vs a dense Llama, frozen forward"};
  Shape s;
  OssShape o;
  int64_t seq = 2048;
  int repeats = 2, threads = 0;
  std::string dtypes = "fp32", model_kind = "all";
  app.add_option("--hidden", s.hidden)->capture_default_str();
  app.add_option("--layers", s.layers)->capture_default_str();
  app.add_option("--heads", s.heads)->capture_default_str();
  app.add_option("--q-lora-rank", s.q_lora_rank)->capture_default_str();
  app.add_option("--kv-lora-rank", s.kv_lora_rank)->capture_default_str();
  app.add_option("--experts", s.experts)->capture_default_str();
  app.add_option("--top-k", s.top_k)->capture_default_str();
  app.add_option("--expert-intermediate", s.expert_intermediate)->capture_default_str();
  app.add_option("--vocab", s.vocab)->capture_default_str();
  app.add_option("--oss-hidden", o.hidden)->capture_default_str();
  app.add_option("--oss-layers", o.layers)->capture_default_str();
  app.add_option("--oss-heads", o.heads)->capture_default_str();
  app.add_option("--oss-kv-heads", o.kv_heads)->capture_default_str();
  app.add_option("--oss-experts", o.experts)->capture_default_str();
  app.add_option("--oss-top-k", o.top_k)->capture_default_str();
  app.add_option("--oss-expert-intermediate", o.expert_intermediate)->capture_default_str();
  app.add_option("--oss-window", o.window)->capture_default_str();
  app.add_option("--seq", seq)->capture_default_str();
  app.add_option("--repeats", repeats)->capture_default_str();
  app.add_option("--threads", threads, "0: all usable cores")->capture_default_str();
  app.add_option("--dtypes", dtypes, "comma-separated: fp32, bf16")->capture_default_str();
  app.add_option("--model", model_kind,
                 "deepseek_v3, dense (its dense peer), gpt_oss, gpt_oss_dense (its dense peer), "
                 "both (the DeepSeek-V3 pair) or all (each in a process of its own)")
      ->check(CLI::IsMember({"deepseek_v3", "dense", "gpt_oss", "gpt_oss_dense", "both", "all"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (model_kind == "both")
    return bench::run_each_model_in_own_process(argc, argv, {"deepseek_v3", "dense"});
  if (model_kind == "all")
    return bench::run_each_model_in_own_process(
        argc, argv, {"deepseek_v3", "dense", "gpt_oss", "gpt_oss_dense"});
  o.vocab = s.vocab;
  const int used_threads = configure_threads(threads);
  if (model_kind == "gpt_oss")
    std::printf(
        "bench_family_forward: hidden %ld, %ld layers, %ld query and %ld key/value heads of 64, "
        "windows of %ld on every other layer; gpt-oss: sinks, %ld experts x %ld, top-%ld, "
        "biases, clamped SwiGLU; dense Llama: MLP %ld; vocab %ld, seq %ld, %d threads\n",
        o.hidden, o.layers, o.heads, o.kv_heads, o.window, o.experts, o.expert_intermediate,
        o.top_k, o.top_k * o.expert_intermediate, o.vocab, seq, used_threads);
  if (model_kind == "gpt_oss" || model_kind == "gpt_oss_dense") {
    bench::print_frozen_forward_in(
        dtypes, model_kind, model_kind == "gpt_oss" ? gpt_oss_config(o) : oss_dense_config(o), seq,
        repeats);
    return 0;
  }
  if (model_kind == "deepseek_v3")
    std::printf(
        "bench_family_forward: hidden %ld, %ld layers, %ld heads; latent attention q_lora_rank "
        "%ld, kv_lora_rank %ld, qk %ld + %ld, v %ld; layer 0 dense, then %ld experts x %ld, "
        "top-%ld in %ld of %ld groups + 1 shared; dense Qwen3: MLP %ld, %ld heads of 128; vocab "
        "%ld, seq %ld, %d threads\n",
        s.hidden, s.layers, s.heads, s.q_lora_rank, s.kv_lora_rank, s.qk_nope, s.qk_rope, s.v_dim,
        s.experts, s.expert_intermediate, s.top_k, s.top_groups, s.groups, active_intermediate(s),
        s.heads, s.vocab, seq, used_threads);
  bench::print_frozen_forward_in(dtypes, model_kind,
                                 model_kind == "dense" ? dense_config(s) : deepseek_v3_config(s),
                                 seq, repeats);
  return 0;
}
