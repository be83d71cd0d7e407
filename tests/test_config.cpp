// YAML config + dotted overrides: typed reads with defaults, unknown keys rejected with their
// dotted path, overrides that create or replace keys, and the resolved config.
#include <gtest/gtest.h>

#include "tandem/core/config.h"
#include "tandem/core/error.h"
#include "test_util.h"

using tandem::Config;

namespace {

using tandem::testing::error_of;

const char* kRun = R"(
model:
  path: /models/target
  dtype: bf16
training:
  lr: 1.0e-4
  steps: 100
  layers: [1, 2, 3]
)";

}  // namespace

TEST(Config, TypedReadsDefaultsAndOverrides) {
  const Config config = Config::parse(kRun, "run.yaml", {"training.lr=3e-4", "training.seed=7"});
  const Config training = config.section("training");
  EXPECT_DOUBLE_EQ(training.get_double("lr"), 3e-4);
  EXPECT_EQ(training.get_int("steps"), 100);
  EXPECT_EQ(training.get_int("seed", 0), 7);
  EXPECT_EQ(training.get_int("warmup", 5), 5);
  EXPECT_EQ(training.get_int_list("layers"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(config.section("model").get_choice("dtype", {"fp32", "bf16"}), "bf16");
  EXPECT_EQ(config.section("model").get_string("path"), "/models/target");
  EXPECT_NO_THROW(config.check_all_used());
  const std::string resolved = config.resolved_yaml();
  EXPECT_NE(resolved.find("warmup: 5"), std::string::npos) << resolved;  // defaults recorded
  EXPECT_NE(resolved.find("lr: 3e-4"), std::string::npos) << resolved;   // as overridden
}

TEST(Config, UnknownKeysAreErrorsWithTheirPath) {
  const Config config = Config::parse(kRun, "run.yaml", {"training.lrr=1"});
  config.section("model").get_string("path");
  config.section("model").get_string("dtype");
  const Config training = config.section("training");
  training.get_double("lr");
  training.get_int("steps");
  const std::string message = error_of([&] { config.check_all_used(); });
  EXPECT_NE(message.find("run.yaml: unknown keys training.layers, training.lrr"), std::string::npos)
      << message;
}

TEST(Config, TypeErrorsAndMissingValuesNameTheKey) {
  const Config config = Config::parse(kRun, "run.yaml", {"training.steps=many"});
  const Config training = config.section("training");
  EXPECT_NE(error_of([&] {
              training.get_int("steps");
            }).find("run.yaml: training.steps: expected an integer"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              training.get_int("epochs");
            }).find("training.epochs: required an integer is missing"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              config.section("model").get_choice("dtype", {"fp32"});
            }).find("'bf16' is not one of: fp32"),
            std::string::npos);
  EXPECT_NE(error_of([&] { config.section("training").section("lr"); }).find("must be a section"),
            std::string::npos);
  EXPECT_THROW(Config::parse("a: [1, 2", "bad.yaml"), tandem::Error);
  EXPECT_THROW(Config::parse(kRun, "run.yaml", {"no-equals-sign"}), tandem::Error);
  EXPECT_THROW(Config::parse(kRun, "run.yaml", {"model.path.deeper=1"}), tandem::Error);
}

TEST(Config, OverridesDoNotDisturbSiblings) {
  const Config config = Config::parse(kRun, "run.yaml", {"model.dtype=fp32", "new.section.key=1"});
  EXPECT_EQ(config.section("model").get_string("path"), "/models/target");
  EXPECT_EQ(config.section("model").get_string("dtype"), "fp32");
  EXPECT_EQ(config.section("new").section("section").get_int("key"), 1);
}

// Hostile or mistaken structure is refused when the file is read, naming file, line and key
// (issue 19): a repeated key, a complex key, nesting no config needs.
TEST(Config, DuplicateAndComplexKeysAndDeepNestingNameTheFileAndLine) {
  const std::string duplicate =
      error_of([] { Config::parse("training:\n  lr: 1\n  steps: 2\n  lr: 3\n", "dup.yaml"); });
  EXPECT_NE(duplicate.find("dup.yaml:4: duplicate key 'training.lr' (first at line 2)"),
            std::string::npos)
      << duplicate;
  const std::string complex_key =
      error_of([] { Config::parse("training:\n  ? [a, b]\n  : 1\n", "complex.yaml"); });
  EXPECT_NE(
      complex_key.find("complex.yaml:2: a key under 'training' must be a plain name, not a list"),
      std::string::npos)
      << complex_key;
  std::string deep = "a: ";
  for (int i = 0; i < 40; ++i) deep += "{b: ";
  deep += "1";
  for (int i = 0; i < 40; ++i) deep += "}";
  const std::string nested = error_of([&] { Config::parse(deep, "deep.yaml"); });
  EXPECT_NE(nested.find("deep.yaml:1: 'a.b.b.b"), std::string::npos) << nested;
  EXPECT_NE(nested.find("nests deeper than 16 levels"), std::string::npos) << nested;
  const std::string override_key =
      error_of([] { Config::parse(kRun, "run.yaml", {"training.x={? [1]: 2}"}); });
  EXPECT_NE(override_key.find("override 'training.x={? [1]: 2}'"), std::string::npos)
      << override_key;
}

// YAML aliases share one node, so a few hundred bytes can name a billion nodes (nine levels of
// ten aliases each): such a file or override is refused from one pass over its text, naming it,
// before anything walks the tree; a few aliases stay fine.
TEST(Config, AliasesThatExpandPastTheNodeLimitAreRefusedNamingTheFile) {
  std::vector<std::string> levels = {"a: &a [x, x, x, x, x, x, x, x, x, x]"};
  for (char level = 'b'; level <= 'i'; ++level) {
    std::string line = std::string(1, level) + ": &" + level + " [";
    for (int i = 0; i < 10; ++i) line += std::string(i ? ", *" : "*") + char(level - 1);
    levels.push_back(line + "]");
  }
  std::string file, flow;
  for (const std::string& level : levels) {
    file += level + "\n";
    flow += (flow.empty() ? "{" : ", ") + level;
  }
  const std::string message = error_of([&] { Config::parse(file, "aliases.yaml"); });
  EXPECT_NE(
      message.find("aliases.yaml: more than 1000000 nodes once its YAML aliases are expanded"),
      std::string::npos)
      << message;
  const std::string in_override =
      error_of([&] { Config::parse(kRun, "run.yaml", {"training.x=" + flow + "}"}); });
  EXPECT_NE(in_override.find("override 'training.x={a: &a"), std::string::npos) << in_override;
  EXPECT_NE(in_override.find("more than 1000000 nodes"), std::string::npos) << in_override;

  const Config shared = Config::parse("training: {lr: &lr 3.0e-4}\noptimizer: {eps: *lr}\n",
                                      "shared.yaml", {"model.layers=[&l [1, 2], *l]"});
  EXPECT_DOUBLE_EQ(shared.section("optimizer").get_double("eps"), 3e-4);
  EXPECT_DOUBLE_EQ(shared.section("training").get_double("lr"), 3e-4);
}
