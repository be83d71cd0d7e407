// Regeneration (eval/regeneration.h): where answers go, turn by turn through the chat template,
// checked against composing the parts by hand (encode_chat, the uncached greedy decoder,
// Tokenizer::decode); bad conversations; and the resumable output file (data/resumable_jsonl.h).
// The kill -9 resume of the whole command is tests/e2e_regenerate.sh.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tandem/data/resumable_jsonl.h"
#include "tandem/eval/regeneration.h"
#include "tandem/eval/uncached_decode.h"
#include "tandem/io/hf_checkpoint.h"
#include "test_util.h"

namespace {

using tandem::ChatMessage;
using tandem::ChatRole;

// A random 2-layer Llama with the demo tokenizer's 4096-token vocabulary; `stop_bias` is added to
// the output row of <|eot_id|> (large: every answer ends at once).
std::string random_chat_model(const std::string& dir, const tandem::Tokenizer& tokenizer,
                              double stop_bias = 0) {
  const int64_t vocab = 4096, hidden = 64, ffn = 128, layers = 2, heads = 4, kv = 2, d = 16;
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << nlohmann::json{
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"vocab_size", vocab},
      {"hidden_size", hidden},
      {"intermediate_size", ffn},
      {"num_hidden_layers", layers},
      {"num_attention_heads", heads},
      {"num_key_value_heads", kv},
      {"head_dim", d},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", 10000.0},
      {"max_position_embeddings", 512},
      {"tie_word_embeddings", false},
      {"bos_token_id", 4083},
      {"eos_token_id", {4084}}}.dump();
  at::manual_seed(3);
  std::vector<std::pair<std::string, at::Tensor>> weights;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, double scale) {
    weights.emplace_back(name, scale == 0 ? at::ones(shape) : at::randn(shape) * scale);
  };
  add("model.embed_tokens.weight", {vocab, hidden}, 1.0);
  for (int64_t i = 0; i < layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "self_attn.q_proj.weight", {heads * d, hidden}, 0.2);
    add(p + "self_attn.k_proj.weight", {kv * d, hidden}, 0.2);
    add(p + "self_attn.v_proj.weight", {kv * d, hidden}, 0.2);
    add(p + "self_attn.o_proj.weight", {hidden, heads * d}, 0.2);
    add(p + "mlp.gate_proj.weight", {ffn, hidden}, 0.2);
    add(p + "mlp.up_proj.weight", {ffn, hidden}, 0.2);
    add(p + "mlp.down_proj.weight", {hidden, ffn}, 0.2);
    add(p + "input_layernorm.weight", {hidden}, 0);
    add(p + "post_attention_layernorm.weight", {hidden}, 0);
  }
  add("model.norm.weight", {hidden}, 0);
  add("lm_head.weight", {vocab, hidden}, 0.2);
  const int64_t eot = *tokenizer.token_to_id("<|eot_id|>");
  weights.back().second[eot] += stop_bias;
  tandem::write_hf_weights(dir, weights);
  return dir;
}

const tandem::Tokenizer& demo_tokenizer() {
  static const tandem::Tokenizer tokenizer =
      tandem::Tokenizer::from_dir(tandem::testing::source_path("data/demo/tokenizer"));
  return tokenizer;
}

std::vector<ChatMessage> chat(std::initializer_list<std::pair<ChatRole, std::string>> turns) {
  std::vector<ChatMessage> out;
  for (const auto& [role, content] : turns) out.push_back({role, content});
  return out;
}

// The answer the model gives after `messages`, composed by hand: the chat prompt with the
// assistant header, the uncached greedy decoder, the stop token dropped, decoded.
std::string answer_by_hand(const tandem::FrozenModel& model,
                           const std::vector<ChatMessage>& messages, int64_t max_new_tokens) {
  const auto& tokenizer = demo_tokenizer();
  tandem::ChatEncodeOptions header;
  header.add_generation_prompt = true;
  const auto ids =
      tandem::encode_chat(tokenizer, tandem::ChatTemplate::from_name("llama3"), messages, header)
          .ids;
  tandem::DecodeOptions decode;
  decode.max_new_tokens = max_new_tokens;
  decode.stop_ids = {4084, *tokenizer.token_to_id("<|eot_id|>")};
  std::vector<int64_t> tokens =
      tandem::greedy_decode(model, std::vector<int64_t>(ids.begin(), ids.end()), decode);
  if (!tokens.empty() &&
      (tokens.back() == decode.stop_ids[0] || tokens.back() == decode.stop_ids[1]))
    tokens.pop_back();
  return tokenizer.decode(std::vector<int32_t>(tokens.begin(), tokens.end()), true);
}

TEST(Regeneration, EveryAssistantTurnIsTheModelsAnswerGivenTheRegeneratedTurnsBefore) {
  tandem::testing::ScratchDir scratch;
  const auto model = tandem::FrozenModel::load(
      random_chat_model(scratch / "model", demo_tokenizer()), at::kFloat, at::kCPU);
  const auto chat_template = tandem::ChatTemplate::from_name("llama3");
  tandem::RegenerationOptions options;
  options.max_new_tokens = 12;
  const tandem::Regenerator regenerator(model, demo_tokenizer(), chat_template, options);
  EXPECT_EQ(regenerator.stop_ids(),
            (std::vector<int64_t>{4084, *demo_tokenizer().token_to_id("<|eot_id|>")}));
  const std::vector<std::vector<ChatMessage>> conversations = {
      chat({{ChatRole::system, "Be brief."},
            {ChatRole::user, "Who is Emma?"},
            {ChatRole::assistant, "old answer"},
            {ChatRole::user, "And Harriet?"},
            {ChatRole::assistant, "old"}}),
      chat({{ChatRole::user, "Tell me"},
            {ChatRole::user, "about Bath."},
            {ChatRole::assistant, "a"},
            {ChatRole::assistant, "b"}}),
      chat({{ChatRole::user, "A question with no answer yet"}}),
      chat({{ChatRole::system, "Only a system turn"}, {ChatRole::assistant, "and an answer"}}),
  };
  const auto results = regenerator.run(conversations, nullptr);
  ASSERT_EQ(results.size(), 4u);

  // 1: both answers regenerated, the second seeing the first regenerated one.
  ASSERT_FALSE(results[0].rejected);
  const auto& first = results[0].messages;
  ASSERT_EQ(first.size(), 5u);
  EXPECT_EQ(first[0].content, "Be brief.");
  EXPECT_EQ(first[1].content, "Who is Emma?");
  EXPECT_EQ(first[3].content, "And Harriet?");
  EXPECT_EQ(first[2].content, answer_by_hand(model, {first.begin(), first.begin() + 2}, 12));
  EXPECT_EQ(first[4].content, answer_by_hand(model, {first.begin(), first.begin() + 4}, 12));
  EXPECT_NE(first[2].content, "old answer");
  EXPECT_EQ(results[0].answer_tokens.size(), 2u);
  // 2: two user messages, then a run of two assistant messages: one answer.
  ASSERT_FALSE(results[1].rejected);
  ASSERT_EQ(results[1].messages.size(), 3u);
  EXPECT_EQ(results[1].messages[2].role, ChatRole::assistant);
  EXPECT_EQ(
      results[1].messages[2].content,
      answer_by_hand(model, {results[1].messages.begin(), results[1].messages.begin() + 2}, 12));
  // 3: a final user message gets an answer.
  ASSERT_FALSE(results[2].rejected);
  ASSERT_EQ(results[2].messages.size(), 2u);
  EXPECT_EQ(results[2].messages[1].role, ChatRole::assistant);
  // 4: nothing to answer.
  ASSERT_TRUE(results[3].rejected);
  EXPECT_EQ(results[3].rejected->reason, tandem::BadInput::no_user_turn);
  EXPECT_TRUE(results[3].messages.empty());
  // Random weights rarely stop: the answers were cut at max_new_tokens.
  for (size_t c = 0; c < 3; ++c)
    for (size_t a = 0; a < results[c].answer_tokens.size(); ++a)
      EXPECT_EQ(results[c].answer_tokens[a] == 12, !results[c].answer_stopped[a]);
}

TEST(Regeneration, AnswersEndAtTheEndOfTurnTokenAndLongPromptsAreRejected) {
  tandem::testing::ScratchDir scratch;
  const auto model = tandem::FrozenModel::load(
      random_chat_model(scratch / "model", demo_tokenizer(), /*stop_bias=*/1e3), at::kFloat,
      at::kCPU);
  const auto chat_template = tandem::ChatTemplate::from_name("llama3");
  tandem::RegenerationOptions options;
  options.max_new_tokens = 8;
  options.max_length = 40;
  const tandem::Regenerator regenerator(model, demo_tokenizer(), chat_template, options);
  std::string long_text;
  for (int i = 0; i < 40; ++i) long_text += "word ";
  const auto results =
      regenerator.run({chat({{ChatRole::user, "Hi"}, {ChatRole::assistant, "x"}}),
                       chat({{ChatRole::user, long_text}, {ChatRole::assistant, "x"}})},
                      nullptr);
  ASSERT_FALSE(results[0].rejected);
  EXPECT_EQ(results[0].messages[1].content, "");  // <|eot_id|> at once: an empty answer
  EXPECT_EQ(results[0].answer_tokens, (std::vector<int64_t>{1}));
  EXPECT_EQ(results[0].answer_stopped, (std::vector<bool>{true}));
  ASSERT_TRUE(results[1].rejected);
  EXPECT_EQ(results[1].rejected->reason, tandem::BadInput::too_long);
  EXPECT_NE(std::string(results[1].rejected->what()).find("exceeds max_length 40"),
            std::string::npos)
      << results[1].rejected->what();
}

// A Jinja template gets each conversation's tools with its prompt, and a conversation the
// template refuses is bad input, not the end of the run.
TEST(Regeneration, JinjaPromptsGetTheConversationsToolsAndRefusalsAreBadLines) {
  tandem::testing::ScratchDir scratch;
  const auto model = tandem::FrozenModel::load(
      random_chat_model(scratch / "model", demo_tokenizer()), at::kFloat, at::kCPU);
  tandem::jinja::Dict globals;
  globals.set("bos_token", tandem::jinja::Value("<|begin_of_text|>"));
  const auto chat_template = tandem::ChatTemplate::from_jinja(
      "{% if tools is none %}{{ raise_exception('this template needs tools') }}{% endif %}"
      "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
      "{{ m.content }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}"
      "<|start_header_id|>assistant<|end_header_id|>\n\n{{ tools | length }}{% endif %}",
      "needs-tools.jinja", globals, "<|eot_id|>");
  tandem::RegenerationOptions options;
  options.max_new_tokens = 4;
  const tandem::Regenerator regenerator(model, demo_tokenizer(), chat_template, options);
  const tandem::jinja::Value tools = tandem::jinja::Value::list({tandem::jinja::Value("t")});
  const auto results =
      regenerator.run({chat({{ChatRole::user, "Hi"}}), chat({{ChatRole::user, "Hi"}})}, nullptr,
                      {tools, tandem::jinja::Value()});
  ASSERT_FALSE(results[0].rejected);
  EXPECT_EQ(results[0].answer_tokens.size(), 1u);
  ASSERT_TRUE(results[1].rejected);
  EXPECT_EQ(results[1].rejected->reason, tandem::BadInput::template_error);
  EXPECT_NE(std::string(results[1].rejected->what()).find("this template needs tools"),
            std::string::npos);
}

// A kill during a write leaves part of a line: reopening cuts it and keeps the complete ones;
// appends go after them; dropping lines rewrites the file.
TEST(ResumableJsonl, CutsAPartialLastLineAndKeepsTheCompleteOnes) {
  tandem::testing::ScratchDir scratch;
  const std::string path = scratch / "out.jsonl";
  {
    tandem::ResumableJsonl out(path, "[test]");
    EXPECT_TRUE(out.existing().empty());
    out.append({{{"n", 1}}, {{"n", 2}}});
  }
  std::ofstream(path, std::ios::app) << "{\"n\": 3, \"cut";  // a write cut by kill -9
  {
    tandem::ResumableJsonl out(path, "[test]");
    ASSERT_EQ(out.existing().size(), 2u);
    EXPECT_EQ(out.existing()[1]["n"], 2);
    out.drop_existing([](const nlohmann::json& line) { return line["n"] == 1; });
    out.append({{{"n", 3}}});
  }
  std::ifstream in(path);
  const std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "{\"n\":2}\n{\"n\":3}\n");
  std::ofstream(path, std::ios::app) << "not json\n";
  EXPECT_NE(tandem::testing::error_of([&] {
              tandem::ResumableJsonl again(path, "[test]");
            }).find(path + ":3: not a JSON object"),
            std::string::npos);
}

// The demo target shipped in data/demo/target (scripts/train_demo_target.sh): a bf16 checkpoint
// within the 20 MB budget that answers the held-out chat prompts and ends its turn, as the
// demo's regenerated training data needs. Guards against a truncated or replaced file.
TEST(Regeneration, TheShippedDemoTargetAnswersHeldOutPromptsAndEndsItsTurn) {
  const std::string dir = tandem::testing::source_path("data/demo/target");
  const auto checkpoint = tandem::HfCheckpoint::open(dir);
  for (const std::string& name : checkpoint.names())
    EXPECT_EQ(checkpoint.info(name).dtype, tandem::safetensors::Dtype::BF16) << name;
  EXPECT_LE(std::filesystem::file_size(dir + "/model.safetensors"), 20'000'000u);
  const auto model = tandem::FrozenModel::load(dir, at::kFloat, at::kCPU);
  std::ifstream heldout(tandem::testing::source_path("data/demo/chat_heldout.jsonl"));
  std::vector<std::vector<ChatMessage>> prompts;
  for (std::string line; prompts.size() < 8 && std::getline(heldout, line);) {
    const auto turns = nlohmann::json::parse(line).at("conversations");
    prompts.push_back(chat({{ChatRole::user, turns.at(0).at("content").get<std::string>()}}));
  }
  tandem::RegenerationOptions options;
  options.max_new_tokens = 128;
  const tandem::Regenerator regenerator(model, demo_tokenizer(),
                                        tandem::ChatTemplate::from_name("llama3"), options);
  int ended = 0;
  for (const auto& result : regenerator.run(prompts, nullptr)) {
    ASSERT_FALSE(result.rejected);
    ASSERT_EQ(result.answer_stopped.size(), 1u);
    ended += result.answer_stopped[0];
    EXPECT_GE(result.messages.back().content.size(), 20u) << "a near-empty answer";
  }
  EXPECT_GE(ended, 1) << "of 8 answers ended their turn within 128 tokens (2 when shipped)";
}

}  // namespace
