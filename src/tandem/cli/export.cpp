// tandem export RUN_DIR [--step N | --best] [--out DIR]: write a run's trained model in serving
// format.
#include <iostream>

#include "tandem/cli/commands.h"
#include "tandem/train/export_run.h"
#include "tandem/train/validation.h"

namespace tandem::cli {

Runner add_export_command(CLI::App& root) {
  struct Options {
    std::string run_dir, out, dtype, verifier_name;
    int64_t step = -1;
    bool best = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = root.add_subcommand(
      "export",
      "export the trained model of a run's checkpoint: an HF checkpoint (sft), or an EAGLE-3 "
      "draft in both SGLang (LlamaForCausalLMEagle3) and vLLM speculators (Eagle3DraftModel) "
      "formats, or a DFlash draft in z-lab's DFlashDraftModel format (SGLang and vLLM)");
  command->add_option("run_dir", options->run_dir, "the run directory (training.run_dir)")
      ->required();
  CLI::Option* step = command->add_option("--step", options->step,
                                          "checkpoint step (default: the newest valid one)");
  command
      ->add_flag("--best", options->best,
                 "the best checkpoint by the run's validation (RUN_DIR/best.json; a run with "
                 "data.validation writes it)")
      ->excludes(step);
  command->add_option("--out", options->out, "output directory (default: RUN_DIR/export)");
  command->add_option("--dtype", options->dtype,
                      "cast the trained weights before writing them: fp32 | bf16 | fp16 "
                      "(default: the dtype they were trained in)");
  command->add_option("--verifier-name", options->verifier_name,
                      "an EAGLE-3 draft: the target's hub id (e.g. Qwen/Qwen3-8B) for the "
                      "speculators config's verifier (default: the run's target.name, else "
                      "target.path as given)");
  return [options]() {
    const std::string out = options->out.empty() ? options->run_dir + "/export" : options->out;
    const int64_t chosen = options->best ? read_best_step(options->run_dir) : options->step;
    const ExportResult result =
        export_run(options->run_dir, chosen, out, options->dtype, options->verifier_name);
    std::cout << "[export] step " << result.step << " (" << result.checkpoint_dir << ") -> "
              << result.out_dir << "\n";
    return 0;
  };
}

}  // namespace tandem::cli
