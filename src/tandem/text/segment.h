#pragma once
// Text on its way through a tokenizer: a run of (normalized) text that knows, byte by byte, which
// bytes of the input it came from, and the two edits SentencePiece-style components make to it
// (replacing matches, prepending), aligned exactly as HF tokenizers' NormalizedString aligns them.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tandem/text/regex.h"

namespace tandem {

/// Input byte range [first, second) of one byte of a normalized text.
using Alignment = std::pair<uint32_t, uint32_t>;

/// A normalized text and, per byte, the input range it came from.
struct AlignedText {
  std::string text;
  std::vector<Alignment> alignments;  // text.size() entries
};

/// A view of text with its alignments: either per byte (`alignments`, e.g. into an AlignedText)
/// or, when `alignments` is null, the input itself from byte `origin` on.
struct Segment {
  std::string_view text;
  const Alignment* alignments = nullptr;
  size_t origin = 0;

  static Segment of(const AlignedText& aligned, size_t origin) {
    return {aligned.text, aligned.alignments.data(), origin};
  }
  Segment sub(size_t begin, size_t end) const {
    return {text.substr(begin, end - begin), alignments ? alignments + begin : nullptr,
            alignments ? origin : origin + begin};
  }
  /// Input byte range of bytes [begin, end) of text, widened to whole characters (HF's
  /// NormalizedString::convert_offsets).
  std::pair<size_t, size_t> input_range(size_t begin, size_t end) const;
  /// The input range of one byte (for an unnormalized text: its whole character's).
  Alignment alignment(size_t byte) const {
    const auto [begin, end] = input_range(byte, byte + 1);
    return {static_cast<uint32_t>(begin), static_cast<uint32_t>(end)};
  }
};

/// Byte ranges [first, second) of matches in a text (Regex::find_all's).
using TextRanges = std::vector<Match>;

/// `segment` with each range of `matches` (sorted, disjoint) replaced by `content` into `out`. The
/// bytes of each inserted `content` take the alignment of the last byte it replaces; the other
/// bytes keep theirs (HF NormalizedString::replace).
void replace_ranges(const Segment& segment, const TextRanges& matches, std::string_view content,
                    AlignedText& out);

/// `prefix` + `segment` into `out`, the prefix aligned with the first character (HF
/// NormalizedString::prepend). `segment` must not be empty.
void prepend_aligned(const Segment& segment, std::string_view prefix, AlignedText& out);

}  // namespace tandem
