#include "tandem/text/token_decoder.h"

#include <nlohmann/json.hpp>

#include "tandem/core/error.h"
#include "tandem/text/byte_level.h"
#include "tandem/text/component_config.h"
#include "tandem/text/pre_tokenizer.h"
#include "tandem/text/utf8.h"

namespace tandem {

namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

size_t count_field(const nlohmann::json& step, const char* field, const std::string& where) {
  if (!step.contains(field) || step[field].is_null()) return 0;
  check(step[field].is_number_unsigned(), where, ".", field, " must be a count");
  return step[field].get<size_t>();
}

// The characters of a valid UTF-8 string, each as its bytes.
std::vector<std::string_view> characters(std::string_view text) {
  std::vector<std::string_view> out;
  for (size_t pos = 0; pos < text.size();) {
    const size_t length = utf8::sequence_length(static_cast<unsigned char>(text[pos]));
    out.push_back(text.substr(pos, length));
    pos += length;
  }
  return out;
}

std::string replace_all(std::string_view text, std::string_view pattern, std::string_view with) {
  std::string out;
  size_t position = 0;
  for (size_t at = text.find(pattern); at != std::string_view::npos;
       at = text.find(pattern, position)) {
    out.append(text.substr(position, at - position));
    out.append(with);
    position = at + pattern.size();
  }
  out.append(text.substr(position));
  return out;
}

}  // namespace

int byte_fallback_value(std::string_view token) {
  // HF: six bytes "<0x..>" whose two middle characters Rust's u8::from_str_radix(_, 16) reads
  // (which takes a leading '+').
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return -1;
  const int high = hex_digit(token[3]), low = hex_digit(token[4]);
  if (token[3] == '+') return low;
  return high < 0 || low < 0 ? -1 : high * 16 + low;
}

TokenDecoder::TokenDecoder(const nlohmann::json& config, const std::string& where) {
  if (config.is_null()) return;
  null_ = false;
  if (component_type(config) == "Sequence") {
    check(config.contains("decoders") && config["decoders"].is_array(), where,
          ".decoders must be an array");
    const auto& steps = config["decoders"];
    for (size_t i = 0; i < steps.size(); ++i)
      add_step(steps[i], where + ".decoders[" + std::to_string(i) + "]");
    return;
  }
  add_step(config, where);
}

void TokenDecoder::add_step(const nlohmann::json& config, const std::string& where) {
  check(config.is_object(), where, " must be an object");
  const std::string type = component_type(config);
  Step step;
  if (type == "ByteLevel") {
    step.kind = Step::kByteLevel;
  } else if (type == "Replace") {
    step.kind = Step::kReplace;
    check(config.contains("content") && config["content"].is_string(), where,
          ".content must be a string");
    step.text = config["content"].get<std::string>();
    step.pattern = read_pattern(config, where);
  } else if (type == "ByteFallback") {
    step.kind = Step::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = Step::kFuse;
  } else if (type == "Strip") {
    step.kind = Step::kStrip;
    step.text = read_one_character(config, "content", where);
    step.start = count_field(config, "start", where);
    step.stop = count_field(config, "stop", where);
  } else if (type == "Metaspace") {
    step.kind = Step::kMetaspace;
    // The same settings, read by the same rules, as the Metaspace pre-tokenizer (HF decodes
    // with the pre-tokenizer's own struct).
    const MetaspaceSettings settings = MetaspaceSettings::read(config, where);
    step.text = settings.replacement;
    step.prepends = settings.prepend != MetaspaceSettings::kNever;
  } else {
    throw Error(where, ": decoder type '", type,
                "' is not supported (supported: ByteLevel, Replace, ByteFallback, Fuse, Strip, "
                "Metaspace, a Sequence of them)");
  }
  steps_.push_back(std::move(step));
}

void TokenDecoder::apply(const Step& step, std::vector<std::string>& tokens) {
  switch (step.kind) {
    case Step::kByteLevel: {
      std::string bytes;
      for (const std::string& token : tokens) {
        if (auto raw = byte_level::decode(token))
          bytes += *raw;
        else
          bytes += token;  // not byte-level spelled (e.g. a special token): its UTF-8 as is
      }
      tokens.assign(1, utf8::decode_lossy(bytes));
      return;
    }
    case Step::kReplace:
      for (std::string& token : tokens) {
        std::vector<Match> matches;
        step.pattern->find_all(token, matches);
        std::string out;
        size_t position = 0;
        for (const auto& [begin, end] : matches) {
          out.append(token, position, begin - position);
          out.append(step.text);
          position = end;
        }
        out.append(token, position);
        token = std::move(out);
      }
      return;
    case Step::kByteFallback: {
      std::vector<std::string> out;
      std::string run;
      size_t run_tokens = 0;
      auto flush = [&] {
        if (run_tokens == 0) return;
        if (!utf8::find_invalid(run))
          out.push_back(run);
        else
          for (size_t i = 0; i < run_tokens; ++i) out.emplace_back("\xEF\xBF\xBD");  // U+FFFD
        run.clear();
        run_tokens = 0;
      };
      for (std::string& token : tokens) {
        const int byte = byte_fallback_value(token);
        if (byte >= 0) {
          run += static_cast<char>(byte);
          ++run_tokens;
          continue;
        }
        flush();
        out.push_back(std::move(token));
      }
      flush();
      tokens = std::move(out);
      return;
    }
    case Step::kFuse: {
      std::string all;
      for (const std::string& token : tokens) all += token;
      tokens.assign(1, std::move(all));
      return;
    }
    case Step::kStrip:
      for (std::string& token : tokens) {
        const auto chars = characters(token);
        size_t begin = 0, end = chars.size();
        while (begin < step.start && begin < chars.size() && chars[begin] == step.text) ++begin;
        for (size_t n = 0; n < step.stop && end > begin && chars[end - 1] == step.text; ++n) --end;
        std::string out;
        for (size_t i = begin; i < end; ++i) out.append(chars[i]);
        token = std::move(out);
      }
      return;
    case Step::kMetaspace:
      // HF 0.23: the replacement becomes a space, except in the first token, where it is
      // dropped (every occurrence, not only the leading one) unless prepend_scheme is never.
      for (size_t i = 0; i < tokens.size(); ++i)
        tokens[i] = replace_all(tokens[i], step.text, i == 0 && step.prepends ? "" : " ");
      return;
  }
}

std::string TokenDecoder::decode(std::vector<std::string> tokens) const {
  if (null_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  for (const Step& step : steps_) apply(step, tokens);
  std::string out;
  for (const std::string& token : tokens) out += token;
  return out;
}

}  // namespace tandem
