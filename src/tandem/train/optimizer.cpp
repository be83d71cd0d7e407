#include "tandem/train/optimizer.h"

#include <ATen/ATen.h>

#include <cmath>
#include <set>

#include "tandem/core/error.h"
#include "tandem/core/fp32_gradients.h"
#include "tandem/core/host_read.h"

namespace tandem {

bool MixedPrecisionAdamW::decays(const at::Tensor& parameter) { return parameter.dim() >= 2; }

MixedPrecisionAdamW::MixedPrecisionAdamW(NamedTensors parameters, AdamWOptions options,
                                         std::vector<bool> decay)
    : parameters_(std::move(parameters)), options_(options) {
  check(!parameters_.empty(), "[optimizer] no trainable parameters were given");
  check(decay.empty() || decay.size() == parameters_.size(), "[optimizer] ", decay.size(),
        " weight-decay flags for ", parameters_.size(), " parameters");
  std::set<const void*> seen;
  at::NoGradGuard no_grad;
  for (const auto& [name, parameter] : parameters_) {
    check(parameter.requires_grad(), "[optimizer] parameter '", name, "' does not require grad");
    check(parameter.is_floating_point(), "[optimizer] parameter '", name,
          "' is not floating point");
    check(seen.insert(parameter.unsafeGetTensorImpl()).second, "[optimizer] parameter '", name,
          "' was given twice");
    Slot slot;
    slot.master = parameter.scalar_type() == at::kFloat ? parameter.detach()
                                                        : parameter.detach().to(at::kFloat);
    slot.exp_avg = at::zeros_like(slot.master);
    slot.exp_avg_sq = at::zeros_like(slot.master);
    slot.decay = decay.empty() ? decays(parameter) : decay[slots_.size()];
    if (parameter.scalar_type() != at::kFloat) {
      slot.grad_sum = std::make_shared<at::Tensor>();
      slot.registration = std::make_shared<Fp32GradientSum>(parameter, slot.grad_sum);
    }
    slots_.push_back(std::move(slot));
  }
}

int64_t MixedPrecisionAdamW::state_bytes() const {
  int64_t bytes = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& slot = slots_[i];
    if (parameters_[i].second.scalar_type() != at::kFloat) bytes += slot.master.nbytes();
    bytes += slot.exp_avg.nbytes() + slot.exp_avg_sq.nbytes();
  }
  return bytes;
}

void MixedPrecisionAdamW::zero_grad() {
  prepared_norm_ = at::Tensor();
  prepared_grads_.clear();
  for (auto& entry : parameters_) entry.second.mutable_grad() = at::Tensor();
  for (Slot& slot : slots_)
    if (slot.grad_sum) *slot.grad_sum = at::Tensor();
}

void MixedPrecisionAdamW::accumulate_gradients() {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    at::Tensor& parameter = parameters_[i].second;
    if (parameter.scalar_type() == at::kFloat || !parameter.grad().defined()) continue;
    at::Tensor& sum = *slots_[i].grad_sum;
    if (sum.defined())
      sum.add_(parameter.grad().to(at::kFloat));
    else
      sum = parameter.grad().to(at::kFloat);
    parameter.mutable_grad() = at::Tensor();
  }
}

int64_t MixedPrecisionAdamW::reduce_gradients(
    const std::function<void(at::Tensor&)>& all_reduce_sum) {
  at::NoGradGuard no_grad;
  const int64_t count = static_cast<int64_t>(parameters_.size());
  int64_t total = count;
  for (const auto& entry : parameters_) total += entry.second.numel();
  // [flags (P) | gradients], on the parameters' device (NCCL reduces device memory).
  const at::Device device = count > 0 ? parameters_.front().second.device() : at::Device(at::kCPU);
  at::Tensor buffer = at::zeros({total}, at::TensorOptions().dtype(at::kFloat).device(device));
  int64_t offset = count;
  for (int64_t i = 0; i < count; ++i) {
    const at::Tensor& parameter = parameters_[i].second;
    const at::Tensor& local =
        parameter.scalar_type() == at::kFloat ? parameter.grad() : *slots_[i].grad_sum;
    const int64_t numel = parameter.numel();
    if (local.defined()) {
      buffer[i] = 1.0;
      buffer.narrow(0, offset, numel).copy_(local.reshape(-1));
    }
    offset += numel;
  }
  all_reduce_sum(buffer);
  const at::Tensor reached =  // one read of the P flags
      read_on_host(buffer.narrow(0, 0, count), HostRead::GradientFlags).contiguous();
  const float* flags = reached.data_ptr<float>();
  offset = count;
  for (int64_t i = 0; i < count; ++i) {
    at::Tensor& parameter = parameters_[i].second;
    const int64_t numel = parameter.numel();
    if (flags[i] > 0) {
      const at::Tensor summed = buffer.narrow(0, offset, numel).view(parameter.sizes()).clone();
      if (parameter.scalar_type() == at::kFloat)
        parameter.mutable_grad() = summed;
      else
        *slots_[i].grad_sum = summed;
    }
    offset += numel;
  }
  return total * static_cast<int64_t>(sizeof(float));
}

at::Tensor MixedPrecisionAdamW::step(double lr) {
  at::Tensor norm = gradient_norm();
  update(lr);
  return norm;
}

at::Tensor MixedPrecisionAdamW::gradient_norm() {
  at::NoGradGuard no_grad;
  // Global norm over every gradient (and, through the hook, every shard): each tensor's norm
  // in fp64 by one multi-tensor call, squared and summed in fp64, so the clipping factor does not
  // depend on how the sum was split (one process, or slices on W ranks) beyond rounding far below
  // fp32's.
  std::vector<at::Tensor> grads(parameters_.size()), present;
  at::Tensor norm_sq;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const at::Tensor& grad = parameters_[i].second.grad();
    const at::Tensor sum = slots_[i].grad_sum ? *slots_[i].grad_sum : at::Tensor();
    if (!grad.defined() && !sum.defined()) continue;
    grads[i] =
        sum.defined() ? (grad.defined() ? sum + grad.to(at::kFloat) : sum) : grad.to(at::kFloat);
    present.push_back(grads[i]);
  }
  if (!present.empty())
    norm_sq = at::stack(at::_foreach_norm(present, 2, at::kDouble)).square().sum();
  if (!norm_sq.defined()) {
    const at::Device device =
        parameters_.empty() ? at::Device(at::kCPU) : parameters_.front().second.device();
    norm_sq = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device));
  }
  if (reduce_norm_sq_) norm_sq = reduce_norm_sq_(norm_sq);
  prepared_grads_ = std::move(grads);
  prepared_norm_ = norm_sq.sqrt();
  return prepared_norm_;
}

void MixedPrecisionAdamW::update(double lr) {
  check(prepared_norm_.defined(), "[optimizer] update() without gradient_norm() first");
  at::NoGradGuard no_grad;
  const at::Tensor grad_norm = std::move(prepared_norm_);
  const std::vector<at::Tensor> grads = std::move(prepared_grads_);
  prepared_norm_ = at::Tensor();
  prepared_grads_.clear();
  // clip = max / (norm + 1e-6) when the norm exceeds max, else 1 (in fp64, as a host double
  // would be; multiplying by exactly 1 leaves the gradients untouched).
  at::Tensor clip;
  if (options_.max_grad_norm > 0)
    clip = at::where(grad_norm > options_.max_grad_norm,
                     at::full_like(grad_norm, options_.max_grad_norm).div(grad_norm + 1e-6),
                     at::ones_like(grad_norm));

  ++step_count_;
  const double bias1 = 1.0 - std::pow(options_.beta1, static_cast<double>(step_count_));
  const double bias2 = 1.0 - std::pow(options_.beta2, static_cast<double>(step_count_));
  // The parameters with a gradient, in lists per role updated by ATen's multi-tensor (_foreach)
  // ops: a handful of kernels per list on CUDA instead of ~10 per parameter, with the same
  // elementwise arithmetic as one tensor at a time. Lists hold up to 64M elements, which bounds
  // the temporaries (clipped gradients, denominators) at 512 MB whatever the model's size.
  constexpr int64_t kListElements = int64_t{1} << 26;
  std::vector<size_t> pending;
  int64_t pending_elements = 0;
  auto flush = [&] {
    if (pending.empty()) return;
    std::vector<at::Tensor> step_grads, masters, decayed, exp_avgs, exp_avg_sqs, low_precision,
        low_precision_masters;
    for (const size_t i : pending) {
      Slot& slot = slots_[i];
      step_grads.push_back(grads[i]);
      masters.push_back(slot.master);
      if (slot.decay && options_.weight_decay > 0) decayed.push_back(slot.master);
      exp_avgs.push_back(slot.exp_avg);
      exp_avg_sqs.push_back(slot.exp_avg_sq);
      if (parameters_[i].second.scalar_type() != at::kFloat) {
        low_precision.push_back(parameters_[i].second.detach());
        low_precision_masters.push_back(slot.master);
      }
    }
    if (clip.defined()) step_grads = at::_foreach_mul(step_grads, clip.to(at::kFloat));
    if (!decayed.empty()) at::_foreach_mul_(decayed, 1.0 - lr * options_.weight_decay);
    at::_foreach_mul_(exp_avgs, options_.beta1);
    at::_foreach_add_(exp_avgs, step_grads, 1.0 - options_.beta1);
    at::_foreach_mul_(exp_avg_sqs, options_.beta2);
    at::_foreach_addcmul_(exp_avg_sqs, step_grads, step_grads, 1.0 - options_.beta2);
    step_grads.clear();
    std::vector<at::Tensor> denominators = at::_foreach_sqrt(exp_avg_sqs);
    at::_foreach_div_(denominators, std::sqrt(bias2));
    at::_foreach_add_(denominators, options_.eps);
    at::_foreach_addcdiv_(masters, exp_avgs, denominators, -lr / bias1);
    if (!low_precision.empty()) at::_foreach_copy_(low_precision, low_precision_masters);
    pending.clear();
    pending_elements = 0;
  };
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (!grads[i].defined()) continue;
    if (pending_elements > 0 && pending_elements + grads[i].numel() > kListElements) flush();
    pending.push_back(i);
    pending_elements += grads[i].numel();
  }
  flush();
}

std::vector<std::string> MixedPrecisionAdamW::nonfinite_state() const {
  at::NoGradGuard no_grad;
  std::vector<std::string> names;
  std::vector<at::Tensor> finite;  // one 0-dim bool per tensor, read together
  auto add = [&](const std::string& name, const at::Tensor& tensor) {
    names.push_back(name);
    finite.push_back(at::isfinite(tensor).all());
  };
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const std::string& name = parameters_[i].first;
    add(name, parameters_[i].second);
    if (parameters_[i].second.scalar_type() != at::kFloat) add("master." + name, slots_[i].master);
    add("exp_avg." + name, slots_[i].exp_avg);
    add("exp_avg_sq." + name, slots_[i].exp_avg_sq);
  }
  std::vector<std::string> bad;
  if (finite.empty()) return bad;
  const at::Tensor flags = read_on_host(at::stack(finite), HostRead::SaveChecks);
  const bool* data = flags.data_ptr<bool>();
  for (size_t i = 0; i < names.size(); ++i)
    if (!data[i]) bad.push_back(names[i]);
  return bad;
}

MixedPrecisionAdamW::NamedTensors MixedPrecisionAdamW::state() const {
  NamedTensors out;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const std::string& name = parameters_[i].first;
    if (parameters_[i].second.scalar_type() != at::kFloat)
      out.emplace_back("master." + name, slots_[i].master);
    out.emplace_back("exp_avg." + name, slots_[i].exp_avg);
    out.emplace_back("exp_avg_sq." + name, slots_[i].exp_avg_sq);
  }
  out.emplace_back("step", at::tensor({step_count_}, at::kLong));
  return out;
}

void MixedPrecisionAdamW::load_state(const std::map<std::string, at::Tensor>& state,
                                     const std::string& where) {
  at::NoGradGuard no_grad;
  auto fetch = [&](const std::string& key, const at::Tensor& like) {
    auto found = state.find(key);
    check(found != state.end(), "[optimizer] ", where, ": missing '", key, "'");
    check(found->second.sizes() == like.sizes(), "[optimizer] ", where, ": '", key, "' has shape ",
          found->second.sizes(), ", expected ", like.sizes());
    return found->second;
  };
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const std::string& name = parameters_[i].first;
    Slot& slot = slots_[i];
    if (parameters_[i].second.scalar_type() != at::kFloat)
      slot.master.copy_(fetch("master." + name, slot.master));
    slot.exp_avg.copy_(fetch("exp_avg." + name, slot.exp_avg));
    slot.exp_avg_sq.copy_(fetch("exp_avg_sq." + name, slot.exp_avg_sq));
  }
  auto step = state.find("step");
  check(step != state.end() && step->second.numel() == 1, "[optimizer] ", where,
        ": missing 'step'");
  step_count_ = step->second.item<int64_t>();
}

}  // namespace tandem
