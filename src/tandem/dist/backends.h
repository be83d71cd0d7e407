#pragma once
// Internal to dist/: the c10d backends, each built in its own translation unit so only that one
// needs its library's headers (gloo_backend.cpp: Debian's libgloo-dev; nccl_backend.cpp: the
// wheel's nccl.h and CUDA runtime headers, CUDA builds only).
#include <chrono>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace tandem::dist {

/// Gloo over TCP; `host` is the address its sockets bind ("127.0.0.1" keeps a one-machine job
/// on loopback; "" lets Gloo pick the interface of this machine's hostname).
c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout,
                                                    const std::string& host);

/// NCCL on CUDA device `device_index` (made the current device first, and bound to the group);
/// an Error in a build without NCCL.
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout,
                                                    int device_index);
bool nccl_built();

}  // namespace tandem::dist
