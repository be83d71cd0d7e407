// libFuzzer target for a training checkpoint's manifest.json: bad input must end in a
// tandem::Error; an accepted manifest encodes and parses back to the same entries.
#include <cstdint>
#include <string>

#include "tandem/core/error.h"
#include "tandem/train/checkpoint_manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const tandem::CheckpointManifest manifest = tandem::parse_manifest_text(text, "<fuzz>");
    const tandem::CheckpointManifest again =
        tandem::parse_manifest_text(tandem::encode_manifest(manifest), "<fuzz round trip>");
    if (again.step != manifest.step || again.version != manifest.version ||
        again.files.size() != manifest.files.size())
      __builtin_trap();
    for (const auto& [name, file] : manifest.files) {
      const auto found = again.files.find(name);
      if (found == again.files.end() || found->second.size != file.size ||
          found->second.xxh64 != file.xxh64)
        __builtin_trap();
    }
  } catch (const tandem::Error&) {
  }
  return 0;
}
