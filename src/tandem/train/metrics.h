#pragma once
// Per-step training metrics fanned out to sinks: `run_dir/metrics.jsonl` (always), TensorBoard
// event files under `run_dir/tensorboard/`, and the console (a progress bar redrawn in place on a
// terminal, plain lines every N steps otherwise).
//
// Steps: `MetricsRecord::step` is the number of optimizer steps done (1 after the first update),
// so a run of total_steps ends at step total_steps. A run resumed from a checkpoint taken after N
// steps logs step N + 1 first and passes resume_step = N + 1: what an earlier attempt logged at
// steps >= resume_step is dropped (JSONL lines removed; TensorBoard told by a SessionLog START).
//
// Names: one value per name, in the order the trainer passes them. A name "group/part" (e.g.
// "loss/ce", "time/forward") is drawn in the chart of "group" by `tandem plot`, and TensorBoard
// groups it the same way.
//
// Non-finite values: JSON has no NaN or infinity, so metrics.jsonl holds null for them (read
// back as NaN); TensorBoard gets the float NaN/inf itself; the console prints nan/inf.
#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tandem/train/tensorboard.h"

namespace tandem {

struct MetricsRecord {
  int64_t step = 0;
  std::vector<std::pair<std::string, double>> values;  // ordered: loss, loss parts, lr, ...

  /// The value named `name`, or nullptr.
  const double* find(std::string_view name) const;
};

/// One JSON object, no newline: {"step":N,"<name>":value,...} in the record's order; non-finite
/// values as null.
std::string format_metrics_line(const MetricsRecord& record);

/// Parses one line of a metrics.jsonl; null becomes NaN, non-numeric fields are skipped. Throws
/// Error("[metrics] <where>: ...") when it is not a JSON object with an integer "step".
MetricsRecord parse_metrics_line(std::string_view line, const std::string& where);

/// One record of a metrics.jsonl with its line as written.
struct MetricsLine {
  MetricsRecord record;
  std::string text;  // without the newline
};

/// The records of a metrics.jsonl in file order, blank lines skipped. A torn last line (no
/// newline and not JSON: what a killed, or still writing, run leaves) is skipped and reported
/// through `torn_tail`; any other bad line is an Error naming path:line.
std::vector<MetricsLine> read_metrics_jsonl(const std::string& path, bool* torn_tail = nullptr);

/// A number for a person: integers as integers, else 4 significant digits; "nan", "inf".
std::string format_metric_value(double value);

/// Where metrics go. Sinks write as they are told; MetricsLogger checks the records.
class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  virtual void write(const MetricsRecord& record) = 0;
  /// A line for a person (checkpoint saved, a warning); only the console shows it.
  virtual void note(const std::string& text) {}
  /// The end of the run (the console finishes its progress line). Called once.
  virtual void close() {}
};

/// `path` (metrics.jsonl): one line per record, appended and flushed as it comes.
class JsonlSink : public MetricsSink {
 public:
  /// Opens `path` for appending after truncate_after(resume_step): 0 starts the file afresh.
  JsonlSink(std::string path, int64_t resume_step);

  /// Drops the lines with step >= resume_step, and a torn last line (no newline, not JSON) that a
  /// killed run can leave; the file is rewritten to a temp file and renamed over the old one, so
  /// a crash here leaves either file whole. A malformed complete line is an Error naming
  /// path:line. The file is not rewritten when nothing is dropped. Leaves the sink appending.
  void truncate_after(int64_t resume_step);

  void write(const MetricsRecord& record) override;

 private:
  void open_for_append();

  std::string path_;
  std::ofstream file_;
};

/// Scalars in `dir/events.out.tfevents.<seconds>.<host>`, a new file per run attempt.
class TensorBoardSink : public MetricsSink {
 public:
  TensorBoardSink(const std::string& dir, int64_t resume_step);
  void write(const MetricsRecord& record) override;
  const std::string& path() const { return writer_.path(); }

 private:
  TensorBoardWriter writer_;
};

struct ConsoleOptions {
  bool interactive = false;  // progress bar redrawn in place with \r; else plain lines
  int64_t total_steps = 0;   // for the bar and the ETA; 0 when unknown
  int64_t every = 10;        // plain lines: at the first record, each multiple of `every`, the last
  int width = 0;             // bar: line width in columns; 0 = the terminal's (stderr), else 100
  double min_redraw_s = 0.1;      // bar: redraw at most this often (and at the last step)
  std::function<double()> clock;  // seconds, monotonic; unset = steady_clock (tests fix it)
};

/// The progress bar shows step, %, loss, lr, grad_norm, tokens_per_s and elapsed<ETA, cut to the
/// terminal's width so \r redraws one line; plain lines show every value, elapsed and ETA. The ETA
/// is the mean time per step since the first record this process saw (so the slow first step and a
/// resume's skipped steps don't distort it).
class ConsoleSink : public MetricsSink {
 public:
  ConsoleSink(std::ostream& out, ConsoleOptions options);

  /// A bar on stderr when stderr is a terminal, else plain lines on stdout.
  static std::unique_ptr<ConsoleSink> for_this_process(int64_t total_steps, int64_t every);

  void write(const MetricsRecord& record) override;
  void note(const std::string& text) override;
  void close() override;

 private:
  double now() const;
  std::string bar_line(const MetricsRecord& record) const;
  std::string plain_line(const MetricsRecord& record) const;
  std::string timing(int64_t step, bool compact) const;  // "elapsed 35s eta 4m12s", "35s<4m12s"
  void draw(const MetricsRecord& record);

  std::ostream& out_;
  ConsoleOptions options_;
  double start_time_ = 0;         // when the sink was made: what "elapsed" counts from
  double first_record_time_ = 0;  // the ETA's rate counts from the first record
  int64_t start_step_ = 0;        // that record's step
  double last_draw_ = -1;         // -1 until the first record
  int64_t printed_step_ = -1;     // plain lines: the last step printed
  MetricsRecord last_record_;
  bool bar_on_screen_ = false;
};

struct MetricsOptions {
  std::string run_dir;      // metrics.jsonl and tensorboard/ go here
  int64_t total_steps = 0;  // the run's length, for the progress bar and ETA
  int64_t resume_step = 0;  // the first step this run logs (see the top of this file)
  int64_t log_every = 10;   // plain console lines every N steps
  bool jsonl = true;
  bool tensorboard = true;
  bool console = true;
};

/// Fans each record out to its sinks. Only one process of a distributed run should log.
class MetricsLogger {
 public:
  /// The sinks `options` asks for (console through ConsoleSink::for_this_process).
  explicit MetricsLogger(const MetricsOptions& options);
  /// Exactly these sinks; `resume_step` as in MetricsOptions.
  explicit MetricsLogger(std::vector<std::unique_ptr<MetricsSink>> sinks, int64_t resume_step = 0);
  ~MetricsLogger();
  MetricsLogger(const MetricsLogger&) = delete;
  MetricsLogger& operator=(const MetricsLogger&) = delete;

  /// Throws Error("[metrics] ...") on an empty, repeated or "step" name, or a step below
  /// resume_step or below the previous record's; then writes to every sink.
  void log(const MetricsRecord& record);
  /// One more sink (an MLflow store), written from the next record on.
  void add_sink(std::unique_ptr<MetricsSink> sink);
  /// A line for a person, printed above the progress bar.
  void note(const std::string& text);
  /// Closes every sink; the destructor does it if not done.
  void close();

 private:
  std::vector<std::unique_ptr<MetricsSink>> sinks_;
  int64_t last_step_;
  bool closed_ = false;
};

}  // namespace tandem
