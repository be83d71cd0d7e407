// tandem rollout: sample completions of prompts from a model, with each token's log-probability
// and a rule-based reward, written as rollout JSONL (data.format: rollout) for GRPO/GSPO. The
// completions are decoded --rows at a time with continuous batching and a KV cache
// (eval/continuous_generation.h); production rollouts come from a serving engine in the same
// format.
#include <ATen/ATen.h>

#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "tandem/cli/commands.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/core/file_io.h"
#include "tandem/data/sampler.h"
#include "tandem/data/token_cache.h"
#include "tandem/eval/continuous_generation.h"
#include "tandem/eval/generation.h"
#include "tandem/models/frozen.h"
#include "tandem/text/regex.h"
#include "tandem/text/tokenizer.h"

namespace tandem::cli {

Runner add_rollout_command(CLI::App& root) {
  struct Options {
    std::string model, data, format = "conversations", tokenizer, chat_template = "auto";
    std::string template_kwargs;
    std::string reward_regex, out, dtype = "fp32", cache_dir, device = "auto";
    int64_t num_prompts = 16, prompt_tokens = 32, samples = 4, max_new_tokens = 32, rows = 16;
    uint64_t seed = 0;
  };
  auto o = std::make_shared<Options>();
  CLI::App* command = root.add_subcommand(
      "rollout",
      "sample completions of prompts from a model (temperature 1) and write rollout JSONL with "
      "old_logprobs, a regex-count reward and group ids, for grpo/gspo training");
  command->add_option("--model", o->model, "HF checkpoint directory to sample from")->required();
  command->add_option("--data", o->data, "prompts: a conversations/text/pretokenized JSONL")
      ->required();
  command->add_option("--format", o->format,
                      "conversations | text | pretokenized (default conversations)");
  command->add_option("--tokenizer", o->tokenizer, "tokenizer directory (default: --model)");
  add_chat_template_options(*command, o->chat_template, o->template_kwargs);
  command->add_option("--num-prompts", o->num_prompts, "prompts to use, from the top (default 16)");
  command->add_option("--prompt-tokens", o->prompt_tokens,
                      "prompt length for documents without a loss mask boundary (default 32)");
  command->add_option("--samples-per-prompt", o->samples,
                      "completions per prompt: one group (default 4)");
  command->add_option("--max-new-tokens", o->max_new_tokens, "tokens per completion (default 32)");
  command
      ->add_option("--reward-regex", o->reward_regex,
                   "reward = number of matches of this regex in the decoded completion")
      ->required();
  command->add_option("--rows", o->rows,
                      "completions decoded together (default 16); a row whose completion ends "
                      "takes the next at once (continuous batching)");
  command->add_option("--seed", o->seed,
                      "sampling seed (default 0): completion i draws from its own stream");
  command->add_option("--dtype", o->dtype, "compute dtype (default fp32)");
  add_device_option(*command, o->device);
  command->add_option("--cache-dir", o->cache_dir, "token cache directory");
  command->add_option("--out", o->out, "output rollout JSONL")->required();
  return [o]() {
    check(o->samples >= 1 && o->num_prompts >= 1,
          "[rollout] --samples-per-prompt and "
          "--num-prompts must be positive");
    const FrozenModel model = FrozenModel::load(o->model, parse_compute_dtype(o->dtype, "--dtype"),
                                                device_from_option(o->device));
    const Tokenizer tokenizer = Tokenizer::from_dir(o->tokenizer.empty() ? o->model : o->tokenizer);
    const Regex reward(o->reward_regex, /*literal=*/false, "--reward-regex");
    DatasetOptions dataset_options;
    dataset_options.tokenizer = &tokenizer;
    dataset_options.chat_template = o->chat_template;
    dataset_options.template_kwargs = o->template_kwargs;
    dataset_options.vocab_size = model.config().vocab_size;
    CacheOptions cache;
    cache.dir = o->cache_dir;
    const TokenizedDataset prompts =
        TokenizedDataset::open(o->data, parse_data_format(o->format), dataset_options, cache);
    DecodeOptions decode;
    decode.max_new_tokens = o->max_new_tokens;
    decode.stop_ids = model.config().eos_token_ids;
    // Every completion is one request (temperature 1, no filter: the policy's distribution),
    // drawing from its own stream, so it does not depend on which others share its batch.
    SamplingOptions sampling;
    sampling.temperature = 1.0;
    check(o->rows >= 1, "[rollout] --rows must be positive");
    ContinuousGenerator generator(model, decode, sampling, o->rows);
    int64_t used = 0;
    std::vector<std::pair<std::vector<int64_t>, std::string>> requests;  // prompt, group id
    for (int64_t i = 0; i < prompts.size() && used < o->num_prompts; ++i) {
      const TokenizedDocument document = prompts.document(i);
      const std::vector<int64_t> prompt = prompt_of(document, o->prompt_tokens);
      if (prompt.empty()) continue;
      ++used;
      for (int64_t s = 0; s < o->samples; ++s) {
        const uint64_t stream = static_cast<uint64_t>(requests.size());
        generator.submit(prompt, stream_seed(o->seed, stream));
        requests.emplace_back(prompt, document.source);
      }
    }
    std::vector<Generation> completions(requests.size());
    for (auto finished = generator.next_finished(); !finished.empty();
         finished = generator.next_finished())
      for (auto& [id, completion] : finished) completions[id] = std::move(completion);
    std::ostringstream lines;
    double reward_sum = 0;
    int64_t written = 0;
    for (size_t r = 0; r < requests.size(); ++r) {
      const Generation& completion = completions[r];
      const std::vector<int32_t> completion_ids(completion.tokens.begin(), completion.tokens.end());
      std::vector<Match> matches;
      reward.find_all(tokenizer.decode(completion_ids, /*skip_special_tokens=*/true), matches);
      nlohmann::json line;
      line["prompt_ids"] = requests[r].first;
      line["completion_ids"] = completion.tokens;
      line["old_logprobs"] = completion.logprobs;
      line["reward"] = static_cast<double>(matches.size());
      line["group_id"] = requests[r].second;
      lines << line.dump() << "\n";
      reward_sum += static_cast<double>(matches.size());
      ++written;
    }
    check(written > 0, "[rollout] ", o->data, ": no document gave a prompt");
    replace_file(o->out, lines.str(), "[rollout]");
    std::cout << std::fixed << std::setprecision(3) << "[rollout] " << o->out << ": " << written
              << " completions of " << used << " prompts, mean reward " << reward_sum / written
              << "\n";
    return 0;
  };
}

}  // namespace tandem::cli
