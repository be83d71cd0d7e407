// tandem reference-logprobs CONFIG.yaml --out FILE: run a DPO config's frozen reference once over
// its preference data and store each document's summed completion log-probability, so training
// with reference.logprobs=FILE needs no reference model in memory.
#include <ATen/ATen.h>

#include <iostream>
#include <map>
#include <optional>

#include "tandem/cli/commands.h"
#include "tandem/core/config.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/core/hash.h"
#include "tandem/data/rank_parts.h"
#include "tandem/io/safetensors.h"
#include "tandem/io/tensor_io.h"
#include "tandem/models/frozen.h"
#include "tandem/objectives/dpo.h"
#include "tandem/train/training_data.h"

namespace tandem::cli {

Runner add_reference_logprobs_command(CLI::App& root) {
  struct Options {
    std::string config_path, out, device = "auto";
    std::vector<std::string> overrides;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = root.add_subcommand(
      "reference-logprobs",
      "run the frozen reference of a DPO config once over its preference data and write each "
      "document's summed completion log-probability (safetensors) for training with "
      "reference.logprobs=FILE (under torchrun each rank runs every W-th micro-batch)");
  command->add_option("config", options->config_path, "the DPO training config (YAML)")->required();
  command->add_option("overrides", options->overrides,
                      "dotted overrides, e.g. reference.dtype=bf16");
  command->add_option("--out", options->out, "output file (.safetensors)")->required();
  add_device_option(*command, options->device);
  return [options]() {
    const Config config = Config::load(options->config_path, options->overrides);
    const at::Device device = device_from_option(options->device);
    const DpoOptions dpo = dpo_options(config, device);
    check(!dpo.reference_path.empty(), "[reference-logprobs] ", options->config_path,
          ": set reference.path (the model to run)");
    // Every document once, whatever data.path's weights say.
    const TrainingData data = read_training_data(config, /*weighted=*/false);
    check(data.format == DataFormat::preference, "[reference-logprobs] ", data.path,
          ": DPO data must be preference pairs (data.format: preference)");
    const FrozenModel reference =
        FrozenModel::load(dpo.reference_path, dpo.reference_dtype, device);
    const int64_t documents = data.dataset->size();
    ReferenceLogprobsInfo info;
    info.dataset_key = hex64(data.dataset->key());
    info.documents = documents;
    info.seq_len = data.packing.seq_len;
    info.vocab_size = reference.config().vocab_size;
    info.reference = dpo.reference_path;
    info.dtype = compute_dtype_name(dpo.reference_dtype);
    info.fp32_lm_head = dpo.policy.loss.fp32_head;

    // Under torchrun, rank R runs micro-batches R, R + W, ... and writes what it computed to
    // OUT.parts/rank-R-of-W.safetensors; the last rank to finish writes OUT from the parts.
    const DataRank rank = DataRank::from_launch();
    std::optional<RankParts> parts;
    if (rank.parallel())
      parts.emplace(options->out + ".parts", rank, "[reference-logprobs]");
    else
      check_no_rank_parts(options->out + ".parts", options->out + ".parts", "[reference-logprobs]");
    // What a part was computed from: a part of other data or another reference is not merged.
    const std::map<std::string, std::string> part_identity = {
        {"dataset_key", info.dataset_key},
        {"seq_len", std::to_string(info.seq_len)},
        {"reference", info.reference},
        {"dtype", info.dtype},
        {"fp32_lm_head", info.fp32_lm_head ? "true" : "false"}};
    auto check_part = [&](const std::string& path) {
      safetensors::File file = safetensors::File::open(path);
      const auto& metadata = file.header().metadata;
      for (const auto& [key, value] : part_identity) {
        const auto found = metadata.find(key);
        check(found != metadata.end() && found->second == value, "[reference-logprobs] ", path,
              ": computed with ", key, " ",
              found == metadata.end() ? std::string("(none)") : found->second, ", this run has ",
              value, "; delete ", parts->dir(), " and rerun every rank with the same config");
      }
      return file;
    };
    if (parts && parts->done()) check_part(parts->path(".safetensors"));
    const std::string who = "[reference-logprobs] " + (parts ? rank.name() + ": " : std::string());
    // Every document's sum and count, filled from what this process computed or from the parts.
    at::Tensor all_logprobs = at::zeros({documents}, at::kFloat);
    at::Tensor all_counts = at::full({documents}, -1, at::kLong);
    auto add_documents = [&](const at::Tensor& index, const at::Tensor& logprobs,
                             const at::Tensor& counts, const std::string& from) {
      check(index.numel() == 0 ||
                (index.min().item<int64_t>() >= 0 && index.max().item<int64_t>() < documents),
            "[reference-logprobs] ", from, ": a document index outside 0..", documents - 1);
      all_logprobs.index_copy_(0, index, logprobs);
      all_counts.index_copy_(0, index, counts);
    };
    auto write_whole = [&](const std::string& when_missing) {
      check((all_counts >= 0).all().item<bool>(), "[reference-logprobs] ", when_missing);
      ReferenceLogprobs::write(options->out, all_logprobs, all_counts, info);
    };
    if (!parts || !parts->done()) {
      std::vector<at::Tensor> indices, logprobs, counts;
      at::NoGradGuard no_grad;
      for (int64_t record = 0, unit = 0; record < data.num_records(); ++unit) {
        const PackedBatch host = next_micro_batch_in_order(record, data);  // advances record
        if (!rank.owns(unit)) continue;
        try {
          const PackedBatch batch = host.to(device);
          const at::Tensor hidden =
              reference.forward(batch.input_ids, batch.layout(), {}, /*with_logits=*/false)
                  .final_hidden;
          std::vector<int64_t> index;
          for (const PackedDocument& document : batch.documents)
            index.push_back(document.dataset_index);
          indices.push_back(at::tensor(index, at::kLong));
          logprobs.push_back(
              document_logprobs(hidden, reference.lm_head_weight(), batch, dpo.policy.loss).cpu());
          counts.push_back(document_target_counts(batch).cpu());
        } catch (const std::exception& e) {
          throw Error(who, "micro-batch ", unit, " (documents ",
                      host.documents.front().dataset_index, "..",
                      host.documents.back().dataset_index, "; this rank runs ",
                      rank.share("micro-batches"), "): ", e.what());
        }
      }
      const auto joined = [](const std::vector<at::Tensor>& pieces, c10::ScalarType dtype) {
        return pieces.empty() ? at::empty({0}, dtype) : at::cat(pieces);
      };
      const at::Tensor index = joined(indices, at::kLong);
      const at::Tensor values = joined(logprobs, at::kFloat);
      const at::Tensor count = joined(counts, at::kLong);
      if (!parts) {
        add_documents(index, values, count, "this run");
        write_whole("internal: a document was missed");
        std::cout << "[reference-logprobs] " << options->out << ": " << documents << " documents ("
                  << data.num_records() << " pairs) from " << dpo.reference_path << "\n";
        return 0;
      }
      write_tensors(parts->path(".safetensors"),
                    {{"index", index}, {"logprobs", values}, {"counts", count}}, part_identity);
      parts->mark_done();
      std::cout << who << index.numel() << " documents written to " << parts->path(".safetensors")
                << "\n";
    }
    const bool merged = parts->merge_if_all_done([&] {
      for (int64_t r = 0; r < rank.ranks; ++r) {
        const std::string path = parts->path_of(r, ".safetensors");
        const safetensors::File file = check_part(path);
        add_documents(read_tensor(file, file.info("index")),
                      read_tensor(file, file.info("logprobs")),
                      read_tensor(file, file.info("counts")), path);
      }
      write_whole(parts->dir() + ": the ranks' parts miss documents; delete it and rerun");
      std::cout << "[reference-logprobs] " << options->out << ": merged the parts of " << rank.ranks
                << " ranks, " << documents << " documents (" << data.num_records()
                << " pairs) from " << dpo.reference_path << "\n";
    });
    if (!merged)
      std::cout << who << "part complete; the last rank to finish writes " << options->out << "\n";
    return 0;
  };
}

}  // namespace tandem::cli
