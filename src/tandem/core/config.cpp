#include "tandem/core/config.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "tandem/core/error.h"

namespace tandem {

struct Config::State {
  std::string source;
  YAML::Node root;
  YAML::Node resolved = YAML::Node(YAML::NodeType::Map);
  std::set<std::string> used;  // dotted keys read (leaves) or opened (sections)
  std::set<std::string> read;  // dotted keys read through the typed getters
};

namespace {

std::vector<std::string> split_dotted(const std::string& key) {
  std::vector<std::string> parts;
  std::stringstream stream(key);
  std::string part;
  while (std::getline(stream, part, '.')) parts.push_back(part);
  return parts;
}

std::string join(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

// yaml-cpp's Node::operator= copies content into the bound node; walking a tree must rebind
// handles with reset() instead, or the walk would overwrite the tree it walks.

// The node at a dotted path, or an undefined node; never creates entries.
YAML::Node find(const YAML::Node& root, const std::string& dotted) {
  YAML::Node node;
  node.reset(root);
  for (const std::string& part : split_dotted(dotted)) {
    if (!node.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    const YAML::Node& parent = node;
    YAML::Node child = parent[part];
    if (!child.IsDefined()) return YAML::Node(YAML::NodeType::Undefined);
    node.reset(child);
  }
  return node;
}

// Sets a dotted path in `root`, creating maps on the way.
void assign(YAML::Node& root, const std::vector<std::string>& parts, const YAML::Node& value,
            const std::string& where) {
  YAML::Node node;
  node.reset(root);
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const YAML::Node& parent = node;
    const YAML::Node existing = parent[parts[i]];
    if (!existing.IsDefined() || existing.IsNull())
      node[parts[i]] = YAML::Node(YAML::NodeType::Map);
    YAML::Node child = node[parts[i]];
    check(child.IsMap(), "[config] ", where, ": '", parts[i], "' is not a section");
    node.reset(child);
  }
  node[parts.back()] = value;
}

void collect_leaves(const YAML::Node& node, const std::string& prefix,
                    std::vector<std::string>& out) {
  if (node.IsMap() && node.size() > 0) {
    for (const auto& item : node)
      collect_leaves(item.second, join(prefix, item.first.as<std::string>()), out);
  } else {
    out.push_back(prefix);
  }
}

// A run config is a few levels of sections with plain keys: refuse what is not, before any
// key is read (a complex key made yaml-cpp throw "bad conversion" naming no file; a repeated
// key silently kept one of its values).
constexpr int kMaxConfigDepth = 16;

std::string line_of(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  return mark.line >= 0 ? ":" + std::to_string(mark.line + 1) : std::string();
}

// YAML aliases share one node, so a file of a few lines can name a tree of billions of nodes
// (a: &a [x, x, ...], b: &b [*a, *a, ...], ...), and every walk below (check_tree, the
// unknown-key check) would visit each of them. The parser's events give the expanded size in
// one pass over the text: an anchored node's size is kept, and an alias adds it without walking.
class ExpandedSize : public YAML::EventHandler {
 public:
  uint64_t total() const { return total_; }

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t anchor) override { add(1, anchor); }
  void OnAlias(const YAML::Mark&, YAML::anchor_t anchor) override {
    const auto found = anchored_.find(anchor);  // absent: an alias inside its own anchor
    add(found == anchored_.end() ? 1 : found->second, YAML::NullAnchor);
  }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t anchor,
                const std::string&) override {
    add(1, anchor);
  }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open_.push_back({1, anchor});
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    open_.push_back({1, anchor});
  }
  void OnMapEnd() override { close(); }

 private:
  // Sizes saturate far above any limit, so no sum overflows.
  static constexpr uint64_t kSaturated = uint64_t{1} << 62;

  void add(uint64_t size, YAML::anchor_t anchor) {
    if (anchor != YAML::NullAnchor) anchored_[anchor] = size;
    uint64_t& into = open_.empty() ? total_ : open_.back().first;
    into = std::min(kSaturated, into + size);
  }
  void close() {
    const auto [size, anchor] = open_.back();
    open_.pop_back();
    add(size, anchor);
  }

  std::vector<std::pair<uint64_t, YAML::anchor_t>> open_;  // open collections: size so far
  std::map<YAML::anchor_t, uint64_t> anchored_;
  uint64_t total_ = 0;
};

// The first document of `text`, refused (naming `source`) when its aliases expand to more than
// kMaxConfigNodes nodes. Throws YAML::Exception on invalid YAML.
YAML::Node load_bounded(const std::string& text, const std::string& source) {
  std::istringstream stream(text);
  YAML::Parser parser(stream);
  ExpandedSize size;
  parser.HandleNextDocument(size);
  check(size.total() <= static_cast<uint64_t>(kMaxConfigNodes), "[config] ", source, ": more than ",
        kMaxConfigNodes,
        " nodes once its YAML aliases are expanded (aliases of aliases?); a run config is a few "
        "sections of plain keys");
  return YAML::Load(text);
}

void check_tree(const YAML::Node& node, const std::string& source, const std::string& path,
                int depth) {
  check(depth <= kMaxConfigDepth, "[config] ", source, line_of(node), ": '", path,
        "' nests deeper than ", kMaxConfigDepth, " levels");
  if (node.IsSequence()) {
    for (const YAML::Node& item : node) check_tree(item, source, path + "[]", depth + 1);
    return;
  }
  if (!node.IsMap()) return;
  std::map<std::string, std::string> seen;  // key -> its line
  for (const auto& item : node) {
    check(item.first.IsScalar(), "[config] ", source, line_of(item.first), ": a key under '",
          path.empty() ? "(top level)" : path, "' must be a plain name, not a ",
          item.first.IsSequence() ? "list"
          : item.first.IsMap()    ? "mapping"
                                  : "null");
    const std::string key = item.first.Scalar();
    const std::string here = line_of(item.first);
    const auto [previous, inserted] = seen.emplace(key, here);
    check(inserted, "[config] ", source, here, ": duplicate key '", join(path, key), "' (first at ",
          "line", previous->second.empty() ? " ?" : " " + previous->second.substr(1), ")");
    check_tree(item.second, source, join(path, key), depth + 1);
  }
}

}  // namespace

Config::Config(std::shared_ptr<State> state, std::string prefix)
    : state_(std::move(state)), prefix_(std::move(prefix)) {}

Config Config::parse(const std::string& yaml, const std::string& source,
                     const std::vector<std::string>& overrides) {
  auto state = std::make_shared<State>();
  state->source = source;
  try {
    state->root = load_bounded(yaml, source);
  } catch (const YAML::Exception& e) {
    throw Error("[config] ", source, ": invalid YAML: ", e.what());
  }
  if (!state->root.IsDefined() || state->root.IsNull())
    state->root = YAML::Node(YAML::NodeType::Map);
  check(state->root.IsMap(), "[config] ", source, ": the top level must be a mapping");
  check_tree(state->root, source, "", 0);
  for (const std::string& item : overrides) {
    const size_t equals = item.find('=');
    check(equals != std::string::npos && equals > 0, "[config] override '", item,
          "' must look like section.key=value");
    const std::string key = item.substr(0, equals);
    YAML::Node value;
    try {
      value = load_bounded(item.substr(equals + 1), "override '" + item + "'");
    } catch (const YAML::Exception& e) {
      throw Error("[config] override '", item, "': invalid value: ", e.what());
    }
    check_tree(value, "override '" + item + "'", key, 1);
    assign(state->root, split_dotted(key), value, "override '" + item + "'");
  }
  return Config(state, "");
}

Config Config::load(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  check(in.good(), "[config] ", path, ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  return parse(text.str(), path, overrides);
}

std::string Config::where(const std::string& key) const {
  return state_->source + ": " + join(prefix_, key);
}

bool Config::has(const std::string& key) const {
  const YAML::Node node = find(state_->root, join(prefix_, key));
  return node.IsDefined() && !node.IsNull();
}

Config Config::root() const { return Config(state_, ""); }

Config Config::section(const std::string& key) const {
  const std::string path = join(prefix_, key);
  const YAML::Node node = find(state_->root, path);
  check(!node.IsDefined() || node.IsNull() || node.IsMap(), "[config] ", where(key),
        " must be a section (a mapping)");
  state_->used.insert(path);
  return Config(state_, path);
}

namespace {

// Defaults as YAML: doubles in their shortest round-trip form (yaml-cpp prints 17 digits).
template <typename T>
YAML::Node to_yaml(const T& value) {
  return YAML::Node(value);
}
template <>
YAML::Node to_yaml(const double& value) {
  char text[64];
  const auto result = std::to_chars(text, text + sizeof(text), value);
  return YAML::Node(std::string(text, result.ptr));
}

template <typename T>
T read_value(Config::State& state, const std::string& path, std::optional<T> fallback,
             const char* type_name, const std::string& where) {
  const YAML::Node node = find(state.root, path);
  state.used.insert(path);
  state.read.insert(path);
  T value;
  if (!node.IsDefined() || node.IsNull()) {
    check(fallback.has_value(), "[config] ", where, ": required ", type_name, " is missing");
    value = *fallback;
    assign(state.resolved, split_dotted(path), to_yaml(value), where);
  } else {
    try {
      value = node.as<T>();
    } catch (const YAML::Exception&) {
      throw Error("[config] ", where, ": expected ", type_name, ", got '", YAML::Dump(node), "'");
    }
    assign(state.resolved, split_dotted(path), YAML::Clone(node), where);  // as the user wrote it
  }
  return value;
}

}  // namespace

int64_t Config::get_int(const std::string& key, std::optional<int64_t> fallback) const {
  return read_value<int64_t>(*state_, join(prefix_, key), fallback, "an integer", where(key));
}
double Config::get_double(const std::string& key, std::optional<double> fallback) const {
  return read_value<double>(*state_, join(prefix_, key), fallback, "a number", where(key));
}
bool Config::get_bool(const std::string& key, std::optional<bool> fallback) const {
  return read_value<bool>(*state_, join(prefix_, key), fallback, "true or false", where(key));
}
std::string Config::get_string(const std::string& key, std::optional<std::string> fallback) const {
  return read_value<std::string>(*state_, join(prefix_, key), fallback, "a string", where(key));
}
std::vector<int64_t> Config::get_int_list(const std::string& key,
                                          std::optional<std::vector<int64_t>> fallback) const {
  return read_value<std::vector<int64_t>>(*state_, join(prefix_, key), fallback,
                                          "a list of integers", where(key));
}

std::vector<WeightedPath> Config::get_path_list(
    const std::string& key, std::optional<std::vector<WeightedPath>> fallback) const {
  const std::string path = join(prefix_, key);
  const YAML::Node node = find(state_->root, path);
  if (!node.IsDefined() || node.IsNull() || !node.IsSequence()) {  // one path
    const std::string one = get_string(key, fallback && fallback->size() == 1
                                                ? std::optional<std::string>(fallback->at(0).path)
                                                : std::nullopt);
    return {{one, 1.0}};
  }
  state_->used.insert(path);
  state_->read.insert(path);
  check(node.size() > 0, "[config] ", where(key), ": an empty list names no file");
  std::vector<WeightedPath> entries;
  for (size_t i = 0; i < node.size(); ++i) {
    const YAML::Node item = node[i];
    const std::string entry = where(key) + "[" + std::to_string(i) + "]";
    WeightedPath out;
    if (item.IsScalar()) {
      out.path = item.Scalar();
    } else {
      check(item.IsMap(), "[config] ", entry, ": expected a path or {path: ..., weight: ...}");
      for (const auto& field : item) {
        const std::string name = field.first.Scalar();
        check(name == "path" || name == "weight", "[config] ", entry, ": unknown field '", name,
              "' (an entry holds path and weight)");
      }
      check(item["path"].IsDefined() && item["path"].IsScalar(), "[config] ", entry,
            ": needs a path (a string)");
      out.path = item["path"].Scalar();
      if (item["weight"].IsDefined()) {
        try {
          out.weight = item["weight"].as<double>();
        } catch (const YAML::Exception&) {
          throw Error("[config] ", entry, ": weight must be a number, got '",
                      YAML::Dump(item["weight"]), "'");
        }
        check(std::isfinite(out.weight) && out.weight > 0, "[config] ", entry,
              ": weight must be a finite number > 0, got ", out.weight);
      }
    }
    check(!out.path.empty(), "[config] ", entry, ": an empty path");
    entries.push_back(std::move(out));
  }
  assign(state_->resolved, split_dotted(path), YAML::Clone(node), where(key));
  return entries;
}

std::vector<std::pair<std::string, std::string>> Config::get_string_map(
    const std::string& key) const {
  const std::string path = join(prefix_, key);
  const YAML::Node node = find(state_->root, path);
  state_->used.insert(path);
  state_->read.insert(path);
  std::vector<std::pair<std::string, std::string>> entries;
  if (!node.IsDefined() || node.IsNull()) {
    assign(state_->resolved, split_dotted(path), YAML::Node(YAML::NodeType::Map), where(key));
    return entries;
  }
  check(node.IsMap(), "[config] ", where(key), ": expected a mapping (name: value, ...)");
  for (const auto& item : node) {
    const std::string name = item.first.Scalar();
    check(item.second.IsScalar() && !item.second.Scalar().empty(), "[config] ",
          where(key + "." + name), ": expected a non-empty string");
    state_->used.insert(join(path, name));
    entries.emplace_back(name, item.second.Scalar());
  }
  assign(state_->resolved, split_dotted(path), YAML::Clone(node), where(key));
  return entries;
}

std::string Config::get_choice(const std::string& key, const std::vector<std::string>& choices,
                               std::optional<std::string> fallback) const {
  const std::string value = get_string(key, fallback);
  for (const std::string& choice : choices)
    if (value == choice) return value;
  std::string listed;
  for (const std::string& choice : choices) listed += (listed.empty() ? "" : ", ") + choice;
  throw Error("[config] ", where(key), ": '", value, "' is not one of: ", listed);
}

void Config::check_all_used() const {
  std::vector<std::string> leaves;
  collect_leaves(state_->root, "", leaves);
  std::vector<std::string> unknown;
  for (const std::string& leaf : leaves) {
    // A leaf (or an empty section) counts as used when a component asked for it.
    if (!state_->used.count(leaf)) unknown.push_back(leaf);
  }
  if (unknown.empty()) return;
  constexpr size_t kListed = 50;  // a hostile file may hold a million
  std::string listed;
  for (size_t i = 0; i < std::min(unknown.size(), kListed); ++i)
    listed += (listed.empty() ? "" : ", ") + unknown[i];
  if (unknown.size() > kListed)
    listed += " and " + std::to_string(unknown.size() - kListed) + " more";
  throw Error("[config] ", state_->source, ": unknown key", unknown.size() > 1 ? "s " : " ", listed,
              " (check the spelling; `tandem config-keys` lists every key)");
}

std::string Config::resolved_yaml() const {
  YAML::Emitter out;
  out << state_->resolved;
  return out.c_str();
}

std::vector<std::string> Config::keys_read() const {
  return {state_->read.begin(), state_->read.end()};
}

}  // namespace tandem
