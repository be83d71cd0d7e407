// libFuzzer target for YAML run configs and their dotted overrides. The input is the YAML file;
// its lines starting with "@" are taken out and given as overrides. Every key tandem reads is
// read with its type; bad input must end in a tandem::Error (naming the file): a yaml-cpp or
// any other exception reaching the caller is a bug.
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "tandem/core/config.h"
#include "tandem/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream lines(std::string(reinterpret_cast<const char*>(data), size));
  std::string yaml;
  std::vector<std::string> overrides;
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line[0] == '@')
      overrides.push_back(line.substr(1));
    else
      yaml += line + "\n";
  }
  try {
    const tandem::Config config = tandem::Config::parse(yaml, "<fuzz.yaml>", overrides);
    const auto attempt = [](const auto& read) {
      try {
        read();
      } catch (const tandem::Error&) {
      }
    };
    for (const char* name : {"training", "data", "model", "loss", "optimizer", "distributed"}) {
      attempt([&] {
        const tandem::Config section = config.section(name);
        for (const char* key : {"steps", "seq_len", "micro_batch_rows", "seed"})
          attempt([&] { section.get_int(key, 0); });
        for (const char* key : {"lr", "beta1", "eps", "temperature"})
          attempt([&] { section.get_double(key, 0.0); });
        for (const char* key : {"path", "run_dir", "tokenizer", "dtype"})
          attempt([&] { section.get_string(key, ""); });
        attempt([&] { section.get_bool("export", true); });
        attempt([&] { section.get_choice("objective", {"sft", "eagle3"}, "sft"); });
        attempt([&] { section.get_int_list("layer_ids"); });
        attempt([&] { section.get_path_list("path", std::vector<tandem::WeightedPath>{}); });
        attempt([&] { section.get_string_map("columns"); });
      });
    }
    attempt([&] { config.check_all_used(); });
    (void)config.resolved_yaml();
  } catch (const tandem::Error&) {
  }
  return 0;
}
