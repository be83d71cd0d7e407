#pragma once
// Added tokens are found in the text before the model runs, as HF's AddedVocabulary does:
// leftmost-longest matches, then single_word / lstrip / rstrip applied to each match. Tokens with
// `normalized: false` are matched on the raw text, the others on the normalized text.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/text/tokenizer.h"

namespace tandem {

/// A found added token: its id and the byte range it takes (stripped whitespace included).
struct AddedMatch {
  int32_t id;
  size_t begin, end;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  /// Matches `patterns[i]` as token `tokens[i]` (pattern = content, or its normalized form).
  AddedTokenMatcher(const std::vector<const AddedToken*>& tokens,
                    const std::vector<std::string>& patterns);

  bool empty() const { return nodes_.empty(); }
  /// The matches in `text`, in order, non-overlapping.
  void find(std::string_view text, std::vector<AddedMatch>& matches) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
    int32_t token = -1;                                       // index into tokens_
  };
  int32_t child(int32_t node, unsigned char byte) const;

  std::vector<Node> nodes_;  // nodes_[0] is the root
  int32_t root_children_[256];
  std::vector<const AddedToken*> tokens_;
};

}  // namespace tandem
