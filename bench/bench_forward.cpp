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
#include "bench_model.h"
#include "tandem/core/dtype.h"
#include "tandem/core/threads.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/models/frozen.h"

using namespace tandem;

int main(int argc, char** argv) {
  CLI::App app{"bench_forward: frozen forward tokens/s and MFU vs the measured matmul peak"};
  bench::ModelShape shape;  // hidden 1024, 8 layers, 16/8 heads, intermediate 2816, vocab 32000
  int64_t seq = 1024, batch = 1;
  int repeats = 3, threads = 0;
  std::string dtypes = "fp32,bf16";
  bench::add_shape_options(app, shape);
  app.add_option("--seq", seq)->capture_default_str();
  app.add_option("--batch", batch)->capture_default_str();
  app.add_option("--repeats", repeats)->capture_default_str();
  app.add_option("--threads", threads, "0: all usable cores")->capture_default_str();
  app.add_option("--dtypes", dtypes, "comma-separated compute dtypes")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const int used_threads = configure_threads(threads);

  DecoderConfig config = bench::llama_config(shape);
  config.max_position_embeddings = seq;

  // Write a real checkpoint and load it the way a frozen target is loaded.
  const std::string dir =
      (std::filesystem::temp_directory_path() / "tandem-bench-forward").string();
  std::filesystem::create_directories(dir);
  {
    CausalLM model(config, at::TensorOptions().dtype(at::kFloat));
    init_normal_(*model, 0.02, 0);
    std::vector<std::pair<std::string, at::Tensor>> weights;
    for (const auto& p : model->named_parameters()) weights.emplace_back(p.key(), p.value());
    write_hf_weights(dir, weights);
    std::ofstream(dir + "/config.json") << config.to_json().dump(2);
  }

  std::printf(
      "bench_forward: hidden %ld, layers %ld, heads %ld/%ld, intermediate %ld, vocab %ld, "
      "batch %ld x seq %ld, %d threads\n",
      shape.hidden, shape.layers, shape.heads, shape.kv_heads, shape.intermediate, shape.vocab,
      batch, seq, used_threads);
  const double flops = bench::forward_flops(config, seq, batch);
  for (const std::string& name : {std::string("fp32"), std::string("bf16")}) {
    if (dtypes.find(name) == std::string::npos) continue;
    const c10::ScalarType dtype = parse_compute_dtype(name, "--dtypes");
    const double peak = bench::matmul_peak_flops(dtype);
    const FrozenModel model = FrozenModel::load(dir, dtype, at::kCPU);
    const at::Tensor ids = at::randint(shape.vocab, {batch, seq}, at::kLong);
    const auto layout = AttentionLayout::causal(batch, seq, at::kCPU);
    const double seconds = bench::best_seconds([&] { model.forward(ids, layout, {}); }, repeats);
    const double achieved = flops / seconds;
    std::printf(
        "  %s: matmul peak %.1f GFLOP/s | forward %.3f s, %.0f tokens/s, %.1f GFLOP/s, "
        "MFU %.1f%% of the %s matmul peak | peak RSS %.0f MiB\n",
        name.c_str(), peak / 1e9, seconds, batch * seq / seconds, achieved / 1e9,
        100.0 * achieved / peak, name.c_str(), bench::peak_rss_mib());
  }
  std::filesystem::remove_all(dir);
  return 0;
}
