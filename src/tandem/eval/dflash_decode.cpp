#include "tandem/eval/dflash_decode.h"

#include <ATen/ATen.h>

#include "tandem/core/error.h"
#include "tandem/core/host_read.h"
#include "tandem/eval/decode_steps.h"

namespace tandem {

DFlashProposer::DFlashProposer(const FrozenModel& target, const DFlashDraftImpl& draft,
                               const at::Tensor& mask_embedding, int64_t draft_tokens)
    : DFlashProposer(target, draft, mask_embedding, draft_tokens, /*first_slot=*/1) {}

DFlashProposer::DFlashProposer(const FrozenModel& target, const DFlashDraftImpl& draft,
                               const at::Tensor& mask_embedding, int64_t draft_tokens,
                               int64_t first_slot)
    : draft_(draft), draft_tokens_(draft_tokens), dtype_(draft.fc->weight.scalar_type()) {
  const DFlashConfig& config = draft.config();
  const int64_t block_size = config.block_size;
  check(draft_tokens >= 1 && draft_tokens <= block_size - first_slot, "[eval] a block draft with ",
        "blocks of ", block_size, " proposes 1..", block_size - first_slot,
        " tokens per step, not ", draft_tokens);
  embed_tokens_ = target.embed_tokens();
  const int64_t vocab = embed_tokens_.size(0);
  check(config.mask_token_id < vocab || mask_embedding.defined(), "[eval] the draft's mask token ",
        config.mask_token_id, " is outside the target vocab (", vocab,
        ") and no grown mask embedding was given");
  lm_head_ = target.lm_head_weight();
  const at::Tensor mask_row =
      (mask_embedding.defined() ? mask_embedding : embed_tokens_[config.mask_token_id])
          .to(dtype_)
          .view({1, 1, -1});
  masks_ = mask_row.expand({1, block_size - 1, mask_row.size(2)});
  const at::Device device = target.device();
  block_offsets_ = at::arange(block_size, at::TensorOptions().dtype(at::kLong).device(device))
                       .view({1, block_size});
  anchor_valid_ = at::ones({1, 1}, at::TensorOptions().dtype(at::kBool).device(device));
}

const std::vector<int64_t>& DFlashProposer::target_layers() const {
  return draft_.config().target_layer_ids;
}

void DFlashProposer::extend(const std::vector<int64_t>& /*ids: the context is features only*/,
                            const at::Tensor& features, int64_t /*next*/) {
  const at::Tensor context = draft_.context(features.to(dtype_));
  context_ = context_.defined() ? at::cat({context_, context}, 1) : context;
}

at::Tensor DFlashProposer::block_hidden(int64_t bonus) const {
  check(context_.defined(), "[eval] propose before any extend");
  const int64_t n = context_.size(1), block_size = draft_.config().block_size;
  // Every one of the block's queries sees the n context keys (strictly before the anchor at n).
  const KeyBands all_context =
      KeyBands::from_host(at::zeros({1, block_size}, at::kLong),
                          at::full({1, block_size}, n - 1, at::kLong), context_.device());
  const at::Tensor block_embeds =
      at::cat({embed_tokens_[bonus].to(dtype_).view({1, 1, -1}), masks_}, 1);  // (1, bs, H)
  return draft_.forward(block_embeds, context_,
                        at::arange(n, block_offsets_.options()).view({1, n}), block_offsets_ + n,
                        all_context, anchor_valid_)[0];
}

std::vector<int64_t> DFlashProposer::propose(int64_t bonus) {
  const at::Tensor hidden = block_hidden(bonus);  // (bs, H)
  // Slot k predicts token n + k (same-position prediction); slot 0 is the anchor.
  const at::Tensor predicted = read_on_host(
      at::linear(hidden.narrow(0, 1, draft_tokens_).to(lm_head_.scalar_type()), lm_head_)
          .argmax(-1),
      HostRead::DecodedTokens);
  return std::vector<int64_t>(predicted.data_ptr<int64_t>(),
                              predicted.data_ptr<int64_t>() + draft_tokens_);
}

SpeculativeOutput dflash_decode(const FrozenModel& target, const DFlashDraftImpl& draft,
                                const at::Tensor& mask_embedding,
                                const std::vector<int64_t>& prompt, int64_t draft_tokens,
                                const DecodeOptions& options) {
  at::NoGradGuard no_grad;
  DFlashProposer proposer(target, draft, mask_embedding, draft_tokens);
  return speculative_decode(target, proposer, prompt, options);
}

}  // namespace tandem
