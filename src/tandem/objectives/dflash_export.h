#pragma once
// DFlash draft checkpoints for serving engines (docs/dflash.md), in z-lab's format
// (DFlashDraftModel, loaded by SGLang `models/dflash.py` and vLLM `models/qwen3_dflash.py`), and
// reading them back.
//
//   <dir>/config.json        Qwen3 dims of the draft (hidden_size = the target's,
//                            num_hidden_layers = draft layers, vocab_size = the target's),
//                            architectures ["DFlashDraftModel"], model_type qwen3, block_size,
//                            num_target_layers, target_hidden_size,
//                            dflash_config {mask_token_id, target_layer_ids}
//   <dir>/model.safetensors  fc, hidden_norm, norm, layers.{i}.* (unprefixed); never the
//                            target's embed_tokens or lm_head (engines share the target's)
//   and only when the mask token was grown (id = target vocab_size, docs/dflash.md):
//   <dir>/mask_embedding.pt           the grown row, a (H,) tensor saved for torch.load: vLLM
//                                     reads this file name to replace embed[mask_token_id]
//   <dir>/mask_embedding.safetensors  the same row as "mask_embedding" (tandem reads this one)
//   <dir>/README.md                   how to serve such a draft (SGLang refuses the id)
// target_layer_ids use tandem's own convention, which is DFlash's: the OUTPUT of target decoder
// layer i (0-based), i.e. transformers' hidden_states[i + 1]. The directory is replaced whole.
#include <ATen/core/Tensor.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "tandem/models/dflash.h"
#include "tandem/objectives/description.h"

namespace tandem {

struct DFlashExportInfo {
  int64_t num_target_layers = 0;  // decoder layers of the target (SGLang checks ids against it)
  at::Tensor mask_embedding;      // (H,) the grown mask row; undefined unless the mask was grown
  std::string mask_token;         // the mask token's text, when known ("" otherwise)
  std::string serving_note;       // for README.md when the mask was grown
};

/// config.json of the export.
nlohmann::json dflash_export_config(const DFlashConfig& config, c10::ScalarType dtype,
                                    const DFlashExportInfo& info);

/// Writes `dir` (replaced whole: written next to it, then renamed).
void write_dflash_export(const DFlashDraftImpl& draft, const std::string& dir,
                         const DFlashExportInfo& info);

struct DFlashExport {
  DFlashDraft draft{nullptr};
  int64_t num_target_layers = 0;
  at::Tensor mask_embedding;  // (H,) when the export carries a grown mask row; else undefined
};

/// Reads an export (what write_dflash_export wrote, or z-lab's) into a draft in `dtype`. Errors
/// name the file and the missing, misshapen or unsupported field or tensor.
DFlashExport load_dflash_export(const std::string& dir, c10::ScalarType dtype);

/// Whether `dir`/config.json declares architectures ["DFlashDraftModel"].
bool is_dflash_export(const std::string& dir);

/// The export in `dir` (a DFlash export is the directory itself) on `device`, for `tandem eval`:
/// block speculative decoding (eval/dflash_decode.h).
std::unique_ptr<DraftDecoder> dflash_draft_decoder(const std::string& dir, c10::ScalarType dtype,
                                                   const c10::Device& device);

}  // namespace tandem
