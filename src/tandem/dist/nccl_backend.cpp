// The NCCL backend, compiled with USE_C10D_NCCL and TANDEM_WITH_NCCL in CUDA builds (the wheel's
// libtorch_cuda carries ProcessGroupNCCL; nccl.h and the CUDA runtime headers come from its
// nvidia/ packages). Without them this file only says NCCL is not built.
#include "tandem/core/error.h"
#include "tandem/dist/backends.h"

#ifdef TANDEM_WITH_NCCL
#include <c10/cuda/CUDAFunctions.h>

#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace tandem::dist {

#ifdef TANDEM_WITH_NCCL

bool nccl_built() { return true; }

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout,
                                                    int device_index) {
  // NCCL picks its GPU from the current device: each rank must be on its own before it starts.
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(device_index));
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
  backend->setBoundDeviceId(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device_index)));
  return backend;
}

#else

bool nccl_built() { return false; }

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>&, int,
                                                    int, std::chrono::milliseconds, int) {
  throw Error("[dist] this tandem was built without NCCL (a CPU-only libtorch, or the wheel ",
              "lacks nccl.h): use distributed.backend: gloo");
}

#endif

}  // namespace tandem::dist
