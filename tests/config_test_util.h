#pragma once
// Helpers for the tests of a family's config.json: a fixture's config as JSON, parsed as
// DecoderConfig, and the error a changed copy must give.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tandem/core/json_file.h"
#include "tandem/models/decoder_config.h"
#include "test_util.h"

namespace tandem::testing {

/// tests/fixtures/models/NAME/config.json.
inline nlohmann::json fixture_config(const std::string& name) {
  return read_json_file(model_fixture(name) + "/config.json", "test");
}

/// `config` read as if it were a file named config.json.
inline DecoderConfig parse_config(const nlohmann::json& config) {
  return DecoderConfig::from_json(config, "config.json");
}

/// Reading `config` fails with an error that names the file and contains `phrase`.
inline void expect_config_error(const nlohmann::json& config, const std::string& phrase) {
  const std::string message = error_of([&] { parse_config(config); });
  EXPECT_NE(message.find("config.json"), std::string::npos) << message;
  EXPECT_NE(message.find(phrase), std::string::npos) << "wanted '" << phrase << "' in: " << message;
}

}  // namespace tandem::testing
