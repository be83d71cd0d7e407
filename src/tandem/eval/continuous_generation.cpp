#include "tandem/eval/continuous_generation.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>

#include "tandem/core/device.h"
#include "tandem/core/error.h"
#include "tandem/core/host_read.h"

namespace tandem {

namespace {

// Slots for caches holding runs of up to `longest` slots: a quarter more, so that the runs are
// shifted down once every ~longest / 4 steps (a copy of the cache) while attention, which reads
// every slot, reads few empty ones.
int64_t slots_for(int64_t longest) { return longest + longest / 4 + 16; }

}  // namespace

ContinuousGenerator::ContinuousGenerator(const FrozenModel& model, const DecodeOptions& options,
                                         const SamplingOptions& sampling, int64_t rows)
    : model_(model), options_(options), sampling_(sampling), rows_(rows) {
  check(rows >= 1, "[generate] continuous batching needs at least one row");
  check_sampling_options(options, sampling, /*has_generator=*/true);
}

int64_t ContinuousGenerator::submit(std::vector<int64_t> prompt, uint64_t seed) {
  check_prompt(prompt, model_.config().vocab_size);
  queue_.push_back({next_id_, std::move(prompt), seed});
  return next_id_++;
}

int64_t ContinuousGenerator::running() const {
  return std::count_if(rows_.begin(), rows_.end(), [](const Row& row) { return row.id >= 0; });
}

void ContinuousGenerator::make_room(int64_t slots_needed) {
  KvCache& cache = *cache_;
  if (cache.length() + slots_needed <= cache.capacity()) return;
  // Shift every run down so the longest live one starts at slot 0.
  int64_t longest = 0;
  for (const Row& row : rows_)
    if (row.id >= 0) longest = std::max(longest, row.span);
  if (longest < cache.length()) {
    cache.shift(longest);
    stats_.shifts += 1;
  }
  if (cache.length() + slots_needed > cache.capacity()) {
    cache.grow(slots_for(cache.length() + slots_needed));
    stats_.grows += 1;
  }
}

void ContinuousGenerator::refill() {
  std::vector<int64_t> free_rows;
  for (size_t r = 0; r < rows_.size(); ++r)
    if (rows_[r].id < 0) free_rows.push_back(static_cast<int64_t>(r));
  const int64_t count = std::min<int64_t>(free_rows.size(), queue_.size());
  if (count == 0) return;
  std::vector<Request> requests(queue_.begin(), queue_.begin() + count);
  queue_.erase(queue_.begin(), queue_.begin() + count);
  std::vector<std::vector<int64_t>> prompts;
  for (Request& request : requests) prompts.push_back(request.prompt);
  // The new prompts, left-padded, through a cache of their own.
  const PaddedPrompts padded = left_pad(prompts);
  const int64_t longest = padded.longest;
  KvCache prefill = model_.new_cache(count, longest);
  const at::Tensor hidden = forward_step(model_, padded, prefill);  // (count, H)
  stats_.prefills += 1;

  if (!cache_) {
    cache_.emplace(model_.new_cache(static_cast<int64_t>(rows_.size()),
                                    slots_for(longest + options_.max_new_tokens)));
    last_ = at::zeros({static_cast<int64_t>(rows_.size()), hidden.size(1)}, hidden.options());
  }
  // The placed slots end at the cache's last slot: it must hold at least `longest`.
  if (cache_->length() < longest) {
    if (longest > cache_->capacity()) {
      cache_->grow(slots_for(longest + options_.max_new_tokens));
      stats_.grows += 1;
    }
    cache_->shift(longest);
  }
  std::vector<int64_t> placed;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t r = free_rows[i];
    cache_->place_row(r, prefill, i);
    Row& row = rows_[r];
    row.id = requests[i].id;
    row.span = static_cast<int64_t>(requests[i].prompt.size());
    row.next_position = row.span;
    row.out = Generation{};
    row.generator.reset();
    if (sampling_.temperature > 0) row.generator = at::detail::createCPUGenerator(requests[i].seed);
    placed.push_back(r);
  }
  last_.index_copy_(0, to_device(at::tensor(placed, at::kLong), model_.device()), hidden);
}

std::vector<std::pair<int64_t, Generation>> ContinuousGenerator::next_finished() {
  std::vector<std::pair<int64_t, Generation>> finished;
  const int64_t batch = static_cast<int64_t>(rows_.size());
  while (finished.empty()) {
    refill();
    if (running() == 0) break;
    const at::Tensor logits = next_token_logits(model_, last_);  // (rows, V)
    const RowTokens chosen = choose_row_tokens(logits, sampling_);
    StepInputs step(batch);
    bool any_left = false;
    for (int64_t b = 0; b < batch; ++b) {
      Row& row = rows_[b];
      if (row.id < 0) continue;
      const auto [token, logprob] =
          row.generator ? chosen.sample(logits, b, *row.generator) : chosen.greedy(b);
      row.out.tokens.push_back(token);
      row.out.logprobs.push_back(logprob);
      if (sequence_ends(row.out, token, options_)) {
        finished.emplace_back(row.id, std::move(row.out));
        row.id = -1;
        cache_->clear_row(b);
        continue;
      }
      step.set(b, token, row.next_position++);
      row.span += 1;
      any_left = true;
    }
    if (!any_left) continue;  // every row ended: refill before the next step
    make_room(1);
    last_ = forward_step(model_, step, *cache_).contiguous();
    stats_.steps += 1;
  }
  std::sort(finished.begin(), finished.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return finished;
}

}  // namespace tandem
