#pragma once
// One key of the run config, declared once (core/config_schema.cpp): its section, name, type,
// default (or required), range or allowed values, and one line of doc. Components read their
// keys through the declarations (`keys::training::steps.read(config)`), so a default and a range
// live only there, and a value out of range is an error naming the file, the key and the range.
// The key lists of `tandem train --help`, of the objectives and of docs/training.md are printed
// from the same declarations (cli/config_reference.h).
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tandem/core/config.h"
#include "tandem/core/error.h"

namespace tandem {

/// No default: the config must set the key.
struct Required {};
/// A default that depends on other values: the reader passes it (`read(config, fallback)`);
/// `text` says how it is chosen.
struct Computed {
  std::string text;
};
/// No default: unset means "not given" (read with `find`); `text` says what happens then.
struct Unset {
  std::string text;
};

/// How a key is found when the config does not set it: required, a declared value, computed by
/// the reader, or left unset.
template <typename T>
struct Fallback {
  enum class Kind { Required, Value, Computed, Unset };
  Kind kind;
  T value{};
  std::string text;  // Computed, Unset: how it is decided

  Fallback(Required) : kind(Kind::Required) {}                                 // NOLINT
  Fallback(Computed how) : kind(Kind::Computed), text(std::move(how.text)) {}  // NOLINT
  Fallback(Unset how) : kind(Kind::Unset), text(std::move(how.text)) {}        // NOLINT
  template <typename U, typename = std::enable_if_t<std::is_convertible_v<U&&, T>>>
  Fallback(U&& value) : kind(Kind::Value), value(std::forward<U>(value)) {}  // NOLINT
};

/// Inclusive bounds of an integer key (or of each element of an integer list).
struct IntRange {
  int64_t min = std::numeric_limits<int64_t>::min();
  int64_t max = std::numeric_limits<int64_t>::max();

  static IntRange between(int64_t min, int64_t max) { return {min, max}; }
  static IntRange at_least(int64_t min) { return {min}; }
  bool contains(int64_t value) const { return value >= min && value <= max; }
  /// "in 1..64", ">= 0": what a value must be.
  std::string text() const;
};

/// Bounds of a number key: always finite, each bound inclusive or not.
struct NumberRange {
  double min = 0;
  double max = std::numeric_limits<double>::infinity();
  bool min_open = false, max_open = false;

  static NumberRange at_least(double min) { return {min}; }
  static NumberRange above(double min) {
    return {min, std::numeric_limits<double>::infinity(), true};
  }
  static NumberRange closed(double min, double max) { return {min, max}; }
  static NumberRange closed_open(double min, double max) { return {min, max, false, true}; }
  bool contains(double value) const;
  /// "in [0, 1)", "> 0": the bounds (a value is finite as well).
  std::string text() const;
};

/// A key's declaration as the help and the docs show it.
struct KeyInfo {
  std::string section;  // "training", "loss", ...
  std::string name;
  std::string type;   // "integer", "number", "true/false", "string", "integer list", "choice"
  std::string range;  // integers, numbers, list entries: "in 1..64", ">= 0", "in [0, 1)", "> 0"
  std::vector<std::string> choices;  // a choice's names
  std::string doc;
  std::string fallback;  // "1024", "cosine", "required", or how an unset key is decided
  bool required = false;
  bool shown_verbatim = false;  // fallback is a value (printed as code), not a description
  std::string path() const { return section + "." + name; }
};

/// A KeyInfo of these fields (its section and default are set when the key is declared).
KeyInfo key_info(std::string name, std::string type, std::string range,
                 std::vector<std::string> choices, std::string doc);

/// The keys one component reads from one config section, in declaration order: what an
/// objective lists (ObjectiveDescription::keys), and what the help and the docs print together.
/// Every group is registered (key_groups()) when it is constructed.
class KeyGroup {
 public:
  /// `component`: who reads these keys, for the docs ("the EAGLE-3 draft").
  KeyGroup(std::string section, std::string component);
  KeyGroup(const KeyGroup&) = delete;
  KeyGroup& operator=(const KeyGroup&) = delete;

  const std::string& section() const { return section_; }
  const std::string& component() const { return component_; }
  const std::vector<const KeyInfo*>& keys() const { return keys_; }

 private:
  friend class KeyBase;
  std::string section_, component_;
  std::vector<const KeyInfo*> keys_;
};

/// Every key group declared, in declaration order.
const std::vector<const KeyGroup*>& key_groups();

/// What every typed key shares: its declaration, added to its group when constructed.
class KeyBase {
 public:
  KeyBase(const KeyBase&) = delete;
  KeyBase& operator=(const KeyBase&) = delete;
  virtual ~KeyBase() = default;

  const KeyInfo& info() const { return info_; }
  /// "FILE: section.name", for errors; `config` is the root or any section of it.
  std::string where(const Config& config) const;

 protected:
  /// Takes `info` (its section from `group`) and adds it to `group`.
  KeyBase(KeyGroup& group, KeyInfo info);
  /// The key's section of `config` (the root or any section of it).
  Config section(const Config& config) const;
  /// An internal error unless `as_declared`: `read` does not fit how the key's default was
  /// declared (read() of a Computed key, ...).
  void expect_declared(bool as_declared, const char* read) const;

  KeyInfo info_;
};

/// A key whose value is a T. Subclasses say how a T is read and checked.
template <typename T>
class Key : public KeyBase {
 public:
  using Kind = typename Fallback<T>::Kind;

  /// The value the config sets, or the declared default (recorded in the resolved config),
  /// checked against the range; an error when a required key is unset. Not for Computed or
  /// Unset keys.
  T read(const Config& config) const {
    expect_declared(fallback_.kind == Kind::Value || fallback_.kind == Kind::Required, "read()");
    return get(section(config),
               fallback_.kind == Kind::Value ? std::optional<T>(fallback_.value) : std::nullopt);
  }
  /// A Computed key: the value the config sets, or `fallback` (recorded as the default).
  T read(const Config& config, const T& fallback) const {
    expect_declared(fallback_.kind == Kind::Computed, "read(config, fallback)");
    return get(section(config), fallback);
  }
  /// The value when the config sets it (checked), else nothing (and nothing is recorded).
  std::optional<T> find(const Config& config) const {
    const Config in = section(config);
    if (!in.has(info_.name)) return std::nullopt;
    return get(in, std::nullopt);
  }

 protected:
  Key(KeyGroup& group, KeyInfo info, Fallback<T> fallback, const std::string& shown)
      : KeyBase(group, with_fallback(std::move(info), fallback, shown)),
        fallback_(std::move(fallback)) {}
  /// Reads the key from its section (`fallback` when unset) and checks it.
  virtual T get(const Config& section, const std::optional<T>& fallback) const = 0;

 private:
  static KeyInfo with_fallback(KeyInfo info, const Fallback<T>& fallback,
                               const std::string& shown) {
    info.required = fallback.kind == Kind::Required;
    info.shown_verbatim = fallback.kind == Kind::Value;
    info.fallback = fallback.kind == Kind::Required ? "required"
                    : fallback.kind == Kind::Value  ? shown
                                                    : fallback.text;
    return info;
  }

  Fallback<T> fallback_;
};

class IntKey : public Key<int64_t> {
 public:
  IntKey(KeyGroup& group, std::string name, Fallback<int64_t> fallback, IntRange range,
         std::string doc);

 private:
  int64_t get(const Config& section, const std::optional<int64_t>& fallback) const override;
  IntRange range_;
};

class NumberKey : public Key<double> {
 public:
  NumberKey(KeyGroup& group, std::string name, Fallback<double> fallback, NumberRange range,
            std::string doc);

 private:
  double get(const Config& section, const std::optional<double>& fallback) const override;
  NumberRange range_;
};

class BoolKey : public Key<bool> {
 public:
  BoolKey(KeyGroup& group, std::string name, Fallback<bool> fallback, std::string doc);

 private:
  bool get(const Config& section, const std::optional<bool>& fallback) const override;
};

/// Free text: a path, a directory, a device name (checked by what uses it).
class StringKey : public Key<std::string> {
 public:
  StringKey(KeyGroup& group, std::string name, Fallback<std::string> fallback, std::string doc);

 private:
  std::string get(const Config& section, const std::optional<std::string>& fallback) const override;
};

/// A path, or a list of paths each with an optional weight (Config::get_path_list).
class PathListKey : public Key<std::vector<WeightedPath>> {
 public:
  PathListKey(KeyGroup& group, std::string name, Fallback<std::vector<WeightedPath>> fallback,
              std::string doc);

 private:
  std::vector<WeightedPath> get(
      const Config& section,
      const std::optional<std::vector<WeightedPath>>& fallback) const override;
};

/// Names mapped to strings (Config::get_string_map); unset is the empty mapping.
class StringMapKey : public Key<std::vector<std::pair<std::string, std::string>>> {
 public:
  StringMapKey(KeyGroup& group, std::string name, std::string doc);

 private:
  std::vector<std::pair<std::string, std::string>> get(
      const Config& section,
      const std::optional<std::vector<std::pair<std::string, std::string>>>& fallback)
      const override;
};

/// A list of integers, each in `range`.
class IntListKey : public Key<std::vector<int64_t>> {
 public:
  IntListKey(KeyGroup& group, std::string name, Fallback<std::vector<int64_t>> fallback,
             IntRange range, std::string doc);

 private:
  std::vector<int64_t> get(const Config& section,
                           const std::optional<std::vector<int64_t>>& fallback) const override;
  IntRange range_;
};

/// "a, b, c" of `names`.
std::string join_names(const std::vector<std::string>& names);

/// One of a closed set of names, each standing for a value of type T (an enum, or the name
/// itself: ChoiceKey). A name outside the set is an error listing the set.
template <typename T>
class EnumKey : public Key<T> {
 public:
  using Choices = std::vector<std::pair<std::string, T>>;

  EnumKey(KeyGroup& group, std::string name, Fallback<T> fallback, Choices choices, std::string doc)
      : Key<T>(group, key_info(std::move(name), "choice", "", names_of(choices), std::move(doc)),
               fallback,
               fallback.kind == Fallback<T>::Kind::Value ? name_of(choices, fallback.value) : ""),
        choices_(std::move(choices)) {}

  /// The names, in declaration order.
  const std::vector<std::string>& names() const { return this->info_.choices; }
  /// The first name standing for `value`.
  std::string name(const T& value) const { return name_of(choices_, value); }

 private:
  static std::vector<std::string> names_of(const Choices& choices) {
    std::vector<std::string> names;
    for (const auto& choice : choices) names.push_back(choice.first);
    return names;
  }
  static std::string name_of(const Choices& choices, const T& value) {
    for (const auto& choice : choices)
      if (choice.second == value) return choice.first;
    throw Error("[config] internal: a value without a name among ", join_names(names_of(choices)));
  }
  T get(const Config& section, const std::optional<T>& fallback) const override {
    const std::optional<std::string> fallback_name =
        fallback ? std::optional<std::string>(name_of(choices_, *fallback)) : std::nullopt;
    const std::string chosen = section.get_choice(this->info_.name, names(), fallback_name);
    for (const auto& choice : choices_)
      if (choice.first == chosen) return choice.second;
    throw Error("[config] internal: ", this->info_.path(), " has no value for '", chosen, "'");
  }

  Choices choices_;
};

/// A closed set of names read as the name itself (where the options struct holds a string).
class ChoiceKey : public EnumKey<std::string> {
 public:
  ChoiceKey(KeyGroup& group, std::string name, Fallback<std::string> fallback,
            const std::vector<std::string>& choices, std::string doc);
};

}  // namespace tandem
