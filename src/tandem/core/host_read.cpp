#include "tandem/core/host_read.h"

#include <ATen/ATen.h>

#include <atomic>

#include "tandem/core/error.h"
#include "tandem/core/host_transfers.h"

namespace tandem {

namespace {

std::map<std::string, int64_t>& counts() {
  static std::map<std::string, int64_t> reads;
  return reads;
}

std::atomic<int64_t> g_to_device_calls{0}, g_to_device_bytes{0}, g_to_host_calls{0},
    g_to_host_bytes{0};

}  // namespace

namespace detail {
void count_to_device(int64_t bytes) {
  g_to_device_calls.fetch_add(1, std::memory_order_relaxed);
  g_to_device_bytes.fetch_add(bytes, std::memory_order_relaxed);
}
void count_to_host(int64_t bytes) {
  g_to_host_calls.fetch_add(1, std::memory_order_relaxed);
  g_to_host_bytes.fetch_add(bytes, std::memory_order_relaxed);
}
}  // namespace detail

HostTransfers host_transfers() {
  return {g_to_device_calls.load(), g_to_device_bytes.load(), g_to_host_calls.load(),
          g_to_host_bytes.load()};
}

const char* host_read_name(HostRead why) {
  switch (why) {
    case HostRead::MoeExpertCounts:
      return "moe_expert_counts";
    case HostRead::GradientFlags:
      return "gradient_flags";
    case HostRead::StepMetrics:
      return "step_metrics";
    case HostRead::DecodedTokens:
      return "decoded_tokens";
    case HostRead::SaveChecks:
      return "save_checks";
    case HostRead::DraftVocabMap:
      return "draft_vocab_map";
  }
  return "unknown";
}

at::Tensor read_on_host(const at::Tensor& tensor, HostRead why, const at::Tensor& stand_in) {
  detail::count_to_host(static_cast<int64_t>(tensor.nbytes()));
  if (!tensor.is_meta()) return tensor.cpu();
  ++counts()[host_read_name(why)];
  if (!stand_in.defined()) return at::zeros(tensor.sizes(), tensor.options().device(at::kCPU));
  check(stand_in.is_cpu() && stand_in.sizes() == tensor.sizes(), "[device] the stand-in for a ",
        host_read_name(why), " read must be a host tensor of shape ", tensor.sizes());
  return stand_in;
}

std::map<std::string, int64_t> meta_host_reads() { return counts(); }

void reset_meta_host_reads() { counts().clear(); }

}  // namespace tandem
