// tandem eval: speculative decoding of held-out prompts with a draft and its frozen target; the
// objective whose export it is loads it (objectives/description.h). Reports τ and per-position
// acceptance, and checks the output equals greedy decoding (eval/greedy_check.h: a failure in
// fp32, reported with each prompt's first divergence in bf16/fp16). With --temperature T > 0 it
// samples by the rejection rule (eval/acceptance_rule.h) and times plain sampling at T instead.
#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>

#include "tandem/cli/commands.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/core/file_io.h"
#include "tandem/core/json_file.h"
#include "tandem/data/rank_parts.h"
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

// One prompt's speculative decoding, and its baseline (greedy or plain sampling) when timed.
struct PromptResult {
  int64_t document = 0;  // in --data
  int64_t prompt_tokens = 0;
  SpeculativeOutput output;
  std::string category;                    // empty: none named
  bool checked = false;                    // compared with greedy decoding
  std::optional<GreedyMismatch> mismatch;  // when checked and different
  double speculative_seconds = 0, baseline_seconds = 0;

  // The report's per_prompt entry.
  nlohmann::json to_json() const {
    nlohmann::json json = {{"document", document},
                           {"prompt_tokens", prompt_tokens},
                           {"new_tokens", output.tokens.size()},
                           {"accepted", output.accepted},
                           {"proposed", output.proposed},
                           {"tokens", output.tokens}};
    if (!category.empty()) json["category"] = category;
    return json;
  }
  // A rank's part holds the entry plus what the report adds up.
  nlohmann::json to_part() const {
    nlohmann::json json = to_json();
    json["checked"] = checked;
    if (mismatch)
      json["mismatch"] = {mismatch->position, mismatch->speculative_token, mismatch->greedy_token};
    json["speculative_seconds"] = speculative_seconds;
    json["baseline_seconds"] = baseline_seconds;
    return json;
  }
  static PromptResult from_part(const nlohmann::json& json) {
    PromptResult result;
    result.document = json.at("document").get<int64_t>();
    result.prompt_tokens = json.at("prompt_tokens").get<int64_t>();
    result.output.tokens = json.at("tokens").get<std::vector<int64_t>>();
    result.output.accepted = json.at("accepted").get<std::vector<int64_t>>();
    result.output.proposed = json.at("proposed").get<std::vector<int64_t>>();
    result.category = json.value("category", std::string());
    result.checked = json.at("checked").get<bool>();
    if (json.contains("mismatch")) {
      const auto fields = json.at("mismatch").get<std::vector<int64_t>>();
      check(fields.size() == 3, "a mismatch has 3 fields");
      result.mismatch = GreedyMismatch{result.document, fields[0], fields[1], fields[2]};
    }
    result.speculative_seconds = json.at("speculative_seconds").get<double>();
    result.baseline_seconds = json.at("baseline_seconds").get<double>();
    return result;
  }
};

struct EvalOptions {
  std::string target, draft, data, format = "conversations", tokenizer, chat_template = "auto";
  std::string template_kwargs;
  std::string dtype = "fp32", out, cache_dir, device = "auto", category_field = "category";
  int64_t num_prompts = 0, prompt_tokens = 32, max_new_tokens = 64, draft_tokens = 0;
  double confidence_threshold = 0, temperature = 0;
  uint64_t seed = 0;
  bool greedy_check = true, strict_greedy_check = false, no_kv_cache = false;
};

// What the report says besides the prompts' results.
struct EvalContext {
  const EvalOptions& o;
  std::string draft_type, draft_objective, draft_dir;
  bool confidence_head = false;
  int64_t draft_tokens = 0;
  c10::ScalarType dtype = c10::kFloat;
  bool kv_cache = true;
  bool categories_named = false;  // --data's records were read for categories
  int64_t ranks = 1;              // the prompts were decoded on this many ranks
};

// Speculative decoding of one prompt, and its baseline: plain greedy decoding (checked against
// it) or, with --temperature, plain sampling at T (timed only).
PromptResult run_prompt(const FrozenModel& target, DraftDecoder& draft, int64_t document,
                        const std::vector<int64_t>& prompt, DecodeOptions decode,
                        const EvalOptions& o, std::string category, int64_t draft_tokens) {
  PromptResult result;
  result.document = document;
  result.prompt_tokens = static_cast<int64_t>(prompt.size());
  result.category = std::move(category);
  // Each prompt draws from its own stream, so a prompt's output does not depend on the others.
  decode.seed = stream_seed(o.seed, static_cast<uint64_t>(document));
  auto start = std::chrono::steady_clock::now();
  result.output = draft.decode(target, prompt, draft_tokens, decode);
  result.speculative_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!o.greedy_check) return result;
  start = std::chrono::steady_clock::now();
  if (o.temperature > 0) {
    // Plain sampling from the target alone at the same temperature (batch 1, KV cache): the
    // baseline of the speedup. Its tokens differ from the speculative ones (other draws).
    at::Generator generator = at::detail::createCPUGenerator(decode.seed);
    SamplingOptions sampling;
    sampling.temperature = o.temperature;
    generate(target, {prompt}, decode, sampling, &generator);
  } else {
    // Plain greedy decoding of the target alone, one prompt at a time as the speculative decoder
    // runs (batch 1), cached or not as it is.
    const std::vector<int64_t> greedy =
        decode.kv_cache ? generate(target, {prompt}, decode, SamplingOptions{})[0].tokens
                        : greedy_decode(target, prompt, decode);
    result.checked = true;
    result.mismatch = first_divergence(document, result.output.tokens, greedy);
  }
  result.baseline_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

// The report of `results` (in document order): printed, written to --out, and the exit code (4:
// outputs differ from greedy decoding where that fails the run).
int report_results(const std::vector<PromptResult>& results, const EvalContext& context) {
  const EvalOptions& o = context.o;
  const bool sampled = o.temperature > 0;
  AcceptanceStats stats(context.draft_tokens);
  std::map<std::string, AcceptanceStats> by_category;
  int64_t identical = 0, generated = 0;
  double speculative_seconds = 0, baseline_seconds = 0;  // baseline: greedy or sampling
  std::vector<GreedyMismatch> mismatches;                // each differing output's first divergence
  nlohmann::json per_prompt = nlohmann::json::array();
  for (const PromptResult& result : results) {
    stats.add(result.output);
    if (!result.category.empty())
      by_category.try_emplace(result.category, context.draft_tokens)
          .first->second.add(result.output);
    generated += static_cast<int64_t>(result.output.tokens.size());
    speculative_seconds += result.speculative_seconds;
    baseline_seconds += result.baseline_seconds;
    if (result.mismatch)
      mismatches.push_back(*result.mismatch);
    else if (result.checked)
      identical += 1;
    per_prompt.push_back(result.to_json());
  }
  const int64_t prompts = static_cast<int64_t>(results.size());

  nlohmann::json report = stats.to_json();
  report["prompts"] = prompts;
  report["draft_tokens"] = context.draft_tokens;
  if (context.confidence_head) report["confidence_threshold"] = o.confidence_threshold;
  report["temperature"] = o.temperature;
  if (sampled) report["seed"] = o.seed;
  report["draft_type"] = context.draft_objective;  // the objective that trained it
  report["max_new_tokens"] = o.max_new_tokens;
  report["generated_tokens"] = generated;
  report["target"] = o.target;
  report["draft"] = context.draft_dir;
  report["data"] = o.data;
  report["kv_cache"] = context.kv_cache;
  report["ranks"] = context.ranks;  // the seconds below are summed over the ranks' devices
  report["speculative_seconds"] = speculative_seconds;
  report["speculative_tokens_per_s"] = generated / std::max(speculative_seconds, 1e-9);
  if (sampled && o.greedy_check) {
    report["sampling_seconds"] = baseline_seconds;
    report["sampling_tokens_per_s"] = generated / std::max(baseline_seconds, 1e-9);
    report["speedup"] = baseline_seconds / std::max(speculative_seconds, 1e-9);
  } else if (o.greedy_check) {
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
    report["category_field"] = o.category_field;
  }
  report["per_prompt"] = per_prompt;
  std::cout << std::fixed << std::setprecision(3) << "[eval] " << prompts << " prompts, "
            << generated << " tokens, " << context.draft_type
            << " draft, k = " << context.draft_tokens << " draft tokens per step"
            << (context.ranks > 1 ? ", on " + std::to_string(context.ranks) + " ranks" : "")
            << "\n[eval] tau = " << stats.tau() << " tokens per target forward (95% interval "
            << report["tau_ci95"][0].get<double>() << " to " << report["tau_ci95"][1].get<double>()
            << ", bootstrap over the " << prompts << " prompts; " << stats.steps()
            << " verify steps; " << stats.drafted_per_step()
            << " draft tokens proposed per step)\n[eval] acceptance by draft position "
            << "(conditional):";
  for (double rate : stats.conditional_acceptance()) std::cout << " " << rate;
  std::cout << "\n";
  for (const auto& [category, category_stats] : by_category) {
    const auto [low, high] = category_stats.tau_interval();
    std::cout << "[eval] " << o.category_field << " " << category
              << ": tau = " << category_stats.tau() << " (95% interval " << low << " to " << high
              << ", " << category_stats.prompts() << " prompts)\n";
  }
  if (!by_category.empty() && context.categories_named) {
    int64_t named = 0;
    for (const auto& entry : by_category) named += entry.second.prompts();
    if (named < prompts)
      std::cout << "[eval] " << prompts - named << " prompts name no " << o.category_field << "\n";
  }
  const std::string devices = context.ranks > 1 ? ", summed over the ranks' devices" : "";
  std::cout << std::setprecision(1) << "[eval] speculative: " << speculative_seconds << " s"
            << devices << ", " << generated / std::max(speculative_seconds, 1e-9)
            << " tokens/s (batch 1, " << (context.kv_cache ? "KV cache" : "no KV cache") << ")\n";
  if (sampled && o.greedy_check)
    std::cout << "[eval] sampling:    " << baseline_seconds << " s at temperature " << o.temperature
              << ", " << generated / std::max(baseline_seconds, 1e-9) << " tokens/s; speedup "
              << std::setprecision(2) << baseline_seconds / std::max(speculative_seconds, 1e-9)
              << "x (no token check: sampled outputs differ from run to run)\n";
  else if (o.greedy_check)
    std::cout << "[eval] greedy:      " << baseline_seconds << " s, "
              << generated / std::max(baseline_seconds, 1e-9) << " tokens/s; speedup "
              << std::setprecision(2) << baseline_seconds / std::max(speculative_seconds, 1e-9)
              << "x\n[eval] greedy check: " << identical << "/" << prompts
              << " outputs identical to plain greedy decoding of the target\n";
  if (!o.out.empty()) replace_file(o.out, report.dump(2) + "\n", "[eval]");
  if (o.greedy_check && !sampled && identical != prompts) {
    for (const GreedyMismatch& mismatch : mismatches)
      std::cerr << "[eval] document " << mismatch.document
                << ": first divergence at generated token " << mismatch.position << " (speculative "
                << mismatch.speculative_token << ", greedy " << mismatch.greedy_token
                << "; -1: ended)\n";
    if (greedy_mismatch_fails(context.dtype, o.strict_greedy_check)) {
      std::cerr << "[eval] error: speculative output differs from greedy decoding for "
                << prompts - identical << " of " << prompts << " prompts"
                << (o.strict_greedy_check ? " (--strict-greedy-check)" : " in fp32") << "\n";
      return 4;
    }
    std::cerr << "[eval] note: " << prompts - identical << " of " << prompts
              << " outputs differ from greedy decoding in " << o.dtype
              << ", where a batched verification and a one-token step round differently "
                 "(not an error; --strict-greedy-check makes it one)\n";
  }
  return 0;
}

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

    EvalContext context{*o,
                        draft->type(),
                        draft_objective,
                        draft_dir,
                        draft->has_confidence_head(),
                        draft_tokens,
                        dtype,
                        decode.kv_cache,
                        !categories.empty(),
                        1};
    // Under torchrun, rank R decodes prompts R, R + W, ... (in the order one process runs them)
    // into OUT.parts/rank-R-of-W.json (data/rank_parts.h); the last rank to finish writes the
    // report from every rank's prompts, as one process would (timings summed over the devices).
    const DataRank rank = DataRank::from_launch();
    std::optional<RankParts> parts;
    if (rank.parallel()) {
      check(!o->out.empty(), "[eval] under torchrun give --out REPORT: the last rank to finish ",
            "merges the ranks' prompts into it");
      parts.emplace(o->out + ".parts", rank, "[eval]");
      context.ranks = rank.ranks;
    } else if (!o->out.empty()) {
      check_no_rank_parts(o->out + ".parts", o->out + ".parts", "[eval]");
    }
    const std::string who = "[eval] " + (parts ? rank.name() + ": " : std::string());
    const nlohmann::json settings = {{"target", o->target},
                                     {"draft", draft_dir},
                                     {"data", o->data},
                                     {"num_prompts", o->num_prompts},
                                     {"prompt_tokens", o->prompt_tokens},
                                     {"max_new_tokens", o->max_new_tokens},
                                     {"draft_tokens", draft_tokens},
                                     {"confidence_threshold", o->confidence_threshold},
                                     {"temperature", o->temperature},
                                     {"seed", o->seed},
                                     {"dtype", compute_dtype_name(dtype)},
                                     {"kv_cache", decode.kv_cache},
                                     {"greedy_check", o->greedy_check},
                                     {"category_field", o->category_field},
                                     {"format", o->format},
                                     {"tokenizer", o->tokenizer},
                                     {"chat_template", o->chat_template},
                                     {"template_kwargs", o->template_kwargs}};

    std::vector<PromptResult> results;
    if (!parts || !parts->done()) {
      int64_t prompts = 0;  // prompts run so far, by every rank
      for (int64_t i = 0; i < dataset.size() && (o->num_prompts <= 0 || prompts < o->num_prompts);
           ++i) {
        const std::vector<int64_t> prompt = prompt_of(dataset.document(i), o->prompt_tokens);
        if (prompt.empty()) continue;
        if (!rank.owns(prompts++)) continue;
        try {
          results.push_back(run_prompt(target, *draft, i, prompt, decode, *o,
                                       category_of(categories, dataset.document(i).source),
                                       draft_tokens));
        } catch (const std::exception& e) {
          throw Error(who, "document ", i, " (prompt ", prompts - 1, "; this rank decodes ",
                      rank.share("prompts"), "): ", e.what());
        }
      }
      check(prompts > 0, "[eval] ", o->data, ": no document gave a prompt");
      if (!parts) return report_results(results, context);
      nlohmann::json part = {{"settings", settings}, {"prompts", nlohmann::json::array()}};
      for (const PromptResult& result : results) part["prompts"].push_back(result.to_part());
      replace_file(parts->path(".json"), part.dump() + "\n", "[eval]");
      parts->mark_done();
      std::cout << who << results.size() << " prompts written to " << parts->path(".json") << "\n";
    }
    int code = 0;
    const bool merged = parts->merge_if_all_done([&] {
      results.clear();
      for (int64_t r = 0; r < rank.ranks; ++r) {
        const std::string path = parts->path_of(r, ".json");
        const nlohmann::json part = read_json_file(path, "eval");
        check(part.value("settings", nlohmann::json()) == settings, "[eval] ", path, ": rank ", r,
              " ran with other settings than this rank; delete ", parts->dir(),
              " and rerun every rank with the same flags");
        try {
          for (const nlohmann::json& entry : part.at("prompts"))
            results.push_back(PromptResult::from_part(entry));
        } catch (const std::exception& e) {
          throw Error("[eval] ", path, ": malformed part: ", e.what());
        }
      }
      std::sort(results.begin(), results.end(), [](const PromptResult& a, const PromptResult& b) {
        return a.document < b.document;
      });
      code = report_results(results, context);
    });
    if (!merged)
      std::cout << who << "part complete; the last rank to finish writes the report " << o->out
                << "\n";
    return code;
  };
}

}  // namespace tandem::cli
