#pragma once
// Run configuration: a YAML file plus dotted command-line overrides (`training.lr=3e-4`).
// Every key must be read by some component: after set-up, `check_all_used()` reports any key
// nobody asked for as unknown (a typo never silently falls back to a default). Values read
// (defaults included) form the resolved config that checkpoints store. Components read their
// keys through the declarations of core/config_schema.h, which hold each key's type, default
// and range; the typed getters below are what those declarations call.
//
// Reading is linear in the file's size: a file (or override) whose YAML aliases expand to more
// than kMaxConfigNodes nodes is refused before anything walks it.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tandem {

/// Nodes a config may hold once its aliases are expanded (a real run config has a few hundred).
inline constexpr int64_t kMaxConfigNodes = 1000000;

/// One entry of a path list (`data.path`): a path or glob and how much it weighs.
struct WeightedPath {
  std::string path;
  double weight = 1.0;
  bool operator==(const WeightedPath&) const = default;
};

class Config {
 public:
  /// Reads `path` and applies `overrides` ("a.b.c=value", value parsed as YAML).
  static Config load(const std::string& path, const std::vector<std::string>& overrides = {});
  /// Parses YAML text; `source` names it in errors.
  static Config parse(const std::string& yaml, const std::string& source,
                      const std::vector<std::string>& overrides = {});

  /// The sub-tree at `key` (an empty map when absent). Reads through it count as reads here.
  Config section(const std::string& key) const;
  /// The whole config (this one when it is the root), sharing what was read.
  Config root() const;
  bool has(const std::string& key) const;

  int64_t get_int(const std::string& key, std::optional<int64_t> fallback = std::nullopt) const;
  double get_double(const std::string& key, std::optional<double> fallback = std::nullopt) const;
  bool get_bool(const std::string& key, std::optional<bool> fallback = std::nullopt) const;
  std::string get_string(const std::string& key,
                         std::optional<std::string> fallback = std::nullopt) const;
  std::vector<int64_t> get_int_list(
      const std::string& key, std::optional<std::vector<int64_t>> fallback = std::nullopt) const;
  /// A path, or a list whose entries are paths or `{path: ..., weight: ...}` mappings (weight
  /// 1 when not given; finite and > 0). Errors name the entry.
  std::vector<WeightedPath> get_path_list(
      const std::string& key,
      std::optional<std::vector<WeightedPath>> fallback = std::nullopt) const;
  /// A mapping of names to strings (`{messages: conversation}`), in the file's order; empty when
  /// unset. Errors name the entry that is not a string.
  std::vector<std::pair<std::string, std::string>> get_string_map(const std::string& key) const;
  /// `get_string` restricted to `choices`.
  std::string get_choice(const std::string& key, const std::vector<std::string>& choices,
                         std::optional<std::string> fallback = std::nullopt) const;

  /// Errors listing every key of the file and overrides that no component read.
  void check_all_used() const;
  /// The values read so far (defaults included) as YAML text.
  std::string resolved_yaml() const;
  /// The dotted keys read so far through the typed getters (sorted; sections not included).
  std::vector<std::string> keys_read() const;
  /// "file.yaml: training.lr" style location of `key`, for error messages.
  std::string where(const std::string& key) const;

  struct State;  // shared by a config and its sections

 private:
  Config(std::shared_ptr<State> state, std::string prefix);
  std::shared_ptr<State> state_;
  std::string prefix_;  // dotted path of this section ("" at the root)
};

}  // namespace tandem
