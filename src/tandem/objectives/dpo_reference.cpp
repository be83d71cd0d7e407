#include "tandem/objectives/dpo_reference.h"

#include <ATen/ATen.h>

#include <map>

#include "tandem/core/error.h"
#include "tandem/io/tensor_io.h"

namespace tandem {

namespace {

constexpr const char* kFormat = "tandem-reference-logprobs";
constexpr const char* kVersion = "1";

const std::string& meta(const std::map<std::string, std::string>& metadata, const std::string& key,
                        const std::string& path) {
  const auto it = metadata.find(key);
  check(it != metadata.end(), "[dpo] ", path, ": not a reference log-prob cache (metadata '", key,
        "' is missing); write one with `tandem reference-logprobs`");
  return it->second;
}

int64_t meta_int(const std::map<std::string, std::string>& metadata, const std::string& key,
                 const std::string& path) {
  const std::string& text = meta(metadata, key, path);
  try {
    size_t used = 0;
    const int64_t value = std::stoll(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  throw Error("[dpo] ", path, ": metadata '", key, "' is '", text, "', not an integer");
}

}  // namespace

void ReferenceLogprobs::write(const std::string& path, const at::Tensor& logprobs,
                              const at::Tensor& counts, const ReferenceLogprobsInfo& info) {
  check(logprobs.dim() == 1 && counts.sizes() == logprobs.sizes() &&
            logprobs.size(0) == info.documents,
        "[dpo] reference log-probs ", logprobs.sizes(), " and counts ", counts.sizes(),
        " must both be (", info.documents, ",)");
  const std::map<std::string, std::string> metadata = {
      {"format", kFormat},
      {"version", kVersion},
      {"dataset_key", info.dataset_key},
      {"documents", std::to_string(info.documents)},
      {"seq_len", std::to_string(info.seq_len)},
      {"vocab_size", std::to_string(info.vocab_size)},
      {"reference", info.reference},
      {"dtype", info.dtype},
      {"fp32_lm_head", info.fp32_lm_head ? "true" : "false"}};
  write_tensors(path,
                {{"reference_logprobs", logprobs.to(at::kFloat).contiguous()},
                 {"target_counts", counts.to(at::kLong).contiguous()}},
                metadata);
}

ReferenceLogprobs ReferenceLogprobs::open(const std::string& path) {
  const safetensors::File file = safetensors::File::open(path);
  const auto& metadata = file.header().metadata;
  check(meta(metadata, "format", path) == kFormat, "[dpo] ", path, ": format '",
        meta(metadata, "format", path), "' is not ", kFormat);
  check(meta(metadata, "version", path) == kVersion, "[dpo] ", path, ": version ",
        meta(metadata, "version", path), " is not supported (this tandem reads ", kVersion, ")");
  ReferenceLogprobs out;
  out.path_ = path;
  out.info_.dataset_key = meta(metadata, "dataset_key", path);
  out.info_.documents = meta_int(metadata, "documents", path);
  out.info_.seq_len = meta_int(metadata, "seq_len", path);
  out.info_.vocab_size = meta_int(metadata, "vocab_size", path);
  out.info_.reference = meta(metadata, "reference", path);
  out.info_.dtype = meta(metadata, "dtype", path);
  out.info_.fp32_lm_head = meta(metadata, "fp32_lm_head", path) == "true";
  for (const char* name : {"reference_logprobs", "target_counts"})
    check(file.contains(name), "[dpo] ", path, ": tensor '", name, "' is missing");
  out.logprobs_ = read_tensor(file, file.info("reference_logprobs"));
  out.counts_ = read_tensor(file, file.info("target_counts"));
  check(out.logprobs_.scalar_type() == at::kFloat && out.logprobs_.dim() == 1 &&
            out.logprobs_.size(0) == out.info_.documents,
        "[dpo] ", path, ": reference_logprobs must be F32 (", out.info_.documents, ",), got ",
        out.logprobs_.sizes());
  check(out.counts_.scalar_type() == at::kLong && out.counts_.sizes() == out.logprobs_.sizes(),
        "[dpo] ", path, ": target_counts must be I64 (", out.info_.documents, ",)");
  check(at::isfinite(out.logprobs_).all().item<bool>() && (out.logprobs_ <= 0).all().item<bool>(),
        "[dpo] ", path, ": reference_logprobs holds values that are not finite log-probabilities");
  return out;
}

void ReferenceLogprobs::check_matches(const std::string& dataset_key, int64_t documents,
                                      int64_t seq_len, const std::string& dataset_path) const {
  check(info_.dataset_key == dataset_key && info_.documents == documents, "[dpo] ", path_,
        ": computed for other data (dataset key ", info_.dataset_key, ", ", info_.documents,
        " documents) than ", dataset_path, " (key ", dataset_key, ", ", documents,
        " documents); rerun `tandem reference-logprobs` on this data");
  check(info_.seq_len == seq_len, "[dpo] ", path_, ": computed with seq_len ", info_.seq_len,
        ", training uses ", seq_len,
        " (long documents are truncated at seq_len, so the two "
        "must agree)");
}

at::Tensor ReferenceLogprobs::lookup(const at::Tensor& indices, const at::Tensor& counts) const {
  check(indices.numel() == 0 ||
            (indices.min().item<int64_t>() >= 0 && indices.max().item<int64_t>() < info_.documents),
        "[dpo] ", path_, ": a document index is outside the cache's ", info_.documents,
        " documents");
  const at::Tensor expected = counts_.index_select(0, indices);
  check(at::equal(expected, counts.to(at::kLong)), "[dpo] ", path_,
        ": the cached token counts differ from this batch's (the data or the packing changed); "
        "rerun `tandem reference-logprobs`");
  return logprobs_.index_select(0, indices);
}

}  // namespace tandem
