#include "tandem/core/device.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/DeviceAccelerator.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "tandem/core/error.h"
#include "tandem/core/host_transfers.h"

namespace tandem {

int64_t cuda_device_count() {
  if (!at::globalContext().hasCUDA()) return 0;
  return at::detail::getCUDAHooks().deviceCount();
}

c10::Device resolve_device(const std::string& spec, int64_t local_rank, const std::string& where) {
  const int64_t gpus = cuda_device_count();
  if (spec == "cpu") return c10::Device(c10::kCPU);
  if (spec == "auto" && gpus == 0) return c10::Device(c10::kCPU);
  int64_t index = local_rank;
  if (spec != "auto" && spec != "cuda") {
    const std::string prefix = "cuda:";
    check(spec.rfind(prefix, 0) == 0 && spec.size() > prefix.size() &&
              spec.find_first_not_of("0123456789", prefix.size()) == std::string::npos,
          "[device] ", where, ": '", spec, "' is not one of auto, cpu, cuda, cuda:N");
    index = std::stoll(spec.substr(prefix.size()));
  }
  check(gpus > 0, "[device] ", where, " = ", spec, ": no CUDA device is visible to this process (",
        at::globalContext().hasCUDA() ? "the driver reports none"
                                      : "this libtorch was built without CUDA, or no driver",
        "); use cpu, or auto to take a GPU only when there is one");
  check(index >= 0 && index < gpus, "[device] ", where, " = ", spec, ": cuda:", index,
        " does not exist (", gpus, " CUDA device", gpus == 1 ? "" : "s",
        " visible; under torchrun each rank takes cuda:LOCAL_RANK)");
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

void make_current(const c10::Device& device) {
  if (!device.is_cuda()) return;
  c10::impl::getDeviceGuardImpl(device.type())->setDevice(device);
}

std::string device_dtype_default(const c10::Device& device) {
  return device.is_cuda() ? "bf16" : "fp32";
}

void use_deterministic_algorithms(bool on) {
  // cuBLAS reads it when its first handle is made: set before any CUDA work.
  if (on) setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  at::globalContext().setDeterministicAlgorithms(on, /*warn_only=*/false);
  at::globalContext().setDeterministicCuDNN(on);
  if (on) at::globalContext().setBenchmarkCuDNN(false);
}

void use_tf32(bool on) {
  at::globalContext().setAllowTF32CuBLAS(on);
  at::globalContext().setAllowTF32CuDNN(on);
}

at::Tensor to_device(const at::Tensor& host, const c10::Device& device) {
  if (host.is_cpu()) detail::count_to_device(static_cast<int64_t>(host.nbytes()));
  if (host.device() == device) return host;
  if (!device.is_cuda() || !host.is_cpu()) return host.to(device);
  return (host.is_pinned() ? host : host.pin_memory()).to(device, /*non_blocking=*/true);
}

at::Tensor mask_indices(const at::Tensor& host_mask, const c10::Device& device) {
  check(host_mask.is_cpu(), "[device] mask_indices needs a host mask, got one on ",
        host_mask.device().str());
  return to_device(host_mask.reshape(-1).nonzero().squeeze(1), device);
}

void synchronize(const c10::Device& device) {
  if (device.is_cuda()) at::accelerator::synchronizeDevice(device.index());
}

double measure_matmul_peak(const c10::Device& device, c10::ScalarType dtype, int64_t n,
                           int repeats) {
  const at::TensorOptions options = at::TensorOptions().dtype(dtype).device(device);
  const at::Tensor a = at::randn({n, n}, options.dtype(at::kFloat)).to(dtype);
  const at::Tensor b = at::randn({n, n}, options.dtype(at::kFloat)).to(dtype);
  at::Tensor c = at::empty({n, n}, options);
  at::mm_out(c, a, b);  // warm-up (and cuBLAS's handle)
  synchronize(device);
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    at::mm_out(c, a, b);
    synchronize(device);
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return 2.0 * static_cast<double>(n) * n * n / best;
}

DeviceMemory device_memory(const c10::Device& device) {
  DeviceMemory memory;
  if (!device.is_cuda()) return memory;
  const auto stats = at::accelerator::getDeviceStats(device.index());
  constexpr size_t all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  memory.allocated = stats.allocated_bytes[all].current;
  memory.reserved = stats.reserved_bytes[all].current;
  memory.peak_allocated = stats.allocated_bytes[all].peak;
  memory.peak_reserved = stats.reserved_bytes[all].peak;
  return memory;
}

void reset_peak_memory(const c10::Device& device) {
  if (device.is_cuda()) at::accelerator::resetPeakStats(device.index());
}

}  // namespace tandem
