#pragma once
// What the tests of hand-written backward passes share: run a function on fresh leaves, take
// the gradients of sum(output * weights), and compare tensors by relative error.
#include <ATen/ATen.h>

#include <algorithm>
#include <functional>
#include <vector>

namespace tandem::test {

/// max |a - b| / max |b|, in fp64.
inline double relative_error(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor a64 = a.to(at::kDouble), b64 = b.to(at::kDouble);
  return (a64 - b64).abs().max().item<double>() / std::max(b64.abs().max().item<double>(), 1e-30);
}

struct OutputAndGradients {
  at::Tensor out;                 // f's output, detached
  std::vector<at::Tensor> grads;  // d sum(out * weights) / d input, per input
};

/// f applied to leaves cloned from `inputs`, then backward of sum(out * weights) (weights in
/// fp64; the output is upcast).
inline OutputAndGradients output_and_gradients(
    const std::function<at::Tensor(const std::vector<at::Tensor>&)>& f,
    const std::vector<at::Tensor>& inputs, const at::Tensor& weights) {
  std::vector<at::Tensor> leaves;
  for (const at::Tensor& input : inputs)
    leaves.push_back(input.detach().clone().requires_grad_(true));
  const at::Tensor out = f(leaves);
  (out.to(at::kDouble) * weights.to(at::kDouble)).sum().backward();
  OutputAndGradients result{out.detach(), {}};
  for (const at::Tensor& leaf : leaves) result.grads.push_back(leaf.grad());
  return result;
}

}  // namespace tandem::test
