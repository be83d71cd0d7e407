// tandem regenerate: a conversations JSONL with every assistant turn replaced by the target's own
// answer (eval/regeneration.h), batched through the KV cache, resumable after a kill: the output
// is appended a batch at a time (data/resumable_jsonl.h) and a rerun skips what is done.
//
// Next to OUT: OUT.settings.json (what generated it; a rerun with other settings is refused) and
// OUT.skipped.jsonl (each bad input line and why, under on_error: skip).
#include <ATen/CPUGeneratorImpl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include "tandem/cli/commands.h"
#include "tandem/core/config.h"
#include "tandem/core/config_schema.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/core/file_io.h"
#include "tandem/data/data_files.h"
#include "tandem/data/datasets.h"
#include "tandem/data/parquet_rows.h"
#include "tandem/data/rank_parts.h"
#include "tandem/data/resumable_jsonl.h"
#include "tandem/data/sampler.h"
#include "tandem/eval/regeneration.h"
#include "tandem/models/frozen.h"

namespace tandem::cli {

namespace {

struct RegenerateOptions {
  std::string config, target, tokenizer, chat_template, template_kwargs, data, out, on_error, dtype;
  std::string device = "auto", batching = "continuous";
  int64_t max_new_tokens = 512, max_length = 0, batch_size = 16, limit = 0, top_k = 0;
  double temperature = 0, top_p = 1.0;
  uint64_t seed = 0;
};

// Flags win; then the training config's keys; then the defaults.
void fill_from_config(RegenerateOptions& o) {
  if (o.config.empty()) return;
  const Config config = Config::load(o.config);
  auto fill = [](std::string& value, const std::optional<std::string>& found) {
    if (value.empty() && found) value = *found;
  };
  auto dtype_name = [](const std::optional<c10::ScalarType>& dtype) {
    return dtype ? std::optional<std::string>(compute_dtype_name(*dtype)) : std::nullopt;
  };
  // A draft's config names its target; a policy's or a student's, its model.
  if (keys::target::path.find(config)) {
    fill(o.target, keys::target::path.find(config));
    fill(o.dtype, dtype_name(keys::target::dtype.find(config)));
  } else {
    fill(o.target, keys::model::path.find(config));
    fill(o.dtype, dtype_name(keys::model::dtype.find(config)));
  }
  // regenerate reads records as they are: a config that renames columns or holds records out
  // would have it answer other records than training reads.
  const auto columns = keys::data::columns.find(config);
  check(!columns || columns->empty(), "[regenerate] ", keys::data::columns.where(config),
        ": regenerate reads `conversations`/`messages` as named; rename the column first");
  const auto heldout = keys::data::heldout_fraction.find(config);
  check(!heldout || *heldout == 0, "[regenerate] ", keys::data::heldout_fraction.where(config),
        ": regenerate answers every record; split the file first (tandem data split) and "
        "regenerate the train part");
  if (const auto paths = keys::data::path.find(config); paths && o.data.empty()) {
    check(paths->size() == 1 && !is_glob(paths->front().path), "[regenerate] ",
          keys::data::path.where(config),
          " names several files; regenerate reads one file: give --data FILE");
    o.data = paths->front().path;
  }
  fill(o.tokenizer, keys::data::tokenizer.find(config));
  fill(o.chat_template, keys::data::chat_template.find(config));
  fill(o.template_kwargs, keys::data::template_kwargs.find(config));
  const std::optional<OnError> on_error = keys::data::on_error.find(config);
  fill(o.on_error, on_error ? std::optional<std::string>(on_error_name(*on_error)) : std::nullopt);
}

std::string duration(double seconds) {
  std::ostringstream out;
  const int64_t s = static_cast<int64_t>(seconds);
  if (s >= 3600) out << s / 3600 << "h";
  if (s >= 60) out << (s / 60) % 60 << "m";
  out << s % 60 << "s";
  return out.str();
}

// Records of the input, for the progress line: non-blank lines of JSONL, the elements of a JSON
// array (scanned, not parsed), the rows a Parquet footer declares.
int64_t count_records(const std::string& path) {
  const RecordFile kind = record_file_kind(path);
  if (kind == RecordFile::parquet) return ParquetRows(path, {}).rows();
  if (kind == RecordFile::json_array) {
    JsonlReader reader(path, OnError::skip);
    reader.skip_through(std::numeric_limits<int64_t>::max());
    return reader.line();
  }
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "[regenerate] ", path, ": cannot open");
  int64_t lines = 0;
  std::string line;
  while (std::getline(in, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos) ++lines;
  return lines;
}

// Adds one line of OUT.skipped.jsonl ({line, reason, detail}) to `counts`.
void count_logged(SkipCounts& counts, const nlohmann::json& logged) {
  SkipCounts::Entry& entry = counts.by_reason[logged.value("reason", std::string("unknown"))];
  if (entry.count++ == 0) {
    entry.first_line = logged.value("line", int64_t{0});
    entry.first_detail = logged.value("detail", std::string());
  }
}

// Checks `settings` against those an output was begun with (at `path`), or records them there
// for a new output. Returns whether that output was finished.
bool begin_or_resume(const std::string& path, const nlohmann::json& settings,
                     const std::string& output) {
  if (!std::filesystem::exists(path)) {
    check(!std::filesystem::exists(output), "[regenerate] ", output, " exists but ", path,
          " does not: not this command's output; choose another --out");
    replace_file(path, settings.dump(2) + "\n", "[regenerate]");
    return false;
  }
  std::ifstream in(path);
  nlohmann::json previous = nlohmann::json::parse(in, nullptr, false);
  check(previous.is_object(), "[regenerate] ", path, ": unreadable; delete it and ", output,
        " to start over");
  // Outputs begun before the dtype had one spelling recorded it as typed ("bfloat16").
  if (previous.contains("dtype") && previous["dtype"].is_string())
    previous["dtype"] = compute_dtype_name(
        parse_compute_dtype(previous["dtype"].get<std::string>(), path + ": dtype"));
  nlohmann::json compared = settings;
  if (!compared.contains("draws")) compared["draws"] = nullptr;  // absent on both sides, or refused
  for (const auto& [key, value] : compared.items())
    check(previous.value(key, nlohmann::json()) == value, "[regenerate] ", output,
          " was begun with other settings (", key, ": ",
          previous.value(key, nlohmann::json()).dump(), " there, ", value.dump(),
          " now): use another --out, the same settings, or delete ", output, " and ", path,
          " to start over");
  return previous.value("finished", false);
}

int64_t json_key(const std::string& line, const char* field, const std::string& part) {
  const nlohmann::json parsed = nlohmann::json::parse(line, nullptr, false);
  const nlohmann::json* value = &parsed;
  if (std::string(field) == "source_line") {  // an output line: regenerated.source_line
    const auto found = parsed.is_object() ? parsed.find("regenerated") : parsed.end();
    value = found != parsed.end() ? &*found : nullptr;
  }
  check(
      value && value->is_object() && value->contains(field) && (*value)[field].is_number_integer(),
      "[regenerate] ", part, ": a line without ", field, ": not a part this command wrote");
  return (*value)[field].get<int64_t>();
}

// The last rank to finish: OUT, OUT.skipped.jsonl and OUT.settings.json from the parts, exactly
// as one process writes them (the settings last: they mark the output finished).
void merge_regenerated(const RankParts& parts, nlohmann::json settings, const std::string& out) {
  std::vector<std::string> outputs, logs;
  for (int64_t rank = 0; rank < parts.rank().ranks; ++rank) {
    std::ifstream in(parts.path_of(rank, ".settings.json"));
    const nlohmann::json theirs = nlohmann::json::parse(in, nullptr, false);
    check(theirs == settings, "[regenerate] ", parts.path_of(rank, ".settings.json"), ": rank ",
          rank, " ran with other settings than this rank; delete ", parts.dir(),
          " and rerun every rank with the same flags");
    // A rank that wrote nothing has no file: nothing to merge from it.
    if (std::filesystem::exists(parts.path_of(rank, ".jsonl")))
      outputs.push_back(parts.path_of(rank, ".jsonl"));
    if (std::filesystem::exists(parts.path_of(rank, ".skipped.jsonl")))
      logs.push_back(parts.path_of(rank, ".skipped.jsonl"));
  }
  const std::string log_path = out + ".skipped.jsonl";
  merge_sorted_jsonl(
      logs, [&](const std::string& line) { return json_key(line, "line", log_path); }, log_path,
      "[regenerate]");
  const int64_t conversations = merge_sorted_jsonl(
      outputs, [&](const std::string& line) { return json_key(line, "source_line", out); }, out,
      "[regenerate]");
  SkipCounts skipped;
  std::ifstream log(log_path);
  for (std::string line; std::getline(log, line);)
    if (!line.empty()) count_logged(skipped, nlohmann::json::parse(line));
  settings["finished"] = true;
  settings["conversations"] = conversations;
  settings["skipped"] = skipped.to_json();
  replace_file(out + ".settings.json", settings.dump(2) + "\n", "[regenerate]");
  std::cout << "[regenerate] " << out << ": merged the parts of " << parts.rank().ranks
            << " ranks, " << conversations << " conversations, " << skipped.total()
            << " lines skipped\n";
}

}  // namespace

Runner add_regenerate_command(CLI::App& root) {
  auto o = std::make_shared<RegenerateOptions>();
  CLI::App* command = root.add_subcommand(
      "regenerate",
      "replace every assistant turn of a conversations JSONL with the target's own answer "
      "(greedy by default), turn by turn through the chat template; resumable");
  command->add_option("config", o->config,
                      "a training config to take the target (target.path or model.path, its "
                      "dtype) and data.{path,tokenizer,chat_template,on_error} from; flags win");
  command->add_option("--target", o->target, "HF checkpoint directory of the model that answers");
  command->add_option("--data", o->data, "input conversations JSONL");
  command->add_option("--out", o->out, "output conversations JSONL (resumed when it exists)")
      ->required();
  command->add_option("--tokenizer", o->tokenizer, "tokenizer directory (default: --target)");
  add_chat_template_options(*command, o->chat_template, o->template_kwargs,
                            " (prompts end as the template's generation prompt does)");
  command->add_option("--max-new-tokens", o->max_new_tokens,
                      "tokens per answer at most (default 512)");
  command->add_option("--max-length", o->max_length,
                      "prompt + max-new-tokens must fit (default: max_position_embeddings)");
  command->add_option("--batch-size", o->batch_size,
                      "conversations generated together (default 16)");
  command
      ->add_option("--batching", o->batching,
                   "continuous (default): a row whose answer ends takes the next one at once; "
                   "static: each batch runs until its longest answer ends")
      ->check(CLI::IsMember({"continuous", "static"}));
  command->add_option("--temperature", o->temperature, "0: greedy (default); > 0: sampling");
  command->add_option("--top-k", o->top_k, "sampling: keep the k most likely tokens (0: all)");
  command->add_option("--top-p", o->top_p, "sampling: nucleus probability (default 1: all)");
  command->add_option("--seed", o->seed, "sampling seed (default 0)");
  command->add_option("--limit", o->limit, "only the first N input lines (default: all)");
  command->add_option(
      "--on-error", o->on_error,
      "bad input lines: fail (default) or skip (counted, listed in OUT.skipped.jsonl)");
  command->add_option("--dtype", o->dtype, "compute dtype (default fp32)");
  add_device_option(*command, o->device);
  return [o]() {
    fill_from_config(*o);
    check(!o->target.empty(), "[regenerate] no target: give --target or a config with target.path");
    check(!o->data.empty(), "[regenerate] no input: give --data or a config with data.path");
    check(o->batch_size >= 1, "[regenerate] --batch-size must be >= 1");
    if (o->chat_template.empty()) o->chat_template = "auto";
    if (o->dtype.empty()) o->dtype = "fp32";
    if (o->tokenizer.empty()) o->tokenizer = o->target;
    const OnError on_error = parse_on_error(o->on_error.empty() ? "fail" : o->on_error);
    check(std::filesystem::absolute(o->out) != std::filesystem::absolute(o->data),
          "[regenerate] --out ", o->out, " is the input file");

    const c10::ScalarType dtype = parse_compute_dtype(o->dtype, "--dtype");
    const FrozenModel model = FrozenModel::load(o->target, dtype, device_from_option(o->device));
    const Tokenizer tokenizer = Tokenizer::from_dir(o->tokenizer);
    const ChatTemplate chat_template =
        ChatTemplate::resolve(o->chat_template, o->tokenizer, o->template_kwargs);
    const bool continuous = o->batching == "continuous";
    RegenerationOptions options;
    options.max_new_tokens = o->max_new_tokens;
    options.max_length = o->max_length;
    options.sampling.temperature = o->temperature;
    options.sampling.top_k = o->top_k;
    options.sampling.top_p = o->top_p;
    const Regenerator regenerator(model, tokenizer, chat_template, options);

    // What generated the output: a rerun must match it to resume (on_error may change).
    nlohmann::json settings = {
        {"command", "tandem regenerate"},
        {"target", o->target},
        {"data", o->data},
        {"tokenizer", o->tokenizer},
        {"chat_template", o->chat_template},
        {"template", chat_template.fingerprint()},  // the source, special tokens and kwargs
        {"dtype", compute_dtype_name(dtype)},       // one spelling: bf16, not bfloat16
        {"max_new_tokens", o->max_new_tokens},
        {"max_length", regenerator.max_length()},
        {"stop_ids", regenerator.stop_ids()},
        {"temperature", o->temperature},
        {"top_k", o->top_k},
        {"top_p", o->top_p},
        {"seed", o->seed},
        {"batch_size", o->batch_size},
        {"limit", o->limit}};
    // Sampled answers draw per conversation under continuous batching, per batch under static
    // batching: an output begun one way is not resumed the other way. Greedy answers are the same.
    // (Outputs begun before continuous batching drew per batch and recorded no `draws`.)
    if (o->temperature > 0 && continuous) settings["draws"] = "per conversation";
    const std::string settings_path = o->out + ".settings.json";
    const std::filesystem::path out_dir = std::filesystem::path(o->out).parent_path();
    if (!out_dir.empty()) std::filesystem::create_directories(out_dir);
    // Under torchrun, rank R answers batches R, R + W, ... into OUT.parts/rank-R-of-W.jsonl
    // (data/rank_parts.h) and the last rank to finish merges the parts into OUT.
    const DataRank rank = DataRank::from_launch();
    const std::string parts_dir = o->out + ".parts";
    std::optional<RankParts> parts;
    bool finished = false;
    if (!rank.parallel()) {
      check_no_rank_parts(parts_dir, parts_dir, "[regenerate]");
      finished = begin_or_resume(settings_path, settings, o->out);
    } else if (std::filesystem::exists(settings_path)) {
      std::ifstream in(settings_path);
      const nlohmann::json previous = nlohmann::json::parse(in, nullptr, false);
      check(previous.is_object() && previous.value("finished", false), "[regenerate] ", o->out,
            " was begun by one process (", settings_path,
            "): finish it without torchrun, or delete both to start over");
      finished = begin_or_resume(settings_path, settings, o->out);  // same settings, or an error
    } else {
      check(!std::filesystem::exists(o->out) || std::filesystem::exists(parts_dir), "[regenerate] ",
            o->out, " exists but ", settings_path,
            " does not: not this command's output; choose another --out");
      parts.emplace(parts_dir, rank, "[regenerate]");
      (void)begin_or_resume(parts->path(".settings.json"), settings, parts->path(".jsonl"));
    }
    if (finished) {
      std::cout << "[regenerate] " << o->out << " is complete; nothing to do\n";
      return 0;
    }
    const std::string who = "[regenerate] " + (parts ? rank.name() + ": " : std::string());
    const std::string output_path = parts ? parts->path(".jsonl") : o->out;

    // Resume: each output line names the last input line of its batch; the next batch starts
    // after the last such line, so a resumed run forms the same batches as an uninterrupted one.
    // Skipped lines past it are dropped and redone (the kill may have fallen between appends).
    ResumableJsonl output(output_path, "[regenerate]");
    ResumableJsonl skipped_log(parts ? parts->path(".skipped.jsonl") : o->out + ".skipped.jsonl",
                               "[regenerate]");
    int64_t done_through = 0, resumed = 0;
    for (const nlohmann::json& line : output.existing()) {
      const nlohmann::json& record = line.value("regenerated", nlohmann::json());
      check(record.is_object() && record.contains("batch_end"), "[regenerate] ", output_path,
            ": a line without regenerated.batch_end: not this command's output");
      done_through = std::max(done_through, record["batch_end"].get<int64_t>());
      ++resumed;
    }
    const bool rank_done = parts && parts->done();
    if (!rank_done)
      skipped_log.drop_existing([&](const nlohmann::json& line) {
        return line.value("line", int64_t{0}) > done_through;
      });
    SkipCounts skipped;  // the log's counts, then this run's
    for (const nlohmann::json& line : skipped_log.existing()) count_logged(skipped, line);

    JsonlReader reader(o->data, on_error);
    const RecordFile input_kind = record_file_kind(o->data);
    std::vector<nlohmann::json> skipped_lines;  // this batch's
    reader.set_skip_listener([&](int64_t line, const BadLine& bad) {
      skipped_lines.push_back({{"line", line},
                               {"reason", std::string(bad_input_name(bad.reason))},
                               {"detail", bad.what()}});
    });
    const int64_t total_lines =
        o->limit > 0 ? std::min(o->limit, count_records(o->data)) : count_records(o->data);
    if (resumed > 0 || done_through > 0)
      std::cout << who << "resuming " << output_path << ": " << resumed
                << " conversations written, input lines 1.." << done_through << " done\n";
    // One process skips what is done; a rank reads every line, to deal the batches as one
    // process forms them, and answers its own.
    if (!parts) reader.skip_through(done_through);
    const bool interactive = ::isatty(STDERR_FILENO) == 1;
    const auto start = std::chrono::steady_clock::now();
    auto last_print = start - std::chrono::seconds(60);
    int64_t written = resumed, new_tokens = 0, truncated = 0;

    // Batches are formed from the input in order (the units of resuming and of the ranks' shares)
    // and written in order. Static batching generates each batch alone; continuous batching
    // reads ahead, keeping twice --batch-size conversations in flight, and a row freed by any
    // answer takes the next one (eval/regeneration.h's RegenerationStream).
    struct PendingBatch {
      int64_t index = 0, batch_end = 0;
      std::vector<int64_t> lines;                     // input line of each conversation
      std::vector<nlohmann::ordered_json> originals;  // in the input's key order
      std::vector<nlohmann::json> skipped;            // bad lines met while forming it
      std::map<int64_t, Regenerated> results;         // by input line
    };
    std::deque<PendingBatch> pending;
    std::optional<RegenerationStream> stream;
    if (continuous) stream.emplace(regenerator, o->batch_size);
    nlohmann::json value;
    bool more = !rank_done;
    int64_t batch_index = 0;
    // Forms the next batch this rank answers (false at the end of the input).
    auto next_batch = [&]() -> bool {
      while (more) {
        std::vector<std::vector<ChatMessage>> batch;
        std::vector<jinja::Value> batch_tools;
        PendingBatch formed;
        formed.index = batch_index++;
        while (static_cast<int64_t>(batch.size()) < o->batch_size) {
          if (o->limit > 0 && reader.line() >= o->limit) {
            more = false;
            break;
          }
          if (!reader.next(value)) {
            more = false;
            break;
          }
          if (o->limit > 0 && reader.line() > o->limit) {
            more = false;
            break;
          }
          static const nlohmann::ordered_json kNoOrder;
          nlohmann::ordered_json original = ordered_line(reader.line_text());  // key order kept
          const nlohmann::ordered_json& order = chat_template.is_jinja() ? original : kNoOrder;
          try {
            std::vector<ChatMessage> messages = parse_conversation(value, order);
            batch_tools.push_back(parse_tools(value, order));
            batch.push_back(std::move(messages));
          } catch (const BadLine& bad) {
            reader.reject(bad);
            continue;
          }
          formed.originals.push_back(std::move(original));
          formed.lines.push_back(reader.line());
        }
        formed.batch_end = reader.line();
        formed.skipped = std::move(skipped_lines);
        skipped_lines.clear();
        if (!rank.owns(formed.index) || formed.batch_end <= done_through)
          continue;  // another rank's batch, or one this rank has written
        // Sampling: static batches draw from `seed` and their first line; continuous batching
        // gives each conversation its own streams from `seed` and its line.
        if (!batch.empty() && !continuous) {
          at::Generator generator = at::detail::createCPUGenerator(
              o->seed * 1000003ULL + static_cast<uint64_t>(formed.lines.front()));
          try {
            const std::vector<Regenerated> results =
                regenerator.run(batch, &generator, batch_tools);
            for (size_t i = 0; i < results.size(); ++i)
              formed.results[formed.lines[i]] = results[i];
          } catch (const std::exception& e) {
            throw Error(who, "input lines ", formed.lines.front(), "..", formed.lines.back(),
                        " (batch ", formed.index, "; this rank answers ", rank.share("batches"),
                        "): ", e.what());
          }
        }
        for (size_t i = 0; continuous && i < batch.size(); ++i)
          stream->add(formed.lines[i], std::move(batch[i]), std::move(batch_tools[i]),
                      splitmix64(o->seed * 1000003ULL + static_cast<uint64_t>(formed.lines[i])));
        pending.push_back(std::move(formed));
        return true;
      }
      return false;
    };
    // Writes the oldest batch once every conversation of it is answered.
    auto write_front = [&]() {
      PendingBatch& front = pending.front();
      std::vector<nlohmann::ordered_json> out_lines;
      for (size_t i = 0; i < front.lines.size(); ++i) {
        const Regenerated& result = front.results.at(front.lines[i]);
        if (result.rejected) {
          reader.reject(*result.rejected, front.lines[i]);  // logged into skipped_lines
          continue;
        }
        nlohmann::ordered_json messages = nlohmann::ordered_json::array();
        for (const ChatMessage& message : result.messages) {
          // The message as it came (its role's spelling, tool calls, reasoning, ... in their
          // order), with the answer's text where one was generated.
          nlohmann::ordered_json item = {{"role", std::string(chat_role_name(message.role))},
                                         {"content", message.content}};
          for (const auto& [key, field] : message.fields.items)
            item[key] = nlohmann::ordered_json::parse(jinja::to_json(field));
          messages.push_back(std::move(item));
        }
        const nlohmann::ordered_json& original = front.originals[i];
        nlohmann::ordered_json line;
        line["id"] = original.contains("id")
                         ? original["id"]
                         : nlohmann::ordered_json(record_name(o->data, input_kind, front.lines[i]));
        line["conversations"] = messages;
        if (original.contains("tools")) line["tools"] = original["tools"];
        line["regenerated"] = {{"source_line", front.lines[i]},
                               {"batch_end", front.batch_end},
                               {"answer_tokens", result.answer_tokens},
                               {"answer_stopped", result.answer_stopped}};
        out_lines.push_back(std::move(line));
        for (size_t a = 0; a < result.answer_tokens.size(); ++a) {
          new_tokens += result.answer_tokens[a];
          truncated += result.answer_stopped[a] ? 0 : 1;
        }
      }
      front.skipped.insert(front.skipped.end(), skipped_lines.begin(), skipped_lines.end());
      skipped_lines.clear();
      // In line order: lines refused while reading and answers refused while generating interleave.
      std::stable_sort(front.skipped.begin(), front.skipped.end(),
                       [](const nlohmann::json& a, const nlohmann::json& b) {
                         return a.value("line", int64_t{0}) < b.value("line", int64_t{0});
                       });
      // Skipped lines first: a kill between the two appends leaves them past the last written
      // line, where the next run drops and redoes them.
      for (const nlohmann::json& line : front.skipped) count_logged(skipped, line);
      skipped_log.append(front.skipped);
      if (!out_lines.empty()) output.append_ordered(out_lines);
      written += static_cast<int64_t>(out_lines.size());
      pending.pop_front();
    };
    std::exception_ptr input_error;  // a bad line under on_error fail: the batches before it
                                     // are finished and written first, as without read-ahead
    while (true) {
      // Read ahead: one batch when static; enough to keep the rows busy when continuous.
      try {
        while (more &&
               (pending.empty() || (continuous && stream->in_flight() < 2 * o->batch_size)) &&
               next_batch()) {
        }
      } catch (const std::exception&) {
        input_error = std::current_exception();
        more = false;
        skipped_lines.clear();  // the unfinished batch's: it is not written
      }
      if (pending.empty()) break;
      if (pending.front().results.size() < pending.front().lines.size()) {
        std::vector<std::pair<int64_t, Regenerated>> complete;
        try {
          complete = stream->next_complete();
        } catch (const std::exception& e) {
          throw Error(who, "input lines ", done_through + 1, "..", pending.back().batch_end,
                      " (batches ", pending.front().index, "..", pending.back().index,
                      " in flight; this rank answers ", rank.share("batches"), "): ", e.what());
        }
        check(!complete.empty(), "[regenerate] internal: batch ", pending.front().index,
              " waits for answers that nothing generates");
        for (auto& [line, result] : complete)
          for (PendingBatch& batch : pending)
            if (!batch.lines.empty() && line >= batch.lines.front() && line <= batch.lines.back())
              batch.results[line] = std::move(result);
        continue;
      }
      write_front();
      const auto now = std::chrono::steady_clock::now();
      if (interactive || now - last_print >= std::chrono::seconds(10) || !more) {
        const double seconds = std::chrono::duration<double>(now - start).count();
        const int64_t line = std::min<int64_t>(reader.line(), total_lines);
        const double rate = new_tokens / std::max(seconds, 1e-9);
        const double lines_rate = (line - done_through) / std::max(seconds, 1e-9);
        std::cerr << (interactive ? "\r" : "") << who << "line " << line << "/" << total_lines
                  << ", " << written << " written, " << skipped.total() << " skipped, "
                  << new_tokens << " new tokens, " << std::fixed << std::setprecision(0) << rate
                  << " tokens/s, eta "
                  << duration(lines_rate > 0 ? (total_lines - line) / lines_rate : 0)
                  << (interactive && (more || !pending.empty()) ? "   " : "\n") << std::flush;
        last_print = now;
      }
    }
    if (input_error) std::rethrow_exception(input_error);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << std::fixed << std::setprecision(1) << who << output_path << ": " << written
              << " conversations (" << written - resumed << " this run, " << new_tokens
              << " new tokens in " << seconds << " s = " << new_tokens / std::max(seconds, 1e-9)
              << " tokens/s), " << truncated << " answers cut at --max-new-tokens\n";
    if (skipped.total() > 0)
      std::cout << who << "skipped " << skipped.total() << " lines:\n" << skipped.report(o->data);
    if (parts) {
      parts->mark_done();
      if (!parts->merge_if_all_done([&] { merge_regenerated(*parts, settings, o->out); }))
        std::cout << who << "part complete; the last rank to finish merges the parts into "
                  << o->out << "\n";
      return 0;
    }
    settings["finished"] = true;
    settings["conversations"] = written;
    settings["skipped"] = skipped.to_json();
    replace_file(settings_path, settings.dump(2) + "\n", "[regenerate]");
    return 0;
  };
}

}  // namespace tandem::cli
