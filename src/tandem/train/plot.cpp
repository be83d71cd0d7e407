#include "tandem/train/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "tandem/core/error.h"
#include "tandem/train/metrics.h"

namespace tandem {

namespace {

// The metrics every run is expected to have, in page order.
constexpr const char* kMainGroups[] = {"loss", "lr", "grad_norm", "tokens_per_s"};

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                   "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

// Chart geometry in SVG user units: the plot area is [kLeft, kWidth - kRight] x
// [kTop, kHeight - kBottom].
constexpr double kWidth = 760, kHeight = 280;
constexpr double kLeft = 72, kRight = 16, kTop = 14, kBottom = 40;

// A curve longer than this is thinned to the min and max of kBuckets buckets, which keeps every
// spike visible at screen resolution.
constexpr size_t kMaxSegmentPoints = 4000;
constexpr size_t kBuckets = 1000;

using Points = std::vector<std::pair<int64_t, double>>;

std::string group_of(const std::string& name) { return name.substr(0, name.find('/')); }

std::string escape_html(const std::string& text) {
  std::string escaped;
  for (char c : text) {
    switch (c) {
      case '&':
        escaped += "&amp;";
        break;
      case '<':
        escaped += "&lt;";
        break;
      case '>':
        escaped += "&gt;";
        break;
      case '"':
        escaped += "&quot;";
        break;
      default:
        escaped += c;
    }
  }
  return escaped;
}

std::string number(double value, const char* format = "%.1f") {
  char text[48];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

// 1, 2 or 5 times a power of ten, giving about `target` ticks over [low, high].
std::vector<double> nice_ticks(double low, double high, int target, double min_spacing = 0) {
  const double raw = std::max((high - low) / target, min_spacing);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double residual = raw / magnitude;
  double spacing = (residual < 1.5 ? 1 : residual < 3 ? 2 : residual < 7 ? 5 : 10) * magnitude;
  spacing = std::max(spacing, min_spacing);
  std::vector<double> ticks;
  const double first = std::ceil(low / spacing - 1e-9);
  for (double i = first; i * spacing <= high + spacing * 1e-9; ++i) {
    const double tick = i * spacing;
    ticks.push_back(std::abs(tick) < spacing * 1e-9 ? 0.0 : tick);
  }
  return ticks;
}

// Runs of finite values; NaN and inf end a run.
std::vector<Points> finite_segments(const Points& points) {
  std::vector<Points> segments(1);
  for (const auto& point : points) {
    if (std::isfinite(point.second)) {
      segments.back().push_back(point);
    } else if (!segments.back().empty()) {
      segments.emplace_back();
    }
  }
  if (segments.back().empty()) segments.pop_back();
  return segments;
}

Points thin(const Points& segment) {
  if (segment.size() <= kMaxSegmentPoints) return segment;
  Points thinned;
  for (size_t bucket = 0; bucket < kBuckets; ++bucket) {
    const size_t begin = bucket * segment.size() / kBuckets;
    const size_t end = (bucket + 1) * segment.size() / kBuckets;
    auto [low, high] =
        std::minmax_element(segment.begin() + begin, segment.begin() + end,
                            [](const auto& a, const auto& b) { return a.second < b.second; });
    if (low > high) std::swap(low, high);  // keep step order
    thinned.push_back(*low);
    if (high != low) thinned.push_back(*high);
  }
  return thinned;
}

struct Range {
  double low = std::numeric_limits<double>::infinity();
  double high = -std::numeric_limits<double>::infinity();
  void add(double value) {
    low = std::min(low, value);
    high = std::max(high, value);
  }
  bool empty() const { return low > high; }
  // A zero-width range widened so a flat line sits mid-chart.
  void widen(double minimum_half_width) {
    if (high > low) return;
    const double half = std::max(std::abs(low) * 0.1, minimum_half_width);
    low -= half;
    high += half;
  }
};

std::string render_chart(const ChartSpec& chart, const MetricsHistory& history) {
  Range steps, values;
  for (const auto& name : chart.series)
    for (const auto& [step, value] : history.points.at(name)) {
      steps.add(static_cast<double>(step));
      if (std::isfinite(value)) values.add(value);
    }
  const double plot_right = kWidth - kRight, plot_bottom = kHeight - kBottom;
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + number(kWidth, "%.0f") +
                    "\" height=\"" + number(kHeight, "%.0f") + "\" viewBox=\"0 0 " +
                    number(kWidth, "%.0f") + " " + number(kHeight, "%.0f") +
                    "\" role=\"img\" aria-label=\"" + escape_html(chart.title) + "\">\n";
  svg += "<rect x=\"" + number(kLeft) + "\" y=\"" + number(kTop) + "\" width=\"" +
         number(plot_right - kLeft) + "\" height=\"" + number(plot_bottom - kTop) +
         "\" fill=\"#fff\" stroke=\"#999\"/>\n";
  svg += "<text x=\"" + number((kLeft + plot_right) / 2) + "\" y=\"" + number(kHeight - 6) +
         "\" text-anchor=\"middle\" class=\"axis\">step</text>\n";
  if (values.empty()) {
    svg += "<text x=\"" + number((kLeft + plot_right) / 2) + "\" y=\"" +
           number((kTop + plot_bottom) / 2) +
           "\" text-anchor=\"middle\" class=\"axis\">no finite values</text>\n</svg>\n";
    return svg;
  }
  steps.widen(1);
  values.widen(1e-12);
  const double pad = (values.high - values.low) * 0.05;
  const bool non_negative = values.low >= 0;
  values.low -= pad;
  values.high += pad;
  if (non_negative) values.low = std::max(values.low, 0.0);
  auto x_of = [&](double step) {
    return kLeft + (step - steps.low) / (steps.high - steps.low) * (plot_right - kLeft);
  };
  auto y_of = [&](double value) {
    return plot_bottom - (value - values.low) / (values.high - values.low) * (plot_bottom - kTop);
  };

  for (double tick : nice_ticks(steps.low, steps.high, 8, 1)) {
    const std::string x = number(x_of(tick));
    svg += "<line x1=\"" + x + "\" y1=\"" + number(kTop) + "\" x2=\"" + x + "\" y2=\"" +
           number(plot_bottom + 4) + "\" class=\"grid\"/><text x=\"" + x + "\" y=\"" +
           number(plot_bottom + 16) + "\" text-anchor=\"middle\">" + number(tick, "%.0f") +
           "</text>\n";
  }
  for (double tick : nice_ticks(values.low, values.high, 5)) {
    const std::string y = number(y_of(tick));
    svg += "<line x1=\"" + number(kLeft - 4) + "\" y1=\"" + y + "\" x2=\"" + number(plot_right) +
           "\" y2=\"" + y + "\" class=\"grid\"/><text x=\"" + number(kLeft - 7) + "\" y=\"" + y +
           "\" dy=\"0.32em\" text-anchor=\"end\">" + format_metric_value(tick) + "</text>\n";
  }
  for (size_t i = 0; i < chart.series.size(); ++i) {
    const std::string color = kColors[i % std::size(kColors)];
    for (const Points& segment : finite_segments(history.points.at(chart.series[i]))) {
      if (segment.size() == 1) {
        svg += "<circle cx=\"" + number(x_of(static_cast<double>(segment[0].first))) + "\" cy=\"" +
               number(y_of(segment[0].second)) + "\" r=\"3\" fill=\"" + color + "\"/>\n";
        continue;
      }
      svg += "<polyline fill=\"none\" stroke=\"" + color +
             "\" stroke-width=\"1.5\" stroke-linejoin=\"round\" points=\"";
      const Points drawn = thin(segment);
      for (size_t p = 0; p < drawn.size(); ++p) {
        if (p) svg += ' ';
        svg.append(number(x_of(static_cast<double>(drawn[p].first))))
            .append(",")
            .append(number(y_of(drawn[p].second)));
      }
      svg += "\"/>\n";
    }
  }
  return svg + "</svg>\n";
}

// "loss 2.345 (step 1000)" for each series: the latest value of each.
std::string latest_values(const ChartSpec& chart, const MetricsHistory& history) {
  std::string text;
  for (size_t i = 0; i < chart.series.size(); ++i) {
    const Points& points = history.points.at(chart.series[i]);
    if (points.empty()) continue;
    text += "<span class=\"series\"><span class=\"swatch\" style=\"background:" +
            std::string(kColors[i % std::size(kColors)]) + "\"></span>" +
            escape_html(chart.series[i]) + " " + format_metric_value(points.back().second) +
            " <span class=\"at\">(step " + std::to_string(points.back().first) + ")</span></span>";
  }
  return text;
}

constexpr const char* kStyle = R"(body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;
margin:24px;color:#222;background:#fafafa}
h1{font-size:20px;margin:0 0 4px}h2{font-size:15px;margin:0 0 4px}
.summary{color:#555;margin:0 0 16px}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(540px,1fr));gap:16px}
section{background:#fff;border:1px solid #ddd;border-radius:6px;padding:10px 12px}
svg{display:block;width:100%;height:auto;font-size:11px;fill:#444}
svg .grid{stroke:#e6e6e6}svg .axis{font-size:12px;fill:#666}
.latest{font-size:13px;margin:0 0 6px}.series{margin-right:14px;display:inline-block}
.swatch{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:4px}
.at{color:#888}
)";

}  // namespace

MetricsHistory read_metrics_history(const std::string& path) {
  check(std::filesystem::is_regular_file(path), "[plot] ", path,
        ": no such file (tandem plot takes a run directory that holds metrics.jsonl)");
  MetricsHistory history;
  std::set<std::string> seen;
  for (const MetricsLine& line : read_metrics_jsonl(path)) {
    ++history.records;
    for (const auto& [name, value] : line.record.values) {
      if (seen.insert(name).second) history.names.push_back(name);
      history.points[name].emplace_back(line.record.step, value);
    }
  }
  for (auto& [name, points] : history.points) {
    std::stable_sort(points.begin(), points.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    Points unique;  // a step logged twice (a resumed run's file kept whole) keeps its last value
    for (const auto& point : points) {
      if (!unique.empty() && unique.back().first == point.first)
        unique.back() = point;
      else
        unique.push_back(point);
    }
    points = std::move(unique);
  }
  return history;
}

std::vector<ChartSpec> plan_charts(const MetricsHistory& history) {
  std::vector<std::string> groups(std::begin(kMainGroups), std::end(kMainGroups));
  for (const auto& name : history.names)
    if (std::find(groups.begin(), groups.end(), group_of(name)) == groups.end())
      groups.push_back(group_of(name));
  std::vector<ChartSpec> charts;
  for (const auto& group : groups) {
    ChartSpec chart{group, {}};
    if (history.points.count(group)) chart.series.push_back(group);
    for (const auto& name : history.names)
      if (name != group && group_of(name) == group) chart.series.push_back(name);
    if (!chart.series.empty()) charts.push_back(std::move(chart));
  }
  return charts;
}

std::string render_metrics_html(const MetricsHistory& history, const std::string& title) {
  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" +
      escape_html(title) + "</title>\n<style>\n" + kStyle + "</style>\n</head>\n<body>\n<h1>" +
      escape_html(title) + "</h1>\n";
  int64_t first_step = std::numeric_limits<int64_t>::max(), last_step = 0;
  for (const auto& [name, points] : history.points)
    if (!points.empty()) {
      first_step = std::min(first_step, points.front().first);
      last_step = std::max(last_step, points.back().first);
    }
  std::string summary = std::to_string(history.records) + " records";
  if (first_step <= last_step)
    summary += ", steps " + std::to_string(first_step) + " to " + std::to_string(last_step);
  const std::vector<ChartSpec> charts = plan_charts(history);
  std::string missing;
  for (const char* group : kMainGroups)
    if (std::none_of(charts.begin(), charts.end(),
                     [&](const ChartSpec& chart) { return chart.title == group; }))
      missing += (missing.empty() ? "" : ", ") + std::string(group);
  if (!missing.empty()) summary += ". Not logged: " + missing;
  html += "<p class=\"summary\">" + escape_html(summary) + ".</p>\n<div class=\"charts\">\n";
  for (const ChartSpec& chart : charts)
    html += "<section>\n<h2>" + escape_html(chart.title) + "</h2>\n<p class=\"latest\">" +
            latest_values(chart, history) + "</p>\n" + render_chart(chart, history) +
            "</section>\n";
  return html + "</div>\n</body>\n</html>\n";
}

std::string write_metrics_plot(const std::string& run_dir, const std::string& out) {
  std::filesystem::path run_path(run_dir);
  const std::string path = out.empty() ? (run_path / "plots.html").string() : out;
  const std::string extension = std::filesystem::path(path).extension().string();
  check(extension == ".html" || extension == ".htm", "[plot] ", path,
        ": the plot is an HTML page; name it .html");
  const MetricsHistory history = read_metrics_history((run_path / "metrics.jsonl").string());
  if (!run_path.has_filename()) run_path = run_path.parent_path();  // "runs/a/"
  const std::string html = render_metrics_html(
      history, "tandem: " + std::filesystem::absolute(run_path).filename().string());
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  check(file.is_open(), "[plot] ", path, ": cannot open for writing");
  file << html;
  file.close();
  check(file.good(), "[plot] ", path, ": write failed");
  return path;
}

}  // namespace tandem
