#include "tandem/data/sampler.h"

#include <nlohmann/json.hpp>
#include <random>
#include <type_traits>
#include <utility>

#include "tandem/core/error.h"

namespace tandem {
namespace {

/// A uniform draw in [0, bound) from `engine` by rejection, identical on every platform.
uint64_t uniform_below(std::mt19937_64& engine, uint64_t bound) {
  // Accept r only in the top floor(2^64 / bound) * bound values so r mod bound is unbiased;
  // (2^64 - bound) mod bound == (-bound) mod bound in unsigned arithmetic.
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const uint64_t r = engine();
    if (r >= threshold) return r % bound;
  }
}

/// Reads field `name` of `json` as T, naming it in the error.
template <typename T>
T field(const nlohmann::json& json, const char* name) {
  const auto found = json.find(name);
  check(found != json.end(), "[sampler] state lacks \"", name, "\"");
  const bool integer =
      std::is_unsigned_v<T> ? found->is_number_unsigned() : found->is_number_integer();
  check(integer, "[sampler] state field \"", name, "\" must be a",
        std::is_unsigned_v<T> ? " non-negative" : "n", " integer");
  return found->get<T>();
}

}  // namespace

uint64_t splitmix64(uint64_t value) {
  value += 0x9E3779B97F4A7C15ull;
  value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9ull;
  value = (value ^ (value >> 27)) * 0x94D049BB133111EBull;
  return value ^ (value >> 31);
}

uint64_t stream_seed(uint64_t seed, uint64_t stream) {
  return splitmix64(seed + 0x9E3779B97F4A7C15ull * stream);
}

std::vector<int64_t> epoch_permutation(int64_t size, uint64_t seed, int64_t epoch) {
  check(size >= 0, "[sampler] dataset size must be >= 0, got ", size);
  std::vector<int64_t> permutation(size);
  for (int64_t i = 0; i < size; ++i) permutation[i] = i;
  std::mt19937_64 engine(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(epoch)));
  for (int64_t i = size - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(uniform_below(engine, static_cast<uint64_t>(i) + 1));
    std::swap(permutation[i], permutation[j]);
  }
  return permutation;
}

Sampler::Sampler(const SamplerOptions& options) : options_(options) {
  check(options.dataset_size > 0, "[sampler] dataset is empty");
  check(options.world_size >= 1, "[sampler] world_size must be >= 1, got ", options.world_size);
  check(options.rank >= 0 && options.rank < options.world_size, "[sampler] rank ", options.rank,
        " outside world_size ", options.world_size);
  const int64_t size = options.dataset_size, world = options.world_size;
  per_rank_ = options.drop_last ? size / world : (size + world - 1) / world;
  check(per_rank_ > 0, "[sampler] ", size, " samples give no sample per rank for world_size ",
        world, " with drop_last");
}

std::vector<int64_t> Sampler::epoch_indices(int64_t epoch) const {
  const int64_t size = options_.dataset_size, world = options_.world_size;
  std::vector<int64_t> order;
  if (options_.shuffle) {
    order = epoch_permutation(size, options_.seed, epoch);
  } else {
    order.resize(size);
    for (int64_t i = 0; i < size; ++i) order[i] = i;
  }
  std::vector<int64_t> indices(per_rank_);
  // Entry k of the cut/padded order is order[k mod N]: padding repeats the first entries.
  for (int64_t i = 0; i < per_rank_; ++i) indices[i] = order[(options_.rank + i * world) % size];
  return indices;
}

const std::vector<int64_t>& Sampler::current_epoch() const {
  if (cached_epoch_ != epoch_) {
    cached_indices_ = epoch_indices(epoch_);
    cached_epoch_ = epoch_;
  }
  return cached_indices_;
}

int64_t Sampler::next() {
  if (offset_ == per_rank_) {
    ++epoch_;
    offset_ = 0;
  }
  return current_epoch()[offset_++];
}

std::vector<int64_t> Sampler::next(int64_t count) {
  check(count >= 0, "[sampler] cannot take ", count, " indices");
  std::vector<int64_t> indices;
  indices.reserve(count);
  for (int64_t i = 0; i < count; ++i) indices.push_back(next());
  return indices;
}

std::vector<int64_t> Sampler::peek(int64_t count) const {
  check(count >= 0, "[sampler] cannot peek ", count, " indices");
  std::vector<int64_t> indices;
  indices.reserve(count);
  int64_t epoch = epoch_, offset = offset_;
  std::vector<int64_t> later;  // indices of an epoch after the current one, when reached
  while (static_cast<int64_t>(indices.size()) < count) {
    if (offset == per_rank_) {
      later = epoch_indices(++epoch);
      offset = 0;
    }
    const std::vector<int64_t>& order = epoch == epoch_ ? current_epoch() : later;
    indices.push_back(order[offset++]);
  }
  return indices;
}

SamplerState Sampler::state() const {
  return {options_.seed,        epoch_, offset_, options_.rank, options_.world_size,
          options_.dataset_size};
}

void Sampler::restore(const SamplerState& state) {
  check(state.seed == options_.seed, "[sampler] saved seed ", state.seed, " differs from ",
        options_.seed);
  check(state.rank == options_.rank && state.world_size == options_.world_size,
        "[sampler] saved position is rank ", state.rank, " of ", state.world_size,
        ", this sampler is rank ", options_.rank, " of ", options_.world_size,
        " (resuming on another world size needs a fresh epoch)");
  check(state.dataset_size == options_.dataset_size, "[sampler] saved dataset size ",
        state.dataset_size, " differs from ", options_.dataset_size);
  check(state.epoch >= 0 && state.offset >= 0 && state.offset <= per_rank_,
        "[sampler] saved position epoch ", state.epoch, " offset ", state.offset, " outside 0..",
        per_rank_);
  epoch_ = state.epoch;
  offset_ = state.offset;
}

void to_json(nlohmann::json& json, const SamplerState& state) {
  json = nlohmann::json{
      {"seed", state.seed}, {"epoch", state.epoch},           {"offset", state.offset},
      {"rank", state.rank}, {"world_size", state.world_size}, {"dataset_size", state.dataset_size}};
}

void from_json(const nlohmann::json& json, SamplerState& state) {
  check(json.is_object(), "[sampler] state must be a JSON object");
  state.seed = field<uint64_t>(json, "seed");
  state.epoch = field<int64_t>(json, "epoch");
  state.offset = field<int64_t>(json, "offset");
  state.rank = field<int64_t>(json, "rank");
  state.world_size = field<int64_t>(json, "world_size");
  state.dataset_size = field<int64_t>(json, "dataset_size");
}

}  // namespace tandem
