#pragma once
// What the speculative-decoding tests of every draft share: random prompts, the fixture target
// loaded for decoding, and a sharpened copy of it for the overfit gates.
#include <ATen/ATen.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "tandem/data/packing.h"
#include "tandem/eval/speculative.h"
#include "tandem/eval/uncached_decode.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/models/frozen.h"
#include "tandem/objectives/dspark.h"
#include "test_util.h"

namespace tandem::testing {

/// `count` prompts of `length` random ids in 3..511 (the fixture vocabulary), from `seed`.
inline std::vector<std::vector<int64_t>> random_prompts(int count, int64_t length, uint64_t seed) {
  at::manual_seed(seed);
  std::vector<std::vector<int64_t>> prompts;
  for (int i = 0; i < count; ++i) {
    const at::Tensor ids = at::randint(3, 512, {length}, at::kLong);
    prompts.emplace_back(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + length);
  }
  return prompts;
}

inline FrozenModel load_cpu_target(const std::string& dir) {
  return FrozenModel::load(dir, at::kFloat, at::Device(at::kCPU));
}

/// The llama3 fixture target with its lm_head scaled up 100x, written into `dir`: a random
/// model's next-token distributions are nearly flat, with near-ties between its top choices
/// that a draft cannot resolve exactly. Sharper logits make the greedy choice well defined; the
/// model is otherwise the same.
constexpr double kSharpen = 100;
inline std::string sharpened_target(const std::string& dir) {
  const std::string source = model_fixture("llama3");
  const auto checkpoint = HfCheckpoint::open(source);
  std::vector<std::pair<std::string, at::Tensor>> weights;
  for (const std::string& name : checkpoint.names())
    weights.emplace_back(
        name, name == "lm_head.weight" ? checkpoint.read(name) * kSharpen : checkpoint.read(name));
  std::filesystem::create_directories(dir);
  write_hf_weights(dir, weights);
  std::filesystem::copy_file(source + "/config.json", dir + "/config.json");
  return dir;
}

/// The overfit gates' samples: each prompt (not trained) followed by the target's own greedy
/// continuation under `decode` (trained), packed one per padded row of `seq_len`.
inline PackedBatch greedy_continuations(const FrozenModel& target,
                                        const std::vector<std::vector<int64_t>>& prompts,
                                        const DecodeOptions& decode, int64_t seq_len) {
  std::vector<TokenizedDocument> documents;
  for (const auto& prompt : prompts) {
    TokenizedDocument document;
    for (int64_t id : prompt)
      document.ids.push_back(static_cast<int32_t>(id)), document.loss_mask.push_back(0);
    for (int64_t id : greedy_decode(target, prompt, decode))
      document.ids.push_back(static_cast<int32_t>(id)), document.loss_mask.push_back(1);
    documents.push_back(document);
  }
  PackingOptions packing;
  packing.seq_len = seq_len;
  packing.mode = PackingMode::Padded;
  return pack_documents(documents, packing);
}

/// A small DSpark draft (2 layers, block 4, Markov rank 8) for the llama3 fixture at `target`.
inline DSparkOptions tiny_dspark_options(const std::string& target) {
  DSparkOptions options;
  options.target_path = target;
  options.dims = {2, 96, 4, 2, 16};
  options.target_layer_ids = {0, 2};
  options.block_size = 4;
  options.mask_token_id = 511;
  options.rope_theta = 10000.0;
  options.heads.markov_rank = 8;
  return options;
}

}  // namespace tandem::testing
