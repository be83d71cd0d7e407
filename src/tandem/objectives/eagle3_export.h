#pragma once
// EAGLE-3 draft checkpoints for serving engines (docs/exports.md), and reading them back:
//   <dir>/sglang       LlamaForCausalLMEagle3 (SGLang; vLLM maps midlayer. -> layers.0.)
//   <dir>/speculators  Eagle3DraftModel (vLLM speculators format)
// Weights are unprefixed, embed_tokens is never stored (engines share the target's). Aux layer
// ids are converted from tandem's convention (output of decoder layer i) to each engine's:
// vLLM / speculators i + 1 (transformers hidden_states index), SGLang's eagle_config i.
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tandem/models/eagle3.h"
#include "tandem/objectives/description.h"
#include "tandem/objectives/verifier.h"

namespace tandem {

struct Eagle3ExportInfo {
  VerifierInfo verifier;           // recorded in the speculators config
  int64_t speculative_tokens = 7;  // draft tokens per step the draft was trained for
};

/// config.json of the SGLang / HF format.
nlohmann::json eagle3_sglang_config(const Eagle3Config& config, c10::ScalarType dtype);
/// config.json of the vLLM speculators format.
nlohmann::json eagle3_speculators_config(const Eagle3Config& config, c10::ScalarType dtype,
                                         const Eagle3ExportInfo& info);

/// Writes `dir`/sglang and `dir`/speculators, each replaced whole (written next to it, renamed).
void write_eagle3_exports(const Eagle3DraftImpl& draft, const std::string& dir,
                          const Eagle3ExportInfo& info);

/// Reads an SGLang-format export (what write_eagle3_exports wrote, or another tool's with the
/// same layout) into a draft in `dtype`; the target's config supplies the RoPE settings when the
/// export lacks them. Errors name the file and the missing or misshapen tensor.
Eagle3Draft load_eagle3_export(const std::string& dir, c10::ScalarType dtype);

/// The SGLang-format export in `dir`: `dir` itself when its config.json declares
/// LlamaForCausalLMEagle3, or `dir`/sglang (a run's export directory); nullopt otherwise.
std::optional<std::string> find_eagle3_export(const std::string& dir);

/// The export in `export_dir` (see find_eagle3_export) on `device`, for `tandem eval`.
std::unique_ptr<DraftDecoder> eagle3_draft_decoder(const std::string& export_dir,
                                                   c10::ScalarType dtype,
                                                   const c10::Device& device);

}  // namespace tandem
