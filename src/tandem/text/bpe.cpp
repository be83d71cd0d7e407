#include "tandem/text/bpe.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "tandem/core/error.h"
#include "tandem/text/byte_level.h"
#include "tandem/text/utf8.h"

namespace tandem {

namespace {

constexpr uint64_t kEmpty = ~uint64_t{0};
constexpr size_t kMaxCachedLength = 256;  // HF caches words shorter than this (bytes)
constexpr size_t kMaxCacheEntries = 1 << 17;

uint64_t mix(uint64_t key) {  // splitmix64 finalizer
  key ^= key >> 30;
  key *= 0xbf58476d1ce4e5b9ULL;
  key ^= key >> 27;
  key *= 0x94d049bb133111ebULL;
  return key ^ (key >> 31);
}

std::atomic<uint64_t> next_cache_key{1};

}  // namespace

void BpeModel::MergeTable::build(const std::vector<std::pair<uint64_t, MergeTarget>>& merges) {
  size_t capacity = 16;
  while (capacity < merges.size() * 2) capacity <<= 1;
  keys.assign(capacity, kEmpty);
  values.assign(capacity, MergeTarget{0, 0});
  mask = capacity - 1;
  for (const auto& [key, target] : merges) {
    size_t slot = mix(key) & mask;
    while (keys[slot] != kEmpty && keys[slot] != key) slot = (slot + 1) & mask;
    keys[slot] = key;  // a repeated pair keeps its last rank, as HF's HashMap collect does
    values[slot] = target;
  }
}

const BpeModel::MergeTarget* BpeModel::MergeTable::find(uint64_t key) const {
  size_t slot = mix(key) & mask;
  while (true) {
    if (keys[slot] == key) return &values[slot];
    if (keys[slot] == kEmpty) return nullptr;
    slot = (slot + 1) & mask;
  }
}

BpeModel::BpeModel(const nlohmann::json& model, const std::string& where, bool byte_level)
    : byte_level_(byte_level), cache_key_(next_cache_key.fetch_add(1)) {
  check(model.is_object(), where, " must be an object");
  const std::string type = model.value("type", std::string("BPE"));
  check(type == "BPE", where, ".type '", type, "' is not supported (only BPE is",
        type == "Unigram" ? ": SentencePiece Unigram models, as T5 and XLNet files hold, are not "
                            "implemented"
                          : "",
        ")");
  auto null_or = [&](const char* field, auto accept) {
    if (!model.contains(field) || model[field].is_null()) return;
    check(accept(model[field]), where, ".", field, " = ", model[field].dump(),
          " is not supported (tandem implements BPE without it)");
  };
  auto boolean = [&](const char* field) {
    if (!model.contains(field) || model[field].is_null()) return false;
    check(model[field].is_boolean(), where, ".", field, " must be a boolean");
    return model[field].get<bool>();
  };
  null_or("dropout",
          [](const nlohmann::json& v) { return v.is_number() && v.get<double>() == 0.0; });
  byte_fallback_ = boolean("byte_fallback");
  fuse_unk_ = boolean("fuse_unk");
  check(!(byte_level && byte_fallback_), where,
        ".byte_fallback is true after a ByteLevel pre-tokenizer, which already covers every "
        "byte: tandem does not implement that mix");
  null_or("continuing_subword_prefix",
          [](const nlohmann::json& v) { return v.is_string() && v.get<std::string>().empty(); });
  null_or("end_of_word_suffix",
          [](const nlohmann::json& v) { return v.is_string() && v.get<std::string>().empty(); });
  if (model.contains("ignore_merges") && !model["ignore_merges"].is_null()) {
    check(model["ignore_merges"].is_boolean(), where, ".ignore_merges must be a boolean");
    ignore_merges_ = model["ignore_merges"].get<bool>();
  }

  check(model.contains("vocab") && model["vocab"].is_object(), where,
        ".vocab is missing or not an object");
  int32_t max_id = -1;
  vocab_.reserve(model["vocab"].size());
  for (const auto& [token, id_json] : model["vocab"].items()) {
    check(id_json.is_number_integer() && id_json.get<int64_t>() >= 0 &&
              id_json.get<int64_t>() < (int64_t{1} << 31),
          where, ".vocab[\"", token, "\"] is not a valid id: ", id_json.dump());
    const auto id = static_cast<int32_t>(id_json.get<int64_t>());
    vocab_[token] = id;
    max_id = std::max(max_id, id);
  }
  // The id table is allocated from the largest id: bound it by a stated size and by the
  // vocabulary's own (the largest published vocabularies hold about 262,144 tokens, ids dense).
  const int64_t entries = static_cast<int64_t>(vocab_.size());
  const int64_t id_bound = std::min<int64_t>(kMaxTokenId, 2 * entries + 65536);
  check(max_id < id_bound, where, ".vocab: the largest id is ", max_id, " for ", entries,
        " tokens; ids must be below ", id_bound,
        " (2 x the tokens + 65,536, at most 2^24): the id table would be mostly empty");
  id_to_token_.assign(static_cast<size_t>(max_id) + 1, std::string());
  has_id_.assign(static_cast<size_t>(max_id) + 1, false);
  for (const auto& [token, id] : vocab_) {
    id_to_token_[id] = token;
    has_id_[id] = true;
    if (byte_level)
      if (auto bytes = byte_level::decode(token)) bytes_to_id_.emplace(std::move(*bytes), id);
  }
  for (int b = 0; b < 256; ++b) {
    std::string spelled;
    spelled += static_cast<char>(b);
    if (!byte_level) {
      char piece[8];
      std::snprintf(piece, sizeof piece, "<0x%02X>", b);  // HF's format!("<{b:#04X}>")
      const auto it = vocab_.find(std::string_view(piece));
      byte_ids_[b] = it != vocab_.end() ? it->second : -1;
      continue;
    }
    const auto it = vocab_.find(byte_level::encode(spelled));
    check(it != vocab_.end(), where, ".vocab lacks the byte-level token for byte 0x", std::hex, b,
          " (every byte must be in the vocabulary of a byte-level BPE)");
    byte_ids_[b] = it->second;
  }
  if (!byte_level && model.contains("unk_token") && !model["unk_token"].is_null()) {
    check(model["unk_token"].is_string(), where, ".unk_token must be a string");
    const std::string unk = model["unk_token"].get<std::string>();
    const auto it = vocab_.find(unk);
    check(it != vocab_.end(), where, ".unk_token '", unk, "' is not in the vocab");
    unk_id_ = it->second;
  }

  check(model.contains("merges") && model["merges"].is_array(), where,
        ".merges is missing or not an array");
  const auto& merges = model["merges"];
  std::vector<std::pair<uint64_t, MergeTarget>> table;
  table.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& merge = merges[rank];
    std::string left, right;
    if (merge.is_string()) {  // legacy "a b"
      const std::string& line = merge.get_ref<const std::string&>();
      const size_t space = line.find(' ');
      check(space != std::string::npos && line.find(' ', space + 1) == std::string::npos, where,
            ".merges[", rank, "] = \"", line, "\" is not two tokens separated by one space");
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else {
      check(merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string(),
            where, ".merges[", rank, "] must be [\"a\", \"b\"] or \"a b\"");
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    }
    const auto a = vocab_.find(left), b = vocab_.find(right), ab = vocab_.find(left + right);
    check(a != vocab_.end(), where, ".merges[", rank, "] refers to '", left,
          "', which is not in the vocab");
    check(b != vocab_.end(), where, ".merges[", rank, "] refers to '", right,
          "', which is not in the vocab");
    check(ab != vocab_.end(), where, ".merges[", rank, "] makes '", left + right,
          "', which is not in the vocab");
    table.emplace_back((uint64_t(uint32_t(a->second)) << 32) | uint32_t(b->second),
                       MergeTarget{static_cast<uint32_t>(rank), ab->second});
  }
  merges_.build(table);
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(id_to_token_.size()) || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

BpeModel::Cache& BpeModel::thread_cache() const {
  // HF keeps a cache per thread too. Keyed by model, so copies of a Tokenizer share it; caches of
  // models that are gone are dropped once a thread has seen many models.
  thread_local std::unordered_map<uint64_t, std::unique_ptr<Cache>> caches;
  auto it = caches.find(cache_key_);
  if (it != caches.end()) return *it->second;
  if (caches.size() >= 8) caches.clear();
  return *caches.emplace(cache_key_, std::make_unique<Cache>()).first->second;
}

void BpeModel::tokenize(std::string_view bytes, std::vector<int32_t>& ids,
                        std::vector<uint32_t>* lengths) const {
  if (bytes.empty()) return;
  if (byte_level_ && bytes.size() == 1 && !ignore_merges_) {
    ids.push_back(byte_ids_[static_cast<unsigned char>(bytes[0])]);
    if (lengths) lengths->push_back(1);
    return;
  }
  auto emit = [&](const CacheEntry& entry) {
    ids.insert(ids.end(), entry.ids.begin(), entry.ids.end());
    if (lengths) lengths->insert(lengths->end(), entry.lengths.begin(), entry.lengths.end());
  };
  // The cache holds final results, so the ignore_merges lookup (which HF does first) can wait
  // for a miss.
  const bool cacheable = bytes.size() < kMaxCachedLength;
  Cache* cache = cacheable ? &thread_cache() : nullptr;
  if (cache) {
    const auto it = cache->find(bytes);
    if (it != cache->end()) return emit(it->second);
    if (cache->size() >= kMaxCacheEntries) cache->clear();
  }
  CacheEntry entry;
  const StringMap<int32_t>& words = byte_level_ ? bytes_to_id_ : vocab_;
  const auto whole = ignore_merges_ ? words.find(bytes) : words.end();
  if (whole != words.end()) {
    entry.ids.push_back(whole->second);
    entry.lengths.push_back(static_cast<uint32_t>(bytes.size()));
  } else {
    merge_word(bytes, entry);
  }
  emit(entry);
  if (cache) cache->emplace(std::string(bytes), std::move(entry));
}

void BpeModel::merge_word(std::string_view bytes, CacheEntry& out) const {
  // HF's Word::merge_all: symbols in a linked list, a min-heap of (rank, position) candidate
  // merges; stale candidates are recognised by their target id no longer matching.
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    uint32_t length;  // 0 once merged into its left neighbour
  };
  struct Candidate {
    uint32_t rank;
    uint32_t pos;
    int32_t id;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : pos > other.pos;
    }
  };
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;
  thread_local std::vector<std::pair<int32_t, uint32_t>> initial;
  if (byte_level_) {
    initial.resize(bytes.size());
    for (size_t i = 0; i < bytes.size(); ++i)
      initial[i] = {byte_ids_[static_cast<unsigned char>(bytes[i])], 1};
  } else {
    character_symbols(bytes, initial);
  }
  const auto n = static_cast<int32_t>(initial.size());
  symbols.resize(n);
  for (int32_t i = 0; i < n; ++i)
    symbols[i] = {initial[i].first, i - 1, i + 1 < n ? i + 1 : -1, initial[i].second};
  auto pair_key = [](int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); };

  heap.clear();
  auto push = [&](Candidate candidate) {
    heap.push_back(candidate);
    std::push_heap(heap.begin(), heap.end(), std::greater<Candidate>());
  };
  for (int32_t i = 0; i + 1 < n; ++i)
    if (const MergeTarget* m = merges_.find(pair_key(symbols[i].id, symbols[i + 1].id)))
      heap.push_back({m->rank, static_cast<uint32_t>(i), m->id});
  std::make_heap(heap.begin(), heap.end(), std::greater<Candidate>());

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<Candidate>());
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = symbols[top.pos];
    if (left.length == 0 || left.next == -1) continue;
    const Symbol right = symbols[left.next];
    const MergeTarget* current = merges_.find(pair_key(left.id, right.id));
    if (!current || current->id != top.id) continue;  // stale
    left.id = top.id;
    left.length += right.length;
    symbols[left.next].length = 0;
    left.next = right.next;
    if (right.next != -1) symbols[right.next].prev = static_cast<int32_t>(top.pos);
    if (left.prev != -1)
      if (const MergeTarget* m = merges_.find(pair_key(symbols[left.prev].id, left.id)))
        push({m->rank, static_cast<uint32_t>(left.prev), m->id});
    if (left.next != -1)
      if (const MergeTarget* m = merges_.find(pair_key(left.id, symbols[left.next].id)))
        push({m->rank, top.pos, m->id});
  }
  for (int32_t i = 0; n > 0 && i != -1; i = symbols[i].next) {
    out.ids.push_back(symbols[i].id);
    out.lengths.push_back(symbols[i].length);
  }
}

void BpeModel::character_symbols(std::string_view text,
                                 std::vector<std::pair<int32_t, uint32_t>>& out) const {
  // HF's BPE::merge_word without continuing_subword_prefix / end_of_word_suffix.
  out.clear();
  int32_t unk_length = 0;  // bytes of the pending unknown run, fused or not
  auto flush_unknown = [&] {
    if (unk_length > 0) out.emplace_back(unk_id_, static_cast<uint32_t>(unk_length));
    unk_length = 0;
  };
  for (size_t pos = 0; pos < text.size();) {
    const size_t length = utf8::sequence_length(static_cast<unsigned char>(text[pos]));
    const std::string_view character = text.substr(pos, length);
    pos += length;
    if (const auto it = vocab_.find(character); it != vocab_.end()) {
      flush_unknown();
      out.emplace_back(it->second, static_cast<uint32_t>(length));
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char byte : character) all = all && byte_ids_[static_cast<unsigned char>(byte)] >= 0;
      if (all) {
        // HF adds the byte pieces without ending a pending unknown run: it stays pending and
        // lands after them.
        for (char byte : character)
          out.emplace_back(byte_ids_[static_cast<unsigned char>(byte)], 1);
        continue;
      }
    }
    if (unk_id_ < 0) continue;  // no unk_token: HF drops the character
    if (!fuse_unk_) flush_unknown();
    unk_length += static_cast<int32_t>(length);
  }
  flush_unknown();
}

}  // namespace tandem
