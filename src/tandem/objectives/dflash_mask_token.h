#pragma once
// The DFlash draft's mask token for a run: draft.mask_token_id when set, else chosen from the
// tokenizer (data.tokenizer, or the target's own directory) by the rules of data/mask_token.h.
#include <cstdint>
#include <optional>
#include <string>

#include "tandem/data/mask_token.h"

namespace tandem {

/// `mask_token_id` (draft.mask_token_id) wins; otherwise the tokenizer in `tokenizer_dir`, or
/// in `target_path` when that is empty, decides. An error names both keys when neither exists.
MaskTokenChoice resolve_dflash_mask_token(std::optional<int64_t> mask_token_id,
                                          const std::string& tokenizer_dir,
                                          const std::string& target_path, int64_t vocab_size);

}  // namespace tandem
