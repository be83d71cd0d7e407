// Greedy generation throughput of `generate` (eval/generation.h: KV cache, batched) on an HF
// checkpoint: `batch` prompts of `prompt_tokens` random ids, each continued by exactly
// `new_tokens` tokens (no stop ids). Prints one JSON line: wall seconds of the best repeat (after
// a warm-up), new tokens/s, model FLOP utilisation against the matmul peak measured in the same
// run, peak memory, and the generated ids (bench_generate.sh compares them with transformers').
//
// Model FLOPs: the prefill forward plus, per generated token, 2 x parameters and attention over
// the cached context (models/flops.h, one query against c keys counted as 2c pairs' half).
#include <ATen/ATen.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "tandem/core/dtype.h"
#include "tandem/core/threads.h"
#include "tandem/eval/generation.h"
#include "tandem/models/flops.h"
#include "tandem/models/frozen.h"

using namespace tandem;

int main(int argc, char** argv) {
  CLI::App app{"bench_generate: greedy generation tokens/s with the KV cache"};
  std::string model_dir, dtype_name = "fp32";
  int64_t batch = 1, prompt_tokens = 32, new_tokens = 64;
  uint64_t seed = 0;
  int repeats = 1, threads = 0;
  app.add_option("--model", model_dir, "HF checkpoint directory")->required();
  app.add_option("--batch", batch)->capture_default_str();
  app.add_option("--prompt-tokens", prompt_tokens)->capture_default_str();
  app.add_option("--new-tokens", new_tokens)->capture_default_str();
  app.add_option("--seed", seed, "prompt ids: torch.randint(3, vocab - 3) from this seed")
      ->capture_default_str();
  app.add_option("--repeats", repeats)->capture_default_str();
  app.add_option("--threads", threads, "0: all usable cores")->capture_default_str();
  app.add_option("--dtype", dtype_name)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const int used_threads = configure_threads(threads);
  const c10::ScalarType dtype = parse_compute_dtype(dtype_name, "--dtype");

  const FrozenModel model = FrozenModel::load(model_dir, dtype, at::kCPU);
  const DecoderConfig& config = model.config();
  at::manual_seed(seed);
  const at::Tensor ids = at::randint(3, config.vocab_size - 3, {batch, prompt_tokens}, at::kLong);
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t b = 0; b < batch; ++b)
    prompts.emplace_back(ids[b].data_ptr<int64_t>(), ids[b].data_ptr<int64_t>() + prompt_tokens);
  DecodeOptions options;
  options.max_new_tokens = new_tokens;  // no stop ids: every row runs to the end

  std::vector<Generation> generated;
  const double peak = bench::matmul_peak_flops(dtype);
  const double seconds = bench::best_seconds(
      [&] { generated = generate(model, prompts, options, SamplingOptions{}); }, repeats);
  double pairs = static_cast<double>(prompt_tokens * prompt_tokens);
  for (int64_t t = 1; t < new_tokens; ++t) pairs += 2.0 * static_cast<double>(prompt_tokens + t);
  const double flops =
      decoder_forward_flops(config, static_cast<double>(batch * (prompt_tokens + new_tokens - 1)),
                            static_cast<double>(batch) * pairs, /*with_lm_head=*/false) +
      lm_head_flops(config, static_cast<double>(batch * new_tokens));
  nlohmann::json tokens = nlohmann::json::array();
  for (const Generation& row : generated) tokens.push_back(row.tokens);
  const nlohmann::json report = {{"engine", "tandem"},
                                 {"batch", batch},
                                 {"prompt_tokens", prompt_tokens},
                                 {"new_tokens", new_tokens},
                                 {"threads", used_threads},
                                 {"dtype", dtype_name},
                                 {"seconds", seconds},
                                 {"tokens_per_s", batch * new_tokens / seconds},
                                 {"matmul_peak_gflops", peak / 1e9},
                                 {"mfu", flops / seconds / peak},
                                 {"peak_rss_mib", bench::peak_rss_mib()},
                                 {"prompts", prompts},
                                 {"tokens", tokens}};
  std::printf("%s\n", report.dump().c_str());
  return 0;
}
