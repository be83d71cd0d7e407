#pragma once
// AdamW for mixed precision: parameters may be bf16 (or fp32); the optimizer keeps fp32 master
// copies (for non-fp32 parameters) and fp32 moments for the trainable parameters only. A step
// upcasts the gradients, clips them by their global norm, updates the masters, and copies the
// result back into the parameters. It only ever sees the explicit list it was given.
#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tandem {

class Fp32GradientSum;  // core/fp32_gradients.h

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;   // decoupled; applied to matrices only (not norms, not biases)
  double max_grad_norm = 1.0;  // global-norm clipping; 0 disables
};

class MixedPrecisionAdamW {
 public:
  using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;
  /// `parameters`: the trainable parameters (from tandem::trainable_parameters), by name.
  /// `decay`: per parameter, whether it gets weight decay; empty: decays(parameter) (sharded
  /// parameters are flat slices, so their owner says it from the full shape).
  MixedPrecisionAdamW(NamedTensors parameters, AdamWOptions options, std::vector<bool> decay = {});

  /// Hook that turns a local sum of squared gradients (fp64, 0-dim) into the global one (all-reduce
  /// across shards); identity by default.
  void set_norm_reduction(std::function<at::Tensor(const at::Tensor&)> reduce) {
    reduce_norm_sq_ = std::move(reduce);
  }

  /// One update with learning rate `lr`: gradient_norm() then update(lr). Returns the global
  /// gradient norm before clipping, a 0-dim fp64 tensor on the parameters' device: the clipping
  /// factor is formed there too, so the update never waits for the host to read the norm.
  /// Parameters without a gradient are skipped (their moments do not advance).
  at::Tensor step(double lr);
  /// The first half of step(): the step's fp32 gradients and their global norm (0-dim fp64, on
  /// the device), kept for update(). A caller that must see the norm before deciding to update
  /// (training.on_nonfinite: skip_step) reads it, then calls update() or zero_grad().
  at::Tensor gradient_norm();
  /// The second half of step(): clips by the norm gradient_norm() found and applies AdamW.
  void update(double lr);
  /// Names of the parameters, masters and moments that hold a NaN or an infinity (empty: all
  /// finite). One read from the device.
  std::vector<std::string> nonfinite_state() const;
  /// Moves the gradients of non-fp32 parameters into fp32 sums and clears them: called after
  /// each micro-batch's backward, so a bf16 weight's gradient is summed over micro-batches in
  /// fp32 and rounded never (autograd alone would accumulate it in bf16). Within a micro-batch
  /// the same holds for every use that reads the weight through with_full_parameters: each
  /// non-fp32 parameter is registered with its fp32 sum while the optimizer lives
  /// (core/fp32_gradients.h), so each use's gradient is added there during backward. fp32
  /// parameters keep accumulating in place. step() uses the sums.
  void accumulate_gradients();
  /// Data parallel: makes every gradient the sum of the ranks' gradients, through
  /// `all_reduce_sum`, called once, in place, on one flat fp32 buffer (a has-gradient flag per
  /// parameter, then the gradients). Call after the step's last accumulate_gradients(). A
  /// parameter no rank has a gradient for keeps none, as in a single process. Returns the
  /// buffer's bytes.
  int64_t reduce_gradients(const std::function<void(at::Tensor&)>& all_reduce_sum);
  /// Drops every parameter's gradient and fp32 sum.
  void zero_grad();

  /// Bytes of the fp32 state this optimizer holds: masters (of non-fp32 parameters) and moments.
  int64_t state_bytes() const;
  int64_t steps_taken() const { return step_count_; }
  /// The state to checkpoint: masters ("master.<name>", only for non-fp32 params), moments
  /// ("exp_avg.<name>", "exp_avg_sq.<name>"), and the step count ("step").
  NamedTensors state() const;
  /// Restores `state()` output; errors name what is missing or misshapen.
  void load_state(const std::map<std::string, at::Tensor>& state, const std::string& where);
  /// Whether `name` gets weight decay (2-D and larger tensors do; norms and biases do not).
  static bool decays(const at::Tensor& parameter);
  const NamedTensors& parameters() const { return parameters_; }

 private:
  struct Slot {
    at::Tensor master;      // fp32 copy of the parameter (the parameter itself when fp32)
    at::Tensor exp_avg;     // fp32 first moment
    at::Tensor exp_avg_sq;  // fp32 second moment
    // fp32 sum of a non-fp32 parameter's gradients this step (undefined: none yet), shared
    // with its Fp32GradientSum registration; null for fp32 parameters.
    std::shared_ptr<at::Tensor> grad_sum;
    std::shared_ptr<Fp32GradientSum> registration;
    bool decay;
  };
  NamedTensors parameters_;
  std::vector<Slot> slots_;
  AdamWOptions options_;
  int64_t step_count_ = 0;
  std::vector<at::Tensor> prepared_grads_;  // gradient_norm() -> update(): fp32, per parameter
  at::Tensor prepared_norm_;
  std::function<at::Tensor(const at::Tensor&)> reduce_norm_sq_;
};

}  // namespace tandem
