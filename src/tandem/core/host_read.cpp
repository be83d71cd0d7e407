#include "tandem/core/host_read.h"

#include <ATen/ATen.h>

#include "tandem/core/error.h"

namespace tandem {

namespace {

std::map<std::string, int64_t>& counts() {
  static std::map<std::string, int64_t> reads;
  return reads;
}

}  // namespace

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
