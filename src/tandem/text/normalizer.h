#pragma once
// NFC / NFKC with HF tokenizers' offset alignments: every byte of the normalized text knows the
// byte range of the input it came from, computed exactly as HF's NormalizedString::transform does
// with the (char, change) stream of the unicode-normalization-alignments crate (Unicode 9.0 data).
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tandem/text/segment.h"

namespace tandem {

enum class NormalForm { kNFC, kNFKC };

/// Normalizes `text`, whose byte i came from input range `alignments[i]` (or, when `alignments`
/// is null, from its character's range shifted by `origin`) into `out`. Returns false, leaving
/// `out` alone, when normalization cannot change the text (the common case).
bool normalize(NormalForm form, std::string_view text, const Alignment* alignments, size_t origin,
               AlignedText& out);

/// The normalized string only (for added tokens' `normalized` content).
std::string normalize_string(NormalForm form, std::string_view text);

}  // namespace tandem
