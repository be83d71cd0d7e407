#include "tandem/models/key_bands.h"

#include <ATen/ATen.h>

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

at::Tensor document_starts(const at::Tensor& document_ids_host) {
  const at::Tensor ids = document_ids_host.to(at::kLong).contiguous();
  check(ids.is_cpu() && ids.dim() == 2, "[attention] document ids must be (B, T) on the CPU, got ",
        ids.sizes(), " on ", ids.device().str());
  at::Tensor starts = at::empty_like(ids);
  const int64_t rows = ids.size(0), length = ids.size(1);
  const int64_t* id = ids.data_ptr<int64_t>();
  int64_t* start = starts.data_ptr<int64_t>();
  for (int64_t b = 0; b < rows; ++b) {
    int64_t current = 0;
    for (int64_t t = 0; t < length; ++t) {
      const int64_t at = b * length + t;
      if (t > 0 && id[at] != id[at - 1]) current = t;
      start[at] = current;
    }
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
