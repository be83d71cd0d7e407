#include "tandem/dist/process_group.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <iostream>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "tandem/core/error.h"
#include "tandem/dist/backends.h"

namespace tandem::dist {

struct ProcessGroup::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> backend;       // the group's own: Gloo or NCCL
  c10::intrusive_ptr<c10d::Backend> host_backend;  // NCCL groups: Gloo for host tensors
  std::string host;  // Gloo's device address ("" = the default interface)

  /// The backend that moves `tensor`: NCCL takes device memory only.
  c10d::Backend& for_tensor(const at::Tensor& tensor) const {
    return host_backend && !tensor.is_cuda() ? *host_backend : *backend;
  }
  /// The backend for barriers and other host-side synchronisation.
  c10d::Backend& for_host() const { return host_backend ? *host_backend : *backend; }

  // NCCL's communicators are shut down before the group (and the store they met through) goes:
  // c10d asks for it, and without it the exit may wait on NCCL's watchdog. Gloo needs nothing.
  ~Impl() {
    if (!host_backend) return;  // a Gloo group
    try {
      backend->shutdown();
    } catch (const std::exception& error) {
      std::cerr << "[dist] NCCL shutdown failed: " << error.what() << "\n";
    }
  }
};

namespace {

using Clock = std::chrono::steady_clock;

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

}  // namespace

Backend choose_backend(const std::string& name, bool cuda_available) {
  if (name == "gloo") return Backend::Gloo;
  if (name == "nccl" || (name == "auto" && cuda_available)) {
    check(nccl_built(), "[dist] this tandem was built without NCCL (a CPU-only libtorch, or the ",
          "wheel lacks nccl.h): use distributed.backend: gloo");
    return Backend::Nccl;
  }
  check(name == "auto", "[dist] backend '", name, "' is not one of auto, gloo, nccl");
  return Backend::Gloo;
}

const char* backend_name(Backend backend) { return backend == Backend::Nccl ? "nccl" : "gloo"; }

bool nccl_available() { return nccl_built(); }

std::shared_ptr<ProcessGroup> ProcessGroup::single() {
  return std::shared_ptr<ProcessGroup>(new ProcessGroup());
}

std::shared_ptr<ProcessGroup> ProcessGroup::connect(const LaunchEnv& env, Backend backend,
                                                    std::chrono::seconds timeout,
                                                    c10::Device device) {
  check(backend != Backend::Nccl || device.is_cuda(), "[dist] rank ", env.rank,
        ": NCCL needs this rank's CUDA device, got ", device.str());
  std::shared_ptr<ProcessGroup> group(new ProcessGroup());
  group->rank_ = env.rank;
  group->size_ = env.world_size;
  group->backend_ = backend;
  group->device_ = device;
  group->timeout_ = timeout;
  // A group of one connects too (a real backend whose collectives are local): the GPU check
  // runs NCCL this way on a one-GPU machine. ProcessGroup::single() is the unconnected one.
  group->impl_ = std::make_unique<Impl>();
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<uint16_t>(env.port);
    store_options.isServer = env.rank == 0 && !env.agent_hosts_store;
    store_options.numWorkers = static_cast<int>(env.world_size);
    store_options.waitWorkers = false;
    store_options.timeout = timeout;
    group->impl_->store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, store_options);
    group->impl_->host = is_loopback(env.master_addr) ? "127.0.0.1" : "";
    group->connect_backend(group->impl_->store);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& error) {
    throw Error("[dist] rank ", env.rank, " of ", env.world_size, ": could not join the job at ",
                env.master_addr, ":", env.port, " within ", timeout.count(), " s (",
                backend_name(backend), "): ", error.what());
  }
  return group;
}

void ProcessGroup::connect_backend(const c10::intrusive_ptr<c10d::Store>& store) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout_);
  const int rank = static_cast<int>(rank_), size = static_cast<int>(size_);
  if (backend_ == Backend::Gloo) {
    impl_->backend = make_gloo_backend(store, rank, size, ms, impl_->host);
    return;
  }
  impl_->backend = make_nccl_backend(store, rank, size, ms, device_.index());
  // The Gloo group beside it rendezvouses under its own prefix of the same store.
  impl_->host_backend = make_gloo_backend(c10::make_intrusive<c10d::PrefixStore>("host", store),
                                          rank, size, ms, impl_->host);
  // NCCL starts its communicator lazily, at the first collective, which a world of one in ddp
  // mode never issues: one all-reduce of one element now starts it, so a broken NCCL fails here,
  // at start-up, and NCCL_DEBUG=VERSION prints its version line in every NCCL run.
  at::Tensor one = at::ones({1}, at::TensorOptions().dtype(at::kFloat).device(device_));
  std::vector<at::Tensor> tensors{one};
  impl_->backend->allreduce(tensors)->wait();
}

std::shared_ptr<ProcessGroup> ProcessGroup::subgroup(const std::vector<int64_t>& ranks,
                                                     const std::string& name) const {
  const auto me = std::find(ranks.begin(), ranks.end(), rank_);
  check(me != ranks.end(), "[dist] rank ", rank_, " is not in the ", name, " group it joins");
  std::shared_ptr<ProcessGroup> group(new ProcessGroup());
  group->rank_ = me - ranks.begin();
  group->size_ = static_cast<int64_t>(ranks.size());
  group->backend_ = backend_;
  group->device_ = device_;
  group->timeout_ = timeout_;
  if (group->size_ == 1) return group;
  group->impl_ = std::make_unique<Impl>();
  group->impl_->host = impl_->host;
  // Each subgroup rendezvouses under its own key prefix of the job's store.
  group->impl_->store = c10::make_intrusive<c10d::PrefixStore>(
      "tandem/" + name + "/" + std::to_string(ranks.front()), impl_->store);
  try {
    group->connect_backend(group->impl_->store);
  } catch (const std::exception& error) {
    throw Error("[dist] rank ", rank_, ": could not form the ", name, " group of ranks ",
                ranks.front(), "..", ranks.back(), " within ", timeout_.count(),
                " s: ", error.what());
  }
  return group;
}

ProcessGroup::~ProcessGroup() = default;

namespace {

// Runs `op`; a c10d failure becomes an Error naming the rank, the operation and the timeout.
template <typename Op>
void guarded(const ProcessGroup& group, const char* name, Op op) {
  const auto start = Clock::now();
  try {
    op();
  } catch (const std::exception& error) {
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    throw Error("[dist] rank ", group.rank(), " of ", group.size(), ": ", name, " failed after ",
                seconds, " s (collective timeout ", group.timeout().count(),
                " s): a peer rank exited or stopped responding; see its log. (", error.what(), ")");
  }
}

}  // namespace

void ProcessGroup::all_reduce_sum(at::Tensor& tensor) {
  bytes_.all_reduce += static_cast<int64_t>(tensor.nbytes());
  ++bytes_.calls;
  if (!impl_) return;
  guarded(*this, "all_reduce", [&] {
    std::vector<at::Tensor> tensors{tensor};
    impl_->for_tensor(tensor).allreduce(tensors)->wait();
  });
}

void ProcessGroup::broadcast(at::Tensor& tensor, int64_t root) {
  bytes_.broadcast += static_cast<int64_t>(tensor.nbytes());
  ++bytes_.calls;
  if (!impl_) return;
  check(tensor.is_contiguous(), "[dist] broadcast needs a contiguous tensor");
  guarded(*this, "broadcast", [&] {
    std::vector<at::Tensor> tensors{tensor};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    impl_->for_tensor(tensor).broadcast(tensors, options)->wait();
  });
}

at::Tensor ProcessGroup::all_gather(const at::Tensor& local) {
  bytes_.all_gather += static_cast<int64_t>(local.nbytes());
  ++bytes_.calls;
  if (!impl_) return local.clone();
  std::vector<int64_t> shape = local.sizes().vec();
  check(!shape.empty(), "[dist] all_gather needs a tensor with a first dimension");
  shape[0] *= size_;
  at::Tensor out = at::empty(shape, local.options());
  at::Tensor input = local.contiguous();
  guarded(*this, "all_gather",
          [&] { impl_->for_tensor(input)._allgather_base(out, input)->wait(); });
  return out;
}

at::Tensor ProcessGroup::reduce_scatter_sum(const at::Tensor& full, bool emulate) {
  check(full.dim() >= 1 && full.size(0) % size_ == 0, "[dist] reduce_scatter: dim 0 (",
        full.dim() >= 1 ? full.size(0) : 0, ") is not a multiple of the ", size_, " ranks");
  const int64_t rows = full.size(0) / size_;
  if (!impl_) {
    bytes_.reduce_scatter += static_cast<int64_t>(full.nbytes());
    ++bytes_.calls;
    return full.clone();
  }
  if (emulate) {
    at::Tensor summed = full.contiguous().clone();
    all_reduce_sum(summed);
    return summed.narrow(0, rank_ * rows, rows).clone();
  }
  bytes_.reduce_scatter += static_cast<int64_t>(full.nbytes());
  ++bytes_.calls;
  std::vector<int64_t> shape = full.sizes().vec();
  shape[0] = rows;
  at::Tensor out = at::empty(shape, full.options());
  at::Tensor input = full.contiguous();
  guarded(*this, "reduce_scatter",
          [&] { impl_->for_tensor(input)._reduce_scatter_base(out, input)->wait(); });
  return out;
}

void ProcessGroup::broadcast_text(std::string& text, int64_t root) {
  if (!impl_) return;
  at::Tensor length = at::full({1}, static_cast<int64_t>(text.size()), at::kLong);
  broadcast(length, root);
  at::Tensor bytes = at::empty({length.item<int64_t>()}, at::kByte);
  if (rank_ == root) std::memcpy(bytes.data_ptr(), text.data(), text.size());
  broadcast(bytes, root);
  text.assign(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(bytes.numel()));
}

int64_t ProcessGroup::all_reduce_int64(int64_t value) {
  at::Tensor tensor = at::full({1}, value, at::kLong);
  all_reduce_sum(tensor);
  return tensor.item<int64_t>();
}

void ProcessGroup::barrier() {
  if (!impl_) return;
  guarded(*this, "barrier", [&] { impl_->for_host().barrier()->wait(); });
}

}  // namespace tandem::dist
