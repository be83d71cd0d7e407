#include "tandem/data/capture.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>

#include "tandem/core/device.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/core/file_io.h"
#include "tandem/core/hash.h"
#include "tandem/core/json_file.h"
#include "tandem/data/packing.h"
#include "tandem/data/rank_parts.h"
#include "tandem/data/token_cache.h"
#include "tandem/io/tensor_io.h"
#include "tandem/models/decoder.h"
#include "tandem/models/frozen.h"

namespace tandem {

namespace {

constexpr const char* kFormat = "tandem-capture-v1";

std::string shard_name(int64_t index) {
  char name[64];
  std::snprintf(name, sizeof(name), "shard-%05lld.safetensors", static_cast<long long>(index));
  return name;
}

struct Manifest {
  CaptureSettings settings;
  struct Shard {
    std::string file;
    int64_t first = 0, count = 0;
  };
  std::vector<Shard> shards;
  bool complete = false;

  int64_t documents_done() const {
    return shards.empty() ? 0 : shards.back().first + shards.back().count;
  }
  nlohmann::json to_json() const {
    nlohmann::json list = nlohmann::json::array();
    for (const Shard& shard : shards)
      list.push_back({{"file", shard.file}, {"first", shard.first}, {"count", shard.count}});
    return {{"format", kFormat},
            {"settings", settings.to_json()},
            {"shards", list},
            {"complete", complete}};
  }
  // `contiguous`: the shards cover documents 0, 1, ... in order (a rank's own list need not).
  static Manifest read(const std::string& path, bool contiguous = true) {
    const nlohmann::json json = read_json_file(path, "capture");
    Manifest manifest;
    try {
      check(json.at("format").get<std::string>() == kFormat, "[capture] ", path,
            ": not a tandem capture manifest (format ", json.at("format").dump(), ", expected ",
            kFormat, ")");
      manifest.settings = CaptureSettings::from_json(json.at("settings"), path);
      int64_t expected_first = 0;
      for (const auto& shard : json.at("shards")) {
        Shard entry{shard.at("file").get<std::string>(), shard.at("first").get<int64_t>(),
                    shard.at("count").get<int64_t>()};
        check((contiguous ? entry.first == expected_first : entry.first >= expected_first) &&
                  entry.count > 0,
              "[capture] ", path, ": shard ", entry.file, " covers documents from ", entry.first,
              ", expected ", expected_first);
        expected_first = entry.first + entry.count;
        manifest.shards.push_back(entry);
      }
      check(expected_first <= manifest.settings.num_documents, "[capture] ", path,
            ": shards cover ", expected_first, " documents, the dataset has ",
            manifest.settings.num_documents);
      manifest.complete = json.at("complete").get<bool>();
    } catch (const nlohmann::json::exception& e) {
      throw Error("[capture] ", path, ": malformed manifest: ", e.what());
    }
    return manifest;
  }
};

}  // namespace

nlohmann::json CaptureSettings::to_json() const {
  return {
      {"target", target},           {"layer_ids", layer_ids},     {"dtype", dtype},
      {"seq_len", seq_len},         {"dataset_key", dataset_key}, {"num_documents", num_documents},
      {"hidden_size", hidden_size}, {"last_hidden", last_hidden}};
}

CaptureSettings CaptureSettings::from_json(const nlohmann::json& json, const std::string& where) {
  CaptureSettings settings;
  try {
    settings.target = json.at("target").get<std::string>();
    settings.layer_ids = json.at("layer_ids").get<std::vector<int64_t>>();
    settings.dtype = json.at("dtype").get<std::string>();
    settings.seq_len = json.at("seq_len").get<int64_t>();
    settings.dataset_key = json.at("dataset_key").get<std::string>();
    settings.num_documents = json.at("num_documents").get<int64_t>();
    settings.hidden_size = json.at("hidden_size").get<int64_t>();
    settings.last_hidden = json.value("last_hidden", true);  // captures before the key: EAGLE-3's
  } catch (const nlohmann::json::exception& e) {
    throw Error("[capture] ", where, ": malformed settings: ", e.what());
  }
  check(settings.seq_len > 0 && settings.hidden_size > 0 && !settings.layer_ids.empty(),
        "[capture] ", where, ": settings need a positive seq_len and hidden_size and layer ids");
  return settings;
}

bool CaptureSettings::operator==(const CaptureSettings& other) const {
  return to_json() == other.to_json();
}

namespace {

// What one shard holds: documents [first, first + count) of `dataset` run through `target`, their
// features stored as the header of this file says.
std::vector<std::pair<std::string, at::Tensor>> capture_shard(const FrozenModel& target,
                                                              const TokenizedDataset& dataset,
                                                              const CaptureSettings& settings,
                                                              int64_t first, int64_t count,
                                                              int64_t max_rows) {
  const c10::ScalarType dtype = parse_compute_dtype(settings.dtype, "capture dtype");
  const int64_t last_layer = target.config().num_hidden_layers - 1;
  std::vector<int64_t> layers = settings.layer_ids;
  if (settings.last_hidden) layers.push_back(last_layer);
  PackingOptions packing;
  packing.seq_len = settings.seq_len;
  packing.mode = PackingMode::Packed;
  packing.overlong = OverlongPolicy::Split;
  packing.max_rows = max_rows;

  std::vector<TokenizedDocument> shard_documents;
  for (int64_t i = 0; i < count; ++i) shard_documents.push_back(dataset.document(first + i));
  // Per document: its chunks' features by first token.
  std::vector<std::map<int64_t, std::pair<at::Tensor, at::Tensor>>> chunks(count);
  for (int64_t next = 0; next < count;) {
    const std::vector<TokenizedDocument> documents(
        shard_documents.begin() + next,
        shard_documents.begin() + std::min(count, next + max_rows * 4));
    // A document longer than `max_rows` rows is packed alone (its seq_len chunks are documents of
    // their own) and run `max_rows` rows at a time, so memory stays that of one micro-batch.
    PackingOptions alone = packing;
    alone.max_rows = 0;
    const bool too_long =
        static_cast<int64_t>(
            plan_packing({static_cast<int64_t>(documents.front().ids.size())}, alone).rows.size()) >
        max_rows;
    const PackedBatch batch =
        too_long ? pack_documents({documents.front()}, alone) : pack_documents(documents, packing);
    const PackedBatch on_device = batch.to(target.device());
    for (int64_t first_row = 0; first_row < batch.rows(); first_row += max_rows) {
      const int64_t rows = std::min(max_rows, batch.rows() - first_row);
      const AttentionLayout layout{on_device.position_ids.narrow(0, first_row, rows),
                                   on_device.document_ids.narrow(0, first_row, rows),
                                   batch.document_ids.narrow(0, first_row, rows)};
      const FrozenModel::Output out = target.forward(on_device.input_ids.narrow(0, first_row, rows),
                                                     layout, layers, /*with_logits=*/false);
      std::vector<at::Tensor> aux_parts;
      for (int64_t layer : settings.layer_ids) aux_parts.push_back(out.hidden.at(layer));
      const at::Tensor aux = at::cat(aux_parts, -1).to(at::kCPU, dtype);  // (rows, T, k*H)
      const at::Tensor last = settings.last_hidden ? out.hidden.at(last_layer).to(at::kCPU, dtype)
                                                   : at::Tensor();  // (rows, T, H)
      for (const PackedDocument& piece : batch.documents) {
        if (piece.row < first_row || piece.row >= first_row + rows) continue;
        const int64_t row = piece.row - first_row;
        chunks[next + piece.source_index][piece.source_begin] = {
            aux[row].narrow(0, piece.begin, piece.length),
            last.defined() ? last[row].narrow(0, piece.begin, piece.length) : at::Tensor()};
      }
    }
    next += batch.documents_consumed;
  }
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (int64_t i = 0; i < count; ++i) {
    const TokenizedDocument& document = shard_documents[i];
    std::vector<at::Tensor> aux, last;
    for (const auto& [begin, features] : chunks[i]) {
      aux.push_back(features.first);
      last.push_back(features.second);
    }
    const std::string j = std::to_string(first + i);
    const int64_t length = static_cast<int64_t>(document.ids.size());
    tensors.emplace_back("aux." + j, at::cat(aux, 0));
    if (settings.last_hidden) tensors.emplace_back("last." + j, at::cat(last, 0));
    tensors.emplace_back(
        "input_ids." + j,
        at::from_blob(const_cast<int32_t*>(document.ids.data()), {length}, at::kInt).clone());
    tensors.emplace_back(
        "loss_mask." + j,
        at::from_blob(const_cast<uint8_t*>(document.loss_mask.data()), {length}, at::kByte)
            .clone());
  }
  return tensors;
}

// Captures shard `file` (documents [first, first + count)), writes it, and lists it in
// `manifest`, rewritten at `manifest_path`: a shard is listed only once it is whole.
void write_shard(const FrozenModel& target, const TokenizedDataset& dataset,
                 const CaptureSettings& settings, const std::string& dir, const std::string& file,
                 int64_t first, int64_t count, int64_t max_rows, Manifest& manifest,
                 const std::string& manifest_path, CaptureProgress& progress) {
  write_tensors(dir + "/" + file, capture_shard(target, dataset, settings, first, count, max_rows),
                {{"format", kFormat}});
  manifest.shards.push_back({file, first, count});
  replace_file(manifest_path, manifest.to_json().dump(2) + "\n", "[capture]");
  progress.documents_written += count;
  progress.shards_written += 1;
}

// Reads the manifest at `path` (a rank's own when not `contiguous`), checks it was written with
// `settings` and that its shards are intact.
Manifest resume_manifest(const std::string& path, const std::string& dir,
                         const CaptureSettings& settings, bool contiguous) {
  Manifest manifest = Manifest::read(path, contiguous);
  check(manifest.settings == settings, "[capture] ", path,
        ": this directory holds a capture with other settings:\n  stored:    ",
        manifest.settings.to_json().dump(), "\n  requested: ", settings.to_json().dump(),
        "\nuse another output directory (or delete this one)");
  for (const Manifest::Shard& shard : manifest.shards)
    safetensors::File::open(dir + "/" + shard.file);  // listed shards must be intact
  return manifest;
}

// The capture split across ranks (data/rank_parts.h): rank R captures shards R, R + W, ... under
// their one-process names and lists them in DIR/ranks/rank-R-of-W.json; the last rank to finish
// writes manifest.json listing them all, as one process does.
CaptureProgress capture_on_ranks(const FrozenModel& target, const TokenizedDataset& dataset,
                                 const CaptureSettings& settings, const std::string& dir,
                                 const CaptureOptions& options) {
  const std::string manifest_path = dir + "/manifest.json";
  if (std::filesystem::exists(manifest_path)) {
    const Manifest whole = resume_manifest(manifest_path, dir, settings, true);
    check(whole.complete, "[capture] ", dir, " was begun by one process (", manifest_path,
          " is unfinished): finish it without torchrun, or delete it to start over");
    return {whole.documents_done(), 0, 0};
  }
  const RankParts parts(dir + "/ranks", options.rank, "[capture]");
  const std::string mine_path = parts.path(".json");
  Manifest mine;
  mine.settings = settings;
  if (std::filesystem::exists(mine_path))
    mine = resume_manifest(mine_path, dir, settings, false);
  else  // listed from the start: a rank that owns no shard still has a (empty) list
    replace_file(mine_path, mine.to_json().dump(2) + "\n", "[capture]");
  const int64_t per_shard = options.documents_per_shard;
  std::set<int64_t> listed;
  CaptureProgress progress;
  for (const Manifest::Shard& shard : mine.shards) {
    check(shard.first % per_shard == 0 && shard.file == shard_name(shard.first / per_shard),
          "[capture] ", mine_path, ": shard ", shard.file, " starts at document ", shard.first,
          ", which --shard-documents ", per_shard,
          " does not give: rerun with the --shard-documents it was begun with");
    listed.insert(shard.first / per_shard);
    progress.documents_done += shard.count;
  }
  const std::string who = "[capture] " + options.rank.name() + ": ";
  for (int64_t index = 0; index * per_shard < settings.num_documents; ++index) {
    if (!options.rank.owns(index) || listed.count(index)) continue;
    const int64_t first = index * per_shard;
    const int64_t count = std::min(per_shard, settings.num_documents - first);
    const std::string file = shard_name(index);
    try {
      write_shard(target, dataset, settings, dir, file, first, count, options.rows, mine, mine_path,
                  progress);
    } catch (const std::exception& e) {
      throw Error(who, "documents ", first, "..", first + count - 1, " (shard ", index,
                  "; this rank captures ", options.rank.share("shards"), "): ", e.what());
    }
    if (!options.quiet)
      std::cerr << who << "documents " << first << ".." << first + count - 1 << " (" << file
                << ")\n";
  }
  parts.mark_done();
  parts.merge_if_all_done([&] {
    Manifest whole;
    whole.settings = settings;
    for (int64_t rank = 0; rank < options.rank.ranks; ++rank) {
      const Manifest theirs = resume_manifest(parts.path_of(rank, ".json"), dir, settings, false);
      whole.shards.insert(whole.shards.end(), theirs.shards.begin(), theirs.shards.end());
    }
    std::sort(whole.shards.begin(), whole.shards.end(),
              [](const Manifest::Shard& a, const Manifest::Shard& b) { return a.first < b.first; });
    int64_t covered = 0;
    for (const Manifest::Shard& shard : whole.shards) {
      check(shard.first == covered, "[capture] ", parts.dir(),
            ": the ranks' shards leave a gap or ", "overlap at document ", covered, " (",
            shard.file, " starts at ", shard.first, "): delete ", dir, " and capture again");
      covered += shard.count;
    }
    check(covered == settings.num_documents, "[capture] ", parts.dir(),
          ": the ranks' shards cover ", covered, " of ", settings.num_documents, " documents");
    whole.complete = true;
    replace_file(manifest_path, whole.to_json().dump(2) + "\n", "[capture]");
    if (!options.quiet)
      std::cerr << "[capture] " << dir << ": merged the shards of " << options.rank.ranks
                << " ranks\n";
  });
  return progress;
}

}  // namespace

CaptureProgress capture_features(const FrozenModel& target, const TokenizedDataset& dataset,
                                 const CaptureSettings& settings, const std::string& dir,
                                 const CaptureOptions& options) {
  check(options.documents_per_shard > 0 && options.rows > 0,
        "[capture] documents per shard and rows must be positive");
  std::filesystem::create_directories(dir);
  if (options.rank.parallel()) return capture_on_ranks(target, dataset, settings, dir, options);
  check_no_rank_parts(dir + "/ranks", dir, "[capture]");
  const std::string manifest_path = dir + "/manifest.json";
  Manifest manifest;
  manifest.settings = settings;
  if (std::filesystem::exists(manifest_path))
    manifest = resume_manifest(manifest_path, dir, settings, true);
  CaptureProgress progress;
  progress.documents_done = manifest.documents_done();

  for (int64_t first = progress.documents_done; first < settings.num_documents;
       first += options.documents_per_shard) {
    const int64_t count = std::min(options.documents_per_shard, settings.num_documents - first);
    const std::string file = shard_name(static_cast<int64_t>(manifest.shards.size()));
    write_shard(target, dataset, settings, dir, file, first, count, options.rows, manifest,
                manifest_path, progress);
    if (!options.quiet)
      std::cerr << "[capture] " << first + count << "/" << settings.num_documents << " documents ("
                << file << ")\n";
  }
  manifest.complete = true;
  replace_file(manifest_path, manifest.to_json().dump(2) + "\n", "[capture]");
  return progress;
}

CaptureStore CaptureStore::open(const std::string& dir) {
  const std::string manifest_path = dir + "/manifest.json";
  check(std::filesystem::exists(manifest_path), "[capture] ", dir,
        ": no manifest.json (not a `tandem capture` output directory)");
  const Manifest manifest = Manifest::read(manifest_path);
  check(manifest.complete && manifest.documents_done() == manifest.settings.num_documents,
        "[capture] ", dir, ": the capture is unfinished (", manifest.documents_done(), "/",
        manifest.settings.num_documents, " documents); rerun `tandem capture` to complete it");
  CaptureStore store;
  store.dir_ = dir;
  store.settings_ = manifest.settings;
  for (const Manifest::Shard& shard : manifest.shards) {
    store.shards_.push_back(
        std::make_shared<safetensors::File>(safetensors::File::open(dir + "/" + shard.file)));
    store.shard_first_.push_back(shard.first);
  }
  return store;
}

CaptureStore::Slice CaptureStore::read(int64_t index, int64_t begin, int64_t length,
                                       const at::Tensor& ids) const {
  check(index >= 0 && index < settings_.num_documents, "[capture] ", dir_, ": document ", index,
        " is not in the capture (", settings_.num_documents, " documents)");
  const size_t shard = static_cast<size_t>(
      std::upper_bound(shard_first_.begin(), shard_first_.end(), index) - shard_first_.begin() - 1);
  const safetensors::File& file = *shards_[shard];
  const std::string j = std::to_string(index);
  const at::Tensor stored_ids = read_tensor(file, file.info("input_ids." + j));
  check(begin >= 0 && begin + length <= stored_ids.size(0), "[capture] ", file.path(),
        ": document ", index, " has ", stored_ids.size(0), " tokens, asked for [", begin, ", ",
        begin + length, ")");
  check(stored_ids.narrow(0, begin, length).to(at::kLong).equal(ids.to(at::kLong)), "[capture] ",
        file.path(), ": document ", index,
        " holds other tokens than the training data: the capture was made from another dataset");
  Slice slice;
  slice.aux = read_tensor(file, file.info("aux." + j)).narrow(0, begin, length);
  if (settings_.last_hidden)
    slice.last = read_tensor(file, file.info("last." + j)).narrow(0, begin, length);
  return slice;
}

void check_capture_features(const CaptureStore& capture, const std::vector<int64_t>& layer_ids,
                            int64_t hidden_size, bool needs_last_hidden, const std::string& who) {
  const CaptureSettings& settings = capture.settings();
  check(settings.layer_ids == layer_ids, who, " ", capture.dir(),
        ": the capture holds target layers ", at::IntArrayRef(settings.layer_ids),
        " but the draft reads ", at::IntArrayRef(layer_ids));
  check(settings.hidden_size == hidden_size, who, " ", capture.dir(), ": captured hidden size ",
        settings.hidden_size, " != the target's ", hidden_size);
  check(settings.last_hidden || !needs_last_hidden, who, " ", capture.dir(),
        ": the capture has no last hidden states (made for a DFlash draft trained on labels), "
        "which this objective's teacher reads; rerun `tandem capture` with this config");
}

void check_capture_matches_data(const CaptureStore& capture, const TokenizedDataset& dataset,
                                int64_t seq_len, const std::string& who) {
  const CaptureSettings& settings = capture.settings();
  const std::string fingerprint = hex64(dataset.key());
  check(settings.dataset_key == fingerprint && settings.num_documents == dataset.size(), who, " ",
        capture.dir(), ": captured from other data (dataset key ", settings.dataset_key, ", ",
        settings.num_documents, " documents) than ", dataset.source_path(), " (key ", fingerprint,
        ", ", dataset.size(), " documents); rerun `tandem capture` on this data");
  check(settings.seq_len == seq_len, who, " ", capture.dir(), ": captured with seq_len ",
        settings.seq_len, ", training uses ", seq_len,
        " (long documents are split at seq_len, so the two must agree)");
}

CapturedBatch read_captured_batch(const CaptureStore& capture, const PackedBatch& batch,
                                  c10::ScalarType dtype, const std::string& who) {
  return read_captured_batch(capture, batch, dtype, batch.input_ids.device(), who);
}

CapturedBatch read_captured_batch(const CaptureStore& capture, const PackedBatch& batch,
                                  c10::ScalarType dtype, const c10::Device& device,
                                  const std::string& who) {
  const CaptureSettings& settings = capture.settings();
  // Assembled on the host (pinned when the device is a GPU), then copied once to the device.
  const at::TensorOptions options =
      at::TensorOptions().dtype(dtype).pinned_memory(device.is_cuda());
  const at::Tensor& input_ids = batch.on_host().input_ids;  // the host copy: no device read
  const int64_t hidden = settings.hidden_size;
  const int64_t features = static_cast<int64_t>(settings.layer_ids.size()) * hidden;
  CapturedBatch out;
  out.aux = at::zeros({batch.rows(), batch.seq_len(), features}, options);
  if (settings.last_hidden) out.last = at::zeros({batch.rows(), batch.seq_len(), hidden}, options);
  for (const PackedDocument& document : batch.documents) {
    check(document.dataset_index >= 0, who,
          " offline training needs batches that know their dataset documents");
    const at::Tensor ids = input_ids[document.row].narrow(0, document.begin, document.length);
    const CaptureStore::Slice slice =
        capture.read(document.dataset_index, document.source_begin, document.length, ids);
    out.aux[document.row].narrow(0, document.begin, document.length).copy_(slice.aux);
    if (out.last.defined())
      out.last[document.row].narrow(0, document.begin, document.length).copy_(slice.last);
  }
  out.aux = to_device(out.aux, device);  // pinned already: copied without waiting
  if (out.last.defined()) out.last = to_device(out.last, device);
  return out;
}

}  // namespace tandem
