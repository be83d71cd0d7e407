// tandem data inspect|stats: look at a dataset the way training will see it: tokens with their
// loss mask, and counts (documents, tokens, trained tokens, lengths, skipped lines by reason).
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>

#include "tandem/cli/commands.h"
#include "tandem/core/error.h"
#include "tandem/data/data_files.h"
#include "tandem/data/datasets.h"
#include "tandem/data/heldout_split.h"
#include "tandem/data/token_cache.h"
#include "tandem/text/tokenizer.h"

namespace tandem::cli {

namespace {

struct DataCommandOptions {
  std::vector<std::string> data;  // files or globs
  std::string format = "conversations";
  std::string tokenizer;
  std::string chat_template = "auto";
  std::string template_kwargs;
  std::string old_template;  // --template: renamed --chat-template
  int64_t max_length = 0;
  bool last_turn_only = false;
  bool no_reasoning_loss = false;
  std::string on_error = "fail";
  std::string unknown_roles = "error";
  int64_t vocab_size = 0;
  std::string cache_dir;
  bool no_cache = false;
  std::vector<std::string> columns;  // FIELD=COLUMN
  double heldout_fraction = 0;
  uint64_t heldout_seed = 0;
  std::string side = "train";
  // inspect
  int64_t index = 0;
  int64_t count = 1;
  std::string color = "auto";
  bool show_ids = false;
};

// Everything a subcommand reads: the tokenizer, the options, and the documents (cached formats)
// or the rollout samples.
struct LoadedData {
  std::vector<std::string> paths;  // --data expanded
  std::string described;           // the files in one line
  std::optional<Tokenizer> tokenizer;
  DatasetOptions options;
  DataFormat format = DataFormat::conversations;
  std::optional<TokenizedDataset> dataset;   // conversations, pretokenized, preference
  std::vector<RolloutSample> rollouts;       // rollout
  std::vector<TokenizedFile> rollout_files;  // rollout: each file's counts (no cache)
};

// Fills `out` in place: out.options points at out.tokenizer.
void load(const DataCommandOptions& cli, LoadedData& out) {
  std::vector<WeightedPath> entries;
  for (const std::string& path : cli.data) entries.push_back({path, 1.0});
  out.paths = paths_of(expand_data_files(entries, "--data"));
  out.described = describe_files(out.paths);
  out.format = parse_data_format(cli.format);
  if (!cli.tokenizer.empty())
    out.tokenizer = std::filesystem::is_directory(cli.tokenizer)
                        ? Tokenizer::from_dir(cli.tokenizer)
                        : Tokenizer::from_file(cli.tokenizer);
  check(
      out.tokenizer || out.format == DataFormat::pretokenized || out.format == DataFormat::rollout,
      "[data] --format ", cli.format, " needs --tokenizer");
  out.options.tokenizer = out.tokenizer ? &*out.tokenizer : nullptr;
  check(cli.old_template.empty(),
        "[data] --template is now --chat-template (the same spelling as the other commands)");
  out.options.chat_template = cli.chat_template;
  out.options.template_kwargs = cli.template_kwargs;
  if (out.tokenizer)  // reject an unknown name or a broken template for every format
    ChatTemplate::resolve(cli.chat_template,
                          std::filesystem::path(out.tokenizer->path()).parent_path().string(),
                          cli.template_kwargs);
  out.options.max_length = cli.max_length;
  out.options.last_turn_only = cli.last_turn_only;
  out.options.train_reasoning = !cli.no_reasoning_loss;
  out.options.on_error = parse_on_error(cli.on_error);
  out.options.unknown_roles = parse_unknown_roles(cli.unknown_roles);
  out.options.vocab_size = cli.vocab_size;
  check(cli.heldout_fraction >= 0 && cli.heldout_fraction < 1,
        "[data] --heldout-fraction must lie in [0, 1), not ", cli.heldout_fraction);
  check(cli.side == "train" || cli.side == "heldout",
        "[data] --side must be train or heldout, not '", cli.side, "'");
  check(cli.heldout_fraction > 0 || cli.side == "train",
        "[data] --side heldout needs --heldout-fraction");
  out.options.heldout = {cli.heldout_fraction, cli.heldout_seed, cli.side == "heldout"};
  for (const std::string& rename : cli.columns) {
    const size_t equals = rename.find('=');
    check(equals != std::string::npos && equals > 0 && equals + 1 < rename.size(),
          "[data] --column ", rename, ": expected FIELD=COLUMN, e.g. messages=conversation");
    out.options.columns.emplace_back(rename.substr(0, equals), rename.substr(equals + 1));
  }
  if (out.format == DataFormat::rollout) {
    for (const std::string& path : out.paths) {
      RolloutStream stream(path, out.options);
      RolloutSample sample;
      TokenizedFile file;
      file.path = path;
      file.first_document = static_cast<int64_t>(out.rollouts.size());
      while (stream.next(sample)) out.rollouts.push_back(std::move(sample));
      file.documents = static_cast<int64_t>(out.rollouts.size()) - file.first_document;
      file.skipped = stream.skipped();
      file.lines = file.documents + file.skipped.total();
      file.passed_over = stream.passed_over();
      out.rollout_files.push_back(std::move(file));
    }
  } else {
    out.dataset =
        TokenizedDataset::open(out.paths, out.format, out.options, {!cli.no_cache, cli.cache_dir});
  }
}

const std::vector<TokenizedFile>& files_of(const LoadedData& data) {
  return data.dataset ? data.dataset->files() : data.rollout_files;
}

// A token's text made printable: newlines and tabs as \n and \t, other control bytes and
// invalid UTF-8 (a token holding part of a character) as \xNN.
std::string printable(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const auto byte = static_cast<uint8_t>(text[i]);
    size_t length = byte < 0x80           ? 1
                    : (byte >> 5) == 0x6  ? 2
                    : (byte >> 4) == 0xE  ? 3
                    : (byte >> 3) == 0x1E ? 4
                                          : 0;
    bool valid = length > 0 && i + length <= text.size();
    for (size_t k = 1; valid && k < length; ++k)
      valid = (static_cast<uint8_t>(text[i + k]) & 0xC0) == 0x80;
    if (!valid || (length == 1 && (byte < 0x20 || byte == 0x7F))) {
      if (byte == '\n') {
        out += "\\n";
      } else if (byte == '\t') {
        out += "\\t";
      } else {
        static const char* hex = "0123456789abcdef";
        out += "\\x";
        out += hex[byte >> 4];
        out += hex[byte & 0xF];
      }
      ++i;
    } else {
      out.append(text, i, length);
      i += length;
    }
  }
  return out;
}

std::string token_text(const LoadedData& data, int32_t id) {
  if (!data.tokenizer) return "<" + std::to_string(id) + ">";
  if (id < 0 || id >= data.tokenizer->vocab_size()) return "<" + std::to_string(id) + "?>";
  return printable(data.tokenizer->decode({id}));
}

void print_document(const LoadedData& data, const TokenizedDocument& document,
                    const std::string& label, bool color, bool show_ids, std::ostream& out) {
  int64_t trained = 0;
  for (uint8_t m : document.loss_mask) trained += m;
  out << "--- " << label << " (" << document.source << "): " << document.ids.size() << " tokens, "
      << trained << " trained ---\n";
  if (show_ids) {
    out << "  pos      id  loss  token\n";
    for (size_t t = 0; t < document.ids.size(); ++t)
      out << std::setw(5) << t << std::setw(8) << document.ids[t] << std::setw(6)
          << int{document.loss_mask[t]} << "  " << token_text(data, document.ids[t]) << "\n";
    return;
  }
  // Trained tokens: green background on a terminal (two shades alternating, so that token
  // boundaries show), [brackets] otherwise.
  bool shade = false;
  for (size_t t = 0; t < document.ids.size(); ++t) {
    const std::string text = token_text(data, document.ids[t]);
    if (!document.loss_mask[t]) {
      out << text;
    } else if (color) {
      out << (shade ? "\x1b[30;102m" : "\x1b[30;42m") << text << "\x1b[0m";
      shade = !shade;
    } else {
      out << "[" << text << "]";
    }
  }
  out << "\n";
}

int run_inspect(const DataCommandOptions& cli) {
  LoadedData data;
  load(cli, data);
  check(cli.color == "auto" || cli.color == "always" || cli.color == "never",
        "[data] --color must be auto, always or never, not '", cli.color, "'");
  const bool color = cli.color == "always" || (cli.color == "auto" && ::isatty(STDOUT_FILENO));
  const int64_t records =
      data.dataset ? data.dataset->num_records() : static_cast<int64_t>(data.rollouts.size());
  check(cli.index >= 0 && cli.index < records, "[data] --index ", cli.index, ": ", data.described,
        " has ", records, " good records (0..", records - 1, ")");
  check(cli.count >= 1, "[data] --count must be at least 1");
  std::cout << data.described << ": " << records << " " << cli.format << " records\n";
  for (const TokenizedFile& file : files_of(data))
    if (!file.cache_path.empty())
      std::cout << "  " << file.path << ": cache " << (file.from_cache ? "hit" : "built") << ": "
                << file.cache_path << "\n";
  const int64_t end = std::min(records, cli.index + cli.count);
  for (int64_t r = cli.index; r < end; ++r) {
    if (data.format == DataFormat::preference) {
      const PreferencePair pair = data.dataset->pair(r);
      print_document(data, pair.chosen, "record " + std::to_string(r) + " chosen", color,
                     cli.show_ids, std::cout);
      print_document(data, pair.rejected, "record " + std::to_string(r) + " rejected", color,
                     cli.show_ids, std::cout);
    } else if (data.format == DataFormat::rollout) {
      const RolloutSample& sample = data.rollouts[r];
      std::ostringstream label;
      label << "record " << r;
      if (sample.advantage) label << ", advantage " << *sample.advantage;
      if (sample.reward) label << ", reward " << *sample.reward;
      if (!sample.group_id.empty()) label << ", group " << sample.group_id;
      print_document(data, sample.document(), label.str(), color, cli.show_ids, std::cout);
    } else {
      print_document(data, data.dataset->document(r), "record " + std::to_string(r), color,
                     cli.show_ids, std::cout);
    }
  }
  return 0;
}

int run_stats(const DataCommandOptions& cli) {
  LoadedData data;
  load(cli, data);
  std::vector<int64_t> lengths;
  int64_t tokens = 0, trained = 0, lines = 0, skipped = 0, passed_over = 0;
  if (data.dataset) {
    const TokenizedDataset& dataset = *data.dataset;
    for (int64_t i = 0; i < dataset.size(); ++i) lengths.push_back(dataset.length(i));
    tokens = dataset.num_tokens();
    trained = dataset.num_trained_tokens();
  } else {
    for (const RolloutSample& s : data.rollouts) {
      lengths.push_back(static_cast<int64_t>(s.prompt_ids.size() + s.completion_ids.size()));
      trained += static_cast<int64_t>(s.completion_ids.size());
    }
    for (int64_t length : lengths) tokens += length;
  }
  for (const TokenizedFile& file : files_of(data)) {
    lines += file.lines;
    skipped += file.skipped.total();
    passed_over += file.passed_over;
  }
  const int64_t documents = static_cast<int64_t>(lengths.size());

  std::ostringstream out;
  out << (data.paths.size() > 1 ? "files       " : "file        ") << data.described << " ("
      << cli.format;
  if (data.format == DataFormat::conversations || data.format == DataFormat::preference)
    out << ", template " << cli.chat_template;
  if (cli.max_length > 0) out << ", max_length " << cli.max_length;
  if (cli.last_turn_only) out << ", last turn only";
  if (cli.no_reasoning_loss) out << ", no loss on reasoning";
  if (cli.heldout_fraction > 0)
    out << ", " << cli.side << " side of held-out fraction " << cli.heldout_fraction << " seed "
        << cli.heldout_seed;
  out << ", on_error " << cli.on_error << ")\n";
  for (const TokenizedFile& file : files_of(data)) {
    if (data.paths.size() > 1)
      out << "  " << file.path << ": " << file.lines - file.skipped.total() << " good records, "
          << file.skipped.total() << " skipped"
          << (cli.heldout_fraction > 0 ? ", " + std::to_string(file.passed_over) + " passed over"
                                       : "")
          << "\n";
    if (!file.cache_path.empty())
      out << (data.paths.size() > 1 ? "    cache " : "cache       ")
          << (file.from_cache ? "hit" : "built") << ": " << file.cache_path << "\n";
  }
  out << "records     " << lines << " (" << lines - skipped << " good, " << skipped << " skipped";
  if (cli.heldout_fraction > 0)
    out << "; " << passed_over << " more on the " << (cli.side == "train" ? "held-out" : "train")
        << " side, passed over";
  out << ")\n";
  out << "documents   " << documents << "\n";
  out << "tokens      " << tokens;
  if (documents > 0)
    out << " (mean " << std::fixed << std::setprecision(1)
        << static_cast<double>(tokens) / documents << ", min "
        << *std::min_element(lengths.begin(), lengths.end()) << ", max "
        << *std::max_element(lengths.begin(), lengths.end()) << ")";
  out << "\n";
  out << "trained     " << trained;
  if (tokens > 0)
    out << " (" << std::fixed << std::setprecision(1) << 100.0 * trained / tokens << "% of tokens)";
  out << "\n";
  out << "skipped     " << skipped << "\n";
  for (const TokenizedFile& file : files_of(data)) out << file.skipped.report(file.path);

  if (documents > 0) {
    // Power-of-two bins [2^k, 2^(k+1)) from the shortest document to the longest.
    const auto bin_of = [](int64_t length) {
      int k = 0;
      while ((int64_t{2} << k) <= length) ++k;
      return k;
    };
    const int first = bin_of(*std::min_element(lengths.begin(), lengths.end()));
    const int last = bin_of(*std::max_element(lengths.begin(), lengths.end()));
    std::vector<int64_t> counts(last - first + 1, 0);
    for (int64_t length : lengths) ++counts[bin_of(length) - first];
    const int64_t most = *std::max_element(counts.begin(), counts.end());
    out << "length histogram (tokens per document)\n";
    for (int k = first; k <= last; ++k) {
      const int64_t count = counts[k - first];
      out << "  [" << std::setw(7) << (int64_t{1} << k) << ", " << std::setw(7) << (int64_t{2} << k)
          << ")  " << std::setw(8) << count << "  "
          << std::string(static_cast<size_t>((count * 40 + most - 1) / most), '#') << "\n";
    }
  }
  std::cout << out.str();
  return 0;
}

void add_common_options(CLI::App* command, DataCommandOptions& options) {
  command
      ->add_option("--data", options.data,
                   "the data: files (JSONL, JSON arrays or Parquet) or globs, read as one "
                   "dataset in the order given")
      ->required();
  command
      ->add_option("--format", options.format, "conversations, pretokenized, preference or rollout")
      ->capture_default_str();
  command->add_option("--tokenizer", options.tokenizer,
                      "directory holding tokenizer.json, or the file (needed to tokenize; "
                      "optional for pretokenized and rollout, where it shows token text)");
  add_chat_template_options(*command, options.chat_template, options.template_kwargs);
  command->add_option("--template", options.old_template, "renamed: --chat-template")->group("");
  command
      ->add_option("--max-length", options.max_length,
                   "longest document in tokens; longer ones are bad input (0: no limit)")
      ->capture_default_str();
  command->add_flag("--no-reasoning-loss", options.no_reasoning_loss,
                    "conversations: the loss skips each assistant turn's reasoning "
                    "(data.train_reasoning: false)");
  command->add_flag("--last-turn-only", options.last_turn_only,
                    "conversations: train the last assistant turn only");
  command
      ->add_option("--unknown-roles", options.unknown_roles,
                   "a message with an unknown role: error (a bad line), skip_turn (leave the "
                   "message out) or skip_conversation (skip the line, counted)")
      ->capture_default_str();
  command
      ->add_option("--on-error", options.on_error,
                   "bad lines: fail (error naming file:line) or skip (count by reason)")
      ->capture_default_str();
  command->add_option("--vocab-size", options.vocab_size,
                      "ids must lie in [0, N) (default: the tokenizer's vocabulary)");
  command->add_option(
      "--cache-dir", options.cache_dir,
      "token cache directory (default: $TANDEM_CACHE/data or ~/.cache/tandem/data)");
  command->add_flag("--no-cache", options.no_cache,
                    "tokenize without reading or writing the cache");
  command->add_option("--column", options.columns,
                      "FIELD=COLUMN: read a field of the format from another key or Parquet "
                      "column (data.columns), e.g. messages=conversation; repeatable");
  command
      ->add_option("--heldout-fraction", options.heldout_fraction,
                   "read one side of a held-out split, as data.heldout_fraction does (0: "
                   "every record)")
      ->capture_default_str();
  command
      ->add_option("--heldout-seed", options.heldout_seed, "the split's seed (data.heldout_seed)")
      ->capture_default_str();
  command
      ->add_option("--side", options.side,
                   "with --heldout-fraction: train (what training reads) or heldout")
      ->capture_default_str();
}

struct SplitOptions {
  std::string data, train, heldout, on_error = "fail";
  double fraction = 0.05;
  uint64_t seed = 0;
};

int run_split(const SplitOptions& cli) {
  const SplitCounts counts = split_records(cli.data, cli.fraction, cli.seed, cli.train, cli.heldout,
                                           parse_on_error(cli.on_error));
  const int64_t total = counts.train + counts.heldout;
  const double percent =
      total > 0 ? 100.0 * static_cast<double>(counts.heldout) / static_cast<double>(total) : 0.0;
  std::cout << "split " << cli.data << " (held-out fraction " << cli.fraction << ", seed "
            << cli.seed << ")\n"
            << "train    " << cli.train << ": " << counts.train << " records\n"
            << "heldout  " << cli.heldout << ": " << counts.heldout << " records (" << percent
            << "%)\n";
  if (counts.skipped.total() > 0)
    std::cout << "skipped  " << counts.skipped.total() << " bad records\n"
              << counts.skipped.report(cli.data);
  return 0;
}

}  // namespace

Runner add_data_command(CLI::App& root) {
  auto options = std::make_shared<DataCommandOptions>();
  CLI::App* data = root.add_subcommand("data", "inspect a dataset and print its statistics");
  data->require_subcommand(1);

  CLI::App* inspect = data->add_subcommand(
      "inspect",
      "print documents token by token with the loss mask shown (trained tokens in "
      "[brackets], or green on a terminal)");
  add_common_options(inspect, *options);
  inspect->add_option("--index", options->index, "first record (good line) to print, 0-based")
      ->capture_default_str();
  inspect->add_option("--count", options->count, "records to print")->capture_default_str();
  inspect->add_option("--color", options->color, "auto (when stdout is a terminal), always, never")
      ->capture_default_str();
  inspect->add_flag("--ids", options->show_ids, "one token per line: position, id, loss, text");

  CLI::App* stats = data->add_subcommand(
      "stats", "documents, tokens, trained tokens, a length histogram, skipped lines by reason");
  add_common_options(stats, *options);

  auto split_options = std::make_shared<SplitOptions>();
  CLI::App* split = data->add_subcommand(
      "split",
      "split a data file (JSONL, JSON array or Parquet) into train and held-out JSONL files, "
      "each record's side decided by a hash of the seed and the record alone");
  split->add_option("--data", split_options->data, "the file to split")
      ->required()
      ->check(CLI::ExistingFile);
  split
      ->add_option("--heldout-fraction", split_options->fraction,
                   "the share of records held out, in (0, 1)")
      ->capture_default_str();
  split->add_option("--seed", split_options->seed, "another seed draws another split")
      ->capture_default_str();
  split->add_option("--train", split_options->train, "the train part (JSONL; must not exist)")
      ->required();
  split
      ->add_option("--heldout", split_options->heldout, "the held-out part (JSONL; must not exist)")
      ->required();
  split
      ->add_option(
          "--on-error", split_options->on_error,
          "bad records: fail (error naming file and record) or skip (count, in neither part)")
      ->capture_default_str();

  return [options, inspect, stats, split_options, split]() {
    if (inspect->parsed()) return run_inspect(*options);
    if (stats->parsed()) return run_stats(*options);
    if (split->parsed()) return run_split(*split_options);
    return 1;
  };
}

}  // namespace tandem::cli
