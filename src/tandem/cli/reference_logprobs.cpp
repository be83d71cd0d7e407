// tandem reference-logprobs CONFIG.yaml --out FILE: run a DPO config's frozen reference once over
// its preference data and store each document's summed completion log-probability, so training
// with reference.logprobs=FILE needs no reference model in memory.
#include <ATen/ATen.h>

#include <iostream>

#include "tandem/cli/commands.h"
#include "tandem/core/config.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/core/hash.h"
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
      "reference.logprobs=FILE");
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
    at::Tensor logprobs = at::zeros({documents}, at::kFloat);
    at::Tensor counts = at::full({documents}, -1, at::kLong);
    at::NoGradGuard no_grad;
    for (int64_t record = 0; record < data.num_records();) {
      const PackedBatch batch = next_micro_batch_in_order(record, data).to(device);
      const at::Tensor hidden =
          reference.forward(batch.input_ids, batch.layout(), {}, /*with_logits=*/false)
              .final_hidden;
      std::vector<int64_t> indices;
      for (const PackedDocument& document : batch.documents)
        indices.push_back(document.dataset_index);
      const at::Tensor index = at::tensor(indices, at::kLong);
      logprobs.index_copy_(
          0, index,
          document_logprobs(hidden, reference.lm_head_weight(), batch, dpo.policy.loss).cpu());
      counts.index_copy_(0, index, document_target_counts(batch).cpu());
    }
    check((counts >= 0).all().item<bool>(), "[reference-logprobs] internal: a document was missed");
    ReferenceLogprobsInfo info;
    info.dataset_key = hex64(data.dataset->key());
    info.documents = documents;
    info.seq_len = data.packing.seq_len;
    info.vocab_size = reference.config().vocab_size;
    info.reference = dpo.reference_path;
    info.dtype = compute_dtype_name(dpo.reference_dtype);
    info.fp32_lm_head = dpo.policy.loss.fp32_head;
    ReferenceLogprobs::write(options->out, logprobs, counts, info);
    std::cout << "[reference-logprobs] " << options->out << ": " << documents << " documents ("
              << data.num_records() << " pairs) from " << dpo.reference_path << "\n";
    return 0;
  };
}

}  // namespace tandem::cli
