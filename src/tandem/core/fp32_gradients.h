#pragma once
// fp32 gradient sums for low-precision trainable weights (docs/gpu.md, mixed precision). Autograd
// sums the gradients of every use of a weight in the weight's own dtype: a bf16 weight used
// seven times in one micro-batch (EAGLE-3's test-time-training unroll reuses the whole draft;
// DFlash projects keys and values twice) gets seven bf16 roundings of a running sum before any
// optimizer sees it. A weight registered here instead hands each use's gradient, upcast, to an
// fp32 sum (the optimizer's), and autograd never sums it in bf16; sharded weights add their
// reduce-scattered fp32 slice gradient the same way instead of rounding it back to bf16.
//
// The uses that count are the weight-reading calls that go through with_full_parameters
// (dist/sharding.h): every Linear, Embedding and RMSNorm, and the fused vocabulary losses' heads.
// A registered weight read any other way still gets an ordinary gradient in its own dtype, which
// the optimizer upcasts and adds (MixedPrecisionAdamW::accumulate_gradients).
#include <ATen/core/Tensor.h>

#include <memory>

namespace tandem {

/// Keeps `parameter` (a leaf that is not fp32) registered with an fp32 sum while it lives.
class Fp32GradientSum {
 public:
  /// `sum` is the fp32 accumulator: undefined until a gradient arrives, then (parameter's
  /// shape) fp32 on its device; the owner reads and clears it (sets it undefined).
  Fp32GradientSum(const at::Tensor& parameter, std::shared_ptr<at::Tensor> sum);
  ~Fp32GradientSum();
  Fp32GradientSum(const Fp32GradientSum&) = delete;
  Fp32GradientSum& operator=(const Fp32GradientSum&) = delete;

 private:
  const void* key_;
  std::shared_ptr<at::Tensor> sum_;
};

/// Whether any weight is registered (the fast path of with_full_parameters).
bool any_fp32_gradient_sums();

/// `parameter` as one weight-reading call should use it: itself, or, when it is registered and
/// autograd is recording, an alias whose gradient is added in fp32 to the registered sum and
/// never reaches `parameter` itself.
at::Tensor use_with_fp32_gradient(const at::Tensor& parameter);

/// Adds `gradient` (parameter's shape, any floating dtype) to the fp32 sum registered for
/// `parameter`. False, and nothing added, when none is.
bool add_to_fp32_gradient_sum(const at::Tensor& parameter, const at::Tensor& gradient);

}  // namespace tandem
