#pragma once
// DSpark draft checkpoints for serving (docs/dspark.md), in vLLM speculators' `dspark` format
// (speculators 0.9.0 DSparkDraftModel) and in DeepSpec's layout for SGLang, and reading the
// speculators one back:
//
//   <dir>/speculators/config.json        speculators_model_type "dspark", transformer_layer_config
//                                        (the draft's Qwen3 layers, the target's RoPE),
//                                        draft_vocab_size = the target's vocab, block_size,
//                                        aux_hidden_state_layer_ids, mask_token_id, markov_rank,
//                                        markov_head_type "vanilla", enable_confidence_head,
//                                        confidence_head_with_markov, sample_from_anchor true,
//                                        speculators_config {algorithm, proposal_methods,
//                                        verifier {name_or_path, architectures}}
//   <dir>/speculators/model.safetensors  fc, hidden_norm, norm, layers.{i}.*, markov_head.*,
//                                        confidence_head.proj.*: unprefixed; never the target's
//                                        embed_tokens or lm_head (speculators loads them from the
//                                        verifier)
//   <dir>/sglang/config.json             DeepSpec's Qwen3DSparkModel layout, which SGLang
//                                        (--speculative-algorithm DSPARK) and vLLM read: the
//                                        draft's Qwen3 layer config at the top level plus
//                                        block_size, num_target_layers, target_layer_ids (tandem's
//                                        own: the OUTPUT of layer i), mask_token_id, markov_rank,
//                                        markov_head_type, enable_confidence_head,
//                                        confidence_head_with_markov, sample_from_anchor,
//                                        layer_types
//   <dir>/sglang/model.safetensors       the same tensors as speculators/ (SGLang skips
//                                        embed_tokens and lm_head and takes the target's)
// Layer ids: speculators' aux_hidden_state_layer_ids index transformers' hidden_states (the
// INPUT of layer j), so each is tandem's target_layer_ids entry (the OUTPUT of layer i) + 1.
// Each directory is replaced whole.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "tandem/models/dspark.h"
#include "tandem/objectives/description.h"
#include "tandem/objectives/verifier.h"

namespace tandem {

struct DSparkExportInfo {
  VerifierInfo verifier;          // recorded in the speculators config
  int64_t num_target_layers = 0;  // layers of the target (aux ids are checked against it)
};

/// config.json of the speculators format.
nlohmann::json dspark_speculators_config(const DSparkDraftImpl& draft, c10::ScalarType dtype,
                                         const DSparkExportInfo& info);

/// config.json of the SGLang format (DeepSpec's Qwen3DSparkModel).
nlohmann::json dspark_sglang_config(const DSparkDraftImpl& draft, c10::ScalarType dtype,
                                    const DSparkExportInfo& info);

/// Writes `dir`/speculators and `dir`/sglang (each replaced whole: written next to it, then
/// renamed). The mask token must be one of the target's (both embed it with the target's
/// embedding).
void write_dspark_export(const DSparkDraftImpl& draft, const std::string& dir,
                         const DSparkExportInfo& info);

/// Reads a speculators-format export (what write_dspark_export wrote) into a draft in `dtype`.
/// Strict: errors name the file and the missing, misshapen or unexpected field or tensor.
std::shared_ptr<DSparkDraftImpl> load_dspark_export(const std::string& dir, c10::ScalarType dtype);

/// The export in `dir` (see find_dspark_export) on `device`, for `tandem eval`: block speculative
/// decoding with the Markov chain and the confidence stop (eval/dspark_decode.h).
std::unique_ptr<DraftDecoder> dspark_draft_decoder(const std::string& dir, c10::ScalarType dtype,
                                                   const c10::Device& device);

/// The speculators-format DSpark export in `dir`: `dir` itself when its config.json says
/// speculators_model_type "dspark", or `dir`/speculators (a run's export directory).
std::optional<std::string> find_dspark_export(const std::string& dir);

}  // namespace tandem
