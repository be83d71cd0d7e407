#include "tandem/train/checkpoint_manifest.h"

#include <charconv>
#include <nlohmann/json.hpp>
#include <optional>

#include "tandem/core/error.h"
#include "tandem/core/hash.h"
#include "tandem/core/json_parse.h"

namespace tandem {
namespace {

constexpr const char* kFormatName = "tandem-checkpoint";

/// Throws Error("[checkpoint] <path>: <parts>").
template <typename... Parts>
[[noreturn]] void fail(const std::string& path, const Parts&... parts) {
  throw Error("[checkpoint] ", path, ": ", parts...);
}

/// The 64-bit value of 16 lowercase hex digits, or nullopt.
std::optional<uint64_t> parse_hex64(const std::string& text) {
  uint64_t value = 0;
  if (text.size() != 16) return std::nullopt;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, 16);
  if (error != std::errc() || end != text.data() + text.size() || hex64(value) != text) {
    return std::nullopt;
  }
  return value;
}

}  // namespace

void check_file_name(const std::string& name, const std::string& path) {
  const bool plain = !name.empty() && name.size() <= 255 && name.find('/') == std::string::npos &&
                     name.find('\0') == std::string::npos && name[0] != '.';
  if (!plain) {
    fail(path, "invalid checkpoint file name '", name,
         "' (need a plain name, no '/', not starting with '.')");
  }
  if (name == kManifestName) {
    fail(path, "'", kManifestName, "' is reserved for the checkpoint's manifest");
  }
}

std::string encode_manifest(const CheckpointManifest& manifest) {
  nlohmann::ordered_json files = nlohmann::ordered_json::object();
  for (const auto& [name, file] : manifest.files) {
    files[name] = {{"size", file.size}, {"xxh64", hex64(file.xxh64)}};
  }
  nlohmann::ordered_json root = {{"format", kFormatName},
                                 {"version", manifest.version},
                                 {"step", manifest.step},
                                 {"files", files},
                                 {"complete", true}};
  return root.dump(2) + "\n";
}

CheckpointManifest parse_manifest_text(const std::string& text, const std::string& path) {
  nlohmann::json root;
  try {
    root = parse_json_text(text);
  } catch (const std::exception& e) {
    fail(path, "not valid JSON (truncated?): ", e.what());
  }
  if (!root.is_object()) fail(path, "not a JSON object");
  const auto member = [&root](const char* key) {
    const auto found = root.find(key);
    return found == root.end() ? nlohmann::json() : *found;
  };
  if (member("format") != kFormatName) {
    fail(path, "not a tandem checkpoint manifest (no \"format\": \"", kFormatName, "\")");
  }
  CheckpointManifest manifest;
  const nlohmann::json version = member("version");
  if (!version.is_number_integer()) fail(path, "\"version\" is missing or not an integer");
  if (version.get<int64_t>() < 1 || version.get<int64_t>() > kCheckpointFormatVersion) {
    fail(path, "format version ", version.dump(), " is not one this build reads (1 to ",
         kCheckpointFormatVersion, ")");
  }
  manifest.version = version.get<int>();
  if (member("complete") != true) fail(path, "not marked \"complete\": true");
  const nlohmann::json step = member("step");
  if (!step.is_number_integer() || step.get<int64_t>() < 0) {
    fail(path, "\"step\" is missing or not a non-negative integer");
  }
  manifest.step = step.get<int64_t>();
  const nlohmann::json files = member("files");
  if (!files.is_object()) fail(path, "\"files\" is missing or not an object");
  for (const auto& [name, entry] : files.items()) {
    check_file_name(name, path);
    const bool has_size =
        entry.is_object() && entry.contains("size") && entry["size"].is_number_unsigned();
    const bool has_hash =
        entry.is_object() && entry.contains("xxh64") && entry["xxh64"].is_string();
    const std::optional<uint64_t> hash =
        has_hash ? parse_hex64(entry["xxh64"].get<std::string>()) : std::nullopt;
    if (!has_size || !hash) {
      fail(path, "entry '", name, "' needs \"size\" (bytes) and \"xxh64\" (16 hex digits)");
    }
    manifest.files[name] = {entry["size"].get<uint64_t>(), *hash};
  }
  return manifest;
}

}  // namespace tandem
