// tandem capture CONFIG.yaml --out DIR: run the frozen target once over a run's training data
// and store the hidden states an EAGLE-3 draft reads, for offline training (data.capture).
#include <iostream>

#include "tandem/cli/commands.h"
#include "tandem/core/config.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/core/hash.h"
#include "tandem/data/capture.h"
#include "tandem/models/eagle3.h"
#include "tandem/models/frozen.h"
#include "tandem/objectives/eagle3.h"
#include "tandem/train/training_data.h"

namespace tandem::cli {

Runner add_capture_command(CLI::App& root) {
  struct Options {
    std::string config_path, out, dtype;
    std::vector<std::string> overrides;
    int64_t documents_per_shard = 256, rows = 0;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = root.add_subcommand(
      "capture",
      "run the frozen target once over the training data of an EAGLE-3 config and store its aux "
      "and last hidden states (safetensors shards + manifest; resumable) for offline training "
      "with data.capture=DIR");
  command->add_option("config", options->config_path, "the EAGLE-3 training config (YAML)")
      ->required();
  command->add_option("overrides", options->overrides, "dotted overrides, e.g. data.seq_len=512");
  command->add_option("--out", options->out, "output directory")->required();
  command->add_option("--dtype", options->dtype,
                      "stored dtype: fp32, bf16, fp16 (default: target.dtype)");
  command->add_option("--shard-documents", options->documents_per_shard,
                      "documents per shard file (default 256)");
  command->add_option("--rows", options->rows,
                      "rows of data.seq_len per target forward (default: data.micro_batch_rows)");
  return [options]() {
    const Config config = Config::load(options->config_path, options->overrides);
    const Eagle3Options eagle3 = eagle3_options(config);
    const TrainingData data = read_training_data(config);
    check(data.dataset.has_value(), "[capture] ", options->config_path,
          ": capture reads document data, not rollouts");
    const FrozenModel target =
        FrozenModel::load(eagle3.target_path, eagle3.target_dtype, at::Device(at::kCPU));
    CaptureSettings settings;
    settings.target = eagle3.target_path;
    settings.layer_ids = eagle3.aux_layer_ids.empty()
                             ? Eagle3Config::default_aux_layers(target.config().num_hidden_layers)
                             : eagle3.aux_layer_ids;
    settings.dtype = options->dtype.empty() ? compute_dtype_name(eagle3.target_dtype)
                                            : compute_dtype_name(parse_compute_dtype(
                                                  options->dtype, "--dtype"));
    settings.seq_len = data.packing.seq_len;
    settings.dataset_key = hex64(data.dataset->key());
    settings.num_documents = data.dataset->size();
    settings.hidden_size = target.config().hidden_size;
    CaptureOptions capture;
    capture.documents_per_shard = options->documents_per_shard;
    capture.rows = options->rows > 0 ? options->rows : data.rows;
    const CaptureProgress progress =
        capture_features(target, *data.dataset, settings, options->out, capture);
    std::cout << "[capture] " << options->out << ": " << settings.num_documents
              << " documents (" << progress.documents_done << " already there, "
              << progress.documents_written << " written now in " << progress.shards_written
              << " shards)\n";
    return 0;
  };
}

}  // namespace tandem::cli
