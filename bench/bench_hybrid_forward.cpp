// Frozen forward of a hybrid target against a dense one of the same widths: a Qwen3.5-shaped
// model (Gated DeltaNet linear attention on three layers of four, gated full attention with
// partial RoPE on the fourth, zero-centred norms) and a dense Qwen3 with the same hidden size,
// layers, attention heads and MLP, both built in memory from their config.json and run as a
// frozen target runs (forward, every layer's output kept for a draft, logits), at 2K tokens by
// default. Prints parameters, tokens/s, model FLOP utilisation against the matmul peak measured
// in the same run, and the forward's peak resident memory (the rise over the loaded model; each
// model runs in a process of its own, so one's freed pages never hide the other's); never
// pass/fail.
//
// Model FLOPs: models/flops.h (the Gated DeltaNet layers count their projections and the chunked
// gated delta rule at chunks of 64, linear in T; attention layers 2 * T^2 * heads * head_dim).
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

struct Shape {
  int64_t hidden = 1024, layers = 8, heads = 8, kv_heads = 2, head_dim = 128, intermediate = 3072,
          vocab = 32000;
  int64_t linear_key_heads = 8, linear_value_heads = 16, linear_dim = 128;
};

// The config.json of a dense Qwen3 of `s`.
json dense_config(const Shape& s) {
  return {{"model_type", "qwen3"},
          {"vocab_size", s.vocab},
          {"hidden_size", s.hidden},
          {"intermediate_size", s.intermediate},
          {"num_hidden_layers", s.layers},
          {"num_attention_heads", s.heads},
          {"num_key_value_heads", s.kv_heads},
          {"head_dim", s.head_dim},
          {"rope_theta", 1e7}};
}

// The same widths as a Qwen3.5 text model: every fourth layer full attention.
json hybrid_config(const Shape& s) {
  json config = dense_config(s);
  config["model_type"] = "qwen3_5_text";
  config["rope_parameters"] = {
      {"rope_type", "default"}, {"rope_theta", 1e7}, {"partial_rotary_factor", 0.25}};
  config.erase("rope_theta");
  config["linear_num_key_heads"] = s.linear_key_heads;
  config["linear_num_value_heads"] = s.linear_value_heads;
  config["linear_key_head_dim"] = s.linear_dim;
  config["linear_value_head_dim"] = s.linear_dim;
  config["linear_conv_kernel_dim"] = 4;
  config["full_attention_interval"] = 4;
  return config;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_hybrid_forward: a Qwen3.5-shaped hybrid vs a dense Qwen3, frozen forward"};
  Shape s;
  int64_t seq = 2048, chunk = 64;
  int repeats = 2, threads = 0;
  std::string dtypes = "fp32", model_kind = "both";
  app.add_option("--hidden", s.hidden)->capture_default_str();
  app.add_option("--layers", s.layers)->capture_default_str();
  app.add_option("--heads", s.heads)->capture_default_str();
  app.add_option("--kv-heads", s.kv_heads)->capture_default_str();
  app.add_option("--head-dim", s.head_dim)->capture_default_str();
  app.add_option("--intermediate", s.intermediate)->capture_default_str();
  app.add_option("--vocab", s.vocab)->capture_default_str();
  app.add_option("--linear-key-heads", s.linear_key_heads)->capture_default_str();
  app.add_option("--linear-value-heads", s.linear_value_heads)->capture_default_str();
  app.add_option("--linear-dim", s.linear_dim, "key and value head dims")->capture_default_str();
  app.add_option("--seq", seq)->capture_default_str();
  app.add_option("--chunk", chunk, "tokens per chunk of the gated delta rule")
      ->capture_default_str();
  app.add_option("--repeats", repeats)->capture_default_str();
  app.add_option("--threads", threads, "0: all usable cores")->capture_default_str();
  app.add_option("--dtypes", dtypes, "comma-separated: fp32, bf16")->capture_default_str();
  app.add_option("--model", model_kind, "hybrid, dense or both (each in a process of its own)")
      ->check(CLI::IsMember({"hybrid", "dense", "both"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (model_kind == "both")
    return bench::run_each_model_in_own_process(argc, argv, {"hybrid", "dense"});
  const int used_threads = configure_threads(threads);
  if (model_kind == "hybrid")
    std::printf(
        "bench_hybrid_forward: hidden %ld, %ld layers (hybrid: 3 of 4 Gated DeltaNet, %ld/%ld "
        "heads of %ld), attention %ld/%ld heads of %ld, intermediate %ld, vocab %ld, seq %ld, "
        "chunk %ld, %d threads\n",
        s.hidden, s.layers, s.linear_key_heads, s.linear_value_heads, s.linear_dim, s.heads,
        s.kv_heads, s.head_dim, s.intermediate, s.vocab, seq, chunk, used_threads);
  bench::print_frozen_forward_in(dtypes, model_kind,
                                 model_kind == "hybrid" ? hybrid_config(s) : dense_config(s), seq,
                                 repeats, chunk);
  return 0;
}
