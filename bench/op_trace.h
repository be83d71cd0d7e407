#pragma once
// What a piece of work asks of a GPU, read from its ATen calls on whatever device it runs: every
// dispatcher call; the kernels it would launch; their FLOPs and the bytes they move; the copies
// between host and device; and a roofline estimate of its time on a GPU of the given peaks.
//
// A kernel is an innermost computing call: a call that is not a view, an allocation, a composite
// wrapper or autograd bookkeeping (launches_no_kernel) and under which no other computing call
// ran. Multi-tensor (`_foreach_*`), fused-optimizer, matmul, reduction and attention calls count as
// one kernel whatever they call inside (on the CPU a `_foreach_` op loops over its tensors and a
// reduction fills its output first; on CUDA a `_foreach_` op is one multi-tensor launch per list of
// up to a few hundred tensors, so counting it once is a slight undercount for long lists).
//
// FLOPs: 2mkn per matmul (mm, addmm, bmm, baddbmm, _grouped_mm), 4 * B * H * L * S * d per
// attention forward (half when causal) and 2.5 times that per attention backward. Bytes: every
// tensor a kernel reads and writes, each counted once per distinct element (a broadcast operand
// by its stored extent; a gathering kernel reads as many rows as it writes).
//
// The estimate: each kernel takes max(FLOPs / matmul peak, bytes / memory bandwidth, a floor),
// the matmul peak by dtype (16-bit or fp32); the step takes the larger of the kernels' sum and
// the host's time to issue them (kernels x dispatch cost), because the host runs ahead of the
// device until it waits. It is a roofline lower bound (attention at the matmul peak, perfect
// overlap, no cache reuse beyond one kernel), not a measurement.
#include <ATen/ATen.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tandem/core/host_transfers.h"

namespace tandem::bench {

/// Peaks of the GPU the estimate is for (defaults: an H100 SXM: the bf16 matmul peak measured
/// there, fp32 without TF32, achievable HBM bandwidth).
struct GpuPeaks {
  double matmul16_flops = 800e12;  // bf16 / fp16 matmul, FLOP/s
  double matmul32_flops = 50e12;   // fp32 matmul without TF32, FLOP/s
  double bandwidth = 3.0e12;       // bytes/s
  double kernel_floor = 2.5e-6;    // the shortest kernel, seconds
  double dispatch = 4e-6;          // host time to issue one kernel, seconds
};

struct OpTrace {
  int64_t calls = 0;          // every ATen dispatcher call, nested ones included
  int64_t kernels = 0;        // kernels a GPU would launch
  double flops = 0;           // matmul and attention FLOPs
  double bytes = 0;           // bytes the kernels read and write
  double device_seconds = 0;  // sum of the kernels' roofline times
  HostTransfers transfers;    // host <-> device copies through to_device / read_on_host
  double cpu_seconds = 0;     // wall time of the work on this machine
  std::map<std::string, int64_t> kernel_names;  // kernels by operation, when asked

  /// The roofline estimate: the device's time or the host's time to issue, whichever is longer.
  double estimate(const GpuPeaks& peaks) const {
    return std::max(device_seconds, static_cast<double>(kernels) * peaks.dispatch);
  }
  OpTrace& operator+=(const OpTrace& other) {
    calls += other.calls, kernels += other.kernels, flops += other.flops, bytes += other.bytes;
    device_seconds += other.device_seconds, cpu_seconds += other.cpu_seconds;
    transfers.to_device_calls += other.transfers.to_device_calls;
    transfers.to_device_bytes += other.transfers.to_device_bytes;
    transfers.to_host_calls += other.transfers.to_host_calls;
    transfers.to_host_bytes += other.transfers.to_host_bytes;
    for (const auto& [name, count] : other.kernel_names) kernel_names[name] += count;
    return *this;
  }
};

namespace op_trace_detail {

// Calls that launch no kernel of their own: views and metadata, allocations without a fill,
// composite operations that only call others (counted there), autograd's bookkeeping.
inline bool launches_no_kernel(const std::string& name) {
  static const std::set<std::string> kNoKernel = {"aten::as_strided",
                                                  "aten::slice",
                                                  "aten::narrow",
                                                  "aten::view",
                                                  "aten::transpose",
                                                  "aten::reshape",
                                                  "aten::_reshape_alias",
                                                  "aten::_unsafe_view",
                                                  "aten::resolve_conj",
                                                  "aten::resolve_neg",
                                                  "aten::t",
                                                  "aten::expand",
                                                  "aten::unsqueeze",
                                                  "aten::squeeze",
                                                  "aten::select",
                                                  "aten::permute",
                                                  "aten::detach",
                                                  "detach",
                                                  "aten::alias",
                                                  "aten::result_type",
                                                  "aten::empty",
                                                  "aten::empty_strided",
                                                  "aten::empty_like",
                                                  "aten::linear",
                                                  "aten::matmul",
                                                  "aten::to",
                                                  "aten::_to_copy",
                                                  "aten::zeros",
                                                  "aten::zeros_like",
                                                  "aten::ones_like",
                                                  "aten::contiguous",
                                                  "aten::unbind",
                                                  "aten::split",
                                                  "aten::chunk",
                                                  "aten::expand_as",
                                                  "aten::view_as",
                                                  "aten::flatten",
                                                  "aten::lift_fresh",
                                                  "aten::is_nonzero",
                                                  "aten::item",
                                                  "aten::_local_scalar_dense",
                                                  "aten::size",
                                                  "aten::stride",
                                                  "aten::numel",
                                                  "aten::set_",
                                                  "aten::resize_",
                                                  "aten::_nested_tensor_from_mask_left_aligned"};
  return kNoKernel.count(name) > 0 || name.rfind("autograd::", 0) == 0 ||
         name.find("Backward") != std::string::npos || name.rfind("torch::autograd", 0) == 0;
}

// Where an attention call's query and key sit, its causal flag, and whether it is a backward.
struct AttentionArgs {
  size_t query = 0, key = 1, causal = 0;
  bool backward = false, packed = false;  // packed: (tokens, H, d) with max key length at max_key
  size_t max_key = 0;
};

inline const std::map<std::string, AttentionArgs>& attention_calls() {
  static const std::map<std::string, AttentionArgs> calls = {
      {"aten::_scaled_dot_product_flash_attention_for_cpu", {0, 1, 4, false, false, 0}},
      {"aten::_scaled_dot_product_flash_attention_for_cpu_backward", {1, 2, 7, true, false, 0}},
      {"aten::_scaled_dot_product_flash_attention", {0, 1, 4, false, false, 0}},
      {"aten::_scaled_dot_product_flash_attention_backward", {1, 2, 11, true, false, 0}},
      {"aten::_scaled_dot_product_efficient_attention", {0, 1, 6, false, false, 0}},
      {"aten::_scaled_dot_product_efficient_attention_backward", {1, 2, 11, true, false, 0}},
      {"aten::_scaled_dot_product_cudnn_attention", {0, 1, 6, false, false, 0}},
      {"aten::_flash_attention_forward", {0, 1, 8, false, true, 6}},
      {"aten::_flash_attention_backward", {1, 2, 11, true, true, 9}},
  };
  return calls;
}

inline bool is_matmul(const std::string& name) {
  static const std::set<std::string> kMatmuls = {"aten::mm", "aten::addmm", "aten::bmm",
                                                 "aten::baddbmm", "aten::_grouped_mm"};
  return kMatmuls.count(name) > 0;
}

// Calls that are one kernel on a GPU whatever the CPU does inside (a CPU reduction fills its
// output first; a CPU `_foreach_` op loops over its tensors).
inline bool always_one_kernel(const std::string& name) {
  static const std::set<std::string> kReductions = {
      "aten::sum",  "aten::mean", "aten::amax",   "aten::amin",
      "aten::max",  "aten::min",  "aten::argmax", "aten::argmin",
      "aten::prod", "aten::all",  "aten::any",    "aten::linalg_vector_norm",
      "aten::norm"};
  return name.rfind("aten::_foreach_", 0) == 0 || name.rfind("aten::_fused_", 0) == 0 ||
         is_matmul(name) || kReductions.count(name) > 0 || attention_calls().count(name) > 0;
}

// Bytes of a tensor's distinct elements (a stride-0 dimension counts once).
inline double extent_bytes(const at::Tensor& tensor) {
  if (!tensor.defined()) return 0;
  double elements = 1;
  for (int64_t d = 0; d < tensor.dim(); ++d)
    if (tensor.stride(d) != 0) elements *= static_cast<double>(tensor.size(d));
  if (tensor.numel() == 0) elements = 0;
  return elements * static_cast<double>(tensor.element_size());
}

inline double value_bytes(const c10::IValue& value) {
  if (value.isTensor()) return extent_bytes(value.toTensor());
  double total = 0;
  if (value.isTensorList())
    for (const at::Tensor& tensor : value.toTensorVector()) total += extent_bytes(tensor);
  if (value.isList())
    for (const c10::IValue& item : value.toListRef()) total += value_bytes(item);
  return total;
}

inline at::Tensor tensor_at(c10::ArrayRef<const c10::IValue> inputs, size_t i) {
  return i < inputs.size() && inputs[i].isTensor() ? inputs[i].toTensor() : at::Tensor();
}

inline double matmul_flops(const std::string& name, c10::ArrayRef<const c10::IValue> inputs) {
  const bool with_bias = name == "aten::addmm" || name == "aten::baddbmm";
  const at::Tensor a = tensor_at(inputs, with_bias ? 1 : 0),
                   b = tensor_at(inputs, with_bias ? 2 : 1);
  if (!a.defined() || !b.defined() || a.dim() < 2 || b.dim() < 2) return 0;
  const double m = static_cast<double>(a.size(-2)), k = static_cast<double>(a.size(-1));
  const double n = static_cast<double>(b.size(-1));
  if (name == "aten::_grouped_mm") return 2 * m * k * n;  // (M, K) x (E, K, N): each row once
  const double batch = a.dim() == 3 ? static_cast<double>(a.size(0)) : 1.0;
  return 2 * batch * m * k * n;
}

inline double attention_flops(const AttentionArgs& args, c10::ArrayRef<const c10::IValue> inputs) {
  const at::Tensor q = tensor_at(inputs, args.query), k = tensor_at(inputs, args.key);
  if (!q.defined() || !k.defined()) return 0;
  const bool causal =
      args.causal < inputs.size() && inputs[args.causal].isBool() && inputs[args.causal].toBool();
  double pairs_times_heads_dim;
  if (args.packed) {  // (tokens, H, d); every query against up to the longest key run
    const double max_key = args.max_key < inputs.size() && inputs[args.max_key].isInt()
                               ? static_cast<double>(inputs[args.max_key].toInt())
                               : static_cast<double>(k.size(0));
    pairs_times_heads_dim = static_cast<double>(q.size(0)) * max_key *
                            static_cast<double>(q.size(1)) * static_cast<double>(q.size(2));
  } else {  // (B, H, L, d) against (B, Hk, S, d)
    pairs_times_heads_dim = static_cast<double>(q.size(0) * q.size(1) * q.size(2)) *
                            static_cast<double>(k.size(2)) * static_cast<double>(q.size(3));
  }
  return 4 * pairs_times_heads_dim * (causal ? 0.5 : 1.0) * (args.backward ? 2.5 : 1.0);
}

inline const std::set<std::string>& gathers() {
  static const std::set<std::string> names = {"aten::index_select", "aten::embedding",
                                              "aten::index", "aten::gather", "aten::take"};
  return names;
}

// Bytes a kernel reads from its inputs (a gather: its index; the rows are added at exit).
inline double read_bytes(const std::string& name, c10::ArrayRef<const c10::IValue> inputs) {
  static const std::set<std::string> kWriteOnly = {"aten::fill_", "aten::zero_", "aten::copy_",
                                                   "aten::normal_", "aten::uniform_"};
  double read = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (i == 0 && (gathers().count(name) || kWriteOnly.count(name))) continue;
    read += value_bytes(inputs[i]);
  }
  return read;
}

// A call in progress. Its inputs are read on entry (the dispatcher's copy of them is gone by the
// time the call returns); its outputs on exit.
struct Frame {
  bool computes = false;      // not in launches_no_kernel
  bool one_kernel = false;    // always_one_kernel: what runs inside is not counted
  bool child_kernel = false;  // a kernel ran inside
  bool transfer = false;      // a copy between devices: counted by to_device / read_on_host
  std::string name;
  double flops = 0, read = 0, first_input = 0;
  c10::ScalarType dtype = at::kFloat;  // of the matmul or attention operands
};

struct State {
  std::mutex mutex;
  OpTrace trace;
  GpuPeaks peaks;
  bool keep_names = false;
};

inline State& state() {
  static State s;
  return s;
}

inline std::vector<Frame>& stack() {
  thread_local std::vector<Frame> frames;
  return frames;
}

struct Pushed : at::ObserverContext {};

inline std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    ++s.trace.calls;
  }
  std::vector<Frame>& frames = stack();
  for (const Frame& frame : frames)
    if (frame.one_kernel) return nullptr;  // inside a call counted as one kernel
  Frame frame;
  frame.name = fn.name();
  frame.computes = !launches_no_kernel(frame.name);
  frame.one_kernel = always_one_kernel(frame.name);
  if (frame.computes || frame.one_kernel) {
    const c10::ArrayRef<const c10::IValue> inputs = fn.inputs();
    frame.read = read_bytes(frame.name, inputs);
    frame.first_input = inputs.empty() ? 0.0 : value_bytes(inputs[0]);
    frame.transfer = frame.name == "aten::copy_" && inputs.size() >= 2 && inputs[0].isTensor() &&
                     inputs[1].isTensor() &&
                     inputs[0].toTensor().device() != inputs[1].toTensor().device();
    const auto attention = attention_calls().find(frame.name);
    if (attention != attention_calls().end()) {
      frame.flops = attention_flops(attention->second, inputs);
      const at::Tensor q = tensor_at(inputs, attention->second.query);
      if (q.defined()) frame.dtype = q.scalar_type();
    } else if (is_matmul(frame.name)) {
      frame.flops = matmul_flops(frame.name, inputs);
      const bool with_bias = frame.name == "aten::addmm" || frame.name == "aten::baddbmm";
      const at::Tensor a = tensor_at(inputs, with_bias ? 1 : 0);
      if (a.defined()) frame.dtype = a.scalar_type();
    }
  }
  frames.push_back(std::move(frame));
  return std::make_unique<Pushed>();
}

inline void on_exit(const at::RecordFunction& fn, at::ObserverContext* context) {
  if (context == nullptr) return;
  std::vector<Frame>& frames = stack();
  const Frame frame = std::move(frames.back());
  frames.pop_back();
  const bool kernel = frame.one_kernel || (frame.computes && !frame.child_kernel);
  if (!frames.empty() && (kernel || frame.child_kernel)) frames.back().child_kernel = true;
  if (!kernel || frame.transfer) return;
  double written = 0;
  for (const c10::IValue& output : fn.outputs()) written += value_bytes(output);
  double read = frame.read;
  if (gathers().count(frame.name)) read += written;  // the rows gathered
  // An in-place op returning nothing (the multi-tensor ones) writes what it read first.
  if (fn.outputs().empty() && frame.name.back() == '_') written += frame.first_input;
  const double bytes = read + written;
  State& s = state();
  const double peak = (frame.dtype == at::kBFloat16 || frame.dtype == at::kHalf)
                          ? s.peaks.matmul16_flops
                          : s.peaks.matmul32_flops;
  const double seconds =
      std::max({frame.flops / peak, bytes / s.peaks.bandwidth, s.peaks.kernel_floor});
  std::lock_guard<std::mutex> lock(s.mutex);
  ++s.trace.kernels;
  s.trace.flops += frame.flops;
  s.trace.bytes += bytes;
  s.trace.device_seconds += seconds;
  if (s.keep_names) ++s.trace.kernel_names[frame.name];
}

}  // namespace op_trace_detail

/// The calls, kernels, FLOPs, bytes and transfers of `work` (run once, on this thread's calls and
/// those of autograd's threads).
inline OpTrace trace_ops(const std::function<void()>& work, const GpuPeaks& peaks = {},
                         bool keep_names = false) {
  using namespace op_trace_detail;
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.trace = OpTrace{};
    s.peaks = peaks;
    s.keep_names = keep_names;
  }
  const HostTransfers before = host_transfers();
  const at::CallbackHandle handle = at::addGlobalCallback(
      at::RecordFunctionCallback(on_enter, on_exit)
          .needsInputs(true)
          .needsOutputs(true)
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  const auto start = std::chrono::steady_clock::now();
  work();
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  at::removeCallback(handle);
  const HostTransfers after = host_transfers();
  std::lock_guard<std::mutex> lock(s.mutex);
  OpTrace trace = std::move(s.trace);
  trace.cpu_seconds = elapsed.count();
  trace.transfers = {after.to_device_calls - before.to_device_calls,
                     after.to_device_bytes - before.to_device_bytes,
                     after.to_host_calls - before.to_host_calls,
                     after.to_host_bytes - before.to_host_bytes};
  return trace;
}

/// The `n` most frequent kernels of `trace` (keep_names), as "name count, ...".
inline std::string top_kernels(const OpTrace& trace, int n) {
  std::vector<std::pair<int64_t, std::string>> ranked;
  for (const auto& [name, count] : trace.kernel_names) ranked.emplace_back(count, name);
  std::sort(ranked.rbegin(), ranked.rend());
  std::string line;
  for (size_t i = 0; i < ranked.size() && i < static_cast<size_t>(n); ++i)
    line += (i ? ", " : "") + ranked[i].second + " " + std::to_string(ranked[i].first);
  return line;
}

}  // namespace tandem::bench
