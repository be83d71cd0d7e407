// tandem capture CONFIG.yaml --out DIR: run the frozen target once over a run's training data
// and store the hidden states an EAGLE-3 or DFlash draft reads, for offline training
// (data.capture).
#include <iostream>

#include "tandem/cli/commands.h"
#include "tandem/core/config.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/core/hash.h"
#include "tandem/data/capture.h"
#include "tandem/models/dflash.h"
#include "tandem/models/eagle3.h"
#include "tandem/models/frozen.h"
#include "tandem/objectives/dflash.h"
#include "tandem/objectives/eagle3.h"
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
      "run the frozen target once over the training data of an EAGLE-3 or DFlash config and store "
      "the hidden states its draft reads (EAGLE-3: aux layers and the last layer; DFlash: its "
      "target layers) as safetensors shards + manifest, resumable, for offline training with "
      "data.capture=DIR");
  command->add_option("config", options->config_path,
                      "the EAGLE-3 or DFlash training config (YAML)")
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
    const std::string objective =
        config.section("training").get_string("objective", "sft");
    check(objective == "eagle3" || objective == "dflash", "[capture] ", options->config_path,
          ": training.objective is '", objective, "'; capture serves eagle3 and dflash drafts");
    std::string target_path;
    c10::ScalarType target_dtype;
    std::vector<int64_t> layer_ids;
    bool last_hidden = true;  // EAGLE-3's teacher reads the last layer, DFlash's only if distilled
    if (objective == "eagle3") {
      const Eagle3Options eagle3 = eagle3_options(config, device);
      target_path = eagle3.target_path;
      target_dtype = eagle3.target_dtype;
      layer_ids = eagle3.aux_layer_ids;
    } else {
      const DFlashOptions dflash = dflash_options(config, device);
      target_path = dflash.target_path;
      target_dtype = dflash.target_dtype;
      layer_ids = dflash.target_layer_ids;
      last_hidden = dflash.teacher == DFlashTeacher::Target;
      if (layer_ids.empty())
        layer_ids = DFlashConfig::default_target_layers(
            DecoderConfig::from_dir(target_path).num_hidden_layers, dflash.dims.num_layers);
    }
    const TrainingData data = read_training_data(config);
    check(data.dataset.has_value(), "[capture] ", options->config_path,
          ": capture reads document data, not rollouts");
    const FrozenModel target = FrozenModel::load(target_path, target_dtype, device);
    CaptureSettings settings;
    settings.target = target_path;
    settings.layer_ids = !layer_ids.empty() ? layer_ids
                                            : Eagle3Config::default_aux_layers(
                                                  target.config().num_hidden_layers);
    settings.last_hidden = last_hidden;
    settings.dtype = options->dtype.empty() ? compute_dtype_name(target_dtype)
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
