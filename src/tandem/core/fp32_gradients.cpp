#include "tandem/core/fp32_gradients.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <unordered_map>

#include "tandem/core/error.h"

namespace tandem {

namespace {

// Registered weights by TensorImpl (the identity modules and the optimizer share). Training
// runs its forward and backward on one thread.
std::unordered_map<const void*, std::shared_ptr<at::Tensor>>& sums() {
  static std::unordered_map<const void*, std::shared_ptr<at::Tensor>> registered;
  return registered;
}

void add_to(at::Tensor& sum, const at::Tensor& gradient) {
  at::NoGradGuard no_grad;
  if (sum.defined())
    sum.add_(gradient);  // the bf16 gradient is widened element by element, summed in fp32
  else
    sum = gradient.to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
}

struct SumHolder : torch::CustomClassHolder {
  std::shared_ptr<at::Tensor> sum;
};

// Identity forward; backward adds this use's gradient to the fp32 sum and gives the weight none.
struct Fp32GradientTap : torch::autograd::Function<Fp32GradientTap> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& parameter,
                            c10::intrusive_ptr<SumHolder> holder) {
    ctx->saved_data["sum"] = c10::IValue::make_capsule(holder);
    return parameter;  // returned unmodified: autograd makes it a view with this node as grad_fn
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto holder =
        c10::static_intrusive_pointer_cast<SumHolder>(ctx->saved_data["sum"].toCapsule());
    if (grads[0].defined()) add_to(*holder->sum, grads[0]);
    return {at::Tensor(), at::Tensor()};
  }
};

}  // namespace

Fp32GradientSum::Fp32GradientSum(const at::Tensor& parameter, std::shared_ptr<at::Tensor> sum)
    : key_(parameter.unsafeGetTensorImpl()), sum_(std::move(sum)) {
  check(parameter.scalar_type() != at::kFloat, "[optimizer] an fp32 weight needs no fp32 sum");
  check(sum_ != nullptr, "[optimizer] an fp32 gradient sum needs its accumulator");
  sums()[key_] = sum_;
}

Fp32GradientSum::~Fp32GradientSum() {
  auto found = sums().find(key_);
  if (found != sums().end() && found->second == sum_) sums().erase(found);
}

bool any_fp32_gradient_sums() { return !sums().empty(); }

at::Tensor use_with_fp32_gradient(const at::Tensor& parameter) {
  if (sums().empty() || !parameter.defined() || !parameter.requires_grad() ||
      !at::GradMode::is_enabled())
    return parameter;
  auto found = sums().find(parameter.unsafeGetTensorImpl());
  if (found == sums().end()) return parameter;
  auto holder = c10::make_intrusive<SumHolder>();
  holder->sum = found->second;
  return Fp32GradientTap::apply(parameter, holder);
}

bool add_to_fp32_gradient_sum(const at::Tensor& parameter, const at::Tensor& gradient) {
  auto found = sums().find(parameter.unsafeGetTensorImpl());
  if (found == sums().end()) return false;
  if (gradient.defined()) add_to(*found->second, gradient.reshape(parameter.sizes()));
  return true;
}

}  // namespace tandem
