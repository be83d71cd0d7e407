#include "tandem/text/segment.h"

#include "tandem/text/utf8.h"

namespace tandem {

std::pair<size_t, size_t> Segment::input_range(size_t begin, size_t end) const {
  if (alignments) return {alignments[begin].first, alignments[end - 1].second};
  while (begin > 0 && utf8::is_continuation(static_cast<unsigned char>(text[begin]))) --begin;
  while (end < text.size() && utf8::is_continuation(static_cast<unsigned char>(text[end]))) ++end;
  return {origin + begin, origin + end};
}

void replace_ranges(const Segment& segment, const TextRanges& matches, std::string_view content,
                    AlignedText& out) {
  out.text.clear();
  out.alignments.clear();
  size_t position = 0;
  auto keep = [&](size_t end) {
    out.text.append(segment.text.substr(position, end - position));
    for (size_t i = position; i < end; ++i) out.alignments.push_back(segment.alignment(i));
  };
  for (const auto& [begin, end] : matches) {
    keep(begin);
    const Alignment last = segment.alignment(end - 1);
    out.text.append(content);
    out.alignments.insert(out.alignments.end(), content.size(), last);
    position = end;
  }
  keep(segment.text.size());
}

void prepend_aligned(const Segment& segment, std::string_view prefix, AlignedText& out) {
  out.text.assign(prefix);
  out.text.append(segment.text);
  out.alignments.assign(prefix.size(), segment.alignment(0));
  for (size_t i = 0; i < segment.text.size(); ++i) out.alignments.push_back(segment.alignment(i));
}

}  // namespace tandem
