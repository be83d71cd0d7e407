// tandem eval: speculative decoding of held-out prompts with a draft and its frozen target; the
// objective whose export it is loads it (objectives/description.h). Reports τ and per-position
// acceptance, and checks the output equals greedy decoding (eval/greedy_check.h: a failure in
// fp32, reported with each prompt's first divergence in bf16/fp16). With --temperature T > 0 it
// samples by the rejection rule (eval/acceptance_rule.h) and times plain sampling at T instead.
#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>

#include "tandem/cli/commands.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/data/sampler.h"
#include "tandem/data/token_cache.h"
#include "tandem/eval/generation.h"
#include "tandem/eval/greedy_check.h"
#include "tandem/eval/prompt_categories.h"
#include "tandem/eval/speculative.h"
#include "tandem/eval/uncached_decode.h"
#include "tandem/models/frozen.h"
#include "tandem/objectives/description.h"
#include "tandem/text/tokenizer.h"

namespace tandem::cli {

namespace {

// Prompt `document`'s seed: splitmix64 at the document's step of the sequence from `seed`, so that
// prompts and seeds give unrelated streams.
uint64_t sampling_seed(uint64_t seed, int64_t document) {
  return splitmix64(seed + 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(document));
}

struct EvalOptions {
  std::string target, draft, data, format = "conversations", tokenizer, chat_template = "auto";
  std::string template_kwargs;
  std::string dtype = "fp32", out, cache_dir, device = "auto", category_field = "category";
  int64_t num_prompts = 0, prompt_tokens = 32, max_new_tokens = 64, draft_tokens = 0;
  double confidence_threshold = 0, temperature = 0;
  uint64_t seed = 0;
  bool greedy_check = true, strict_greedy_check = false, no_kv_cache = false;
};

}  // namespace

Runner add_eval_command(CLI::App& root) {
  auto o = std::make_shared<EvalOptions>();
  CLI::App* command = root.add_subcommand(
      "eval",
      "speculative decoding with the frozen target on held-out prompts: acceptance length τ, "
      "per-position acceptance, and a token-for-token check against plain greedy decoding");
  command->add_option("--target", o->target, "target HF checkpoint directory")->required();
  command
      ->add_option("--draft", o->draft,
                   "the draft export (a run's export directory, or the format directory in it) "
                   "of one of: " +
                       objective_names([](const auto& d) { return bool(d.find_export); }) +
                       "; its config.json architectures tell which")
      ->required();
  command->add_option("--data", o->data, "held-out JSONL file")->required();
  command->add_option("--format", o->format, "conversations | text | pretokenized")
      ->check(CLI::IsMember({"conversations", "text", "pretokenized"}));
  command->add_option("--tokenizer", o->tokenizer, "tokenizer directory (default: --target)");
  add_chat_template_options(*command, o->chat_template, o->template_kwargs);
  command->add_option("--num-prompts", o->num_prompts,
                      "prompts to run, from the top (default 0: every document of --data)");
  command->add_option("--prompt-tokens", o->prompt_tokens,
                      "prompt length for documents without a loss mask boundary (default 32)");
  command->add_option("--max-new-tokens", o->max_new_tokens, "tokens to generate (default 64)");
  command->add_option("--draft-tokens", o->draft_tokens,
                      "draft tokens per step k (default: the draft's own: its TTT length, "
                      "block_size - 1 for DFlash, block_size for DSpark)");
  command->add_option("--confidence-threshold", o->confidence_threshold,
                      "drafts with a confidence head (DSpark): stop each proposal before the "
                      "first position whose predicted acceptance is below this (default 0: never)");
  command->add_option("--temperature", o->temperature,
                      "0 (default): greedy verification, checked against greedy decoding; T > 0: "
                      "speculative sampling at T by the rejection rule (the output is distributed "
                      "as the target's own sampling at T; timed against plain sampling)");
  command->add_option("--seed", o->seed,
                      "with --temperature: the seed of the draws (prompt i uses its own stream)");
  command->add_option("--category-field", o->category_field,
                      "τ per category when the records of --data (one file) name one in this "
                      "string field (default \"category\")");
  command->add_option("--dtype", o->dtype, "compute dtype of target and draft (default fp32)");
  add_device_option(*command, o->device);
  command->add_option("--cache-dir", o->cache_dir, "token cache directory");
  command->add_option("--out", o->out, "write the report as JSON here");
  command->add_flag("!--no-greedy-check", o->greedy_check,
                    "skip the comparison with plain greedy decoding of the target (with "
                    "--temperature: skip timing plain sampling)");
  command->add_flag("--strict-greedy-check", o->strict_greedy_check,
                    "fail (exit 4) on any difference from greedy decoding also in bf16/fp16, "
                    "where near-tied argmaxes may round either way (fp32 always fails on one)");
  command->add_flag("--no-kv-cache", o->no_kv_cache,
                    "decode without KV caches: every target forward recomputes the whole prefix "
                    "(the reference decoders, for comparison; same tokens, much slower)");
  return [o]() {
    const c10::ScalarType dtype = parse_compute_dtype(o->dtype, "--dtype");
    check(std::isfinite(o->temperature) && o->temperature >= 0, "[eval] --temperature ",
          o->temperature, " must be a finite number >= 0 (0: greedy)");
    const bool sampled = o->temperature > 0;
    check(!(sampled && o->strict_greedy_check),
          "[eval] --strict-greedy-check compares with greedy ",
          "decoding, which sampled output (--temperature ", o->temperature, ") is not");
    const at::Device device = device_from_option(o->device);
    const FrozenModel target = FrozenModel::load(o->target, dtype, device);
    // The objective whose export this is (objectives/description.h): it loads the draft.
    std::unique_ptr<DraftDecoder> draft;
    std::string draft_dir, draft_objective;
    for (const ObjectiveDescription& objective : objective_descriptions()) {
      if (!objective.find_export) continue;
      if (const auto found = objective.find_export(o->draft)) {
        draft_dir = *found;
        draft_objective = objective.name;
        draft = objective.load_draft(draft_dir, dtype, device);
        break;
      }
    }
    check(draft != nullptr, "[eval] ", o->draft, ": not a draft export tandem can evaluate (the ",
          "exports of ", objective_names([](const auto& d) { return bool(d.find_export); }),
          "; its config.json names the architecture)");
    draft->check_target(target, o->target);
    const int64_t draft_tokens =
        o->draft_tokens > 0 ? o->draft_tokens : draft->default_draft_tokens();
    check(draft_tokens >= 1, "[eval] --draft-tokens must be >= 1");
    check(o->confidence_threshold == 0 || draft->has_confidence_head(), "[eval] ", draft_dir,
          ": --confidence-threshold needs a draft with a confidence head (DSpark); this ",
          draft->type(), " draft has none");

    const DataFormat format = parse_data_format(o->format);
    std::optional<Tokenizer> tokenizer;
    DatasetOptions dataset_options;
    if (format != DataFormat::pretokenized) {
      tokenizer = Tokenizer::from_dir(o->tokenizer.empty() ? o->target : o->tokenizer);
      dataset_options.tokenizer = &*tokenizer;
    }
    dataset_options.chat_template = o->chat_template;
    dataset_options.template_kwargs = o->template_kwargs;
    dataset_options.vocab_size = target.config().vocab_size;
    CacheOptions cache;
    cache.dir = o->cache_dir;
    const TokenizedDataset dataset =
        TokenizedDataset::open(o->data, format, dataset_options, cache);

    // Each prompt's category, from its record (one data file only: a glob or mixture has none).
    const std::map<std::string, std::string> categories =
        std::filesystem::is_regular_file(o->data) ? record_categories(o->data, o->category_field)
                                                  : std::map<std::string, std::string>{};
    std::map<std::string, AcceptanceStats> by_category;

    DecodeOptions decode;
    decode.max_new_tokens = o->max_new_tokens;
    decode.stop_ids = target.config().eos_token_ids;
    decode.kv_cache = !o->no_kv_cache;
    decode.confidence_threshold = o->confidence_threshold;
    decode.temperature = o->temperature;
    AcceptanceStats stats(draft_tokens);
    int64_t prompts = 0, identical = 0, generated = 0;
    double speculative_seconds = 0, baseline_seconds = 0;  // baseline: greedy or sampling
    std::vector<GreedyMismatch> mismatches;  // each differing output's first divergence
    nlohmann::json per_prompt = nlohmann::json::array();
    for (int64_t i = 0; i < dataset.size() && (o->num_prompts <= 0 || prompts < o->num_prompts);
         ++i) {
      const std::vector<int64_t> prompt = prompt_of(dataset.document(i), o->prompt_tokens);
      if (prompt.empty()) continue;
      // Each prompt draws from its own stream, so a prompt's output does not depend on the others.
      decode.seed = sampling_seed(o->seed, i);
      auto start = std::chrono::steady_clock::now();
      const SpeculativeOutput output = draft->decode(target, prompt, draft_tokens, decode);
      speculative_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      stats.add(output);
      const std::string category = category_of(categories, dataset.document(i).source);
      if (!category.empty())
        by_category.try_emplace(category, draft_tokens).first->second.add(output);
      generated += static_cast<int64_t>(output.tokens.size());
      prompts += 1;
      per_prompt.push_back({{"document", i},
                            {"prompt_tokens", prompt.size()},
                            {"new_tokens", output.tokens.size()},
                            {"accepted", output.accepted},
                            {"tokens", output.tokens}});
      if (!category.empty()) per_prompt.back()["category"] = category;
      if (sampled && o->greedy_check) {
        // Plain sampling from the target alone at the same temperature (batch 1, KV cache): the
        // baseline of the speedup. Its tokens differ from the speculative ones (other draws).
        start = std::chrono::steady_clock::now();
        at::Generator generator = at::detail::createCPUGenerator(decode.seed);
        SamplingOptions sampling;
        sampling.temperature = o->temperature;
        generate(target, {prompt}, decode, sampling, &generator);
        baseline_seconds +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      } else if (o->greedy_check) {
        // Plain greedy decoding of the target alone, one prompt at a time as the speculative
        // decoder runs (batch 1), cached or not as it is.
        start = std::chrono::steady_clock::now();
        const std::vector<int64_t> greedy =
            decode.kv_cache ? generate(target, {prompt}, decode, SamplingOptions{})[0].tokens
                            : greedy_decode(target, prompt, decode);
        baseline_seconds +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (const auto mismatch = first_divergence(i, output.tokens, greedy))
          mismatches.push_back(*mismatch);
        else
          identical += 1;
      }
    }
    check(prompts > 0, "[eval] ", o->data, ": no document gave a prompt");

    nlohmann::json report = stats.to_json();
    report["prompts"] = prompts;
    report["draft_tokens"] = draft_tokens;
    if (draft->has_confidence_head()) report["confidence_threshold"] = o->confidence_threshold;
    report["temperature"] = o->temperature;
    if (sampled) report["seed"] = o->seed;
    report["draft_type"] =
        draft_objective;  // the objective that trained it: eagle3, dflash, dspark
    report["max_new_tokens"] = o->max_new_tokens;
    report["generated_tokens"] = generated;
    report["target"] = o->target;
    report["draft"] = draft_dir;
    report["data"] = o->data;
    report["kv_cache"] = decode.kv_cache;
    report["speculative_seconds"] = speculative_seconds;
    report["speculative_tokens_per_s"] = generated / std::max(speculative_seconds, 1e-9);
    if (sampled && o->greedy_check) {
      report["sampling_seconds"] = baseline_seconds;
      report["sampling_tokens_per_s"] = generated / std::max(baseline_seconds, 1e-9);
      report["speedup"] = baseline_seconds / std::max(speculative_seconds, 1e-9);
    } else if (o->greedy_check) {
      report["greedy_identical"] = identical;
      nlohmann::json documents = nlohmann::json::array(), divergences = nlohmann::json::array();
      for (const GreedyMismatch& mismatch : mismatches) {
        documents.push_back(mismatch.document);
        divergences.push_back({{"document", mismatch.document},
                               {"position", mismatch.position},
                               {"speculative_token", mismatch.speculative_token},
                               {"greedy_token", mismatch.greedy_token}});
      }
      report["greedy_mismatched_documents"] = documents;
      report["greedy_match_rate"] = static_cast<double>(identical) / static_cast<double>(prompts);
      report["greedy_mismatches"] = divergences;
      report["baseline_seconds"] = baseline_seconds;
      report["greedy_tokens_per_s"] = generated / std::max(baseline_seconds, 1e-9);
      report["speedup"] = baseline_seconds / std::max(speculative_seconds, 1e-9);
    }
    if (!by_category.empty()) {
      nlohmann::json per_category = nlohmann::json::object();
      for (const auto& [category, category_stats] : by_category) {
        per_category[category] = category_stats.to_json();
        per_category[category]["prompts"] = category_stats.prompts();
      }
      report["per_category"] = per_category;
      report["category_field"] = o->category_field;
    }
    report["per_prompt"] = per_prompt;
    std::cout << std::fixed << std::setprecision(3) << "[eval] " << prompts << " prompts, "
              << generated << " tokens, " << draft->type() << " draft, k = " << draft_tokens
              << " draft tokens per step\n"
              << "[eval] tau = " << stats.tau() << " tokens per target forward (95% interval "
              << report["tau_ci95"][0].get<double>() << " to "
              << report["tau_ci95"][1].get<double>() << ", bootstrap over the " << prompts
              << " prompts; " << stats.steps() << " verify steps; " << stats.drafted_per_step()
              << " draft tokens proposed per step)\n[eval] acceptance by draft position "
              << "(conditional):";
    for (double rate : stats.conditional_acceptance()) std::cout << " " << rate;
    std::cout << "\n";
    for (const auto& [category, category_stats] : by_category) {
      const auto [low, high] = category_stats.tau_interval();
      std::cout << "[eval] " << o->category_field << " " << category
                << ": tau = " << category_stats.tau() << " (95% interval " << low << " to " << high
                << ", " << category_stats.prompts() << " prompts)\n";
    }
    if (!by_category.empty() && !categories.empty()) {
      int64_t named = 0;
      for (const auto& entry : by_category) named += entry.second.prompts();
      if (named < prompts)
        std::cout << "[eval] " << prompts - named << " prompts name no " << o->category_field
                  << "\n";
    }
    std::cout << std::setprecision(1) << "[eval] speculative: " << speculative_seconds << " s, "
              << generated / std::max(speculative_seconds, 1e-9) << " tokens/s (batch 1, "
              << (decode.kv_cache ? "KV cache" : "no KV cache") << ")\n";
    if (sampled && o->greedy_check)
      std::cout << "[eval] sampling:    " << baseline_seconds << " s at temperature "
                << o->temperature << ", " << generated / std::max(baseline_seconds, 1e-9)
                << " tokens/s; speedup " << std::setprecision(2)
                << baseline_seconds / std::max(speculative_seconds, 1e-9)
                << "x (no token check: sampled outputs differ from run to run)\n";
    else if (o->greedy_check)
      std::cout << "[eval] greedy:      " << baseline_seconds << " s, "
                << generated / std::max(baseline_seconds, 1e-9) << " tokens/s; speedup "
                << std::setprecision(2) << baseline_seconds / std::max(speculative_seconds, 1e-9)
                << "x\n[eval] greedy check: " << identical << "/" << prompts
                << " outputs identical to plain greedy decoding of the target\n";
    if (!o->out.empty()) {
      std::ofstream out(o->out);
      out << report.dump(2) << "\n";
      check(out.good(), "[eval] ", o->out, ": write failed");
    }
    if (o->greedy_check && !sampled && identical != prompts) {
      for (const GreedyMismatch& mismatch : mismatches)
        std::cerr << "[eval] document " << mismatch.document
                  << ": first divergence at generated token " << mismatch.position
                  << " (speculative " << mismatch.speculative_token << ", greedy "
                  << mismatch.greedy_token << "; -1: ended)\n";
      if (greedy_mismatch_fails(dtype, o->strict_greedy_check)) {
        std::cerr << "[eval] error: speculative output differs from greedy decoding for "
                  << prompts - identical << " of " << prompts << " prompts"
                  << (o->strict_greedy_check ? " (--strict-greedy-check)" : " in fp32") << "\n";
        return 4;
      }
      std::cerr << "[eval] note: " << prompts - identical << " of " << prompts
                << " outputs differ from greedy decoding in " << o->dtype
                << ", where a batched verification and a one-token step round differently "
                   "(not an error; --strict-greedy-check makes it one)\n";
    }
    return 0;
  };
}

}  // namespace tandem::cli
