// tandem plot: a run's metrics.jsonl drawn as one self-contained HTML page.
#include "tandem/train/plot.h"

#include <iostream>
#include <memory>

#include "tandem/cli/commands.h"

namespace tandem::cli {

namespace {

struct PlotOptions {
  std::string run_dir;
  std::string out;  // default: RUN_DIR/plots.html
};

}  // namespace

Runner add_plot_command(CLI::App& root) {
  auto options = std::make_shared<PlotOptions>();
  CLI::App* command = root.add_subcommand(
      "plot",
      "draw a run's metrics (loss, lr, grad norm, throughput) as a self-contained HTML page");
  command->add_option("RUN_DIR", options->run_dir, "run directory holding metrics.jsonl")
      ->required();
  command->add_option("--out", options->out, "output .html file (default: RUN_DIR/plots.html)");
  return [options]() {
    const std::string path = write_metrics_plot(options->run_dir, options->out);
    std::cout << "wrote " << path << "\n";
    return 0;
  };
}

}  // namespace tandem::cli
