// Frozen forward throughput: a Llama-style model (hidden 1024 by default) at sequence 1024,
// loaded from an HF checkpoint like any frozen target, against the matmul peak measured in the
// same run. Prints tokens/s, model FLOP utilisation and peak memory; never pass/fail.
//
// Model FLOPs per forward (the standard count): 2 * (matmul parameters, lm_head included) per
// token, plus causal attention 2 * T^2 * heads * head_dim per layer (QK^T and PV, half the
// square for causality).
#include <ATen/ATen.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "tandem/core/dtype.h"
#include "tandem/core/threads.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/models/frozen.h"

namespace {

using namespace tandem;

double forward_flops(const DecoderConfig& c, int64_t tokens_per_row, int64_t rows) {
  const double attention_width = static_cast<double>(c.num_attention_heads) * c.head_dim;
  const double kv_width = static_cast<double>(c.num_key_value_heads) * c.head_dim;
  const double per_layer_params = c.hidden_size * (2 * attention_width + 2 * kv_width) +
                                  3.0 * c.hidden_size * c.intermediate_size;
  const double matmul_params = c.num_hidden_layers * per_layer_params +
                               static_cast<double>(c.vocab_size) * c.hidden_size;
  const double t = static_cast<double>(tokens_per_row);
  const double attention = c.num_hidden_layers * 2.0 * t * t * attention_width;
  return rows * (2.0 * matmul_params * t + attention);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_forward: frozen forward tokens/s and MFU vs the measured matmul peak"};
  int64_t hidden = 1024, layers = 8, heads = 16, kv_heads = 8, intermediate = 2816;
  int64_t vocab = 32000, seq = 1024, batch = 1;
  int repeats = 3, threads = 0;
  std::string dtypes = "fp32,bf16";
  app.add_option("--hidden", hidden)->capture_default_str();
  app.add_option("--layers", layers)->capture_default_str();
  app.add_option("--heads", heads)->capture_default_str();
  app.add_option("--kv-heads", kv_heads)->capture_default_str();
  app.add_option("--intermediate", intermediate)->capture_default_str();
  app.add_option("--vocab", vocab)->capture_default_str();
  app.add_option("--seq", seq)->capture_default_str();
  app.add_option("--batch", batch)->capture_default_str();
  app.add_option("--repeats", repeats)->capture_default_str();
  app.add_option("--threads", threads, "0: all usable cores")->capture_default_str();
  app.add_option("--dtypes", dtypes, "comma-separated compute dtypes")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const int used_threads = configure_threads(threads);

  DecoderConfig config;
  config.family = DecoderFamily::Llama;
  config.vocab_size = vocab;
  config.hidden_size = hidden;
  config.intermediate_size = intermediate;
  config.num_hidden_layers = layers;
  config.num_attention_heads = heads;
  config.num_key_value_heads = kv_heads;
  config.head_dim = hidden / heads;
  config.rope_theta = 500000.0;
  config.max_position_embeddings = seq;
  config.sliding_window.assign(layers, 0);

  // Write a real checkpoint and load it the way a frozen target is loaded.
  const std::string dir = (std::filesystem::temp_directory_path() / "tandem-bench-forward").string();
  std::filesystem::create_directories(dir);
  {
    CausalLM model(config, at::TensorOptions().dtype(at::kFloat));
    init_normal_(*model, 0.02, 0);
    std::vector<std::pair<std::string, at::Tensor>> weights;
    for (const auto& p : model->named_parameters()) weights.emplace_back(p.key(), p.value());
    write_hf_weights(dir, weights);
    std::ofstream(dir + "/config.json") << config.to_json().dump(2);
  }

  std::printf("bench_forward: hidden %ld, layers %ld, heads %ld/%ld, intermediate %ld, vocab %ld, "
              "batch %ld x seq %ld, %d threads\n",
              hidden, layers, heads, kv_heads, intermediate, vocab, batch, seq, used_threads);
  const double flops = forward_flops(config, seq, batch);
  for (const std::string& name : {std::string("fp32"), std::string("bf16")}) {
    if (dtypes.find(name) == std::string::npos) continue;
    const c10::ScalarType dtype = parse_compute_dtype(name, "--dtypes");
    const double peak = bench::matmul_peak_flops(dtype);
    const FrozenModel model = FrozenModel::load(dir, dtype, at::kCPU);
    const at::Tensor ids = at::randint(vocab, {batch, seq}, at::kLong);
    const auto layout = AttentionLayout::causal(batch, seq, at::kCPU);
    const double seconds = bench::best_seconds([&] { model.forward(ids, layout, {}); }, repeats);
    const double achieved = flops / seconds;
    std::printf("  %s: matmul peak %.1f GFLOP/s | forward %.3f s, %.0f tokens/s, %.1f GFLOP/s, "
                "MFU %.1f%% of the %s matmul peak | peak RSS %.0f MiB\n",
                name.c_str(), peak / 1e9, seconds, batch * seq / seconds, achieved / 1e9,
                100.0 * achieved / peak, name.c_str(), bench::peak_rss_mib());
  }
  std::filesystem::remove_all(dir);
  return 0;
}
