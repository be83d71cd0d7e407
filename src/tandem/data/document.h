#pragma once
// The unit every dataset yields and every packer consumes: one tokenized document.
#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

struct TokenizedDocument {
  std::vector<int32_t> ids;        // (T,) token ids
  std::vector<uint8_t> loss_mask;  // (T,) 1 where the token is a training target
  std::string source;              // "file:line" for error messages and `data inspect`
};

}  // namespace tandem
