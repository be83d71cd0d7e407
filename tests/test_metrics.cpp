// Metrics: CRC32C and TFRecord framing, TensorBoard event bytes against a golden file that
// TensorBoard itself read (tools/check_tensorboard_events.py), metrics.jsonl writing, NaN and
// truncation on resume, the console's lines, and `tandem plot`.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>

#include "tandem/core/error.h"
#include "tandem/train/metrics.h"
#include "tandem/train/plot.h"
#include "tandem/train/tensorboard.h"
#include "test_util.h"

namespace {

using tandem::MetricsRecord;
using tandem::testing::run_command;
using tandem::testing::ScratchDir;
using tandem::testing::tandem_binary;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream content;
  content << file.rdbuf();
  return content.str();
}

void write_file(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary) << content;
}

size_t count(const std::string& text, const std::string& needle) {
  size_t found = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1))
    ++found;
  return found;
}

// The records behind both golden files: parts, a zero, NaN and inf, a negative value, a step
// past 2^31 (a 5-byte varint).
std::vector<MetricsRecord> golden_records() {
  return {{1,
           {{"loss", 2.5},
            {"loss/ce", 2.25},
            {"lr", 3e-4},
            {"grad_norm", 1.0},
            {"tokens_per_s", 12345.5}}},
          {2,
           {{"loss", 2.0},
            {"loss/ce", 1.75},
            {"lr", 0.0},
            {"grad_norm", kNaN},
            {"tokens_per_s", kInf}}},
          {3000000000, {{"loss", -1.5}, {"loss/ce", 0.1}, {"lr", 1e-5}, {"grad_norm", 0.5}}}};
}

constexpr double kGoldenStartTime = 1700000000.5;

// --- CRC32C and TFRecord framing ---

TEST(Crc32c, StandardCheckValue) {
  EXPECT_EQ(tandem::crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(tandem::crc32c(""), 0u);
  // Continuing over a split input gives the CRC of the whole.
  EXPECT_EQ(tandem::crc32c("56789", 5, tandem::crc32c("1234")), 0xE3069283u);
}

TEST(Crc32c, MaskedFormMatchesTensorBoard) {
  // Values from tensorboard's pywrap_tensorflow.masked_crc32c.
  EXPECT_EQ(tandem::mask_crc32c(tandem::crc32c("123456789")), 0xC78AB0E5u);
  EXPECT_EQ(tandem::mask_crc32c(0), 0xA282EAD8u);
  const uint32_t crc = 0xE3069283u;
  EXPECT_EQ(tandem::mask_crc32c(crc), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST(TfRecord, FramingRoundTrip) {
  const std::vector<std::string> payloads = {"", "x", std::string(300, '\xab'),
                                             std::string("with\0nul", 8)};
  std::string stream;
  for (const auto& payload : payloads) {
    const std::string record = tandem::frame_tfrecord(payload);
    ASSERT_EQ(record.size(), payload.size() + 16);
    stream += record;
  }
  EXPECT_EQ(tandem::read_tfrecords(stream, "stream"), payloads);

  std::string corrupt = stream;
  corrupt[12 + 16] ^= 1;  // the payload of the second record
  EXPECT_THROW(tandem::read_tfrecords(corrupt, "stream"), tandem::Error);
  corrupt = stream;
  corrupt[16 + 2] ^= 1;  // the length of the second record
  EXPECT_THROW(tandem::read_tfrecords(corrupt, "stream"), tandem::Error);
  try {
    tandem::read_tfrecords(stream.substr(0, stream.size() - 3), "f.tfevents");
    FAIL() << "a truncated stream was accepted";
  } catch (const tandem::Error& error) {
    EXPECT_NE(std::string(error.what()).find("f.tfevents: truncated"), std::string::npos)
        << error.what();
  }
}

// --- TensorBoard events ---

TEST(TensorBoard, EventEncoding) {
  // Hand-checked bytes: wall_time 1.0 (field 1, fixed64), step 5 (field 2, varint), summary
  // (field 5) holding one value {tag "a", simple_value 1.0f}.
  const std::string expected(
      "\x09\x00\x00\x00\x00\x00\x00\xf0\x3f\x10\x05\x2a\x0a\x0a\x08"
      "\x0a\x01\x61\x15\x00\x00\x80\x3f",
      23);
  EXPECT_EQ(tandem::encode_scalars_event(1.0, 5, {{"a", 1.0}}), expected);
  // Step 0 is left out (proto3 default); the file version is field 3.
  EXPECT_EQ(tandem::encode_file_version_event(1.0),
            std::string("\x09\x00\x00\x00\x00\x00\x00\xf0\x3f\x1a\x0d", 11) + "brain.Event:2");
  // SessionLog (field 7) {status START (field 1) = 1}.
  EXPECT_EQ(tandem::encode_session_start_event(1.0, 3),
            std::string("\x09\x00\x00\x00\x00\x00\x00\xf0\x3f\x10\x03\x3a\x02\x08\x01", 15));
}

// The golden records as TensorBoardWriter writes them, fixed wall times.
void write_golden_events(const std::string& path) {
  tandem::TensorBoardWriter writer(path, /*resume_step=*/1, kGoldenStartTime);
  double wall_time = kGoldenStartTime;
  for (const auto& record : golden_records())
    writer.add_scalars(record.step, record.values, wall_time += 0.25);
}

// The golden records as JsonlSink writes them.
void write_golden_jsonl(const std::string& path) {
  std::vector<std::unique_ptr<tandem::MetricsSink>> sinks;
  sinks.push_back(std::make_unique<tandem::JsonlSink>(path, 0));
  tandem::MetricsLogger logger(std::move(sinks));
  for (const auto& record : golden_records()) logger.log(record);
}

// The goldens are written by the code under test, so no test rewrites them: this one does, only
// when asked by name (scripts/update_goldens.sh), and the diff then goes to review with the
// TensorBoard read-back of tests/fixtures/metrics/README.md.
TEST(Goldens, DISABLED_RewriteMetricsGoldens) {
  write_golden_events(tandem::testing::source_path("tests/fixtures/metrics/events.golden"));
  const std::string jsonl =
      tandem::testing::source_path("tests/fixtures/metrics/events.golden.jsonl");
  std::filesystem::remove(jsonl);
  write_golden_jsonl(jsonl);
}

TEST(TensorBoard, WriterReproducesGoldenFile) {
  // tests/fixtures/metrics/events.golden was written by this code and read back by TensorBoard
  // (see the README there); scripts/update_goldens.sh rewrites it.
  ScratchDir dir;
  const std::string path = dir / "events.out.tfevents.1700000000.test";
  write_golden_events(path);
  const std::string golden_path =
      tandem::testing::source_path("tests/fixtures/metrics/events.golden");
  const std::string bytes = read_file(path);
  EXPECT_EQ(bytes, read_file(golden_path)) << "writer output differs from " << golden_path;
  // file_version, SessionLog START, one event per record.
  EXPECT_EQ(tandem::read_tfrecords(bytes, path).size(), 2 + golden_records().size());
}

TEST(TensorBoard, CreateNamesFilesAfterTimeAndHost) {
  ScratchDir dir;
  const auto first = tandem::TensorBoardWriter::create(dir / "tb", 0, 1700000000.9);
  const auto second = tandem::TensorBoardWriter::create(dir / "tb", 5, 1700000000.1);
  const std::string name = std::filesystem::path(first.path()).filename().string();
  EXPECT_TRUE(std::regex_match(name, std::regex(R"(events\.out\.tfevents\.1700000000\..+)")))
      << name;
  EXPECT_EQ(second.path(), first.path() + ".1");  // a run restarted within the same second
}

// --- metrics.jsonl ---

TEST(MetricsJsonl, OneObjectPerStepWithNullForNonFinite) {
  ScratchDir dir;
  const std::string path = dir / "metrics.jsonl";
  {
    std::vector<std::unique_ptr<tandem::MetricsSink>> sinks;
    sinks.push_back(std::make_unique<tandem::JsonlSink>(path, 0));
    tandem::MetricsLogger logger(std::move(sinks));
    for (const auto& record : golden_records()) {
      logger.log(record);
      // Flushed at every step: the line is in the file before the next record.
      EXPECT_NE(read_file(path).find("\"step\":" + std::to_string(record.step)), std::string::npos);
    }
  }
  const std::string golden_path =
      tandem::testing::source_path("tests/fixtures/metrics/events.golden.jsonl");
  const std::string content = read_file(path);
  EXPECT_EQ(content, read_file(golden_path));
  EXPECT_EQ(
      content.substr(0, content.find('\n')),
      R"({"step":1,"loss":2.5,"loss/ce":2.25,"lr":0.0003,"grad_norm":1.0,"tokens_per_s":12345.5})");
  EXPECT_NE(content.find(R"("grad_norm":null,"tokens_per_s":null)"), std::string::npos);

  const auto lines = tandem::read_metrics_jsonl(path);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[2].record.step, 3000000000);
  EXPECT_TRUE(std::isnan(*lines[1].record.find("grad_norm")));
  EXPECT_EQ(*lines[0].record.find("lr"), 3e-4);  // shortest round-trip digits, exact
  EXPECT_EQ(lines[0].record.values.size(), 5u);
}

ino_t inode(const std::string& path) {
  struct stat info {};
  stat(path.c_str(), &info);
  return info.st_ino;
}

std::string steps_file(int64_t first, int64_t last) {
  std::string content;
  for (int64_t step = first; step <= last; ++step)
    content += tandem::format_metrics_line({step, {{"loss", 1.0 / step}}}) + "\n";
  return content;
}

TEST(MetricsJsonl, ResumeDropsStepsFromResumeStepAndTornTail) {
  ScratchDir dir;
  const std::string path = dir / "metrics.jsonl";
  write_file(path, steps_file(1, 6) + R"({"step":7,"lo)");  // killed mid-line
  {
    tandem::JsonlSink sink(path, 4);
    EXPECT_EQ(read_file(path), steps_file(1, 3));
    sink.write({4, {{"loss", 0.25}}});
  }
  EXPECT_EQ(read_file(path), steps_file(1, 4));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  // Nothing to drop: the file is left alone (same inode, not rewritten).
  const ino_t inode_before = inode(path);
  { tandem::JsonlSink sink(path, 100); }
  EXPECT_EQ(read_file(path), steps_file(1, 4));
  EXPECT_EQ(inode(path), inode_before);

  // A fresh run (resume step 0) starts the file over.
  { tandem::JsonlSink sink(path, 0); }
  EXPECT_EQ(read_file(path), "");
}

TEST(MetricsJsonl, MalformedLineIsAnErrorNamingFileAndLine) {
  ScratchDir dir;
  const std::string path = dir / "metrics.jsonl";
  write_file(path, steps_file(1, 1) + "{\"step\":2,\"loss\":}\n" + steps_file(3, 3));
  try {
    tandem::JsonlSink sink(path, 2);
    FAIL() << "a malformed line was accepted";
  } catch (const tandem::Error& error) {
    EXPECT_NE(std::string(error.what()).find(path + ":2: not JSON"), std::string::npos)
        << error.what();
  }
  write_file(path, "{\"loss\":1}\n");
  EXPECT_THROW(tandem::read_metrics_jsonl(path), tandem::Error);  // no step
}

TEST(MetricsLogger, RejectsBadNamesAndStepsGoingBack) {
  tandem::MetricsLogger logger({}, /*resume_step=*/5);
  EXPECT_THROW(logger.log({4, {{"loss", 1}}}), tandem::Error);  // before the resume step
  logger.log({5, {{"loss", 1}}});
  logger.log({5, {{"eval/loss", 1}}});                          // same step again is fine
  EXPECT_THROW(logger.log({4, {{"loss", 1}}}), tandem::Error);  // going back
  EXPECT_THROW(logger.log({6, {{"loss", 1}, {"loss", 2}}}), tandem::Error);
  EXPECT_THROW(logger.log({6, {{"step", 1}}}), tandem::Error);
  EXPECT_THROW(logger.log({6, {{"", 1}}}), tandem::Error);
}

TEST(MetricsLogger, WritesJsonlAndTensorBoardInRunDir) {
  ScratchDir dir;
  tandem::MetricsOptions options;
  options.run_dir = dir / "run";
  options.console = false;
  {
    tandem::MetricsLogger logger(options);
    for (const auto& record : golden_records()) logger.log(record);
  }
  EXPECT_EQ(read_file(dir / "run/metrics.jsonl"),
            read_file(tandem::testing::source_path("tests/fixtures/metrics/events.golden.jsonl")));
  int event_files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "run/tensorboard")) {
    ++event_files;
    const std::string bytes = read_file(entry.path().string());
    EXPECT_EQ(tandem::read_tfrecords(bytes, entry.path().string()).size(), 5u);
  }
  EXPECT_EQ(event_files, 1);
}

TEST(MetricValue, FormatsForPeople) {
  EXPECT_EQ(tandem::format_metric_value(2.0), "2");
  EXPECT_EQ(tandem::format_metric_value(2.34567), "2.346");
  EXPECT_EQ(tandem::format_metric_value(3e-4), "0.0003");
  EXPECT_EQ(tandem::format_metric_value(1.5e-5), "1.5e-05");
  EXPECT_EQ(tandem::format_metric_value(12345.6), "12346");
  EXPECT_EQ(tandem::format_metric_value(kNaN), "nan");
  EXPECT_EQ(tandem::format_metric_value(-kInf), "-inf");
}

// --- console ---

struct FakeClock {
  double seconds = 0;
  std::function<double()> function() {
    return [this] { return seconds; };
  }
};

TEST(ConsoleSink, PlainLinesEveryNSteps) {
  std::ostringstream out;
  FakeClock clock;
  tandem::ConsoleOptions options;
  options.interactive = false;
  options.total_steps = 100;
  options.every = 10;
  options.clock = clock.function();
  {
    tandem::ConsoleSink sink(out, options);
    for (int64_t step = 1; step <= 25; ++step) {
      clock.seconds = static_cast<double>(step);  // one second per step
      sink.write({step, {{"loss", 2.5}, {"lr", 3e-4}, {"grad_norm", kNaN}}});
    }
    sink.close();
  }
  const std::string text = out.str();
  EXPECT_EQ(text.find('\r'), std::string::npos);
  EXPECT_EQ(text.find("\x1b"), std::string::npos);
  EXPECT_EQ(text,
            "step 1/100  loss 2.5  lr 0.0003  grad_norm nan  elapsed 1s\n"
            "step 10/100  loss 2.5  lr 0.0003  grad_norm nan  elapsed 10s eta 1m30s\n"
            "step 20/100  loss 2.5  lr 0.0003  grad_norm nan  elapsed 20s eta 1m20s\n"
            "step 25/100  loss 2.5  lr 0.0003  grad_norm nan  elapsed 25s eta 1m15s\n");
}

TEST(ConsoleSink, ProgressBarRedrawsOneLineInPlace) {
  std::ostringstream out;
  FakeClock clock;
  tandem::ConsoleOptions options;
  options.interactive = true;
  options.total_steps = 10;
  options.width = 100;
  options.clock = clock.function();
  tandem::ConsoleSink sink(out, options);
  for (int64_t step = 1; step <= 10; ++step) {
    clock.seconds = static_cast<double>(step);
    sink.write({step,
                {{"loss", 2.5},
                 {"lr", 3e-4},
                 {"grad_norm", 0.5},
                 {"tokens_per_s", 1e5},
                 {"documents_seen", 12.0 * step}}});
    if (step == 5) sink.note("saved step-5");
  }
  EXPECT_EQ(count(out.str(), "\n"), 1u);  // only the note's line
  sink.close();
  const std::string text = out.str();
  EXPECT_EQ(count(text, "\n"), 2u);
  EXPECT_NE(text.find("\r\x1b[Ksaved step-5\n\r"), std::string::npos);
  // Every drawn line fits in the width; the last shows 100% and the key figures.
  std::string last_line;
  for (size_t at = text.find('\r'); at != std::string::npos; at = text.find('\r', at + 1)) {
    const size_t end = text.find_first_of("\x1b", at);
    const std::string line = text.substr(at + 1, end - at - 1);
    EXPECT_LE(line.size(), 99u) << line;
    if (line.rfind("step", 0) == 0) last_line = line;
  }
  EXPECT_NE(last_line.find("step 10/10 100% [###"), std::string::npos) << last_line;
  EXPECT_NE(last_line.find("loss 2.5 lr 0.0003 gnorm 0.5 tok/s 100000"), std::string::npos)
      << last_line;
  EXPECT_EQ(last_line.find("documents_seen"), std::string::npos) << last_line;
}

TEST(ConsoleSink, NarrowTerminalLineIsCutToFit) {
  std::ostringstream out;
  tandem::ConsoleOptions options;
  options.interactive = true;
  options.total_steps = 10;
  options.width = 40;
  tandem::ConsoleSink sink(out, options);
  sink.write({3, {{"loss", 2.5}, {"lr", 3e-4}, {"grad_norm", 0.5}, {"tokens_per_s", 1e5}}});
  const std::string text = out.str();
  EXPECT_EQ(text, "\r" + text.substr(1, 39) + "\x1b[K");
  EXPECT_EQ(text.rfind("\rstep 3/10  30% loss", 0), 0u) << text;
}

// --- plot ---

std::vector<std::string> polylines(const std::string& svg) {
  std::vector<std::string> found;
  const std::string marker = "<polyline";
  for (size_t at = svg.find(marker); at != std::string::npos; at = svg.find(marker, at + 1)) {
    const size_t begin = svg.find("points=\"", at) + 8;
    found.push_back(svg.substr(begin, svg.find('"', begin) - begin));
  }
  return found;
}

size_t point_count(const std::string& points) { return count(points, ","); }

// The <svg>…</svg> of the chart titled `title`.
std::string chart_svg(const std::string& html, const std::string& title) {
  const size_t heading = html.find("<h2>" + title + "</h2>");
  if (heading == std::string::npos) return "";
  const size_t begin = html.find("<svg", heading);
  return html.substr(begin, html.find("</svg>", begin) + 6 - begin);
}

TEST(Plot, OneChartPerMetricGroupWithEveryPoint) {
  ScratchDir dir;
  std::string jsonl;
  for (int64_t step = 1; step <= 20; ++step) {
    MetricsRecord record{step,
                         {{"loss", 3.0 - 0.1 * step},
                          {"loss/ce", 2.0 - 0.05 * step},
                          {"lr", 1e-3 * step / 20},
                          {"grad_norm", step == 8 ? kNaN : 1.0},
                          {"time/data", 0.01},
                          {"time/forward", 0.2}}};
    jsonl += tandem::format_metrics_line(record) + "\n";
  }
  write_file(dir / "metrics.jsonl", jsonl);
  const auto history = tandem::read_metrics_history(dir / "metrics.jsonl");
  const std::string html = tandem::render_metrics_html(history, "run <x>");

  const auto charts = tandem::plan_charts(history);
  ASSERT_EQ(charts.size(), 4u);  // loss (+ loss/ce), lr, grad_norm, time (data + forward)
  EXPECT_EQ(charts[0].series, (std::vector<std::string>{"loss", "loss/ce"}));
  EXPECT_EQ(charts[3].title, "time");
  EXPECT_EQ(count(html, "<svg"), 4u);
  EXPECT_NE(html.find("Not logged: tokens_per_s"), std::string::npos);
  EXPECT_NE(html.find("run &lt;x&gt;"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org/2000/svg"));  // nothing fetched

  const auto loss = polylines(chart_svg(html, "loss"));
  ASSERT_EQ(loss.size(), 2u);
  EXPECT_EQ(point_count(loss[0]), 20u);
  EXPECT_EQ(point_count(loss[1]), 20u);
  EXPECT_EQ(point_count(polylines(chart_svg(html, "lr"))[0]), 20u);
  // The NaN at step 8 splits grad_norm into steps 1-7 and 9-20.
  const auto grad_norm = polylines(chart_svg(html, "grad_norm"));
  ASSERT_EQ(grad_norm.size(), 2u);
  EXPECT_EQ(point_count(grad_norm[0]), 7u);
  EXPECT_EQ(point_count(grad_norm[1]), 12u);
  EXPECT_EQ(html.find("nan,"), std::string::npos);
  EXPECT_EQ(html.find(",nan"), std::string::npos);
  // Tick labels on both axes.
  EXPECT_NE(chart_svg(html, "loss").find(">10</text>"), std::string::npos);
  EXPECT_NE(chart_svg(html, "lr").find(">0.0004</text>"), std::string::npos);
}

TEST(Plot, SinglePointAndAllNaNAreDrawnWithoutCurves) {
  ScratchDir dir;
  write_file(dir / "metrics.jsonl", R"({"step":3,"loss":2.5,"grad_norm":null})"
                                    "\n");
  const std::string html =
      tandem::render_metrics_html(tandem::read_metrics_history(dir / "metrics.jsonl"), "one");
  EXPECT_EQ(count(html, "<svg"), 2u);
  EXPECT_EQ(count(chart_svg(html, "loss"), "<circle"), 1u);
  EXPECT_TRUE(polylines(html).empty());
  EXPECT_NE(chart_svg(html, "grad_norm").find("no finite values"), std::string::npos);
  EXPECT_EQ(html.find("nan\""), std::string::npos);

  write_file(dir / "metrics.jsonl", "");  // a run that has not logged yet
  const std::string empty =
      tandem::render_metrics_html(tandem::read_metrics_history(dir / "metrics.jsonl"), "none");
  EXPECT_EQ(count(empty, "<svg"), 0u);
  EXPECT_NE(empty.find("0 records. Not logged: loss, lr, grad_norm, tokens_per_s."),
            std::string::npos);
}

TEST(Plot, ThinsVeryLongCurvesKeepingSpikes) {
  ScratchDir dir;
  std::string jsonl;
  for (int64_t step = 1; step <= 20000; ++step)
    jsonl += tandem::format_metrics_line({step, {{"loss", step == 12345 ? 50.0 : 1.0}}}) + "\n";
  write_file(dir / "metrics.jsonl", jsonl);
  const std::string html =
      tandem::render_metrics_html(tandem::read_metrics_history(dir / "metrics.jsonl"), "long");
  const auto loss = polylines(html);
  ASSERT_EQ(loss.size(), 1u);
  EXPECT_LE(point_count(loss[0]), 2000u);
  // The spike survives thinning: some point sits near the top of the plot, the rest near 1.0.
  double top = 1e9;
  std::istringstream points(loss[0]);
  for (std::string point; points >> point;)
    top = std::min(top, std::stod(point.substr(point.find(',') + 1)));
  EXPECT_LT(top, 40.0);
}

TEST(Plot, BinaryWritesHtmlIntoRunDir) {
  ScratchDir dir;
  std::filesystem::create_directories(dir / "run");
  write_file(dir / "run/metrics.jsonl", steps_file(1, 5));
  auto result = run_command(tandem_binary() + " plot " + (dir / "run"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const std::string html = read_file(dir / "run/plots.html");
  EXPECT_EQ(count(html, "<svg"), 1u);
  EXPECT_EQ(point_count(polylines(html)[0]), 5u);

  result = run_command(tandem_binary() + " plot " + (dir / "run") + " --out " + (dir / "p.html"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(std::filesystem::exists(dir / "p.html"));
}

TEST(Plot, BinaryNamesFileAndLineOfMalformedJsonl) {
  ScratchDir dir;
  write_file(dir / "metrics.jsonl", steps_file(1, 2) + "{\"step\": 3, \"loss\": nope}\n");
  auto result = run_command(tandem_binary() + " plot " + dir.path());
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find(dir / "metrics.jsonl:3: not JSON"), std::string::npos)
      << result.output;

  result = run_command(tandem_binary() + " plot " + (dir / "missing"));
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("missing/metrics.jsonl: no such file"), std::string::npos)
      << result.output;
}

}  // namespace
