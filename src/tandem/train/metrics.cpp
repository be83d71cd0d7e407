#include "tandem/train/metrics.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tandem/core/error.h"
#include "tandem/core/file_io.h"

namespace tandem {

namespace {

// The progress bar's figures, with their short labels.
constexpr std::pair<const char*, const char*> kBarFigures[] = {
    {"loss", "loss"}, {"lr", "lr"}, {"grad_norm", "gnorm"}, {"tokens_per_s", "tok/s"}};

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto total = static_cast<int64_t>(std::llround(seconds));
  char text[32];
  if (total < 60)
    std::snprintf(text, sizeof(text), "%llds", static_cast<long long>(total));
  else if (total < 3600)
    std::snprintf(text, sizeof(text), "%lldm%02llds", static_cast<long long>(total / 60),
                  static_cast<long long>(total % 60));
  else
    std::snprintf(text, sizeof(text), "%lldh%02lldm", static_cast<long long>(total / 3600),
                  static_cast<long long>(total / 60 % 60));
  return text;
}

int terminal_columns() {
  winsize size{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return 100;
}

std::string step_text(int64_t step, int64_t total_steps) {
  // Appended piece by piece: GCC 12 warns (falsely) on "literal" + std::string&& here.
  std::string text = "step ";
  text += std::to_string(step);
  if (total_steps > 0) text.append("/").append(std::to_string(total_steps));
  return text;
}

}  // namespace

const double* MetricsRecord::find(std::string_view name) const {
  for (const auto& [key, value] : values)
    if (key == name) return &value;
  return nullptr;
}

std::string format_metrics_line(const MetricsRecord& record) {
  nlohmann::ordered_json line;
  line["step"] = record.step;
  for (const auto& [name, value] : record.values) {
    if (std::isfinite(value))
      line[name] = value;
    else
      line[name] = nullptr;
  }
  return line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

MetricsRecord parse_metrics_line(std::string_view line, const std::string& where) {
  nlohmann::ordered_json json;
  try {
    json = nlohmann::ordered_json::parse(line.begin(), line.end());
  } catch (const nlohmann::ordered_json::parse_error& error) {
    throw Error("[metrics] ", where, ": not JSON: ", error.what());
  }
  check(json.is_object(), "[metrics] ", where, ": not a JSON object");
  const auto step = json.find("step");
  check(step != json.end() && step->is_number_integer(), "[metrics] ", where,
        ": no integer \"step\"");
  MetricsRecord record;
  record.step = step->get<int64_t>();
  for (const auto& [name, value] : json.items()) {
    if (name == "step") continue;
    if (value.is_number())
      record.values.emplace_back(name, value.get<double>());
    else if (value.is_null())
      record.values.emplace_back(name, std::numeric_limits<double>::quiet_NaN());
  }
  return record;
}

std::vector<MetricsLine> read_metrics_jsonl(const std::string& path, bool* torn_tail) {
  std::string content;
  {
    std::ifstream in(path, std::ios::binary);
    check(in.is_open(), "[metrics] ", path, ": cannot open for reading");
    std::ostringstream buffer;
    buffer << in.rdbuf();
    check(!in.bad(), "[metrics] ", path, ": read failed");
    content = buffer.str();
  }
  if (torn_tail) *torn_tail = false;
  std::vector<MetricsLine> lines;
  int64_t line_number = 0;
  for (size_t begin = 0; begin < content.size();) {
    const size_t newline = content.find('\n', begin);
    const bool complete = newline != std::string::npos;
    const size_t end = complete ? newline : content.size();
    std::string text = content.substr(begin, end - begin);
    begin = end + 1;
    ++line_number;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      MetricsRecord record = parse_metrics_line(text, path + ":" + std::to_string(line_number));
      lines.push_back({std::move(record), std::move(text)});
    } catch (const Error&) {
      if (complete) throw;
      if (torn_tail) *torn_tail = true;
    }
  }
  return lines;
}

std::string format_metric_value(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char text[32];
  if (std::abs(value) < 1e15 && (value == std::round(value) || std::abs(value) >= 1e4))
    std::snprintf(text, sizeof(text), "%.0f", value);
  else
    std::snprintf(text, sizeof(text), "%.4g", value);
  return text;
}

// ---- JSONL ----

JsonlSink::JsonlSink(std::string path, int64_t resume_step) : path_(std::move(path)) {
  truncate_after(resume_step);
}

void JsonlSink::open_for_append() {
  file_.open(path_, std::ios::binary | std::ios::app);
  check(file_.is_open(), "[metrics] ", path_, ": cannot open for appending");
}

void JsonlSink::truncate_after(int64_t resume_step) {
  if (file_.is_open()) file_.close();
  if (!std::filesystem::exists(path_)) return open_for_append();
  bool torn_tail = false;
  std::string kept;
  bool dropped = false;
  for (const MetricsLine& line : read_metrics_jsonl(path_, &torn_tail)) {
    if (line.record.step >= resume_step)
      dropped = true;
    else
      kept.append(line.text).push_back('\n');
  }
  if (dropped || torn_tail || kept.size() != std::filesystem::file_size(path_))
    replace_file(path_, kept, "[metrics]");
  open_for_append();
}

void JsonlSink::write(const MetricsRecord& record) {
  const std::string line = format_metrics_line(record) + "\n";
  file_.write(line.data(), static_cast<std::streamsize>(line.size()));
  file_.flush();
  check(file_.good(), "[metrics] ", path_, ": write failed");
}

// ---- TensorBoard ----

TensorBoardSink::TensorBoardSink(const std::string& dir, int64_t resume_step)
    : writer_(TensorBoardWriter::create(dir, resume_step)) {}

void TensorBoardSink::write(const MetricsRecord& record) {
  writer_.add_scalars(record.step, record.values);
}

// ---- console ----

ConsoleSink::ConsoleSink(std::ostream& out, ConsoleOptions options)
    : out_(out), options_(std::move(options)) {
  check(options_.every > 0, "[metrics] console: log every ", options_.every, " steps");
  start_time_ = now();
}

std::unique_ptr<ConsoleSink> ConsoleSink::for_this_process(int64_t total_steps, int64_t every) {
  ConsoleOptions options;
  options.interactive = isatty(STDERR_FILENO) == 1;
  options.total_steps = total_steps;
  options.every = every;
  return std::make_unique<ConsoleSink>(options.interactive ? std::cerr : std::cout, options);
}

double ConsoleSink::now() const {
  if (options_.clock) return options_.clock();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string ConsoleSink::timing(int64_t step, bool compact) const {
  const double time = now();
  std::string eta;
  if (options_.total_steps > 0 && step > start_step_) {
    const double per_step = (time - first_record_time_) / static_cast<double>(step - start_step_);
    eta = format_duration(per_step * static_cast<double>(options_.total_steps - step));
  }
  const std::string elapsed = format_duration(time - start_time_);
  if (compact) return elapsed + "<" + (eta.empty() ? "?" : eta);
  return "elapsed " + elapsed + (eta.empty() ? "" : " eta " + eta);
}

std::string ConsoleSink::plain_line(const MetricsRecord& record) const {
  std::string line = step_text(record.step, options_.total_steps);
  for (const auto& [name, value] : record.values)
    line += "  " + name + " " + format_metric_value(value);
  return line + "  " + timing(record.step, false);
}

std::string ConsoleSink::bar_line(const MetricsRecord& record) const {
  const int width = (options_.width > 0 ? options_.width : terminal_columns()) - 1;
  const std::string head = step_text(record.step, options_.total_steps);
  std::string figures;
  for (const auto& [name, label] : kBarFigures)
    if (const double* value = record.find(name))
      figures += std::string(" ") + label + " " + format_metric_value(*value);
  const std::string tail = figures + "  " + timing(record.step, true);
  std::string line = head;
  if (options_.total_steps > 0) {
    const double fraction =
        std::clamp(static_cast<double>(record.step) / options_.total_steps, 0.0, 1.0);
    char percent[8];
    std::snprintf(percent, sizeof(percent), "%3d%%", static_cast<int>(fraction * 100));
    // A fixed 30 cells when the line has room, so the bar does not jitter as figures change.
    const int cells = std::min(30, width - static_cast<int>(head.size() + tail.size()) - 8);
    if (cells >= 10) {
      const int filled = static_cast<int>(fraction * cells);
      line.append(" ").append(percent).append(" [");
      line.append(filled, '#').append(cells - filled, '.').append("]");
    } else {
      line.append(" ").append(percent);
    }
  }
  line += tail;
  if (static_cast<int>(line.size()) > width) line.resize(std::max(width, 0));
  return line;
}

void ConsoleSink::draw(const MetricsRecord& record) {
  out_ << '\r' << bar_line(record) << "\x1b[K" << std::flush;
  bar_on_screen_ = true;
}

void ConsoleSink::write(const MetricsRecord& record) {
  const double time = now();
  const bool first = last_draw_ < 0;
  if (first) {
    first_record_time_ = time;
    start_step_ = record.step;
  }
  const bool last = options_.total_steps > 0 && record.step >= options_.total_steps;
  last_record_ = record;
  if (options_.interactive) {
    if (first || last || time - last_draw_ >= options_.min_redraw_s) {
      last_draw_ = time;
      draw(record);
    }
  } else if (first || last || record.step % options_.every == 0) {
    last_draw_ = time;
    out_ << plain_line(record) << '\n' << std::flush;
    printed_step_ = record.step;
  }
}

void ConsoleSink::note(const std::string& text) {
  if (bar_on_screen_) out_ << "\r\x1b[K";
  out_ << text << '\n';
  if (bar_on_screen_) draw(last_record_);
  out_ << std::flush;
}

void ConsoleSink::close() {
  if (last_draw_ < 0) return;  // nothing was logged
  if (options_.interactive) {
    draw(last_record_);
    out_ << '\n' << std::flush;
    bar_on_screen_ = false;
  } else if (printed_step_ != last_record_.step) {
    out_ << plain_line(last_record_) << '\n' << std::flush;
    printed_step_ = last_record_.step;
  }
}

// ---- the logger ----

MetricsLogger::MetricsLogger(const MetricsOptions& options) : last_step_(options.resume_step) {
  if (options.jsonl || options.tensorboard) {
    std::error_code error;
    std::filesystem::create_directories(options.run_dir, error);
    check(!error, "[metrics] ", options.run_dir,
          ": cannot create the run directory: ", error.message());
  }
  if (options.jsonl)
    sinks_.push_back(
        std::make_unique<JsonlSink>(options.run_dir + "/metrics.jsonl", options.resume_step));
  if (options.tensorboard)
    sinks_.push_back(
        std::make_unique<TensorBoardSink>(options.run_dir + "/tensorboard", options.resume_step));
  if (options.console)
    sinks_.push_back(ConsoleSink::for_this_process(options.total_steps, options.log_every));
}

MetricsLogger::MetricsLogger(std::vector<std::unique_ptr<MetricsSink>> sinks, int64_t resume_step)
    : sinks_(std::move(sinks)), last_step_(resume_step) {}

void MetricsLogger::add_sink(std::unique_ptr<MetricsSink> sink) {
  sinks_.push_back(std::move(sink));
}

MetricsLogger::~MetricsLogger() {
  try {
    close();
  } catch (const std::exception& error) {
    std::cerr << "warning: " << error.what() << "\n";
  }
}

void MetricsLogger::log(const MetricsRecord& record) {
  check(!closed_, "[metrics] log() after close()");
  check(record.step >= last_step_, "[metrics] step ", record.step, " logged after step ",
        last_step_, " (steps must not go back; a resumed run passes resume_step)");
  for (size_t i = 0; i < record.values.size(); ++i) {
    const std::string& name = record.values[i].first;
    check(!name.empty() && name != "step", "[metrics] step ", record.step,
          ": a value may not be named \"", name, "\"");
    for (size_t j = 0; j < i; ++j)
      check(record.values[j].first != name, "[metrics] step ", record.step, ": \"", name,
            "\" given twice");
  }
  last_step_ = record.step;
  for (auto& sink : sinks_) sink->write(record);
}

void MetricsLogger::note(const std::string& text) {
  for (auto& sink : sinks_) sink->note(text);
}

void MetricsLogger::close() {
  if (closed_) return;
  closed_ = true;
  for (auto& sink : sinks_) sink->close();
}

}  // namespace tandem
