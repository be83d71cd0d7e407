#include "tandem/models/layers.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "tandem/dist/sharding.h"
#include "tandem/models/lean_layers.h"

namespace tandem {

LinearImpl::LinearImpl(int64_t in_features, int64_t out_features, bool has_bias,
                       const at::TensorOptions& options) {
  weight = register_parameter("weight", at::empty({out_features, in_features}, options));
  if (has_bias) bias = register_parameter("bias", at::empty({out_features}, options));
}

at::Tensor apply_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!bias.defined())
    return with_full_parameters({weight}, {x}, [](const auto& in, const auto& w) {
      return std::vector<at::Tensor>{at::linear(in[0], w[0])};
    })[0];
  return with_full_parameters({weight, bias}, {x}, [](const auto& in, const auto& w) {
    return std::vector<at::Tensor>{at::linear(in[0], w[0], w[1])};
  })[0];
}

at::Tensor apply_embedding(const at::Tensor& weight, const at::Tensor& ids) {
  return with_full_parameters({weight}, {ids}, [](const auto& in, const auto& w) {
    return std::vector<at::Tensor>{at::embedding(w[0], in[0])};
  })[0];
}

at::Tensor apply_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps,
                          bool zero_centered) {
  return with_full_parameters({weight}, {x}, [eps, zero_centered](const auto& in, const auto& w) {
    return std::vector<at::Tensor>{zero_centered ? zero_centered_rms_norm(in[0], w[0], eps)
                                                 : rms_norm(in[0], w[0], eps)};
  })[0];
}

at::Tensor LinearImpl::forward(const at::Tensor& x) const { return apply_linear(x, weight, bias); }

EmbeddingImpl::EmbeddingImpl(int64_t vocab_size, int64_t hidden_size,
                             const at::TensorOptions& options) {
  weight = register_parameter("weight", at::empty({vocab_size, hidden_size}, options));
}

at::Tensor EmbeddingImpl::forward(const at::Tensor& ids) const {
  return apply_embedding(weight, ids);
}

RMSNormImpl::RMSNormImpl(int64_t size, double eps_, const at::TensorOptions& options,
                         bool zero_centered_)
    : eps(eps_), zero_centered(zero_centered_) {
  weight = register_parameter("weight", at::empty({size}, options));
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return lean_rms_norm(x, weight, eps);  // keeps x and the inverse RMS only (models/lean_layers.h)
}

at::Tensor zero_centered_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor normed = x32 * at::rsqrt(x32.square().mean(-1, true) + eps);
  return (normed * (weight.to(at::kFloat) + 1.0)).to(x.scalar_type());
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x) const {
  return apply_rms_norm(x, weight, eps, zero_centered);
}

MlpImpl::MlpImpl(int64_t hidden_size, int64_t intermediate_size, bool bias,
                 const at::TensorOptions& options, MlpActivation activation_)
    : activation(activation_) {
  gate_proj = register_module("gate_proj", Linear(hidden_size, intermediate_size, bias, options));
  up_proj = register_module("up_proj", Linear(hidden_size, intermediate_size, bias, options));
  down_proj = register_module("down_proj", Linear(intermediate_size, hidden_size, bias, options));
}

at::Tensor MlpImpl::forward(const at::Tensor& x) const {
  if (activation == MlpActivation::GeluTanh)  // Gemma's GeGLU
    return down_proj->forward(at::gelu(gate_proj->forward(x), "tanh") * up_proj->forward(x));
  return down_proj->forward(swiglu(gate_proj->forward(x), up_proj->forward(x)));
}

void init_normal_(torch::nn::Module& module, double std, uint64_t seed) {
  at::NoGradGuard no_grad;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (auto& child : module.modules(/*include_self=*/true)) {
    const auto* norm = dynamic_cast<RMSNormImpl*>(child.get());
    for (auto& param : child->named_parameters(/*recurse=*/false)) {
      at::Tensor& value = param.value();
      if (norm != nullptr) {
        value.fill_(norm->zero_centered ? 0.0 : 1.0);
      } else if (param.key() == "bias") {
        value.zero_();
      } else {
        at::Tensor sample = at::empty(value.sizes(), at::kFloat);
        sample.normal_(0.0, std, generator);
        value.copy_(sample);
      }
    }
  }
}

}  // namespace tandem
