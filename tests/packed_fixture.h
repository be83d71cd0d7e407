#pragma once
// The documents of a packed fixture batch (input_ids, loss_mask, document_ids, padding_mask of a
// reference file), in row order, so tandem's packer can rebuild the batch.
#include <ATen/ATen.h>

#include <map>
#include <string>
#include <vector>

#include "tandem/data/packing.h"

namespace tandem::testing {

inline std::vector<TokenizedDocument> packed_fixture_documents(
    const std::map<std::string, at::Tensor>& reference) {
  const at::Tensor ids = reference.at("input_ids"), loss = reference.at("loss_mask");
  const at::Tensor documents = reference.at("document_ids"), real = reference.at("padding_mask");
  std::vector<TokenizedDocument> out;
  for (int64_t row = 0; row < ids.size(0); ++row) {
    int64_t current = -1;
    for (int64_t t = 0; t < ids.size(1) && real[row][t].item<int64_t>() != 0; ++t) {
      if (documents[row][t].item<int64_t>() != current) {
        current = documents[row][t].item<int64_t>();
        out.emplace_back();
      }
      out.back().ids.push_back(static_cast<int32_t>(ids[row][t].item<int64_t>()));
      out.back().loss_mask.push_back(static_cast<uint8_t>(loss[row][t].item<int64_t>()));
    }
  }
  return out;
}

}  // namespace tandem::testing
