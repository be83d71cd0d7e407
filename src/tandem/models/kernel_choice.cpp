#include "tandem/models/kernel_choice.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

namespace tandem {

std::optional<KernelChoice> asked_or_unsupported(AttentionKernel asked, c10::ScalarType dtype) {
  if (asked != AttentionKernel::Fused)
    return KernelChoice{asked, "asked for (" + std::string(kernel_name(asked)) + ")"};
  if (dtype != c10::kFloat && dtype != c10::kBFloat16 && dtype != c10::kHalf)
    return KernelChoice{AttentionKernel::Blockwise,
                        "no fused kernel for " + std::string(c10::toString(dtype))};
  return std::nullopt;
}

bool kernels_agree(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want,
                   double bound) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i) {
    const double scale = std::max(1.0, want[i].abs().max().item<double>());
    if (!got[i].isfinite().all().item<bool>() ||
        (got[i] - want[i]).abs().max().item<double>() > bound * scale)
      return false;
  }
  return true;
}

const char* kernel_name(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::Fused:
      return "fused";
    case AttentionKernel::Blockwise:
      return "blockwise";
    case AttentionKernel::Dense:
      return "dense";
  }
  return "unknown";
}

void log_kernel_choice_once(const char* attention, const at::Tensor& q,
                            const KernelChoice& choice) {
  using Kind = std::tuple<std::string, std::string, int, int64_t, int>;
  static std::mutex mutex;
  static std::set<Kind> logged;
  const Kind kind{attention, q.device().str(), static_cast<int>(q.scalar_type()), q.size(3),
                  static_cast<int>(choice.kernel)};
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!logged.insert(kind).second) return;
  }
  std::cerr << "[attention] " << attention << " on " << q.device().str() << " ("
            << c10::toString(q.scalar_type()) << ", head_dim " << q.size(3)
            << "): " << kernel_name(choice.kernel) << " kernel, " << choice.reason << std::endl;
}

bool remembered_check(const std::string& kind, const std::function<bool()>& check) {
  // Recursive: a check may itself ask about another kind.
  static std::recursive_mutex mutex;
  static std::map<std::string, bool> known;
  std::lock_guard<std::recursive_mutex> lock(mutex);
  const auto found = known.find(kind);
  if (found != known.end()) return found->second;
  bool answer = false;
  std::string why;
  try {
    const at::AutoGradMode gradients_on(true);
    answer = check();
  } catch (const std::exception& e) {
    answer = false;
    why = e.what();
    why = ": " + why.substr(0, why.find('\n'));
  }
  known[kind] = answer;
  // Logged once per kind, so a GPU run shows which fused kernels it verified and uses.
  std::cerr << "[kernel] self-check " << kind << ": " << (answer ? "passed" : "failed") << why
            << "\n";
  return answer;
}

std::string check_kind(const std::string& what, const c10::Device& device, c10::ScalarType dtype,
                       int64_t head_dim) {
  std::string kind = what + " " + device.str() + " " + c10::toString(dtype);
  if (head_dim >= 0) kind += " " + std::to_string(head_dim);
  return kind;
}

std::vector<at::Tensor> output_and_gradients_on_host(const at::Tensor& out,
                                                     const std::vector<at::Tensor>& inputs,
                                                     const at::Tensor& weights) {
  std::vector<at::Tensor> results = {out.detach().to(at::kFloat).cpu()};
  for (const at::Tensor& gradient :
       torch::autograd::grad({(out.to(at::kFloat) * weights.to(at::kFloat)).sum()}, inputs))
    results.push_back(gradient.to(at::kFloat).cpu());
  return results;
}

bool cuda_flash_attention_runs(const c10::Device& device) {
  return remembered_check("cuda flash runs " + device.str(), [&] {
    const at::Tensor x =
        at::zeros({1, 1, 16, 64}, at::TensorOptions().dtype(at::kBFloat16).device(device));
    const auto result = at::_scaled_dot_product_flash_attention(x, x, x, 0.0, true, false);
    at::_scaled_dot_product_flash_attention_backward(
        x, x, x, x, std::get<0>(result), std::get<1>(result), at::Tensor(), at::Tensor(), 16, 16,
        0.0, true, std::get<6>(result), std::get<7>(result));
    return true;
  });
}

}  // namespace tandem
