// τ per category in `tandem eval` (eval/prompt_categories.h): each held-out record's category
// found by the record name its document carries, for JSONL and JSON array files; the report's
// per-category τ recomputed here from the per-prompt accepted counts.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "speculative_fixtures.h"
#include "tandem/core/error.h"
#include "tandem/data/token_cache.h"
#include "tandem/eval/prompt_categories.h"
#include "test_util.h"

namespace {

using tandem::testing::random_prompts;
using tandem::testing::ScratchDir;

TEST(EvalCategories, EachDocumentFindsItsRecordsCategory) {
  ScratchDir scratch;
  const auto prompts = random_prompts(4, 6, 3);
  const std::vector<nlohmann::json> categories = {"math", nullptr, "code", "math"};
  nlohmann::json array = nlohmann::json::array();
  {
    std::ofstream jsonl(scratch / "rows.jsonl");
    for (size_t i = 0; i < prompts.size(); ++i) {
      nlohmann::json row{{"input_ids", prompts[i]}};
      if (!categories[i].is_null()) row["category"] = categories[i];
      jsonl << row.dump() << "\n";
      if (i == 1) jsonl << "\n";  // a blank line: record numbers are lines
      array.push_back(row);
    }
  }
  std::ofstream(scratch / "rows.json") << array.dump(1);
  for (const std::string name : {"rows.jsonl", "rows.json"}) {
    const std::string path = scratch / name;
    const auto found = tandem::record_categories(path, "category");
    tandem::DatasetOptions options;
    options.vocab_size = 512;
    const auto dataset = tandem::TokenizedDataset::open(path, tandem::DataFormat::pretokenized,
                                                        options, tandem::CacheOptions{});
    ASSERT_EQ(dataset.size(), 4);
    for (int64_t i = 0; i < 4; ++i)
      EXPECT_EQ(tandem::category_of(found, dataset.document(i).source),
                categories[i].is_null() ? "" : categories[i].get<std::string>())
          << name << " document " << i << " (" << dataset.document(i).source << ")";
  }
  std::ofstream(scratch / "bad.jsonl") << R"({"input_ids": [3, 4], "category": 7})"
                                       << "\n";
  try {
    tandem::record_categories(scratch / "bad.jsonl", "category");
    FAIL() << "a number as a category was accepted";
  } catch (const tandem::Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:1: field \"category\" must be a string"),
              std::string::npos)
        << e.what();
  }
}

TEST(EvalCategories, TheReportGivesTauPerCategory) {
  const std::string fixture = tandem::testing::model_fixture("llama3");
  tandem::DSparkObjective objective(tandem::testing::tiny_dspark_options(fixture));
  ScratchDir scratch;
  objective.export_model(scratch / "export");
  const std::vector<std::string> kinds = {"chat", "math", "", "chat", "math"};
  {
    std::ofstream data(scratch / "prompts.jsonl");
    const auto prompts = random_prompts(5, 8, 9);
    for (size_t i = 0; i < prompts.size(); ++i) {
      nlohmann::json row{{"input_ids", prompts[i]}};
      if (!kinds[i].empty()) row["kind"] = kinds[i];
      data << row.dump() << "\n";
    }
  }
  const auto result = tandem::testing::run_command(
      tandem::testing::tandem_binary() + " eval --target " + fixture + " --draft " +
      (scratch / "export") + " --data " + (scratch / "prompts.jsonl") +
      " --format pretokenized --prompt-tokens 5 --max-new-tokens 12 --category-field kind" +
      " --out " + (scratch / "report.json"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("[eval] kind chat: tau = "), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("1 prompts name no kind"), std::string::npos) << result.output;
  const auto report = nlohmann::json::parse(std::ifstream(scratch / "report.json"));
  ASSERT_TRUE(report.contains("per_category")) << report.dump();
  EXPECT_EQ(report["per_category"].size(), 2u);
  std::map<std::string, std::pair<int64_t, int64_t>> totals;  // category -> (tokens, steps)
  for (const auto& prompt : report["per_prompt"]) {
    if (!prompt.contains("category")) continue;
    auto& [tokens, steps] = totals[prompt["category"].get<std::string>()];
    for (int64_t accepted : prompt["accepted"]) tokens += accepted + 1, steps += 1;
  }
  for (const std::string category : {"chat", "math"}) {
    const auto& entry = report["per_category"][category];
    EXPECT_EQ(entry["prompts"], 2);
    EXPECT_DOUBLE_EQ(entry["tau"].get<double>(),
                     static_cast<double>(totals[category].first) / totals[category].second);
  }
}

}  // namespace
