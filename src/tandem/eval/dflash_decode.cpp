#include "tandem/eval/dflash_decode.h"

#include <ATen/ATen.h>

#include "tandem/core/error.h"
#include "tandem/eval/decode_steps.h"

namespace tandem {

namespace {

// One block whose bs queries all see the n context keys.
KeyBands all_context(int64_t n, int64_t block_size, const at::Device& device) {
  return KeyBands::from_host(at::zeros({1, block_size}, at::kLong),
                             at::full({1, block_size}, n - 1, at::kLong), device);
}

}  // namespace

SpeculativeOutput dflash_decode(const FrozenModel& target, const DFlashDraftImpl& draft,
                                const at::Tensor& mask_embedding,
                                const std::vector<int64_t>& prompt, int64_t draft_tokens,
                                const DecodeOptions& options) {
  const DFlashConfig& config = draft.config();
  const int64_t block_size = config.block_size;
  check(!prompt.empty(), "[eval] empty prompt");
  check(draft_tokens >= 1 && draft_tokens <= block_size - 1, "[eval] a DFlash draft with blocks of ",
        block_size, " proposes 1..", block_size - 1, " tokens per step, not ", draft_tokens);
  const at::Tensor embed_tokens = target.embed_tokens();
  const int64_t vocab = embed_tokens.size(0);
  check(config.mask_token_id < vocab || mask_embedding.defined(), "[eval] the draft's mask token ",
        config.mask_token_id, " is outside the target vocab (", vocab,
        ") and no grown mask embedding was given");
  at::NoGradGuard no_grad;
  const c10::ScalarType dtype = draft.fc->weight.scalar_type();
  const at::Tensor lm_head = target.lm_head_weight();
  const at::Tensor mask_row =
      (mask_embedding.defined() ? mask_embedding : embed_tokens[config.mask_token_id])
          .to(dtype)
          .view({1, 1, -1});
  const at::Tensor masks = mask_row.expand({1, block_size - 1, mask_row.size(2)});
  const at::Device device = target.device();
  const at::Tensor block_offsets =
      at::arange(block_size, at::TensorOptions().dtype(at::kLong).device(device)).view({1, block_size});
  const at::Tensor anchor_valid = at::ones({1, 1}, at::TensorOptions().dtype(at::kBool).device(device));

  SpeculativeOutput output;
  std::vector<int64_t> ids = prompt;  // tokens whose target features are known
  TargetPass pass = run_target(target, ids, 1, config.target_layer_ids);
  int64_t bonus = pass.choices.item<int64_t>();  // the anchor of the next block
  output.tokens.push_back(bonus);
  while (!decode_finished(output.tokens, options)) {
    const int64_t n = static_cast<int64_t>(ids.size());
    // Context: the target's features of positions 0..n-1, strictly before the anchor at n.
    const at::Tensor context = draft.context(pass.features.narrow(1, 0, n).to(dtype));
    const at::Tensor block_embeds =
        at::cat({embed_tokens[bonus].to(dtype).view({1, 1, -1}), masks}, 1);  // (1, bs, H)
    const at::Tensor hidden = draft.forward(
        block_embeds, context, at::arange(n, block_offsets.options()).view({1, n}),
        block_offsets + n, all_context(n, block_size, device), anchor_valid);  // (1, bs, H)
    // Slot k predicts token n + k (same-position prediction); slot 0 is the anchor.
    const at::Tensor predicted =
        at::linear(hidden[0].narrow(0, 1, draft_tokens).to(lm_head.scalar_type()), lm_head)
            .argmax(-1)
            .cpu();
    const std::vector<int64_t> proposal(predicted.data_ptr<int64_t>(),
                                        predicted.data_ptr<int64_t>() + draft_tokens);

    bonus = verify_proposal(target, proposal, config.target_layer_ids, ids, bonus, pass, output);
  }
  return output;
}

}  // namespace tandem
