// RMSNorm and SwiGLU with hand-written backward (models/lean_layers.h) against their composite
// forms under autograd: the same values, the same gradients for every input, in fp64, fp32 and
// bf16 (with an fp32 weight, as a bf16 model with fp32 masters has none: both bf16 too).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gradients.h"
#include "tandem/models/lean_layers.h"

namespace {

at::Tensor composite_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor inv_rms = at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * (x32 * inv_rms).to(x.scalar_type());
}

using tandem::test::output_and_gradients;
using tandem::test::relative_error;

void expect_same(const std::function<at::Tensor(const std::vector<at::Tensor>&)>& lean,
                 const std::function<at::Tensor(const std::vector<at::Tensor>&)>& composite,
                 const std::vector<at::Tensor>& inputs, double bound, const std::string& what) {
  at::manual_seed(5);
  const at::Tensor weights = at::randn(composite(inputs).sizes(), at::kDouble);
  const auto [lean_out, lean_grads] = output_and_gradients(lean, inputs, weights);
  const auto [reference_out, reference_grads] = output_and_gradients(composite, inputs, weights);
  EXPECT_EQ(lean_out.scalar_type(), reference_out.scalar_type()) << what;
  EXPECT_TRUE(lean_out.equal(reference_out)) << what << ": the forward is the composite's exactly";
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_TRUE(lean_grads[i].defined()) << what << ": input " << i;
    EXPECT_EQ(lean_grads[i].scalar_type(), inputs[i].scalar_type()) << what << ": input " << i;
    EXPECT_LE(relative_error(lean_grads[i], reference_grads[i]), bound)
        << what << ": gradient of input " << i;
  }
}

TEST(LeanLayers, RmsNormEqualsTheCompositeFormInValueAndGradients) {
  at::manual_seed(1);
  const at::Tensor x = at::randn({3, 7, 64}) * 3;
  const at::Tensor weight = at::randn({64});
  for (const auto& [x_type, weight_type, bound] :
       {std::tuple{at::kDouble, at::kDouble, 1e-6},  // normalised in fp32, like transformers
        std::tuple{at::kFloat, at::kFloat, 1e-5}, std::tuple{at::kBFloat16, at::kFloat, 1e-2},
        std::tuple{at::kBFloat16, at::kBFloat16, 2e-2}})
    expect_same(
        [](const std::vector<at::Tensor>& in) { return tandem::lean_rms_norm(in[0], in[1], 1e-6); },
        [](const std::vector<at::Tensor>& in) { return composite_rms_norm(in[0], in[1], 1e-6); },
        {x.to(x_type), weight.to(weight_type)}, bound,
        std::string("rms_norm ") + c10::toString(x_type) + " x, " + c10::toString(weight_type) +
            " weight");
}

TEST(LeanLayers, SwigluEqualsTheCompositeFormInValueAndGradients) {
  at::manual_seed(2);
  const at::Tensor gate = at::randn({2, 5, 96}) * 4, up = at::randn({2, 5, 96});
  for (const auto& [type, bound] :
       {std::pair{at::kDouble, 1e-12}, std::pair{at::kFloat, 1e-5}, std::pair{at::kBFloat16, 2e-2}})
    expect_same([](const std::vector<at::Tensor>& in) { return tandem::swiglu(in[0], in[1]); },
                [](const std::vector<at::Tensor>& in) { return at::silu(in[0]) * in[1]; },
                {gate.to(type), up.to(type)}, bound, std::string("swiglu ") + c10::toString(type));
}

// Without grad mode they are plain forwards (frozen models) and record nothing.
TEST(LeanLayers, UnderNoGradNothingIsRecorded) {
  at::NoGradGuard no_grad;
  const at::Tensor x = at::randn({4, 8}).requires_grad_(true), w = at::ones({8});
  EXPECT_FALSE(tandem::lean_rms_norm(x, w, 1e-6).requires_grad());
  EXPECT_FALSE(tandem::swiglu(x, x).requires_grad());
}

}  // namespace
