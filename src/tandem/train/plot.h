#pragma once
// `tandem plot`: a run's metrics.jsonl drawn as one self-contained HTML page of inline SVG
// charts (no scripts, no fonts, nothing fetched), one chart per metric group.
//
// Charts: loss (with its parts "loss/<part>"), lr, grad_norm, tokens_per_s first, then every other
// group in the order the file first names it; "group/part" names share the chart of "group".
// Non-finite values (null in the file) break a curve into segments; a lone point is drawn as a
// dot. Main metrics the file lacks are listed under the title.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tandem {

/// Every metric of a run: names in first-appearance order, (step, value) points sorted by step
/// (NaN where the run logged a non-finite value). A step logged twice keeps its last value.
struct MetricsHistory {
  std::vector<std::string> names;
  std::map<std::string, std::vector<std::pair<int64_t, double>>> points;
  int64_t records = 0;
};

/// Reads a metrics.jsonl; throws Error("[metrics] <path>:<line>: ...") for a malformed line and
/// Error("[plot] <path>: ...") when the file cannot be read.
MetricsHistory read_metrics_history(const std::string& path);

/// One chart of the page: its group name and the metric names drawn in it, main name first.
struct ChartSpec {
  std::string title;
  std::vector<std::string> series;
};

/// The charts `history` gives, in page order (see the top of this file).
std::vector<ChartSpec> plan_charts(const MetricsHistory& history);

/// The HTML page; `title` heads it (HTML-escaped).
std::string render_metrics_html(const MetricsHistory& history, const std::string& title);

/// Reads `run_dir/metrics.jsonl` and writes the page to `out` (default `run_dir/plots.html`);
/// returns the path written.
std::string write_metrics_plot(const std::string& run_dir, const std::string& out = "");

}  // namespace tandem
