#pragma once
// What the objective-step benchmarks share: a random Llama checkpoint on disk (frozen models
// load from checkpoints), a packed batch of random documents, and one measured step.
#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "bench_common.h"
#include "bench_model.h"
#include "tandem/data/packing.h"
#include "tandem/models/layers.h"
#include "tandem/objectives/objective.h"
#include "tandem/objectives/sft.h"

namespace tandem::bench {

/// A model of `config` with N(0, 0.02) weights, written as an HF checkpoint to `dir` (the hub
/// form: one tensor per expert for a mixture of experts).
inline std::string write_random_model(const DecoderConfig& config, const std::string& dir,
                                      uint64_t seed = 0) {
  CausalLM model(config, at::TensorOptions().dtype(at::kFloat));
  init_normal_(*model, 0.02, seed);
  export_causal_lm(model, dir, /*source_dir=*/"");
  return dir;
}

/// A Llama of `shape` with N(0, 0.02) weights, written as an HF checkpoint to `dir`.
inline std::string write_random_llama(const ModelShape& shape, const std::string& dir,
                                      uint64_t seed = 0) {
  return write_random_model(llama_config(shape), dir, seed);
}

/// `rows` rows of `seq_len` tokens, `per_row` random documents each, the first 1/16 of every
/// document untrained (a prompt). Dataset indices are the documents' order, so consecutive
/// pairs (2r, 2r+1) are preference pairs for DPO.
inline PackedBatch random_batch(int64_t vocab, int64_t rows, int64_t seq_len, int64_t per_row) {
  std::vector<TokenizedDocument> documents;
  at::manual_seed(1);
  for (int64_t d = 0; d < rows * per_row; ++d) {
    const at::Tensor ids = at::randint(vocab, {seq_len / per_row}, at::kInt);
    TokenizedDocument document;
    document.ids.assign(ids.data_ptr<int32_t>(), ids.data_ptr<int32_t>() + ids.numel());
    document.loss_mask.assign(document.ids.size(), 1);
    std::fill(document.loss_mask.begin(), document.loss_mask.begin() + seq_len / per_row / 16, 0);
    documents.push_back(document);
  }
  PackingOptions packing;
  packing.seq_len = seq_len;
  PackedBatch batch = pack_documents(documents, packing);
  for (auto& document : batch.documents) document.dataset_index = document.source_index;
  return batch;
}

/// Peak-RSS rise and best time of the objective's forward + backward on `batch`.
inline PeakAndTime measure_objective_step(Objective& objective, const PackedBatch& batch) {
  const StepTotals totals = objective.count(batch);
  auto run = [&] {
    ObjectiveOutput output = objective.compute(batch, totals);
    output.loss.backward();
    for (auto& parameter : objective.trainable().parameters()) parameter.mutable_grad().reset();
  };
  return measure_peak_and_time(run, 1);
}

}  // namespace tandem::bench
