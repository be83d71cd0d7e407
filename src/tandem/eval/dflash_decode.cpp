#include "tandem/eval/dflash_decode.h"

#include <ATen/ATen.h>

#include "tandem/core/error.h"
#include "tandem/core/host_read.h"
#include "tandem/eval/decode_steps.h"
#include "tandem/eval/uncached_decode.h"

namespace tandem {

DFlashProposer::DFlashProposer(const FrozenModel& target, const DFlashDraftImpl& draft,
                               const at::Tensor& mask_embedding, int64_t draft_tokens)
    : draft_(draft), draft_tokens_(draft_tokens), dtype_(draft.fc->weight.scalar_type()) {
  const DFlashConfig& config = draft.config();
  const int64_t block_size = config.block_size;
  check(draft_tokens >= 1 && draft_tokens <= block_size - 1,
        "[eval] a DFlash draft with blocks of ", block_size, " proposes 1..", block_size - 1,
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

std::vector<int64_t> DFlashProposer::propose(const at::Tensor& context, int64_t bonus) const {
  const int64_t n = context.size(1), block_size = draft_.config().block_size;
  // Every one of the block's queries sees the n context keys (strictly before the anchor at n).
  const KeyBands all_context =
      KeyBands::from_host(at::zeros({1, block_size}, at::kLong),
                          at::full({1, block_size}, n - 1, at::kLong), context.device());
  const at::Tensor block_embeds =
      at::cat({embed_tokens_[bonus].to(dtype_).view({1, 1, -1}), masks_}, 1);  // (1, bs, H)
  const at::Tensor hidden =
      draft_.forward(block_embeds, context, at::arange(n, block_offsets_.options()).view({1, n}),
                     block_offsets_ + n, all_context, anchor_valid_);
  // Slot k predicts token n + k (same-position prediction); slot 0 is the anchor.
  const at::Tensor predicted = read_on_host(
      at::linear(hidden[0].narrow(0, 1, draft_tokens_).to(lm_head_.scalar_type()), lm_head_)
          .argmax(-1),
      HostRead::DecodedTokens);
  return std::vector<int64_t>(predicted.data_ptr<int64_t>(),
                              predicted.data_ptr<int64_t>() + draft_tokens_);
}

SpeculativeOutput dflash_decode(const FrozenModel& target, const DFlashDraftImpl& draft,
                                const at::Tensor& mask_embedding,
                                const std::vector<int64_t>& prompt, int64_t draft_tokens,
                                const DecodeOptions& options) {
  if (!options.kv_cache)
    return dflash_decode_uncached(target, draft, mask_embedding, prompt, draft_tokens, options);
  check(!prompt.empty(), "[eval] empty prompt");
  at::NoGradGuard no_grad;
  const DFlashProposer proposer(target, draft, mask_embedding, draft_tokens);
  const int64_t prompt_length = static_cast<int64_t>(prompt.size());
  CachedTarget cached(target, draft.config().target_layer_ids,
                      prompt_length + options.max_new_tokens + draft_tokens + 1);

  SpeculativeOutput output;
  TargetPass pass = cached.run(prompt);
  int64_t bonus = pass.choices[prompt_length - 1].item<int64_t>();  // the next block's anchor
  output.tokens.push_back(bonus);
  // The draft's context of every position the target has run (position-wise, so it grows).
  at::Tensor context = draft.context(pass.features.to(proposer.dtype()));
  while (!decode_finished(output.tokens, options)) {
    const std::vector<int64_t> proposal = proposer.propose(context, bonus);
    bonus = cached.verify(bonus, proposal, pass, output);
    context = at::cat({context, draft.context(pass.features.to(proposer.dtype()))}, 1);
  }
  return output;
}

}  // namespace tandem
