#include "tandem/models/key_bands.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "tandem/core/device.h"
#include "tandem/core/error.h"
#include "tandem/models/decoder.h"

namespace tandem {

KeyBands KeyBands::from_host(at::Tensor first_host, at::Tensor last_host,
                             const c10::Device& device) {
  check(first_host.is_cpu() && last_host.is_cpu() && first_host.dim() == 2 &&
            first_host.sizes() == last_host.sizes(),
        "[attention] key bands must be two (B, Tq) tensors on the CPU, got ", first_host.sizes(),
        " and ", last_host.sizes());
  KeyBands bands;
  bands.first_host = first_host.to(at::kLong).contiguous();
  bands.last_host = last_host.to(at::kLong).contiguous();
  bands.first = to_device(bands.first_host, device);
  bands.last = to_device(bands.last_host, device);
  return bands;
}

at::Tensor KeyBands::dense_mask(int64_t keys) const {
  const at::Tensor columns = at::arange(keys, first.options()).view({1, 1, keys});
  return (columns >= first.unsqueeze(2)).logical_and(columns <= last.unsqueeze(2));
}

double KeyBands::visible_pairs() const {
  return (last_host - first_host + 1).clamp_min(0).sum().item<double>();
}

std::vector<std::vector<int64_t>> document_bounds(const at::Tensor& document_ids_host) {
  const at::Tensor ids = document_ids_host.to(at::kLong).contiguous();
  check(ids.is_cpu() && ids.dim() == 2, "[attention] document ids must be (B, T) on the CPU, got ",
        ids.sizes(), " on ", ids.device().str());
  const int64_t rows = ids.size(0), length = ids.size(1);
  const int64_t* id = ids.data_ptr<int64_t>();
  std::vector<std::vector<int64_t>> bounds(static_cast<size_t>(rows));
  for (int64_t b = 0; b < rows; ++b) {
    std::vector<int64_t>& row = bounds[static_cast<size_t>(b)];
    row.push_back(0);
    for (int64_t t = 1; t < length; ++t)
      if (id[b * length + t] != id[b * length + t - 1]) row.push_back(t);
    row.push_back(length);
  }
  return bounds;
}

at::Tensor document_starts(const at::Tensor& document_ids_host) {
  const std::vector<std::vector<int64_t>> bounds = document_bounds(document_ids_host);
  const int64_t rows = document_ids_host.size(0), length = document_ids_host.size(1);
  at::Tensor starts = at::empty({rows, length}, at::kLong);
  int64_t* start = starts.data_ptr<int64_t>();
  for (int64_t b = 0; b < rows; ++b) {
    const std::vector<int64_t>& row = bounds[static_cast<size_t>(b)];
    for (size_t i = 0; i + 1 < row.size(); ++i)
      std::fill(start + b * length + row[i], start + b * length + row[i + 1], row[i]);
  }
  return starts;
}

KeyBands causal_key_bands(const AttentionLayout& layout, int64_t sliding_window) {
  const int64_t rows = layout.positions.size(0), length = layout.positions.size(1);
  const at::Tensor columns = at::arange(length, at::TensorOptions().dtype(at::kLong))
                                 .view({1, length})
                                 .expand({rows, length});
  at::Tensor first = layout.document_ids.defined() ? document_starts(layout.host_document_ids())
                                                   : at::zeros({rows, length}, at::kLong);
  if (sliding_window > 0) first = at::maximum(first, columns - (sliding_window - 1));
  return KeyBands::from_host(first, columns.contiguous(), layout.positions.device());
}

}  // namespace tandem
