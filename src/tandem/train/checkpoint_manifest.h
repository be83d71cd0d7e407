#pragma once
// The manifest of a training checkpoint (manifest.json, written last, its presence the commit):
// the format name and version, the step, and every file's size and XXH64. Reading it is kept
// apart from the file system so that it can be fuzzed on its own (fuzz/fuzz_manifest.cpp).
#include <cstdint>
#include <map>
#include <string>

namespace tandem {

/// Version of the manifest format written by CheckpointWriter; readers reject newer ones.
inline constexpr int kCheckpointFormatVersion = 1;
/// The manifest's file name in a checkpoint directory.
inline constexpr const char* kManifestName = "manifest.json";

/// One file listed in a manifest.
struct CheckpointFile {
  uint64_t size = 0;   // bytes
  uint64_t xxh64 = 0;  // XXH64 (seed 0) of the whole file
};

/// A parsed manifest.json.
struct CheckpointManifest {
  int version = kCheckpointFormatVersion;
  int64_t step = 0;
  std::map<std::string, CheckpointFile> files;  // file name -> size and checksum
};

/// The manifest as JSON text, keys in a fixed order so that it reads well.
std::string encode_manifest(const CheckpointManifest& manifest);

/// Parses and checks manifest text: valid JSON (bounded nesting), the tandem format, a known
/// version, "complete": true, a step >= 0, well-formed file entries with plain names. Throws
/// Error("[checkpoint] <path>: <what is wrong>").
CheckpointManifest parse_manifest_text(const std::string& text, const std::string& path);

/// Throws unless `name` can be a file of a checkpoint: a plain name, not hidden, not the
/// manifest. `path` names the place for the message.
void check_file_name(const std::string& name, const std::string& path);

}  // namespace tandem
