#include "tandem/text/normalizer_sequence.h"

#include <nlohmann/json.hpp>

#include "tandem/core/error.h"
#include "tandem/text/component_config.h"

namespace tandem {

namespace {

std::string string_field(const nlohmann::json& step, const char* field, const std::string& where) {
  check(step.contains(field) && step[field].is_string(), where, ".", field, " must be a string");
  return step[field].get<std::string>();
}

}  // namespace

NormalizerSequence::NormalizerSequence(const nlohmann::json& config, const std::string& where) {
  if (config.is_null()) return;
  if (component_type(config) == "Sequence") {
    check(config.contains("normalizers") && config["normalizers"].is_array(), where,
          ".normalizers must be an array");
    const auto& steps = config["normalizers"];
    for (size_t i = 0; i < steps.size(); ++i)
      add_step(steps[i], where + ".normalizers[" + std::to_string(i) + "]");
    return;
  }
  add_step(config, where);
}

void NormalizerSequence::add_step(const nlohmann::json& config, const std::string& where) {
  check(config.is_object(), where, " must be an object");
  const std::string type = component_type(config);
  Step step;
  if (type == "NFC") {
    step.kind = Step::kNFC;
  } else if (type == "NFKC") {
    step.kind = Step::kNFKC;
  } else if (type == "Prepend") {
    step.kind = Step::kPrepend;
    step.text = string_field(config, "prepend", where);
  } else if (type == "Replace") {
    step.kind = Step::kReplace;
    step.text = string_field(config, "content", where);
    step.pattern = read_pattern(config, where);
  } else {
    throw Error(where, ": normalizer type '", type,
                "' is not supported (supported: NFC, NFKC, Prepend, Replace, a Sequence of them)");
  }
  steps_.push_back(std::move(step));
}

bool NormalizerSequence::apply_step(const Step& step, const Segment& in, AlignedText& out) const {
  switch (step.kind) {
    case Step::kNFC:
    case Step::kNFKC:
      return normalize(step.kind == Step::kNFC ? NormalForm::kNFC : NormalForm::kNFKC, in.text,
                       in.alignments, in.origin, out);
    case Step::kPrepend:
      if (in.text.empty()) return false;
      prepend_aligned(in, step.text, out);
      return true;
    case Step::kReplace: {
      TextRanges matches;
      step.pattern->find_all(in.text, matches);
      // An empty regex match replaces nothing here (HF would insert the content there): the one
      // known difference, documented in docs/data.md.
      std::erase_if(matches, [](const auto& m) { return m.first == m.second; });
      if (matches.empty()) return false;
      replace_ranges(in, matches, step.text, out);
      return true;
    }
  }
  return false;
}

Segment NormalizerSequence::apply(const Segment& segment, AlignedText& storage) const {
  Segment current = segment;
  AlignedText next;
  for (const Step& step : steps_) {
    if (!apply_step(step, current, next)) continue;
    std::swap(storage, next);
    current = Segment::of(storage, segment.origin);
  }
  return current;
}

std::string NormalizerSequence::apply(std::string_view text) const {
  AlignedText storage;
  return std::string(apply(Segment{text, nullptr, 0}, storage).text);
}

}  // namespace tandem
