#pragma once
// Which device a run computes on, decided once (docs/gpu.md): `training.device` or a subcommand's
// `--device` = auto | cpu | cuda | cuda:N. auto is CUDA when this libtorch can reach a GPU, else
// the CPU; under torchrun/Slurm a plain "cuda" (or auto) means cuda:LOCAL_RANK. Everything here
// goes through ATen's device-generic hooks, so this file needs no CUDA headers and the same
// binary runs on machines with and without a GPU.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>

namespace tandem {

/// Number of CUDA devices this process can use (0 without a GPU or a CUDA libtorch).
int64_t cuda_device_count();

/// Parses `spec` (auto | cpu | cuda | cuda:N) into a device. `local_rank` picks the GPU of a
/// plain "cuda" or of auto in a multi-process job. A CUDA device that is not there is an Error
/// naming `where` (the config key or flag) and what was found.
c10::Device resolve_device(const std::string& spec, int64_t local_rank, const std::string& where);

/// Makes `device` this process's current CUDA device (no-op on the CPU): called once where a run
/// decides its device. Device allocators and libraries that take no device argument (the caching
/// allocator's raw allocations, NCCL, cuBLAS handles) use the current device; without it every
/// rank of a multi-GPU job would also use cuda:0.
void make_current(const c10::Device& device);

/// The dtype a model gets on `device` when its config does not name one, frozen (target,
/// teacher, reference) or trained (whose masters and AdamW moments stay fp32 either way): bf16 on
/// a GPU, fp32 on the CPU. A run resumed on the other kind of device must name its dtype.
std::string device_dtype_default(const c10::Device& device);

/// Deterministic algorithms on (training.deterministic): ATen's deterministic mode, cuDNN
/// deterministic with benchmarking off, and cuBLAS's fixed workspace (CUBLAS_WORKSPACE_CONFIG,
/// set before cuBLAS starts). Slower on CUDA; the CPU is deterministic already.
void use_deterministic_algorithms(bool on);

/// TF32 tensor cores for fp32 matmuls (cuBLAS) and convolutions (cuDNN) on NVIDIA GPUs
/// (training.tf32); off by default, so fp32 stays fp32. No effect on the CPU or on bf16.
void use_tf32(bool on);

/// `host` (a CPU tensor) on `device`: pinned and copied without waiting when `device` is a GPU
/// (the copy is ordered before later work on the device's stream); itself on the CPU.
at::Tensor to_device(const at::Tensor& host, const c10::Device& device);

/// The flat indices (N,) int64 of the true entries of `host_mask` (a CPU bool tensor, read
/// row-major), on `device`. Boolean indexing of a device tensor makes the host wait for the
/// device to count the entries; indices computed on the host and index_select do not.
at::Tensor mask_indices(const at::Tensor& host_mask, const c10::Device& device);

/// Blocks until the work queued on `device` is done (a no-op on the CPU): for timers only.
void synchronize(const c10::Device& device);

/// Achieved FLOP/s of an (n x n) @ (n x n) matmul in `dtype` on `device` (best of `repeats`
/// after a warm-up; the device is waited for around each): the practical matmul peak, the
/// denominator of model FLOP utilisation.
double measure_matmul_peak(const c10::Device& device, c10::ScalarType dtype, int64_t n,
                           int repeats);

/// Caching-allocator figures of a CUDA device, in bytes.
struct DeviceMemory {
  int64_t allocated = 0;       // held by live tensors now
  int64_t reserved = 0;        // held by the allocator now (allocated + cached)
  int64_t peak_allocated = 0;  // since the last reset_peak_memory
  int64_t peak_reserved = 0;
};

/// The allocator's figures for `device` (all zero on the CPU: use the process's RSS there).
DeviceMemory device_memory(const c10::Device& device);
/// Starts the peak figures of `device` afresh (no-op on the CPU).
void reset_peak_memory(const c10::Device& device);

}  // namespace tandem
