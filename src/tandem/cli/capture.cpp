// tandem capture CONFIG.yaml --out DIR: run the frozen target once over a run's training data
// and store the hidden states its draft reads (what the objective's description asks for,
// objectives/description.h), for offline training (data.capture).
#include "tandem/data/capture.h"

#include <iostream>

#include "tandem/cli/commands.h"
#include "tandem/core/config.h"
#include "tandem/core/config_schema.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/core/hash.h"
#include "tandem/models/frozen.h"
#include "tandem/objectives/description.h"
#include "tandem/train/training_data.h"

namespace tandem::cli {

Runner add_capture_command(CLI::App& root) {
  struct Options {
    std::string config_path, out, dtype, device = "auto";
    std::vector<std::string> overrides;
    int64_t documents_per_shard = 256, rows = 0;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = root.add_subcommand(
      "capture",
      "run the frozen target once over the training data of a draft's config and store the "
      "hidden states the draft reads (its target layers, and the last layer when its loss needs "
      "it) as safetensors shards + manifest, resumable, for offline training with "
      "data.capture=DIR (under torchrun each rank captures every W-th shard); objectives with "
      "a capture: " +
          objective_names([](const auto& d) { return bool(d.capture); }));
  command->add_option("config", options->config_path, "the draft's training config (YAML)")
      ->required();
  command->add_option("overrides", options->overrides, "dotted overrides, e.g. data.seq_len=512");
  command->add_option("--out", options->out, "output directory")->required();
  command->add_option("--dtype", options->dtype,
                      "stored dtype: fp32, bf16, fp16 (default: target.dtype)");
  command->add_option("--shard-documents", options->documents_per_shard,
                      "documents per shard file (default 256)");
  add_device_option(*command, options->device);
  command->add_option("--rows", options->rows,
                      "rows of data.seq_len per target forward (default: data.micro_batch_rows)");
  return [options]() {
    const Config config = Config::load(options->config_path, options->overrides);
    const at::Device device = device_from_option(options->device);
    const std::string objective = keys::training::objective.read(config);
    const ObjectiveDescription& described =
        find_objective(objective, keys::training::objective.where(config));
    check(bool(described.capture), "[capture] ", options->config_path, ": training.objective is '",
          objective, "'; capture serves ",
          objective_names([](const auto& d) { return bool(d.capture); }));
    const CaptureRequest request = described.capture(config, device);
    const TrainingData data = read_training_data(config);
    check(data.dataset.has_value(), "[capture] ", options->config_path,
          ": capture reads document data, not rollouts");
    const FrozenModel target = FrozenModel::load(request.target_path, request.target_dtype, device);
    CaptureSettings settings;
    settings.target = request.target_path;
    settings.layer_ids = request.layer_ids;
    settings.last_hidden = request.last_hidden;
    settings.dtype = options->dtype.empty()
                         ? compute_dtype_name(request.target_dtype)
                         : compute_dtype_name(parse_compute_dtype(options->dtype, "--dtype"));
    settings.seq_len = data.packing.seq_len;
    settings.dataset_key = hex64(data.dataset->key());
    settings.num_documents = data.dataset->size();
    settings.hidden_size = target.config().hidden_size;
    CaptureOptions capture;
    capture.documents_per_shard = options->documents_per_shard;
    capture.rows = options->rows > 0 ? options->rows : data.rows;
    capture.rank = DataRank::from_launch();
    const CaptureProgress progress =
        capture_features(target, *data.dataset, settings, options->out, capture);
    std::cout << "[capture] " << (capture.rank.parallel() ? capture.rank.name() + ": " : "")
              << options->out << ": " << settings.num_documents << " documents ("
              << progress.documents_done << " already there, " << progress.documents_written
              << " written now in " << progress.shards_written << " shards)\n";
    return 0;
  };
}

}  // namespace tandem::cli
