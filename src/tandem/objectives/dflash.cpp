#include "tandem/objectives/dflash.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>

#include "tandem/core/config.h"
#include "tandem/core/device.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/core/hash.h"
#include "tandem/core/json_file.h"
#include "tandem/dist/sharding.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/models/flops.h"
#include "tandem/objectives/dflash_export.h"
#include "tandem/objectives/distill.h"
#include "tandem/objectives/sft.h"
#include "tandem/objectives/vocab_head.h"
#include "tandem/text/tokenizer.h"

namespace tandem {

namespace {

// SplitMix64 (Steele, Lea, Flood): a small, fully specified generator, so anchor draws are the
// same on every platform and library version.
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// `count` of `candidates` drawn without replacement (partial Fisher-Yates), ascending.
std::vector<int64_t> draw_sorted(std::vector<int64_t> candidates, int64_t count, uint64_t seed) {
  const int64_t total = static_cast<int64_t>(candidates.size());
  if (count < total) {
    uint64_t state = seed;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t j =
          i + static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(total - i));
      std::swap(candidates[i], candidates[j]);
    }
    candidates.resize(count);
  }
  std::sort(candidates.begin(), candidates.end());
  return candidates;
}

// The tokenizer facts mask-token resolution needs, from `dir`/tokenizer.json and, when present,
// the `mask_token` its tokenizer_config.json declares (a string or {"content": ...}).
TokenizerVocab read_tokenizer_vocab(const std::string& dir) {
  TokenizerVocab vocab = tokenizer_vocab(Tokenizer::from_dir(dir));
  const std::string config_path = dir + "/tokenizer_config.json";
  if (std::filesystem::exists(config_path)) {
    const nlohmann::json config = read_json_file(config_path, "dflash");
    if (config.contains("mask_token") && !config["mask_token"].is_null()) {
      const nlohmann::json& mask = config["mask_token"];
      vocab.declared_mask_token =
          mask.is_string() ? mask.get<std::string>() : mask.at("content").get<std::string>();
    }
  }
  return vocab;
}

MaskTokenChoice resolve_dflash_mask_token(const DFlashOptions& options, int64_t vocab_size) {
  if (options.mask_token_id) return resolve_mask_token(options.mask_token_id, vocab_size, {});
  std::string dir = options.tokenizer_dir;
  if (dir.empty() && std::filesystem::exists(options.target_path + "/tokenizer.json"))
    dir = options.target_path;
  check(!dir.empty(),
        "[dflash] no mask token: set draft.mask_token_id, or data.tokenizer so one "
        "can be chosen from the tokenizer (",
        options.target_path, " has no tokenizer.json)");
  return resolve_mask_token(std::nullopt, vocab_size, read_tokenizer_vocab(dir));
}

// Argmax of hidden (N, H) @ head (V, H)^T, `chunk` rows at a time: never (N, V) logits. (N,)
at::Tensor chunked_argmax(const at::Tensor& hidden, const at::Tensor& head,
                          const FusedLossOptions& options) {
  at::NoGradGuard no_grad;
  const int64_t total = hidden.size(0);
  const int64_t chunk =
      options.chunk_tokens > 0 ? options.chunk_tokens : std::max<int64_t>(1, total);
  std::vector<at::Tensor> parts;
  for (int64_t begin = 0; begin < total; begin += chunk)
    parts.push_back(project_to_vocab(hidden.narrow(0, begin, std::min(chunk, total - begin)), head,
                                     options.fp32_head)
                        .argmax(-1));
  return parts.empty() ? at::zeros({0}, hidden.options().dtype(at::kLong)) : at::cat(parts);
}

// `blocks` with their tensors on the CPU (as drawn; a copy when a caller moved them).
DFlashBlocks on_host(const DFlashBlocks& blocks) {
  return {blocks.block_size, blocks.anchors.cpu(), blocks.anchor_valid.cpu()};
}

std::vector<int64_t> to_vector(const at::Tensor& tensor) {
  const at::Tensor values = tensor.to(at::kCPU, at::kLong).contiguous();
  return {values.data_ptr<int64_t>(), values.data_ptr<int64_t>() + values.numel()};
}

}  // namespace

DFlashOptions dflash_options(const Config& config, const RunContext& run) {
  DFlashOptions options;
  options.run = run;
  const Config target = config.section("target");
  options.target_path = target.get_string("path");
  options.target_dtype = parse_compute_dtype(
      target.get_string("dtype", frozen_dtype_default(run.device)), target.where("dtype"));
  const Config draft = config.section("draft");
  options.draft_dtype =
      parse_compute_dtype(draft.get_string("dtype", "fp32"), draft.where("dtype"));
  options.dims.num_layers = draft.get_int("num_layers", 5);
  check(options.dims.num_layers >= 1, "[dflash] ", draft.where("num_layers"), ": must be >= 1");
  options.dims.intermediate_size = draft.get_int("intermediate_size", 0);
  options.dims.num_attention_heads = draft.get_int("num_attention_heads", 0);
  options.dims.num_key_value_heads = draft.get_int("num_key_value_heads", 0);
  options.dims.head_dim = draft.get_int("head_dim", 0);
  options.target_layer_ids = draft.get_int_list("target_layer_ids", std::vector<int64_t>{});
  options.block_size = draft.get_int("block_size", 16);
  check(options.block_size >= 2, "[dflash] ", draft.where("block_size"), ": must be >= 2");
  if (draft.has("mask_token_id")) options.mask_token_id = draft.get_int("mask_token_id");
  if (draft.has("rope_theta")) options.rope_theta = draft.get_double("rope_theta");
  options.init_std = draft.get_double("init_std", 0.02);
  const Config data = config.section("data");
  options.tokenizer_dir = data.get_string("tokenizer", "");
  options.capture_dir = data.get_string("capture", "");
  options.seed = static_cast<uint64_t>(config.section("training").get_int("seed", 0));
  const Config loss = config.section("loss");
  options.gamma = loss.get_double("gamma", dflash_default_gamma(options.block_size));
  check(std::isfinite(options.gamma) && options.gamma > 0, "[dflash] ", loss.where("gamma"),
        ": must be a finite number > 0, got ", options.gamma);
  options.max_anchors = loss.get_int("max_anchors", 512);
  check(options.max_anchors >= 1 && options.max_anchors <= (int64_t{1} << 20), "[dflash] ",
        loss.where("max_anchors"), ": must be in 1..1048576, got ", options.max_anchors);
  options.loss.chunk_tokens = read_chunk_tokens(loss, "dflash");
  options.loss.fp32_head = loss.get_bool("fp32_lm_head", false);
  options.teacher = loss.get_choice("teacher", {"labels", "target"}, "labels") == "target"
                        ? DFlashTeacher::Target
                        : DFlashTeacher::Labels;
  if (options.teacher == DFlashTeacher::Labels) {
    for (const char* key : {"divergence", "beta", "temperature", "hard_label_weight"})
      check(!loss.has(key), "[dflash] ", loss.where(key),
            " applies to distillation from the target: set loss.teacher: target, or remove it");
  } else {
    options.distill = read_distill_loss(loss, "dflash");
  }
  options.distill.chunk_tokens = options.loss.chunk_tokens;
  options.distill.fp32_head = options.loss.fp32_head;
  return options;
}

double dflash_default_gamma(int64_t block_size) {
  const double bs = static_cast<double>(block_size);
  return block_size <= 10 ? bs / 2 : 5.0 + (bs - 10.0) / 3.0;
}

at::Tensor dflash_slot_weights(int64_t block_size, double gamma) {
  const at::Tensor slots = at::arange(block_size, at::kFloat);
  return at::exp(-(slots - 1) / gamma).index_put_({slots == 0}, 0.0);
}

DFlashAnchors sample_dflash_anchors(const PackedBatch& batch, int64_t block_size,
                                    int64_t max_anchors, uint64_t seed) {
  const at::Tensor loss_mask = batch.on_host().loss_mask.to(at::kByte).contiguous();
  const auto trained = loss_mask.accessor<uint8_t, 2>();
  const int64_t rows = batch.rows();
  std::vector<std::vector<int64_t>> candidates(static_cast<size_t>(rows));
  std::vector<Hasher> row_seeds(static_cast<size_t>(rows), Hasher(seed));
  DFlashAnchors out;
  for (const PackedDocument& document : batch.documents) {
    // The document's identity (its dataset index, or input index, and where this chunk starts)
    // and the epoch it was drawn in: every pass over the data draws fresh anchors.
    row_seeds[document.row]
        .update_u64(static_cast<uint64_t>(document.dataset_index >= 0 ? document.dataset_index
                                                                      : document.source_index))
        .update_u64(static_cast<uint64_t>(document.source_begin))
        .update_u64(static_cast<uint64_t>(document.epoch));
    int64_t loss_tokens = 0;
    for (int64_t t = document.begin; t < document.begin + document.length; ++t)
      loss_tokens += trained[document.row][t];
    if (loss_tokens < 2 * block_size) {
      ++out.skipped_documents;
      continue;
    }
    // The whole block inside the document: a + bs - 1 <= its last column.
    for (int64_t a = document.begin; a <= document.begin + document.length - block_size; ++a)
      if (trained[document.row][a]) candidates[document.row].push_back(a);
  }
  std::vector<std::vector<int64_t>> chosen;
  int64_t width = 1;
  for (int64_t b = 0; b < rows; ++b) {
    chosen.push_back(draw_sorted(std::move(candidates[b]), max_anchors, row_seeds[b].digest()));
    width = std::max<int64_t>(width, static_cast<int64_t>(chosen.back().size()));
  }
  at::Tensor anchors = at::zeros({rows, width}, at::kLong);
  at::Tensor valid = at::zeros({rows, width}, at::kBool);
  for (int64_t b = 0; b < rows; ++b)
    for (size_t i = 0; i < chosen[b].size(); ++i) {
      anchors[b][static_cast<int64_t>(i)] = chosen[b][i];
      valid[b][static_cast<int64_t>(i)] = true;
    }
  out.blocks = {block_size, anchors, valid};
  return out;
}

DFlashTargets dflash_targets(const PackedBatch& batch, const DFlashBlocks& blocks) {
  const int64_t rows = batch.rows(), length = batch.seq_len(), count = blocks.num_anchors();
  const at::Tensor slots = at::arange(blocks.block_size, blocks.anchors.options()).view({1, 1, -1});
  const at::Tensor columns = blocks.anchors.unsqueeze(2) + slots;  // (B, A, bs): a + k
  const at::Tensor inside = columns < length;
  const at::Tensor gather_index =
      columns.clamp_max(length - 1).view({rows, count * blocks.block_size});
  const auto at_label = [&](const at::Tensor& x) {  // x[b, a + k] as (B, A, bs)
    return x.gather(1, gather_index).view({rows, count, blocks.block_size});
  };
  const at::Tensor anchor_document = batch.document_ids.gather(1, blocks.anchors).unsqueeze(2);
  const at::Tensor anchor_valid = blocks.anchor_valid.unsqueeze(2);
  DFlashTargets targets;
  targets.valid = (slots >= 1)
                      .logical_and(inside)
                      .logical_and(anchor_valid)
                      .logical_and(at_label(batch.document_ids) == anchor_document)
                      .logical_and(at_label(batch.padding_mask).to(at::kBool))
                      .logical_and(at_label(batch.loss_mask).to(at::kBool));
  targets.labels = at::where(inside.logical_and(anchor_valid), at_label(batch.input_ids),
                             at::zeros_like(columns));
  return targets;
}

DFlashObjective::DFlashObjective(const DFlashOptions& options) : options_(options) {
  target_config_ = DecoderConfig::from_dir(options.target_path);
  load_draft_target(options.target_path, options.target_dtype, !options.capture_dir.empty(),
                    options.run, target_, head_);
  gamma_ = options.gamma > 0 ? options.gamma : dflash_default_gamma(options.block_size);

  mask_token_ = resolve_dflash_mask_token(options, target_config_.vocab_size);
  if (!options.run.rank_zero || options.run.rank_zero->reads_files())  // said once per job
    std::cerr << "[dflash] mask token id " << mask_token_.id << " ("
              << mask_token_rule_name(mask_token_.rule)
              << (mask_token_.content.empty() ? "" : ", " + mask_token_.content) << ")"
              << (mask_token_.grow_embedding ? ": a row is grown; " + mask_token_.serving_note : "")
              << "\n";
  input_embedding_ = head_->embed_tokens();
  if (mask_token_.grow_embedding) {  // a copy with one more row; the target's stays untouched
    {
      const FullParameters target_embedding({input_embedding_});  // gathered when sharded
      input_embedding_ = grow_embedding(input_embedding_, mean_embedding_row(input_embedding_));
    }
    mask_embedding_ = input_embedding_[mask_token_.id].clone();  // (H,) for the export
    shard_on_load(options.run.shard_on_load, input_embedding_);  // split like the target's
  }

  DFlashConfig config = DFlashConfig::for_target(
      target_config_, options.dims, options.target_layer_ids, options.block_size, mask_token_.id);
  if (options.rope_theta) {
    config.layer.rope_theta = *options.rope_theta;
    config.layer.rope_scaling = RopeScaling{};
  }
  const int64_t last_layer = target_config_.num_hidden_layers - 1;
  for (int64_t layer : config.target_layer_ids)
    // Serving engines capture layer inputs (the output of layer i = the input of layer i + 1),
    // so the last layer's output is never available at inference.
    check(layer >= 0 && layer < last_layer, "[dflash] target layer ", layer,
          " cannot be read: ", options.target_path, " has layers 0..", last_layer,
          " and serving engines expose the outputs of layers 0..", last_layer - 1, " only");
  draft_ = DFlashDraft(
      config, at::TensorOptions().dtype(options.draft_dtype).device(options.run.placement()));
  draft_->attention_options = options.run.attention;
  init_normal_(*draft_, options.init_std, options.seed);
  for (auto& parameter : draft_->parameters()) parameter.set_requires_grad(true);
  if (!options.capture_dir.empty()) {
    capture_.emplace(CaptureStore::open(options.capture_dir));
    check_capture_features(*capture_, config.target_layer_ids, target_config_.hidden_size,
                           /*needs_last_hidden=*/options.teacher == DFlashTeacher::Target,
                           "[dflash]");
  }
}

void DFlashObjective::attach_data(const DataContext& data) {
  if (capture_)
    check_capture_matches_data(*capture_, data.documents("dflash"), data.seq_len, "[dflash]");
}

DFlashAnchors DFlashObjective::anchors(const PackedBatch& batch) const {
  return sample_dflash_anchors(batch, options_.block_size, options_.max_anchors, options_.seed);
}

StepTotals DFlashObjective::totals(const PackedBatch& batch, const DFlashBlocks& blocks) const {
  StepTotals totals;
  totals.documents = batch.total_documents();
  // (An IntArrayRef: torch 2.11 also has a Dimname overload, which makes {0, 1} ambiguous.)
  totals.unroll_tokens = to_vector(
      dflash_targets(batch.on_host(), on_host(blocks)).valid.sum(at::IntArrayRef{0, 1}));  // (bs)
  for (int64_t count : totals.unroll_tokens) totals.loss_tokens += count;
  return totals;
}

StepTotals DFlashObjective::count(const PackedBatch& batch) const {
  return totals(batch, anchors(batch).blocks);
}

TargetFeatures DFlashObjective::features(const PackedBatch& batch) const {
  const bool with_last = options_.teacher == DFlashTeacher::Target;
  if (target_)
    return target_features(*target_, batch.input_ids, batch.layout(),
                           draft_->config().target_layer_ids, with_last);
  CapturedBatch captured = read_captured_batch(*capture_, batch, options_.target_dtype, "[dflash]");
  TargetFeatures features;
  features.aux = std::move(captured.aux);
  if (with_last) features.last = std::move(captured.last);
  return features;
}

double dflash_draft_forward_flops(const DFlashConfig& c, const PackedBatch& batch,
                                  const DFlashBlocks& blocks) {
  const DecoderConfig& l = c.layer;
  const double tokens = static_cast<double>(batch.rows()) * batch.seq_len();
  const double queries = blocks.anchor_valid.sum().item<double>() * c.block_size;
  const double visible_context =  // sum over block queries of the context keys each one sees
      dflash_key_bands(batch.on_host().document_ids, on_host(blocks), c10::kCPU).visible_pairs();
  const double q = static_cast<double>(l.num_attention_heads) * l.head_dim;
  const double kv = static_cast<double>(l.num_key_value_heads) * l.head_dim;
  const double h = static_cast<double>(l.hidden_size);
  const double fc =
      2 * tokens * static_cast<double>(c.target_layer_ids.size()) * c.target_hidden_size * h;
  const double context_kv = 2 * tokens * h * 2 * kv;
  const double block_matmuls =
      2 * queries * (h * (q + 2 * kv) + q * h + 3 * h * l.intermediate_size);
  const double attention = 4 * q * (visible_context + queries * c.block_size);
  return fc + l.num_hidden_layers * (context_kv + block_matmuls + attention);
}

double DFlashObjective::model_flops(const PackedBatch& batch) const {
  const PackedBatch& host = batch.on_host();  // counted on the host: no wait for the device
  const DFlashAnchors drawn = anchors(host);
  const double labels = static_cast<double>(totals(host, drawn.blocks).loss_tokens);
  // Online the target's layers; the frozen lm_head forward and its hidden-state gradient on the
  // labelled slots; the draft's forward and backward.
  const double target =
      target_ ? decoder_forward_flops(target_config_, static_cast<double>(host.num_tokens),
                                      host.attention_pairs(), /*with_lm_head=*/false)
              : 0.0;
  return target + 2 * lm_head_flops(target_config_, labels) +
         3 * dflash_draft_forward_flops(draft_->config(), host, drawn.blocks);
}

DFlashResult DFlashObjective::run(const PackedBatch& batch, const TargetFeatures& features,
                                  const DFlashBlocks& drawn, const StepTotals& totals) const {
  const int64_t block_size = drawn.block_size;
  // The blocks and their targets are laid out on the host, then sent: the device never waits.
  const at::Device device = batch.input_ids.device();
  const DFlashBlocks host_blocks = on_host(drawn);
  const DFlashBlocks blocks{block_size, to_device(host_blocks.anchors, device),
                            to_device(host_blocks.anchor_valid, device)};
  check(static_cast<int64_t>(totals.unroll_tokens.size()) == block_size,
        "[dflash] step totals carry ", totals.unroll_tokens.size(), " block slots, the blocks ",
        block_size);
  const at::Tensor slot_weights = dflash_slot_weights(block_size, gamma_);  // (bs)
  double weight_total = 0;
  for (int64_t k = 0; k < block_size; ++k)
    weight_total += slot_weights[k].item<double>() * static_cast<double>(totals.unroll_tokens[k]);
  check(weight_total > 0,
        "[dflash] the step has no block slot with a label (every document "
        "shorter than 2 * block_size loss tokens, or no loss-masked anchors)");

  const c10::ScalarType dtype = options_.draft_dtype;
  at::Tensor block_embeds;
  {
    at::NoGradGuard no_grad;
    block_embeds =
        apply_embedding(input_embedding_, dflash_block_ids(batch.input_ids, blocks, mask_token_.id))
            .to(dtype);  // (B, A * bs, H)
  }
  const at::Tensor context = draft_->context(features.aux.to(dtype));  // (B, S, H)
  DFlashResult result;
  result.hidden = draft_->forward(
      block_embeds, context, batch.position_ids, dflash_block_positions(batch.position_ids, blocks),
      dflash_key_bands(batch.on_host().document_ids, host_blocks, device), blocks.anchor_valid);
  const DFlashTargets host_targets = dflash_targets(batch.on_host(), host_blocks);
  result.targets = {to_device(host_targets.labels, device), to_device(host_targets.valid, device)};

  // Only the labelled slots go through the lm_head.
  const int64_t hidden_size = result.hidden.size(2);
  const at::Tensor labelled_on_host = host_targets.valid.reshape(-1).nonzero().squeeze(1);  // (N,)
  const at::Tensor slots_on_host = labelled_on_host.remainder(block_size);                  // (N,)
  const at::Tensor labelled = to_device(labelled_on_host, device);
  const at::Tensor slots = to_device(slots_on_host, device);
  // In the lm_head's dtype (the target's): a bf16 draft may train against an fp32 target.
  const at::Tensor hidden = result.hidden.reshape({-1, hidden_size})
                                .index_select(0, labelled)
                                .to(head_->lm_head().scalar_type());  // (N, H)
  const at::Tensor labels = result.targets.labels.reshape(-1).index_select(0, labelled);
  const bool distill = options_.teacher == DFlashTeacher::Target;
  at::Tensor teacher_hidden;  // (N, H_t) the target's normed last hidden state at a + k - 1
  if (distill) {
    check(features.last.defined(), "[dflash] loss.teacher: target needs the target's last hidden",
          " states (a capture made without them? capture again with this config)");
    const int64_t rows = batch.rows(), length = batch.seq_len();
    const at::Tensor slot_offsets =
        at::arange(block_size, blocks.anchors.options()).view({1, 1, -1}) - 1;
    const at::Tensor flat_columns =  // (B * A * bs): b * S + a + k - 1, clamped for slot 0
        (at::arange(rows, blocks.anchors.options()).view({-1, 1, 1}) * length +
         (blocks.anchors.unsqueeze(2) + slot_offsets).clamp(0, length - 1))
            .reshape(-1);
    at::NoGradGuard no_grad;
    teacher_hidden = head_
                         ->final_norm(features.last.reshape({rows * length, -1})
                                          .index_select(0, flat_columns.index_select(0, labelled)))
                         .to(head_->lm_head().scalar_type());
  }
  // The target's lm_head goes through with_full_parameters (gathered per call when sharded),
  // also for a micro-batch without labelled slots (N = 0: loss 0, zero gradients), so every
  // rank makes the same calls.
  if (distill) {
    const at::Tensor weights =
        to_device(slot_weights, hidden.device()).index_select(0, slots) / weight_total;  // (N,)
    const DistillLossOptions distill_options = options_.distill;
    result.loss =
        with_full_parameters({head_->lm_head()}, {hidden, teacher_hidden, labels, weights},
                             [distill_options](const auto& in, const auto& head) {
                               return std::vector<at::Tensor>{fused_distillation_loss(
                                   in[0], head[0], in[1], head[0], in[2], in[3], distill_options)};
                             })[0];
  } else {
    const FusedLossOptions loss_options = options_.loss;
    const at::Tensor logprobs = with_full_parameters(
        {head_->lm_head()}, {hidden, labels}, [loss_options](const auto& in, const auto& head) {
          return std::vector<at::Tensor>{fused_token_logprobs(in[0], head[0], in[1], loss_options)};
        })[0];
    const at::Tensor weights = to_device(slot_weights, logprobs.device()).index_select(0, slots);
    result.loss = -(logprobs * weights).sum() / weight_total;
    at::NoGradGuard no_grad;
    result.loss_sums = at::zeros({block_size}, logprobs.options().dtype(at::kDouble))
                           .index_add_(0, slots, -logprobs.detach().to(at::kDouble));
  }
  if (!result.loss_sums.defined())  // teacher target: no per-slot cross-entropy
    result.loss_sums = at::zeros({block_size}, hidden.options().dtype(at::kDouble));
  const FullParameters lm_head({head_->lm_head()});  // for the accuracy metrics, when sharded
  const at::Tensor wanted =  // (N,) what greedy verification would accept at each slot
      distill ? chunked_argmax(teacher_hidden, head_->lm_head(), options_.loss) : labels;
  const at::Tensor hits =
      chunked_argmax(hidden.detach(), head_->lm_head(), options_.loss).eq(wanted);
  result.correct =
      at::zeros({block_size}, slots.options()).index_add_(0, slots, hits.to(at::kLong));
  result.counts = to_vector(at::bincount(slots_on_host, {}, block_size));
  return result;
}

ObjectiveOutput DFlashObjective::compute(const PackedBatch& batch, const StepTotals& totals) {
  const DFlashAnchors drawn = anchors(batch);
  TargetFeatures target;
  {
    at::NoGradGuard no_grad;
    target = features(batch);
  }
  const DFlashResult result = run(batch, target, drawn.blocks, totals);
  ObjectiveOutput output;
  output.loss = result.loss;
  output.add_metric("loss", result.loss);
  for (int64_t k = 1; k < options_.block_size; ++k) {
    const double count = static_cast<double>(std::max<int64_t>(totals.unroll_tokens[k], 1));
    output.add_metric("acc_" + std::to_string(k), result.correct[k].to(at::kDouble) / count);
    if (options_.teacher == DFlashTeacher::Labels)
      output.add_metric("loss_" + std::to_string(k), result.loss_sums[k] / count);
  }
  output.add_metric("anchors", drawn.blocks.anchor_valid.sum().item<double>());  // host blocks
  output.add_metric("skipped_documents", static_cast<double>(drawn.skipped_documents));
  return output;
}

void DFlashObjective::finish_metrics(std::vector<std::pair<std::string, double>>& metrics) const {
  // Simulated acceptance length: sum_k prod_{i<=k} acc_i over the predicted slots 1..bs-1.
  double product = 1.0, accepted = 0.0;
  for (int64_t k = 1; k < options_.block_size; ++k) {
    const std::string name = "acc_" + std::to_string(k);
    for (const auto& [key, value] : metrics)
      if (key == name) product *= value;
    accepted += product;
  }
  metrics.emplace_back("sim_accept_length", accepted);
}

void DFlashObjective::export_model(const std::string& dir) const {
  DFlashExportInfo info;
  info.num_target_layers = target_config_.num_hidden_layers;
  info.mask_token = mask_token_.content;
  if (mask_token_.grow_embedding) {
    info.mask_embedding = mask_embedding_;
    info.serving_note = mask_token_.serving_note;
  }
  write_dflash_export(*draft_, dir, info);
}

ObjectiveDescription dflash_description() {
  ObjectiveDescription description;
  description.name = "dflash";
  description.summary = "a DFlash block-diffusion draft against a frozen target";
  description.keys =
      "target (path, dtype), draft (num_layers, target_layer_ids, block_size, "
      "mask_token_id, intermediate_size, num_attention_heads, "
      "num_key_value_heads, head_dim, rope_theta, dtype, init_std), loss (gamma, "
      "max_anchors, chunk_tokens, fp32_lm_head, teacher: labels | target; with "
      "target: divergence, beta, temperature, hard_label_weight), data.capture";
  description.make = [](const Config& config, const RunContext& run) {
    return std::make_unique<DFlashObjective>(dflash_options(config, run));
  };
  // Its target layers, and the last layer only when the target's distribution is the teacher.
  description.capture = [](const Config& config, const RunContext& run) {
    const DFlashOptions options = dflash_options(config, run);
    CaptureRequest request{options.target_path, options.target_dtype, options.target_layer_ids,
                           options.teacher == DFlashTeacher::Target};
    if (request.layer_ids.empty())
      request.layer_ids = DFlashConfig::default_target_layers(
          DecoderConfig::from_dir(options.target_path).num_hidden_layers, options.dims.num_layers);
    return request;
  };
  description.find_export = [](const std::string& dir) -> std::optional<std::string> {
    if (is_dflash_export(dir)) return dir;
    return std::nullopt;
  };
  description.load_draft = dflash_draft_decoder;
  return description;
}

}  // namespace tandem
