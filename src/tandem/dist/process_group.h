#pragma once
// A c10d process group (PyTorch's own distributed layer) behind a small interface: rendezvous
// through a c10d TCPStore, Gloo on CPU, NCCL on CUDA. An NCCL group also holds a Gloo group
// over the same ranks ("cpu:gloo,cuda:nccl", as PyTorch does): every collective goes by its
// tensor's device, CUDA tensors over NCCL and host tensors (metrics, text, checkpoint state)
// over Gloo, and barriers over Gloo. The c10d headers stay inside dist/, so
// nothing else needs Gloo's or NCCL's headers. Every collective turns a c10d failure (a peer
// that exited, a connection reset, the collective timeout) into a tandem Error naming the rank,
// the operation and the timeout, so a run ends with a clear message instead of hanging.
// ProcessGroup::single() is a group of one process where every operation is local.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tandem/dist/launch.h"

namespace c10d {
class Store;
}

namespace tandem::dist {

enum class Backend { Gloo, Nccl };

/// "gloo" | "nccl" | "auto" (NCCL when `cuda_available`, else Gloo). NCCL in a build without
/// it is an Error saying so.
Backend choose_backend(const std::string& name, bool cuda_available);
const char* backend_name(Backend backend);
/// Whether this binary was built with the NCCL backend (CUDA builds).
bool nccl_available();

/// Bytes each rank handed to the collectives (its input sizes), by kind: the benchmark's
/// "bytes moved per step".
struct CollectiveBytes {
  int64_t all_reduce = 0;
  int64_t broadcast = 0;
  int64_t all_gather = 0;
  int64_t reduce_scatter = 0;
  int64_t calls = 0;
  int64_t total() const { return all_reduce + broadcast + all_gather + reduce_scatter; }
  CollectiveBytes& operator+=(const CollectiveBytes& other) {
    all_reduce += other.all_reduce;
    broadcast += other.broadcast;
    all_gather += other.all_gather;
    reduce_scatter += other.reduce_scatter;
    calls += other.calls;
    return *this;
  }
};

class ProcessGroup {
 public:
  /// A group of one with no backend: every collective is the identity, nothing is connected.
  static std::shared_ptr<ProcessGroup> single();
  /// Connects to the job's other processes (blocks until all arrive or `timeout` passes).
  /// NCCL needs `device`, this rank's GPU (made current before NCCL starts).
  static std::shared_ptr<ProcessGroup> connect(const LaunchEnv& env, Backend backend,
                                               std::chrono::seconds timeout,
                                               c10::Device device = c10::Device(c10::kCPU));
  ~ProcessGroup();
  /// The group of `ranks` (ranks of this group, this rank among them), named `name`: every
  /// member calls it with the same list; disjoint groups may be formed at the same time.
  std::shared_ptr<ProcessGroup> subgroup(const std::vector<int64_t>& ranks,
                                         const std::string& name) const;

  int64_t rank() const { return rank_; }
  int64_t size() const { return size_; }
  Backend backend() const { return backend_; }
  std::chrono::seconds timeout() const { return timeout_; }

  /// In place: every rank's `tensor` becomes the element-wise sum over ranks.
  void all_reduce_sum(at::Tensor& tensor);
  /// In place: every rank's `tensor` becomes `root`'s (same dtype and shape on every rank).
  void broadcast(at::Tensor& tensor, int64_t root = 0);
  /// Every rank's `local` (same shape everywhere) stacked along dim 0: (size * n, ...).
  at::Tensor all_gather(const at::Tensor& local);
  /// `full` (size * n, ...) summed over ranks; this rank's n rows. Uses the backend's own
  /// reduce-scatter (Gloo and NCCL both have one), or, when `emulate`, an all-reduce and this
  /// rank's slice of it (same result, size times the traffic).
  at::Tensor reduce_scatter_sum(const at::Tensor& full, bool emulate = false);
  /// `text` becomes `root`'s on every rank (length first, then the bytes).
  void broadcast_text(std::string& text, int64_t root = 0);
  /// Sum of `value` over ranks.
  int64_t all_reduce_int64(int64_t value);
  /// Returns once every rank has called it.
  void barrier();

  const CollectiveBytes& bytes() const { return bytes_; }
  void reset_bytes() { bytes_ = {}; }

  struct Impl;  // the c10d objects (dist/process_group.cpp)

 private:
  ProcessGroup() = default;
  /// Creates the backend for this group's rank and size over `store`.
  void connect_backend(const c10::intrusive_ptr<c10d::Store>& store);
  std::unique_ptr<Impl> impl_;
  int64_t rank_ = 0;
  int64_t size_ = 1;
  Backend backend_ = Backend::Gloo;
  c10::Device device_{c10::kCPU};  // NCCL: this rank's GPU
  std::chrono::seconds timeout_{0};
  CollectiveBytes bytes_;
};

}  // namespace tandem::dist
