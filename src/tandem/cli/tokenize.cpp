// tandem tokenize: encode text (or decode ids) with an HF tokenizer.json, to inspect what the data
// pipeline feeds a model and to compare with HF `tokenizers`.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tandem/cli/commands.h"
#include "tandem/core/error.h"
#include "tandem/text/tokenizer.h"

namespace tandem::cli {

namespace {

struct TokenizeOptions {
  std::string tokenizer;  // directory holding tokenizer.json, or the file itself
  std::string text;
  std::string file;
  std::string decode;  // "1,2,3"
  bool add_special = false;
  bool json = false;
};

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "[tokenize] --file ", path, ": cannot open the file");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

int run_decode(const Tokenizer& tokenizer, const TokenizeOptions& options) {
  std::vector<int32_t> ids;
  for (int64_t id : parse_int_list(options.decode, "--decode")) {
    check(id >= 0 && id <= std::numeric_limits<int32_t>::max(), "[tokenize] --decode: id ", id,
          " is out of range");
    ids.push_back(static_cast<int32_t>(id));
  }
  const std::string text = tokenizer.decode(ids);
  if (options.json)
    std::cout << nlohmann::json({{"ids", ids}, {"text", text}}).dump() << "\n";
  else
    std::cout << text << "\n";
  return 0;
}

int run_encode(const Tokenizer& tokenizer, const TokenizeOptions& options) {
  const std::string text = options.file.empty() ? options.text : read_text_file(options.file);
  const Encoding encoding = tokenizer.encode_with_offsets(text, options.add_special);
  std::vector<std::string> tokens;
  for (int32_t id : encoding.ids) tokens.push_back(tokenizer.id_to_token(id));
  if (options.json) {
    std::cout << nlohmann::json(
                     {{"ids", encoding.ids}, {"tokens", tokens}, {"offsets", encoding.offsets}})
                     .dump()
              << "\n";
    return 0;
  }
  std::cout << encoding.ids.size() << " tokens\nids: ";
  for (size_t i = 0; i < encoding.ids.size(); ++i) std::cout << (i ? "," : "") << encoding.ids[i];
  std::cout << "\n";
  // One line per token: id, the vocabulary spelling, and the input bytes it covers.
  for (size_t i = 0; i < encoding.ids.size(); ++i) {
    const auto [begin, end] = encoding.offsets[i];
    std::cout << encoding.ids[i] << "\t" << nlohmann::json(tokens[i]).dump() << "\t[" << begin
              << ", " << end << ")\t" << nlohmann::json(text.substr(begin, end - begin)).dump()
              << "\n";
  }
  return 0;
}

int run_tokenize(const TokenizeOptions& options) {
  const Tokenizer tokenizer = std::filesystem::is_directory(options.tokenizer)
                                  ? Tokenizer::from_dir(options.tokenizer)
                                  : Tokenizer::from_file(options.tokenizer);
  if (!options.decode.empty()) return run_decode(tokenizer, options);
  return run_encode(tokenizer, options);
}

}  // namespace

Runner add_tokenize_command(CLI::App& root) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* command =
      root.add_subcommand("tokenize", "encode or decode text with an HF tokenizer.json");
  command
      ->add_option("--tokenizer", options->tokenizer,
                   "directory holding tokenizer.json, or the tokenizer.json file")
      ->required();
  CLI::Option* text = command->add_option("--text", options->text, "text to encode");
  CLI::Option* file = command->add_option("--file", options->file, "file whose text to encode");
  CLI::Option* decode =
      command->add_option("--decode", options->decode, "comma-separated ids to decode instead");
  text->excludes(file)->excludes(decode);
  file->excludes(decode);
  command->add_flag("--add-special", options->add_special,
                    "add the post-processor's special tokens (e.g. BOS)");
  command->add_flag("--json", options->json, "print JSON: ids, tokens, byte offsets");
  return [options, text, file, decode]() {
    check(text->count() + file->count() + decode->count() == 1,
          "[tokenize] give one of --text, --file or --decode");
    return run_tokenize(*options);
  };
}

}  // namespace tandem::cli
