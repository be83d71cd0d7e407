#pragma once
// The reference log-probability cache of DPO (`tandem reference-logprobs`): the frozen
// reference's summed completion log-probability of every document of a preference dataset,
// computed once, so training needs no reference model in memory.
//
// File: safetensors with
//   reference_logprobs  F32 (documents,)  sum of log pi_ref over each document's trained tokens
//   target_counts       I64 (documents,)  how many tokens that sum covers
// and metadata {format: "tandem-reference-logprobs", version: "1", dataset_key (16 hex digits
// of TokenizedDataset::key), documents, seq_len (documents are truncated at it), vocab_size,
// reference (the model directory), dtype, fp32_lm_head}. Written atomically.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace tandem {

struct ReferenceLogprobsInfo {
  std::string dataset_key;
  int64_t documents = 0;
  int64_t seq_len = 0;
  int64_t vocab_size = 0;
  std::string reference;
  std::string dtype;
  bool fp32_lm_head = false;
};

class ReferenceLogprobs {
 public:
  /// Reads and validates `path`; errors name the file and what is wrong.
  static ReferenceLogprobs open(const std::string& path);
  /// Writes `path` atomically. logprobs (D,) float, counts (D,) int64.
  static void write(const std::string& path, const at::Tensor& logprobs, const at::Tensor& counts,
                    const ReferenceLogprobsInfo& info);

  /// Errors unless the cache was made from a dataset with this key and size at this seq_len.
  void check_matches(const std::string& dataset_key, int64_t documents, int64_t seq_len,
                     const std::string& dataset_path) const;
  /// Sums of the documents `indices` (D,) int64 -> (D,) fp32; checks their token counts.
  at::Tensor lookup(const at::Tensor& indices, const at::Tensor& counts) const;

  const ReferenceLogprobsInfo& info() const { return info_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  ReferenceLogprobsInfo info_;
  at::Tensor logprobs_;  // (documents,) fp32
  at::Tensor counts_;    // (documents,) int64
};

}  // namespace tandem
