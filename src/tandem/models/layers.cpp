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

at::Tensor apply_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return with_full_parameters({weight}, {x}, [eps](const auto& in, const auto& w) {
    return std::vector<at::Tensor>{rms_norm(in[0], w[0], eps)};
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

RMSNormImpl::RMSNormImpl(int64_t size, double eps_, const at::TensorOptions& options) : eps(eps_) {
  weight = register_parameter("weight", at::empty({size}, options));
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return lean_rms_norm(x, weight, eps);  // keeps x and the inverse RMS only (models/lean_layers.h)
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x) const {
  return apply_rms_norm(x, weight, eps);
}

void init_normal_(torch::nn::Module& module, double std, uint64_t seed) {
  at::NoGradGuard no_grad;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (auto& child : module.modules(/*include_self=*/true)) {
    const bool is_norm = dynamic_cast<RMSNormImpl*>(child.get()) != nullptr;
    for (auto& param : child->named_parameters(/*recurse=*/false)) {
      at::Tensor& value = param.value();
      if (is_norm) {
        value.fill_(1.0);
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
