#pragma once
// A seeded, deterministic, resumable sampler over dataset indices 0..N-1, sharded by
// data-parallel rank.
//
// Epoch e's order is a permutation drawn from (seed, e) with std::mt19937_64 (whose output the
// C++ standard fixes) and a Fisher-Yates shuffle whose bounded draw is written out here
// (std::shuffle and std::uniform_int_distribution are implementation-defined), so the order is
// the same on every platform and standard library:
//   engine seed  = splitmix64(splitmix64(seed) ^ epoch)
//   for i = N-1 .. 1: j = uniform(i + 1); swap(p[i], p[j])
//   uniform(n)   = first engine() output r with r >= (2^64 - n) mod n, taken mod n (rejection)
// Sharding: the epoch's permutation is first cut to a multiple of world_size W (drop_last: the
// last N mod W entries are dropped; otherwise it is padded by repeating its first entries, as
// PyTorch's DistributedSampler does), then rank r takes entries r, r+W, r+2W, ...: disjoint
// across ranks, equal counts (floor(N/W) or ceil(N/W)) per rank per epoch.
// Position: (epoch, offset) where offset counts the indices this rank has taken in that epoch.
// Each rank saves its own SamplerState; restoring it continues with exactly the same indices.
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <vector>

namespace tandem {

struct SamplerOptions {
  int64_t dataset_size = 0;  // N
  uint64_t seed = 0;
  int64_t rank = 0;
  int64_t world_size = 1;
  bool shuffle = true;    // false: the identity order every epoch
  bool drop_last = true;  // false: pad each epoch to a multiple of world_size by repeating
};

/// The exact position of one rank's sampler (JSON: {"seed","epoch","offset","rank","world_size",
/// "dataset_size"}); the last three are checked on restore.
struct SamplerState {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t offset = 0;  // indices already taken by this rank in `epoch`
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t dataset_size = 0;
  bool operator==(const SamplerState&) const = default;
};
/// nlohmann::json conversions, so a checkpoint can write `json["sampler"] = sampler.state()`.
void to_json(nlohmann::json& json, const SamplerState& state);
/// Reads a SamplerState; throws Error("[sampler] ...") on missing or mistyped fields.
void from_json(const nlohmann::json& json, SamplerState& state);

/// splitmix64 (Steele, Lea, Flood 2014): the 64-bit mixer used to derive per-epoch seeds.
uint64_t splitmix64(uint64_t value);
/// The seed of stream `stream` drawn from `seed`: splitmix64 at that step of the Weyl sequence
/// from `seed`, so that streams and seeds give unrelated draws (eval's prompts, regenerate's
/// answers, rollout's completions).
uint64_t stream_seed(uint64_t seed, uint64_t stream);

/// The permutation of 0..size-1 for (seed, epoch), as described above. (size,)
std::vector<int64_t> epoch_permutation(int64_t size, uint64_t seed, int64_t epoch);

class Sampler {
 public:
  /// A sampler at the start of epoch 0; throws if a rank would get no indices per epoch.
  explicit Sampler(const SamplerOptions& options);

  /// The next index for this rank, moving to the next epoch after the last one.
  int64_t next();
  /// The next `count` indices (count,), as `count` calls of next().
  std::vector<int64_t> next(int64_t count);
  /// The next `count` indices without moving the position. (count,)
  std::vector<int64_t> peek(int64_t count) const;

  /// This rank's indices of `epoch`, in order. (per_rank(),)
  std::vector<int64_t> epoch_indices(int64_t epoch) const;
  /// Indices each rank takes per epoch: floor(N/W) (drop_last) or ceil(N/W).
  int64_t per_rank() const { return per_rank_; }

  /// The current position.
  SamplerState state() const;
  /// Moves to `state`; throws if it belongs to another seed, rank, world size or dataset size.
  void restore(const SamplerState& state);

 private:
  const std::vector<int64_t>& current_epoch() const;  // cached epoch_indices(epoch_)
  SamplerOptions options_;
  int64_t per_rank_ = 0;
  int64_t epoch_ = 0;
  int64_t offset_ = 0;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_indices_;
};

}  // namespace tandem
