#include "tandem/eval/eagle3_decode.h"

#include <ATen/ATen.h>

#include "tandem/core/device.h"
#include "tandem/core/error.h"
#include "tandem/core/host_read.h"
#include "tandem/eval/decode_steps.h"
#include "tandem/models/key_bands.h"

namespace tandem {

Eagle3Proposer::Eagle3Proposer(const FrozenModel& target, const Eagle3DraftImpl& draft,
                               int64_t draft_tokens)
    : draft_(draft),
      head_(target.head()),
      draft_tokens_(draft_tokens),
      dtype_(draft.fc->weight.scalar_type()),
      draft_to_target_(read_on_host(draft.draft_to_target(), HostRead::DraftVocabMap)) {
  check(draft_tokens >= 1, "[eval] draft tokens per step must be >= 1, got ", draft_tokens);
}

const std::vector<int64_t>& Eagle3Proposer::target_layers() const {
  return draft_.config().aux_layer_ids;
}

int64_t Eagle3Proposer::context_length() const {
  return state_.context_k.defined() ? state_.context_k.size(2) : 0;
}

void Eagle3Proposer::reset() {
  state_ = TttState();
  last_ = at::Tensor();
}

void Eagle3Proposer::extend(const std::vector<int64_t>& ids, const at::Tensor& features,
                            int64_t next) {
  const at::Device device = features.device();
  const int64_t first = context_length(), count = static_cast<int64_t>(ids.size());
  check(count > 0 && features.size(1) == count, "[eval] extend: ", count, " ids and features ",
        features.sizes());
  std::vector<int64_t> shifted(ids.begin() + 1, ids.end());  // position t reads token t + 1
  shifted.push_back(next);
  state_.step_k.clear();  // the last proposal's unroll
  state_.step_v.clear();
  const at::Tensor embeds = head_.embed(decode_row(shifted, device)).to(dtype_);
  const at::Tensor hidden = draft_.fuse(features.to(dtype_));
  const at::Tensor positions = at::arange(first, first + count, at::kLong).view({1, count});
  // From an empty context: step 0 of the training unroll over all of it, causal (the uncached
  // reference comes here every step). After: only the new positions join the context, which
  // is what the cached decoder's steps are checked against.
  const at::Tensor out =
      first == 0 ? draft_.step(embeds, hidden, to_device(positions, device),
                               causal_key_bands(AttentionLayout::causal(1, count, device)), state_)
                 : draft_.extend_context(embeds, hidden, positions, state_);
  last_ = out.narrow(1, count - 1, 1);
}

std::vector<int64_t> Eagle3Proposer::propose(int64_t /*next: already read by extend*/) {
  check(last_.defined(), "[eval] propose before any extend");
  const at::Device device = last_.device();
  const int64_t n = context_length();
  const KeyBands all_context =  // one query that sees the whole context
      KeyBands::from_host(at::zeros({1, 1}, at::kLong), at::full({1, 1}, n - 1, at::kLong), device);
  const int64_t* draft_to_target = draft_to_target_.data_ptr<int64_t>();
  std::vector<int64_t> proposal;
  at::Tensor last = last_;
  for (int64_t j = 0; j < draft_tokens_; ++j) {
    if (j > 0)
      last = draft_.step(head_.embed(decode_row({proposal.back()}, device)).to(dtype_), last,
                         at::full({1, 1}, n - 1 + j, at::TensorOptions(at::kLong).device(device)),
                         all_context, state_);
    const int64_t draft_id =
        read_on_host(draft_.logits(last).argmax(-1), HostRead::DecodedTokens).item<int64_t>();
    proposal.push_back(draft_to_target[draft_id]);
  }
  return proposal;
}

SpeculativeOutput eagle3_decode(const FrozenModel& target, const Eagle3DraftImpl& draft,
                                const std::vector<int64_t>& prompt, int64_t draft_tokens,
                                const DecodeOptions& options) {
  at::NoGradGuard no_grad;
  Eagle3Proposer proposer(target, draft, draft_tokens);
  return speculative_decode(target, proposer, prompt, options);
}

}  // namespace tandem
