// Tokenizer throughput on one thread: encodes every document of a corpus (a JSON list of strings,
// made by bench/bench_tokenizer.sh) with each named fixture tokenizer and prints MB/s for ids
// only and for ids + offsets. bench_tokenizer.sh runs HF `tokenizers` on the same corpus.
//
//   bench_tokenizer CORPUS.json FIXTURE_DIR NAME...   (NAME: a fixture directory or a variant)
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/text/tokenizer.h"

namespace {

using nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream in(path);
  tandem::check(in.good(), "[bench] cannot open ", path);
  return json::parse(in);
}

// A fixture's tokenizer.json, or a variant: a JSON merge patch on one (see variants.json).
json fixture_config(const std::string& dir, const std::string& name) {
  if (std::ifstream(dir + "/" + name + "/tokenizer.json").good())
    return read_json(dir + "/" + name + "/tokenizer.json");
  const json variants = read_json(dir + "/variants.json");
  tandem::check(variants.contains(name), "[bench] no fixture or variant named ", name);
  json config = fixture_config(dir, variants[name]["base"].get<std::string>());
  config.merge_patch(variants[name]["patch"]);
  return config;
}

// CPU time of the process: steadier than wall time on a machine shared with builds (HF's side
// measures the same way).
double cpu_seconds() {
  timespec now;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return now.tv_sec + now.tv_nsec * 1e-9;
}

double seconds(const std::function<void()>& work) {
  const double start = cpu_seconds();
  work();
  return cpu_seconds() - start;
}

/// Best of `repeats` timed runs after one warm-up run (which also fills the BPE cache, as HF's).
double best_seconds(const std::function<void()>& work, int repeats) {
  work();
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) best = std::min(best, seconds(work));
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: bench_tokenizer CORPUS.json FIXTURE_DIR NAME...\n";
    return 2;
  }
  try {
    const auto documents = read_json(argv[1]).get<std::vector<std::string>>();
    size_t bytes = 0;
    for (const auto& document : documents) bytes += document.size();
    const double megabytes = bytes / 1e6;
    std::printf("corpus: %zu documents, %.2f MB, 1 thread, MB/s of CPU time\n", documents.size(),
                megabytes);
    for (int i = 3; i < argc; ++i) {
      const std::string name = argv[i];
      json config;
      const double parse_s = seconds([&] { config = fixture_config(argv[2], name); });
      std::optional<tandem::Tokenizer> tokenizer;
      const double build_s =
          seconds([&] { tokenizer = tandem::Tokenizer::from_json(config, name); });
      size_t tokens = 0;
      const double ids_s = best_seconds(
          [&] {
            tokens = 0;
            for (const auto& document : documents) tokens += tokenizer->encode(document).size();
          },
          3);
      const double offsets_s = best_seconds(
          [&] {
            for (const auto& document : documents) tokenizer->encode_with_offsets(document);
          },
          3);
      std::printf(
          "tandem %-14s ids: %7.2f MB/s  ids+offsets: %7.2f MB/s  (%zu tokens; load: JSON parse "
          "%.2f s + build %.2f s)\n",
          name.c_str(), megabytes / ids_s, megabytes / offsets_s, tokens, parse_s, build_s);
    }
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
