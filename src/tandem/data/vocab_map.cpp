#include "tandem/data/vocab_map.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <numeric>

#include "tandem/core/error.h"
#include "tandem/core/hash.h"
#include "tandem/io/safetensors.h"
#include "tandem/io/tensor_io.h"

namespace tandem {
namespace {

constexpr const char* kKeyVersion = "tandem-vocab-map-v1";

}  // namespace

TokenCounter::TokenCounter(int64_t vocab_size) {
  check(vocab_size > 0, "[vocab_map] vocab_size must be positive, got ", vocab_size);
  counts_.assign(vocab_size, 0);
}

void TokenCounter::add(const TokenizedDocument& document) {
  check(document.ids.size() == document.loss_mask.size(), "[vocab_map] ", document.source, ": ",
        document.ids.size(), " ids but ", document.loss_mask.size(), " loss-mask entries");
  const auto vocab_size = static_cast<int64_t>(counts_.size());
  for (size_t t = 0; t < document.ids.size(); ++t) {
    if (!document.loss_mask[t]) continue;
    const int64_t id = document.ids[t];
    check(id >= 0 && id < vocab_size, "[vocab_map] ", document.source, ": token ", t, " has id ",
          id, " outside the target vocab of ", vocab_size);
    ++counts_[id];
    ++total_;
  }
}

void TokenCounter::merge(const TokenCounter& other) {
  check(other.counts_.size() == counts_.size(), "[vocab_map] cannot merge counts over ",
        other.counts_.size(), " ids into counts over ", counts_.size());
  for (size_t id = 0; id < counts_.size(); ++id) counts_[id] += other.counts_[id];
  total_ += other.total_;
}

at::Tensor TokenCounter::counts() const {
  return at::tensor(at::ArrayRef<int64_t>(counts_), at::TensorOptions().dtype(at::kLong));
}

at::Tensor VocabMap::draft_to_target() const {
  return d2t + at::arange(d2t.size(0), d2t.options());
}

void VocabMap::validate(const std::string& where) const {
  check(d2t.defined() && t2d.defined(), "[vocab_map] ", where, ": d2t or t2d missing");
  check(d2t.dim() == 1 && d2t.scalar_type() == at::kLong, "[vocab_map] ", where,
        ": d2t must be 1-D int64, got ", d2t.sizes(), " ", d2t.scalar_type());
  check(t2d.dim() == 1 && t2d.scalar_type() == at::kBool, "[vocab_map] ", where,
        ": t2d must be 1-D bool, got ", t2d.sizes(), " ", t2d.scalar_type());
  const int64_t draft = draft_vocab_size(), vocab = vocab_size();
  check(draft > 0 && draft <= vocab, "[vocab_map] ", where, ": draft vocab ", draft,
        " must be in 1..", vocab);
  const at::Tensor targets = draft_to_target().cpu().contiguous();  // (D,)
  const at::Tensor in_draft = t2d.cpu().contiguous();               // (V,)
  const int64_t* target = targets.data_ptr<int64_t>();
  const bool* flag = in_draft.data_ptr<bool>();
  for (int64_t i = 0; i < draft; ++i) {
    check(target[i] >= 0 && target[i] < vocab, "[vocab_map] ", where, ": d2t[", i,
          "] maps to target id ", target[i], " outside 0..", vocab - 1);
    check(i == 0 || target[i] > target[i - 1], "[vocab_map] ", where,
          ": target ids not strictly increasing at draft id ", i);
    check(flag[target[i]], "[vocab_map] ", where, ": t2d[", target[i], "] is false but d2t maps ",
          "draft id ", i, " to it");
  }
  const int64_t selected = std::count(flag, flag + vocab, true);
  check(selected == draft, "[vocab_map] ", where, ": t2d marks ", selected, " ids, d2t has ",
        draft);
}

VocabMap build_vocab_map(const at::Tensor& counts, int64_t draft_vocab_size) {
  check(counts.dim() == 1 && counts.scalar_type() == at::kLong,
        "[vocab_map] counts must be 1-D int64, got ", counts.sizes(), " ", counts.scalar_type());
  const int64_t vocab = counts.size(0);
  check(draft_vocab_size > 0 && draft_vocab_size <= vocab, "[vocab_map] draft_vocab_size ",
        draft_vocab_size, " must be in 1..", vocab, " (the target vocab)");
  const at::Tensor host_counts = counts.cpu().contiguous();
  const int64_t* count = host_counts.data_ptr<int64_t>();
  std::vector<int64_t> ranked(vocab);
  std::iota(ranked.begin(), ranked.end(), 0);
  // (count desc, id asc) is a strict total order, so partial_sort's result is unique.
  std::partial_sort(
      ranked.begin(), ranked.begin() + draft_vocab_size, ranked.end(),
      [count](int64_t a, int64_t b) { return count[a] != count[b] ? count[a] > count[b] : a < b; });
  ranked.resize(draft_vocab_size);
  std::sort(ranked.begin(), ranked.end());

  VocabMap map;
  map.d2t = at::empty({draft_vocab_size}, at::TensorOptions().dtype(at::kLong));
  map.t2d = at::zeros({vocab}, at::TensorOptions().dtype(at::kBool));
  int64_t* d2t = map.d2t.data_ptr<int64_t>();
  bool* t2d = map.t2d.data_ptr<bool>();
  for (int64_t i = 0; i < draft_vocab_size; ++i) {
    d2t[i] = ranked[i] - i;
    t2d[ranked[i]] = true;
  }
  return map;
}

std::string vocab_map_key(std::string_view data_fingerprint, int64_t vocab_size,
                          int64_t draft_vocab_size) {
  return hex64(Hasher()
                   .update_field(kKeyVersion)
                   .update_field(data_fingerprint)
                   .update_u64(static_cast<uint64_t>(vocab_size))
                   .update_u64(static_cast<uint64_t>(draft_vocab_size))
                   .digest());
}

void save_vocab_map(const std::string& path, const VocabMap& map, const std::string& key) {
  map.validate(path);
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  write_tensors(path, {{"d2t", map.d2t}, {"t2d", map.t2d}},
                {{"key", key},
                 {"vocab_size", std::to_string(map.vocab_size())},
                 {"draft_vocab_size", std::to_string(map.draft_vocab_size())}});
}

VocabMap load_vocab_map(const std::string& path, const std::string& key) {
  const auto file = safetensors::File::open(path);
  if (!key.empty()) {
    const auto& metadata = file.header().metadata;
    const auto found = metadata.find("key");
    check(found != metadata.end() && found->second == key, "[vocab_map] ", path,
          ": written for another key (", found == metadata.end() ? "none" : found->second,
          "), expected ", key);
  }
  VocabMap map;
  map.d2t = read_tensor(file, file.info("d2t"));
  map.t2d = read_tensor(file, file.info("t2d"));
  map.validate(path);
  return map;
}

std::string vocab_map_cache_path(const std::string& cache_dir, const std::string& key) {
  return (std::filesystem::path(cache_dir) / ("vocab_map-" + key + ".safetensors")).string();
}

bool try_load_vocab_map(const std::string& path, const std::string& key, int64_t vocab_size,
                        int64_t draft_vocab_size, VocabMap& map) {
  if (!std::filesystem::exists(path)) return false;
  try {
    VocabMap loaded = load_vocab_map(path, key);
    if (loaded.vocab_size() != vocab_size || loaded.draft_vocab_size() != draft_vocab_size)
      return false;
    map = std::move(loaded);
    return true;
  } catch (const Error&) {
    return false;  // corrupt or foreign: the caller rebuilds and replaces it
  }
}

VocabMap build_and_save_vocab_map(const std::string& path, const std::string& key,
                                  const at::Tensor& counts, int64_t vocab_size,
                                  int64_t draft_vocab_size) {
  check(counts.dim() == 1 && counts.size(0) == vocab_size, "[vocab_map] token counts have shape ",
        counts.sizes(), ", the target vocab is ", vocab_size);
  VocabMap map = build_vocab_map(counts, draft_vocab_size);
  save_vocab_map(path, map, key);
  return map;
}

}  // namespace tandem
