// The run-config schema (core/config_schema.h): docs/training.md's key tables are the ones the
// declarations print; no objective sees a key declared twice; every key the trainer's read
// functions read from each config under configs/ is declared among that config's objective's
// keys; values out of range name the file, the key and the range; the choice lists agree with
// the parsers of the same names.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "tandem/cli/config_reference.h"
#include "tandem/core/config.h"
#include "tandem/core/config_schema.h"
#include "tandem/core/dtype.h"
#include "tandem/data/datasets.h"
#include "tandem/data/jsonl.h"
#include "tandem/data/packing.h"
#include "tandem/dist/launch.h"
#include "tandem/objectives/dflash.h"
#include "tandem/objectives/distill.h"
#include "tandem/objectives/distill_loss.h"
#include "tandem/objectives/dpo.h"
#include "tandem/objectives/dspark.h"
#include "tandem/objectives/eagle3.h"
#include "tandem/objectives/policy.h"
#include "tandem/objectives/policy_loss.h"
#include "tandem/objectives/sft.h"
#include "tandem/text/chat_template.h"
#include "tandem/train/data_parallel.h"
#include "tandem/train/training_data.h"
#include "tandem/train/training_options.h"
#include "test_util.h"

namespace {

namespace keys = tandem::keys;
using tandem::Config;
using tandem::testing::error_of;
using tandem::testing::source_path;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool lists(const std::vector<const tandem::KeyGroup*>& groups, const tandem::KeyGroup* group) {
  return std::find(groups.begin(), groups.end(), group) != groups.end();
}

// The functions that read an objective's own keys (what make() reads before building anything).
using Reader = std::function<void(const Config&, const tandem::RunContext&)>;
const std::map<std::string, Reader>& objective_readers() {
  static const std::map<std::string, Reader> readers = {
      {"sft", [](const Config& c, const tandem::RunContext& r) { tandem::sft_options(c, r); }},
      {"eagle3",
       [](const Config& c, const tandem::RunContext& r) { tandem::eagle3_options(c, r); }},
      {"dflash",
       [](const Config& c, const tandem::RunContext& r) { tandem::dflash_options(c, r); }},
      {"dspark",
       [](const Config& c, const tandem::RunContext& r) { tandem::dspark_options(c, r); }},
      {"distill",
       [](const Config& c, const tandem::RunContext& r) { tandem::distill_options(c, r); }},
      {"dpo", [](const Config& c, const tandem::RunContext& r) { tandem::dpo_options(c, r); }},
      {"grpo",
       [](const Config& c, const tandem::RunContext& r) { tandem::policy_options(c, "grpo", r); }},
      {"gspo",
       [](const Config& c, const tandem::RunContext& r) { tandem::policy_options(c, "gspo", r); }},
  };
  return readers;
}

}  // namespace

TEST(ConfigSchema, DocsTablesAreTheGeneratedOnes) {
  const std::string path = source_path("docs/training.md");
  const std::string text = read_text(path);
  ASSERT_FALSE(text.empty()) << path;
  EXPECT_TRUE(tandem::update_key_tables(text, path) == text)
      << "docs/training.md's config key tables differ from the declarations "
         "(src/tandem/core/config_schema.cpp); regenerate them with:\n"
         "  build/tandem config-keys --update docs/training.md";
  std::vector<std::string> documented = tandem::key_tables_in(text),
                           sections = tandem::key_sections();
  std::sort(documented.begin(), documented.end());
  std::sort(sections.begin(), sections.end());
  EXPECT_EQ(documented, sections)
      << "docs/training.md needs one `<!-- config-keys: SECTION -->` ... `<!-- /config-keys -->` "
         "block per config section, then: build/tandem config-keys --update docs/training.md";
}

// Two declarations may share a path only when no objective reads both (loss.beta is DPO's in
// one and distillation's in another); within what one objective reads, a path is declared once.
TEST(ConfigSchema, NoObjectiveSeesAKeyDeclaredTwice) {
  for (const tandem::ObjectiveDescription& objective : tandem::objective_descriptions()) {
    std::map<std::string, const tandem::KeyInfo*> declared;
    for (const tandem::KeyGroup* group : tandem::objective_key_groups(objective))
      for (const tandem::KeyInfo* key : group->keys()) {
        const auto [at, inserted] = declared.emplace(key->path(), key);
        EXPECT_TRUE(inserted || at->second == key)
            << objective.name << " reads " << key->path() << ", declared twice";
      }
  }
  for (const tandem::KeyGroup* group : tandem::key_groups()) {
    bool read = lists(keys::common_groups(), group);
    for (const tandem::ObjectiveDescription& objective : tandem::objective_descriptions())
      read = read || lists(objective.keys, group);
    EXPECT_TRUE(read) << "the keys of " << group->component() << " (" << group->section()
                      << ") are listed by no objective";
  }
  for (const tandem::ObjectiveDescription& objective : tandem::objective_descriptions())
    EXPECT_TRUE(objective_readers().count(objective.name))
        << objective.name << ": add its options reader to objective_readers() above";
}

// Config records every key read through it; each config under configs/ and configs/examples/
// goes through the functions `tandem train` (and --dry-run) reads it with, short of opening
// data or models: every key read must be declared among its objective's keys, and no key of the
// file is left unread.
TEST(ConfigSchema, EveryKeyTheShippedConfigsReadIsDeclared) {
  std::vector<std::string> files;
  for (const char* dir : {"configs", "configs/examples"})
    for (const auto& entry : std::filesystem::directory_iterator(source_path(dir)))
      if (entry.path().extension() == ".yaml") files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 10u);
  for (const std::string& file : files) {
    SCOPED_TRACE(file);
    const Config config = Config::load(file);
    tandem::read_training(config);
    tandem::read_distributed(config);
    const tandem::RunContext run =
        tandem::read_run_context(config, tandem::dist::LaunchEnv{}, /*dry_run=*/true);
    tandem::read_data_options(config);
    const std::string objective = keys::training::objective.read(config);
    ASSERT_TRUE(objective_readers().count(objective)) << objective;
    objective_readers().at(objective)(config, run);
    EXPECT_NO_THROW(config.check_all_used());
    std::set<std::string> declared;
    for (const tandem::KeyGroup* group :
         tandem::objective_key_groups(tandem::find_objective(objective, file)))
      for (const tandem::KeyInfo* key : group->keys()) declared.insert(key->path());
    for (const std::string& key : config.keys_read())
      EXPECT_TRUE(declared.count(key)) << key << " is read but not declared for " << objective;
  }
}

TEST(ConfigSchema, OutOfRangeValuesNameTheFileTheKeyAndTheRange) {
  const Config config = Config::parse(
      "loss: {max_anchors: 0, temperature: .nan}\noptimizer: {eps: -1}\n"
      "draft: {aux_layer_ids: [1, 2000, 3]}\ntraining: {schedule: linear, seed: -2}\n"
      "data: {format: csv}\n",
      "run.yaml");
  for (const auto& [read, phrase] : std::vector<std::pair<std::function<void()>, std::string>>{
           {[&] { keys::block_loss::max_anchors.read(config); },
            "[config] run.yaml: loss.max_anchors: must be in 1..1048576, got 0"},
           {[&] { keys::distill_loss::temperature.read(config); },
            "run.yaml: loss.temperature: must be a finite number > 0, got nan"},
           {[&] { keys::optimizer::eps.read(config); },
            "run.yaml: optimizer.eps: must be a finite number > 0, got -1"},
           {[&] { keys::eagle3_draft::aux_layer_ids.find(config); },
            "run.yaml: draft.aux_layer_ids: entry 1 must be in 0..1023, got 2000"},
           {[&] { keys::training::seed.read(config); },
            "run.yaml: training.seed: must be >= 0, got -2"},
           {[&] { keys::training::schedule.read(config); },
            "run.yaml: training.schedule: 'linear' is not one of: constant, cosine"},
           {[&] { keys::data::format.read(config); },
            "run.yaml: data.format: 'csv' is not one of: conversations, text, pretokenized, "
            "preference, rollout"},
           {[&] { keys::training::run_dir.read(config); },
            "run.yaml: training.run_dir: required a string is missing"},
           {[&] { keys::block_loss::gamma.read(config); }, "internal"}})
    EXPECT_NE(error_of(read).find(phrase), std::string::npos) << phrase << "\n" << error_of(read);
  // Defaults come from the declarations and are recorded in the resolved config.
  const Config empty = Config::parse("", "empty.yaml");
  EXPECT_EQ(keys::chunked_loss::chunk_tokens.read(empty), 1024);
  EXPECT_DOUBLE_EQ(keys::gspo_loss::epsilon_high.read(empty), 4e-4);
  EXPECT_EQ(keys::block_loss::gamma.read(empty, 7.0), 7.0);
  EXPECT_FALSE(keys::dflash_draft::mask_token_id.find(empty).has_value());
  EXPECT_NE(empty.resolved_yaml().find("chunk_tokens: 1024"), std::string::npos);
}

// training.seed has one declaration and one reader: the run context, which the objectives and
// the sampler take it from.
TEST(ConfigSchema, TheSeedIsReadOnceIntoTheRunContext) {
  const Config config =
      Config::parse("training: {seed: 7}\nmodel: {config: fresh.json}\n", "run.yaml");
  const tandem::RunContext run =
      tandem::read_run_context(config, tandem::dist::LaunchEnv{}, /*dry_run=*/true);
  EXPECT_EQ(run.seed, 7u);
  EXPECT_EQ(tandem::sft_options(config, run).seed, 7u);
  const std::vector<std::string> read = config.keys_read();
  EXPECT_EQ(std::count(read.begin(), read.end(), "training.seed"), 1);
}

// Names are listed once in the schema and once in the parsers other callers use: they agree.
TEST(ConfigSchema, ChoicesAgreeWithTheParsersOfTheSameNames) {
  const auto read = [](const auto& key, const std::string& section, const std::string& name) {
    return key.read(
        Config::parse(section + ": {" + key.info().name + ": " + name + "}\n", "c.yaml"));
  };
  for (const std::string& name : keys::model::dtype.names())  // a computed default: given one
    EXPECT_EQ(keys::model::dtype.read(Config::parse("model: {dtype: " + name + "}\n", "c.yaml"),
                                      c10::ScalarType::Float),
              tandem::parse_compute_dtype(name, name));
  for (const std::string& name : keys::data::format.names())
    EXPECT_EQ(read(keys::data::format, "data", name), tandem::parse_data_format(name));
  for (const std::string& name : keys::data::packing.names())
    EXPECT_EQ(read(keys::data::packing, "data", name), tandem::parse_packing_mode(name));
  for (const std::string& name : keys::data::on_error.names())
    EXPECT_EQ(read(keys::data::on_error, "data", name), tandem::parse_on_error(name));
  for (const std::string& name : keys::data::overlong.names())
    EXPECT_EQ(keys::data::overlong.read(Config::parse("data: {overlong: " + name + "}\n", "c.yaml"),
                                        tandem::OverlongPolicy::Split),
              tandem::parse_overlong_policy(name));
  for (const std::string& name : keys::distill_loss::divergence.names())
    EXPECT_EQ(read(keys::distill_loss::divergence, "loss", name), tandem::parse_divergence(name));
  for (const std::string& name : keys::dpo_loss::type.names())
    EXPECT_EQ(read(keys::dpo_loss::type, "loss", name), tandem::parse_dpo_loss_type(name));
  for (const std::string& name : tandem::ChatTemplate::names())
    EXPECT_EQ(
        tandem::ChatTemplate::resolve(read(keys::data::chat_template, "data", name), "").name(),
        name);
}

// `tandem train --help` lists each objective's keys as the declarations say (EAGLE-3's
// loss.chunk_tokens included), and `tandem config-keys --markdown` prints the docs' tables.
TEST(ConfigSchema, TheHelpAndConfigKeysPrintTheDeclarations) {
  const auto help =
      tandem::testing::run_command(tandem::testing::tandem_binary() + " train --help");
  EXPECT_EQ(help.exit_code, 0) << help.output;
  EXPECT_NE(help.output.find(tandem::key_summary(keys::common_groups(), "\n  ")), std::string::npos)
      << help.output;
  for (const tandem::ObjectiveDescription& objective : tandem::objective_descriptions())
    EXPECT_NE(help.output.find(tandem::key_summary(objective.keys, "; ")), std::string::npos)
        << objective.name << "\n"
        << help.output;
  EXPECT_NE(help.output.find("loss: chunk_tokens=1024; data: capture"), std::string::npos)
      << help.output;
  const auto markdown =
      tandem::testing::run_command(tandem::testing::tandem_binary() + " config-keys --markdown");
  EXPECT_EQ(markdown.exit_code, 0) << markdown.output;
  EXPECT_NE(
      markdown.output.find(tandem::key_table_begin("loss") + "\n" + tandem::key_table("loss")),
      std::string::npos)
      << markdown.output;
}
