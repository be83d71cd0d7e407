#pragma once
// Continuous batching: up to `rows` sequences decode together through one KV cache, and a row
// whose sequence ends takes the next queued prompt at once, instead of idling until the longest
// sequence of a static batch ends (eval/generation.h). New prompts are prefilled together in a
// cache of their own and placed into the free rows (KvCache::place_row), so every live row's
// slots stay one run ending at the cache's last slot; when the cache fills, the slots are shifted
// down past the longest live run (KvCache::shift), and the cache grows only when a run needs it.
// The cache holds a quarter more slots than the longest sequence it has seen.
// Each sequence's tokens are what generate() gives it alone: greedy rows take the argmax, sampled
// rows draw from a generator of their own (seeded per request), so a token never depends on which
// other sequences share the batch, up to the rounding of batched arithmetic.
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "tandem/eval/generation.h"
#include "tandem/models/frozen.h"
#include "tandem/models/kv_cache.h"

namespace tandem {

class ContinuousGenerator {
 public:
  /// Sequences of `model` decoded `rows` at a time with `options` (max_new_tokens, stop_ids) and
  /// `sampling` (temperature 0: greedy).
  ContinuousGenerator(const FrozenModel& model, const DecodeOptions& options,
                      const SamplingOptions& sampling, int64_t rows);

  /// Queues `prompt`; a sampled sequence draws from a CPU generator seeded with `seed`. Returns
  /// the request's id (0, 1, 2, ... in submission order).
  int64_t submit(std::vector<int64_t> prompt, uint64_t seed = 0);

  /// Decodes (filling free rows from the queue, oldest first) until at least one sequence ends,
  /// and returns the ended ones by id, in id order; empty when nothing is queued or running.
  std::vector<std::pair<int64_t, Generation>> next_finished();

  int64_t running() const;
  int64_t queued() const { return static_cast<int64_t>(queue_.size()); }

  struct Stats {
    int64_t steps = 0;     // one-token forwards over the rows
    int64_t prefills = 0;  // forwards of newly placed prompts
    int64_t shifts = 0;    // the cache's slots shifted down to free room
    int64_t grows = 0;     // the cache reallocated larger
  };
  const Stats& stats() const { return stats_; }

 private:
  struct Request {
    int64_t id;
    std::vector<int64_t> prompt;
    uint64_t seed;
  };
  struct Row {
    int64_t id = -1;   // -1: free
    int64_t span = 0;  // slots its sequence holds: prompt + tokens fed back
    int64_t next_position = 0;
    Generation out;
    std::optional<at::Generator> generator;  // sampling only
  };
  void refill();                         // free rows take queued prompts
  void make_room(int64_t slots_needed);  // the cache can take `slots_needed` more slots

  const FrozenModel& model_;
  DecodeOptions options_;
  SamplingOptions sampling_;
  std::deque<Request> queue_;
  std::vector<Row> rows_;
  std::optional<KvCache> cache_;
  at::Tensor last_;  // (rows, H): each live row's last hidden state
  int64_t next_id_ = 0;
  Stats stats_;
};

}  // namespace tandem
