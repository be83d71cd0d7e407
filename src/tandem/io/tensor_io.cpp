#include "tandem/io/tensor_io.h"

#include <ATen/ATen.h>

#include <cstring>

#include "tandem/core/error.h"

namespace tandem {

using safetensors::Dtype;

c10::ScalarType to_scalar_type(Dtype dtype, const std::string& where) {
  switch (dtype) {
    case Dtype::BOOL:
      return at::kBool;
    case Dtype::U8:
      return at::kByte;
    case Dtype::I8:
      return at::kChar;
    case Dtype::I16:
      return at::kShort;
    case Dtype::U16:
      return at::kUInt16;
    case Dtype::F16:
      return at::kHalf;
    case Dtype::BF16:
      return at::kBFloat16;
    case Dtype::I32:
      return at::kInt;
    case Dtype::U32:
      return at::kUInt32;
    case Dtype::F32:
      return at::kFloat;
    case Dtype::F64:
      return at::kDouble;
    case Dtype::I64:
      return at::kLong;
    case Dtype::U64:
      return at::kUInt64;
    case Dtype::F8_E4M3:
      return at::kFloat8_e4m3fn;
    case Dtype::F8_E5M2:
      return at::kFloat8_e5m2;
  }
  throw Error("[safetensors] ", where, ": dtype has no libtorch equivalent");
}

Dtype to_safetensors_dtype(c10::ScalarType dtype) {
  switch (dtype) {
    case at::kBool:
      return Dtype::BOOL;
    case at::kByte:
      return Dtype::U8;
    case at::kChar:
      return Dtype::I8;
    case at::kShort:
      return Dtype::I16;
    case at::kUInt16:
      return Dtype::U16;
    case at::kHalf:
      return Dtype::F16;
    case at::kBFloat16:
      return Dtype::BF16;
    case at::kInt:
      return Dtype::I32;
    case at::kUInt32:
      return Dtype::U32;
    case at::kFloat:
      return Dtype::F32;
    case at::kDouble:
      return Dtype::F64;
    case at::kLong:
      return Dtype::I64;
    case at::kUInt64:
      return Dtype::U64;
    case at::kFloat8_e4m3fn:
      return Dtype::F8_E4M3;
    case at::kFloat8_e5m2:
      return Dtype::F8_E5M2;
    default:
      throw Error("[safetensors] cannot store dtype ", c10::toString(dtype));
  }
}

at::Tensor read_tensor(const safetensors::File& file, const safetensors::TensorInfo& info) {
  const auto dtype = to_scalar_type(info.dtype, file.path() + " tensor '" + info.name + "'");
  at::Tensor out = at::empty(info.shape, at::TensorOptions().dtype(dtype));
  // memcpy rather than from_blob: mmapped data need not be aligned for the element type.
  if (info.nbytes() > 0) std::memcpy(out.data_ptr(), file.data(info), info.nbytes());
  return out;
}

void write_tensors(const std::string& path,
                   const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                   const std::map<std::string, std::string>& metadata) {
  std::vector<at::Tensor> contiguous;  // keeps the CPU copies alive until written
  std::vector<safetensors::TensorToWrite> records;
  contiguous.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    contiguous.push_back(tensor.detach().to(at::kCPU).contiguous());
    const at::Tensor& t = contiguous.back();
    records.push_back({name, to_safetensors_dtype(t.scalar_type()), t.sizes().vec(), t.data_ptr(),
                       static_cast<size_t>(t.nbytes())});
  }
  safetensors::write_file(path, records, metadata);
}

}  // namespace tandem
