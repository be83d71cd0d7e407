#include "tandem/dist/weight_checksum.h"

#include <ATen/ATen.h>

#include "tandem/dist/sharding.h"

namespace tandem {

namespace {

uint64_t mix(uint64_t digest, uint64_t value) {  // FNV-1a over the 8 bytes of value
  for (int byte = 0; byte < 8; ++byte) {
    digest ^= (value >> (8 * byte)) & 0xff;
    digest *= 0x100000001b3ULL;
  }
  return digest;
}

// The tensor's bits as integers of the same width.
at::Tensor as_integers(const at::Tensor& tensor) {
  const at::Tensor flat = tensor.detach().contiguous().view(-1);
  switch (flat.element_size()) {
    case 1:
      return flat.view(at::kByte);
    case 2:
      return flat.view(at::kShort);
    case 4:
      return flat.view(at::kInt);
    default:
      return flat.view(at::kLong);
  }
}

}  // namespace

uint64_t weights_checksum(const std::vector<at::Tensor>& weights) {
  uint64_t digest = 0xcbf29ce484222325ULL;
  constexpr int64_t kChunk = int64_t{1} << 22;  // elements per step: bounded int64 temporaries
  for (const at::Tensor& weight : weights) {
    const FullParameters full({weight});
    digest = mix(digest, static_cast<uint64_t>(weight.scalar_type()));
    for (int64_t size : weight.sizes()) digest = mix(digest, static_cast<uint64_t>(size));
    const at::Tensor bits = as_integers(weight);
    for (int64_t start = 0; start < bits.numel(); start += kChunk) {
      const int64_t count = std::min(kChunk, bits.numel() - start);
      // sum of bits[i] * (i mod p + 1) and of bits[i]^2: position- and value-sensitive, wrapping
      // in int64 the same way on every device.
      const at::Tensor values = bits.narrow(0, start, count).to(at::kLong);
      const at::Tensor positions =
          at::arange(start, start + count, values.options()).remainder(1000003) + 1;
      const at::Tensor sums = at::stack({(values * positions).sum(), (values * values).sum()});
      const at::Tensor host = sums.cpu();
      digest = mix(digest, static_cast<uint64_t>(host[0].item<int64_t>()));
      digest = mix(digest, static_cast<uint64_t>(host[1].item<int64_t>()));
    }
  }
  return digest;
}

}  // namespace tandem
