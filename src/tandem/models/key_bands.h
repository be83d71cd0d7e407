#pragma once
// Which context keys each query may see, as one contiguous range per query: [first, last]
// (empty when last < first). Every attention in tandem fits this form because packed documents
// are contiguous runs of a row (data/packing.h):
//   - causal within documents: [start of the query's document, t] (and t - window + 1 for a
//     sliding window);
//   - a DFlash block: [start of the anchor's document, anchor - 1].
// Two (B, Tq) int64 tensors instead of a (B, Tq, Tk) mask: the blockwise kernel forms each
// tile's mask from them and skips tiles no query sees. Host copies choose the tiles without
// waiting for the device.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <vector>

namespace tandem {

struct AttentionLayout;  // models/decoder.h

struct KeyBands {
  at::Tensor first, last;            // (B, Tq) int64 on the compute device
  at::Tensor first_host, last_host;  // the same on the CPU

  /// Bands computed on the host, copied once to `device`.
  static KeyBands from_host(at::Tensor first_host, at::Tensor last_host, const c10::Device& device);
  int64_t rows() const { return first_host.size(0); }     // B
  int64_t queries() const { return first_host.size(1); }  // Tq
  /// The same visibility as a dense mask (B, Tq, keys) bool on the device: for the dense
  /// reference kernels and tests only.
  at::Tensor dense_mask(int64_t keys) const;
  /// Number of visible (query, key) pairs, counted on the host (for model FLOPs).
  double visible_pairs() const;
};

/// Per row, the columns where its documents start, then T: [0, s_1, ..., T]. document_ids
/// (B, T) on the CPU, documents contiguous in each row.
std::vector<std::vector<int64_t>> document_bounds(const at::Tensor& document_ids_host);
/// For each token, the column where its document starts: (B, T) int64 on the CPU.
at::Tensor document_starts(const at::Tensor& document_ids_host);

/// Causal attention within documents (the layout's), limited to the last `sliding_window` keys
/// when it is > 0: query t sees [max(start of its document, t - window + 1), t].
KeyBands causal_key_bands(const AttentionLayout& layout, int64_t sliding_window = 0);

}  // namespace tandem
