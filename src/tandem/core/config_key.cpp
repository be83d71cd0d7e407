#include "tandem/core/config_key.h"

#include <charconv>
#include <cmath>
#include <sstream>

namespace tandem {

namespace {

// A number as errors print it (the stream's default: 0.2, 1e-08, inf).
std::string number_text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// A default as the docs show it: doubles in their shortest round-trip form, with the exponent's
// leading zeros dropped (3e-4, not 3e-04).
std::string shortest(double value) {
  char text[64];
  const auto result = std::to_chars(text, text + sizeof(text), value);
  std::string out(text, result.ptr);
  const size_t exponent = out.find_first_of("eE");
  if (exponent != std::string::npos) {
    size_t digits = exponent + 1;
    if (digits < out.size() && (out[digits] == '-' || out[digits] == '+')) ++digits;
    while (digits + 1 < out.size() && out[digits] == '0') out.erase(digits, 1);
  }
  return out;
}

std::vector<const KeyGroup*>& registered_groups() {
  static std::vector<const KeyGroup*> groups;
  return groups;
}

}  // namespace

std::string IntRange::text() const {
  if (max == std::numeric_limits<int64_t>::max()) return ">= " + std::to_string(min);
  return "in " + std::to_string(min) + ".." + std::to_string(max);
}

bool NumberRange::contains(double value) const {
  if (!std::isfinite(value)) return false;
  const bool above_min = min_open ? value > min : value >= min;
  const bool below_max = max_open ? value < max : value <= max;
  return above_min && below_max;
}

std::string NumberRange::text() const {
  if (std::isinf(max)) return (min_open ? "> " : ">= ") + number_text(min);
  return std::string("in ") + (min_open ? "(" : "[") + number_text(min) + ", " + number_text(max) +
         (max_open ? ")" : "]");
}

KeyGroup::KeyGroup(std::string section, std::string component)
    : section_(std::move(section)), component_(std::move(component)) {
  registered_groups().push_back(this);
}

const std::vector<const KeyGroup*>& key_groups() { return registered_groups(); }

KeyBase::KeyBase(KeyGroup& group, KeyInfo info) : info_(std::move(info)) {
  info_.section = group.section();
  group.keys_.push_back(&info_);
}

Config KeyBase::section(const Config& config) const { return config.root().section(info_.section); }

std::string KeyBase::where(const Config& config) const { return section(config).where(info_.name); }

void KeyBase::expect_declared(bool as_declared, const char* read) const {
  check(as_declared, "[config] internal: ", info_.path(), " is not declared for ", read);
}

KeyInfo key_info(std::string name, std::string type, std::string range,
                 std::vector<std::string> choices, std::string doc) {
  KeyInfo info;
  info.name = std::move(name);
  info.type = std::move(type);
  info.range = std::move(range);
  info.choices = std::move(choices);
  info.doc = std::move(doc);
  return info;
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

IntKey::IntKey(KeyGroup& group, std::string name, Fallback<int64_t> fallback, IntRange range,
               std::string doc)
    : Key(group, key_info(std::move(name), "integer", range.text(), {}, std::move(doc)), fallback,
          std::to_string(fallback.value)),
      range_(range) {}

int64_t IntKey::get(const Config& section, const std::optional<int64_t>& fallback) const {
  const int64_t value = section.get_int(info_.name, fallback);
  check(range_.contains(value), "[config] ", section.where(info_.name), ": must be ", range_.text(),
        ", got ", value);
  return value;
}

NumberKey::NumberKey(KeyGroup& group, std::string name, Fallback<double> fallback,
                     NumberRange range, std::string doc)
    : Key(group, key_info(std::move(name), "number", range.text(), {}, std::move(doc)), fallback,
          shortest(fallback.value)),
      range_(range) {}

double NumberKey::get(const Config& section, const std::optional<double>& fallback) const {
  const double value = section.get_double(info_.name, fallback);
  // One-sided ranges say "finite" too: an infinite value is as wrong as one below the bound.
  check(range_.contains(value), "[config] ", section.where(info_.name), ": must be ",
        std::isinf(range_.max) ? "a finite number " : "", range_.text(), ", got ", value);
  return value;
}

BoolKey::BoolKey(KeyGroup& group, std::string name, Fallback<bool> fallback, std::string doc)
    : Key(group, key_info(std::move(name), "true/false", "", {}, std::move(doc)), fallback,
          fallback.value ? "true" : "false") {}

bool BoolKey::get(const Config& section, const std::optional<bool>& fallback) const {
  return section.get_bool(info_.name, fallback);
}

StringKey::StringKey(KeyGroup& group, std::string name, Fallback<std::string> fallback,
                     std::string doc)
    : Key(group, key_info(std::move(name), "string", "", {}, std::move(doc)), fallback,
          fallback.value) {}

std::string StringKey::get(const Config& section,
                           const std::optional<std::string>& fallback) const {
  return section.get_string(info_.name, fallback);
}

PathListKey::PathListKey(KeyGroup& group, std::string name,
                         Fallback<std::vector<WeightedPath>> fallback, std::string doc)
    : Key(group, key_info(std::move(name), "path or list", "", {}, std::move(doc)), fallback,
          fallback.value.empty() ? std::string() : fallback.value.front().path) {}

std::vector<WeightedPath> PathListKey::get(
    const Config& section, const std::optional<std::vector<WeightedPath>>& fallback) const {
  return section.get_path_list(info_.name, fallback);
}

StringMapKey::StringMapKey(KeyGroup& group, std::string name, std::string doc)
    : Key(group, key_info(std::move(name), "mapping", "", {}, std::move(doc)),
          std::vector<std::pair<std::string, std::string>>{}, "{}") {}

std::vector<std::pair<std::string, std::string>> StringMapKey::get(
    const Config& section,
    const std::optional<std::vector<std::pair<std::string, std::string>>>&) const {
  return section.get_string_map(info_.name);
}

IntListKey::IntListKey(KeyGroup& group, std::string name, Fallback<std::vector<int64_t>> fallback,
                       IntRange range, std::string doc)
    : Key(group, key_info(std::move(name), "integer list", range.text(), {}, std::move(doc)),
          fallback,
          [&] {
            std::string shown;
            for (const int64_t value : fallback.value)
              shown += (shown.empty() ? "" : ", ") + std::to_string(value);
            return "[" + shown + "]";
          }()),
      range_(range) {}

std::vector<int64_t> IntListKey::get(const Config& section,
                                     const std::optional<std::vector<int64_t>>& fallback) const {
  const std::vector<int64_t> values = section.get_int_list(info_.name, fallback);
  for (size_t i = 0; i < values.size(); ++i)
    check(range_.contains(values[i]), "[config] ", section.where(info_.name), ": entry ", i,
          " must be ", range_.text(), ", got ", values[i]);
  return values;
}

namespace {

EnumKey<std::string>::Choices named_by_themselves(const std::vector<std::string>& names) {
  EnumKey<std::string>::Choices choices;
  for (const std::string& name : names) choices.emplace_back(name, name);
  return choices;
}

}  // namespace

ChoiceKey::ChoiceKey(KeyGroup& group, std::string name, Fallback<std::string> fallback,
                     const std::vector<std::string>& choices, std::string doc)
    : EnumKey(group, std::move(name), std::move(fallback), named_by_themselves(choices),
              std::move(doc)) {}

}  // namespace tandem
