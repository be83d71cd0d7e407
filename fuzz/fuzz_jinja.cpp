// libFuzzer target for the chat-template engine: the input is a template, rendered with a
// conversation that has tools, tool calls and reasoning (the first byte picks
// add_generation_prompt and enable_thinking). Templates are untrusted programs: a tandem::Error
// is the expected answer to a bad one; a crash, a hang past the step bound, or any other
// exception is a bug.
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "tandem/core/error.h"
#include "tandem/text/jinja.h"
#include "tandem/text/jinja_json.h"

namespace {

const tandem::jinja::Dict& conversation(uint8_t mode) {
  static const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?  \u00e9\ud83d\ude42"},
    {"role": "assistant", "content": "", "reasoning_content": "Call the tool.",
     "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                                      "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": "{\"temp\": 21}"},
    {"role": "assistant", "content": "21 degrees."}])");
  static const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  static tandem::jinja::Dict variables[4];
  tandem::jinja::Dict& dict = variables[mode % 4];
  if (dict.items.empty()) {
    dict.set("messages", tandem::jinja::value_from_json(messages));
    dict.set("tools", tandem::jinja::value_from_json(tools));
    dict.set("documents", tandem::jinja::Value::none());
    dict.set("add_generation_prompt", tandem::jinja::Value((mode & 1) != 0));
    dict.set("enable_thinking", tandem::jinja::Value((mode & 2) != 0));
    dict.set("bos_token", tandem::jinja::Value("<s>"));
    dict.set("eos_token", tandem::jinja::Value("</s>"));
  }
  return dict;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string source(reinterpret_cast<const char*>(data) + 1, size - 1);
  tandem::jinja::RenderOptions options;
  options.max_steps = 200000;
  options.max_output_bytes = 1 << 20;
  options.now = 0;
  try {
    const tandem::jinja::Template chat_template(source, "<fuzz template>");
    const tandem::jinja::Rendered out = chat_template.render(conversation(data[0]), options);
    for (const auto& [begin, end] : out.generation_spans)
      if (begin > end || end > out.text.size()) __builtin_trap();  // a span outside the text
  } catch (const tandem::Error&) {
  }
  return 0;
}
