// libFuzzer target for config.json -> DecoderConfig: bad input must end in a tandem::Error
// (no other exception, no crash, no huge allocation); a config that is accepted survives the
// round trip through to_json unchanged.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "tandem/core/error.h"
#include "tandem/core/json_parse.h"
#include "tandem/models/decoder_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const tandem::DecoderConfig config =
        tandem::DecoderConfig::from_json(tandem::parse_json_text(text), "<fuzz config.json>");
    const tandem::DecoderConfig again =
        tandem::DecoderConfig::from_json(config.to_json(), "<fuzz round trip>");
    if (again.to_json() != config.to_json()) __builtin_trap();
  } catch (const tandem::Error&) {
  } catch (const tandem::JsonTextError&) {
  }
  return 0;
}
