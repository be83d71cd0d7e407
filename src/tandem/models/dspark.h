#pragma once
// The DSpark draft (docs/dspark.md): the DFlash block backbone (models/dflash.h) plus two small
// heads. Module names are DeepSpec's and speculators' (`markov_head.markov_w{1,2}`,
// `confidence_head.proj`), so named_parameters() are the exported keys.
//
//   h_k          the backbone's normed output at block slot k (slot k of anchor a predicts the
//                token at a + k + 1: every slot, the anchor's included, predicts one token)
//   prev_k       the token before the one slot k predicts: the anchor for k = 0, then the token
//                at a + k (teacher-forced in training, the chain's own choice when drafting)
//   Markov head  e_k = markov_w1[prev_k] (rank r);  logits_k = lm_head(h_k) + markov_w2 e_k
//   confidence   c_k = proj(cat(h_k, e_k)): the logit of P(slot k is accepted | the slots
//                before it were)
// markov_rank 0 leaves the Markov head out (logits = lm_head(h)); the confidence head then reads
// h alone.
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "tandem/models/dflash.h"
#include "tandem/models/layers.h"

namespace tandem {

/// How the two heads start (the backbone starts N(0, draft.init_std) either way).
enum class DSparkHeadInit {
  // markov_w1 ~ N(0, 0.01); markov_w2 and the confidence proj (weight and bias) ~ U(±1/√fan_in):
  // torch's Linear default, as speculators 0.9.0 starts them.
  FanIn,
  // N(0, draft.init_std) and a zero bias, like the backbone: what transformers' post_init gives
  // DeepSpec's reference heads.
  Normal,
};

struct DSparkHeads {
  int64_t markov_rank = 256;  // r; 0: no Markov head
  bool confidence_head = true;
  DSparkHeadInit init = DSparkHeadInit::FanIn;
};

/// markov_w1: the previous token's rank-r code; markov_w2: its bias on every logit.
class MarkovHeadImpl : public torch::nn::Module {
 public:
  MarkovHeadImpl(int64_t vocab_size, int64_t rank, const at::TensorOptions& options);
  Embedding markov_w1{nullptr};  // weight (V, r)
  Linear markov_w2{nullptr};     // weight (V, r), no bias
};
TORCH_MODULE(MarkovHead);

/// proj: cat(h, e) (H + r) -> one logit, with a bias.
class ConfidenceHeadImpl : public torch::nn::Module {
 public:
  ConfidenceHeadImpl(int64_t input_size, const at::TensorOptions& options);
  Linear proj{nullptr};  // weight (1, H + r), bias (1)
};
TORCH_MODULE(ConfidenceHead);

class DSparkDraftImpl : public DFlashDraftImpl {
 public:
  DSparkDraftImpl(const DFlashConfig& config, const DSparkHeads& heads,
                  const at::TensorOptions& options);

  /// e = markov_w1[prev_ids]: (...) int64 -> (..., r); undefined when markov_rank is 0.
  at::Tensor markov_code(const at::Tensor& prev_ids) const;
  /// markov_w2 e: (..., r) -> (..., V); zeros of (..., V) need no call (rank 0).
  at::Tensor markov_bias(const at::Tensor& code) const;
  /// The confidence logits proj(cat(h, e)): hidden (..., H), code (..., r) or undefined -> (...).
  at::Tensor confidence_logits(const at::Tensor& hidden, const at::Tensor& code) const;
  const DSparkHeads& heads() const { return heads_; }

  MarkovHead markov_head{nullptr};          // absent when markov_rank is 0
  ConfidenceHead confidence_head{nullptr};  // absent when the confidence head is off

 private:
  DSparkHeads heads_;
};

/// Draws the heads for heads().init == FanIn from `seed` (on the host, then copied, so a seed
/// gives the same heads on any device); Normal leaves them as init_normal_ drew them.
void init_dspark_heads(DSparkDraftImpl& draft, uint64_t seed);

}  // namespace tandem
