#include "tandem/text/normalizer.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/text/unicode_data.h"
#include "tandem/text/utf8.h"

namespace tandem {

namespace {

namespace ud = unicode_data;

uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const auto* begin = ud::kCombiningClasses;
  const auto* end = begin + ud::kCombiningClassCount;
  const auto* it = std::lower_bound(
      begin, end, cp,
      [](const ud::CombiningClass& entry, char32_t key) { return entry.code_point < key; });
  return it != end && it->code_point == cp ? it->combining_class : 0;
}

const ud::Decomposition* find_decomposition(const ud::Decomposition* table, size_t count,
                                            char32_t cp) {
  const auto* end = table + count;
  const auto* it = std::lower_bound(
      table, end, cp,
      [](const ud::Decomposition& entry, char32_t key) { return entry.code_point < key; });
  return it != end && it->code_point == cp ? it : nullptr;
}

// Hangul syllable arithmetic (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

template <typename Emit>
void decompose(NormalForm form, char32_t cp, Emit emit) {
  if (cp <= 0x7F) return emit(cp);
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    emit(kLBase + s / kNCount);
    emit(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount > 0) emit(kTBase + s % kTCount);
    return;
  }
  const ud::Decomposition* entry = nullptr;
  const char32_t* chars = nullptr;
  if (form == NormalForm::kNFKC) {
    entry = find_decomposition(ud::kCompatibilityDecompositions,
                               ud::kCompatibilityDecompositionCount, cp);
    chars = ud::kCompatibilityDecompositionChars;
  }
  if (!entry) {
    entry = find_decomposition(ud::kCanonicalDecompositions, ud::kCanonicalDecompositionCount, cp);
    chars = ud::kCanonicalDecompositionChars;
  }
  if (!entry) return emit(cp);
  for (uint32_t i = 0; i < entry->length; ++i) emit(chars[entry->offset + i]);
}

std::optional<char32_t> compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kNCount + (b - kVBase) * kTCount);
  if (a >= kSBase && a < kSBase + kSCount && b > kTBase && b < kTBase + kTCount &&
      (a - kSBase) % kTCount == 0)
    return a + (b - kTBase);
  const uint64_t key = (uint64_t(a) << 21) | b;
  const auto* end = ud::kCompositions + ud::kCompositionCount;
  const auto* it =
      std::lower_bound(ud::kCompositions, end, key,
                       [](const ud::Composition& entry, uint64_t k) { return entry.pair < k; });
  if (it != end && it->pair == key) return it->composed;
  return std::nullopt;
}

// One output char and HF's `change`: 0 replaces an input char, 1 is inserted, -N replaces one and
// removes the N after it.
struct Change {
  char32_t ch;
  int64_t change;
};

// The crate's Decompositions iterator, run to the end: decompose each char (first piece change 0,
// the rest 1), then stably sort runs of non-starters by combining class.
std::vector<Change> decompose_all(NormalForm form, std::string_view text) {
  struct Entry {
    uint8_t ccc;
    Change change;
  };
  std::vector<Entry> buffer;
  size_t pending = 0;
  auto sort_pending = [&] {
    std::stable_sort(buffer.begin() + pending, buffer.end(),
                     [](const Entry& a, const Entry& b) { return a.ccc < b.ccc; });
    pending = buffer.size();
  };
  for (size_t pos = 0; pos < text.size();) {
    const char32_t cp = utf8::next(text, pos);
    bool first = true;
    decompose(form, cp, [&](char32_t d) {
      const uint8_t ccc = combining_class(d);
      if (ccc == 0) sort_pending();
      buffer.push_back({ccc, {d, first ? 0 : 1}});
      first = false;
    });
  }
  sort_pending();
  std::vector<Change> out;
  out.reserve(buffer.size());
  for (const Entry& e : buffer) out.push_back(e.change);
  return out;
}

// The crate's Recompositions iterator (canonical composition), including how it merges changes:
// a composed char takes k.change + change - 1.
std::vector<Change> recompose_all(const std::vector<Change>& decomposed) {
  std::vector<Change> out;
  std::vector<Change> buffer;
  std::optional<Change> composee;
  int last_ccc = -1;  // class of the last buffered char; -1 when the buffer is empty
  for (const Change& item : decomposed) {
    const uint8_t ch_class = combining_class(item.ch);
    if (!composee) {
      if (ch_class != 0) {
        out.push_back(item);
        continue;
      }
      composee = item;
      continue;
    }
    const Change k = *composee;
    if (last_ccc < 0) {
      if (auto r = compose(k.ch, item.ch)) {
        composee = Change{*r, k.change + item.change - 1};
        continue;
      }
      if (ch_class == 0) {
        composee = item;
        out.push_back(k);
        continue;
      }
      buffer.push_back(item);
      last_ccc = ch_class;
      continue;
    }
    if (last_ccc >= ch_class) {
      // `item` is blocked from the composee.
      if (ch_class == 0) {
        composee = item;
        last_ccc = -1;
        out.push_back(k);  // the crate returns k, then purges the buffer
        out.insert(out.end(), buffer.begin(), buffer.end());
        buffer.clear();
        continue;
      }
      buffer.push_back(item);
      last_ccc = ch_class;
      continue;
    }
    if (auto r = compose(k.ch, item.ch)) {
      composee = Change{*r, k.change + item.change - 1};
      continue;
    }
    buffer.push_back(item);
    last_ccc = ch_class;
  }
  if (composee) out.push_back(*composee);
  out.insert(out.end(), buffer.begin(), buffer.end());
  return out;
}

// What normalization may do to a code point, for skipping text it leaves alone.
enum : uint8_t {
  kCombines = 1,     // a non-starter, or the second char of some composition
  kChangesNfc = 2,   // NFC of the char alone differs from it
  kChangesNfkc = 4,  // NFKC of the char alone differs from it
};

const std::vector<uint8_t>& properties() {
  static const std::vector<uint8_t> table = [] {
    std::vector<uint8_t> t(0x110000, 0);
    for (size_t i = 0; i < ud::kCombiningClassCount; ++i)
      if (ud::kCombiningClasses[i].combining_class != 0)
        t[ud::kCombiningClasses[i].code_point] |= kCombines;
    for (size_t i = 0; i < ud::kCompositionCount; ++i)
      t[ud::kCompositions[i].pair & 0x1FFFFF] |= kCombines;
    for (char32_t cp = kVBase; cp < kVBase + kVCount; ++cp) t[cp] |= kCombines;
    for (char32_t cp = kTBase + 1; cp < kTBase + kTCount; ++cp) t[cp] |= kCombines;
    auto changes_alone = [](NormalForm form, char32_t cp) {
      std::string text;
      utf8::append(text, cp);
      const std::vector<Change> out = recompose_all(decompose_all(form, text));
      return out.size() != 1 || out[0].ch != cp;
    };
    for (size_t i = 0; i < ud::kCanonicalDecompositionCount; ++i) {
      const char32_t cp = ud::kCanonicalDecompositions[i].code_point;
      if (changes_alone(NormalForm::kNFC, cp)) t[cp] |= kChangesNfc;
      if (changes_alone(NormalForm::kNFKC, cp)) t[cp] |= kChangesNfkc;
    }
    for (size_t i = 0; i < ud::kCompatibilityDecompositionCount; ++i)
      t[ud::kCompatibilityDecompositions[i].code_point] |= kChangesNfkc;
    return t;
  }();
  return table;
}

}  // namespace

bool normalize(NormalForm form, std::string_view text, const Alignment* alignments, size_t origin,
               AlignedText& out) {
  // Only chunks holding a char that may change or combine need the full algorithm. A chunk starts
  // at a char that neither changes nor combines: there the crate's iterators have emitted
  // everything before, so chunks can be normalized one by one.
  const std::vector<uint8_t>& props = properties();
  const uint8_t mask = kCombines | (form == NormalForm::kNFC ? kChangesNfc : kChangesNfkc);
  auto code_point_at = [&](size_t pos) {
    return static_cast<unsigned char>(text[pos]) < 0x80 ? char32_t(text[pos])
                                                        : utf8::next(text, pos);
  };
  bool any = false;
  for (size_t pos = 0; pos < text.size() && !any;) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    any = (props[utf8::next(text, pos)] & mask) != 0;
  }
  if (!any) return false;

  auto old_alignment = [&](size_t byte) -> Alignment {
    if (alignments) return alignments[byte];
    size_t begin = byte;
    while (begin > 0 && utf8::is_continuation(static_cast<unsigned char>(text[begin]))) --begin;
    const size_t end = begin + utf8::sequence_length(static_cast<unsigned char>(text[begin]));
    return {static_cast<uint32_t>(origin + begin), static_cast<uint32_t>(origin + end)};
  };
  const uint32_t start = alignments ? alignments[0].first : static_cast<uint32_t>(origin);
  out.text.clear();
  out.alignments.clear();
  out.text.reserve(text.size() + 16);
  out.alignments.reserve(text.size() + 16);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = pos;
    bool dirty = false;
    do {
      dirty = dirty || (props[code_point_at(end)] & mask) != 0;
      end += utf8::sequence_length(static_cast<unsigned char>(text[end]));
    } while (end < text.size() && (props[code_point_at(end)] & mask) != 0);
    if (!dirty) {
      out.text.append(text.substr(pos, end - pos));
      for (size_t byte = pos; byte < end; ++byte) out.alignments.push_back(old_alignment(byte));
      pos = end;
      continue;
    }
    // HF's NormalizedString::transform with this chunk's (char, change) stream.
    size_t offset = pos;  // byte offset in `text` of the next input char to consume
    auto consume = [&] {
      check(offset < end, "[tokenizer] internal error: normalization consumed past its chunk");
      offset += utf8::sequence_length(static_cast<unsigned char>(text[offset]));
    };
    for (const Change& c : recompose_all(decompose_all(form, text.substr(pos, end - pos)))) {
      Alignment align;
      if (c.change > 0) {
        align = offset < 1 ? Alignment{start, start} : old_alignment(offset - 1);
      } else {
        check(offset < end, "[tokenizer] internal error: normalization alignment overrun");
        align = old_alignment(offset);
        consume();
        for (int64_t i = 0; i < -c.change; ++i) consume();
      }
      utf8::append(out.text, c.ch);
      out.alignments.insert(out.alignments.end(), utf8::encoded_length(c.ch), align);
    }
    pos = end;
  }
  return true;
}

std::string normalize_string(NormalForm form, std::string_view text) {
  AlignedText out;
  if (!normalize(form, text, nullptr, 0, out)) return std::string(text);
  return out.text;
}

}  // namespace tandem
