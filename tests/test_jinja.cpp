// The Jinja engine against transformers' own chat-template renderer (fixture cases from
// tools/make_jinja_fixtures.py: every construct, text and generation spans byte for byte, and
// the same refusals), plus what only tandem promises: errors with line and column, named
// unsupported constructs, and bounds on hostile templates.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tandem/core/error.h"
#include "tandem/text/jinja.h"
#include "tandem/text/jinja_json.h"
#include "test_util.h"

namespace {

using namespace tandem;
using jinja::Dict;
using jinja::Template;
using jinja::Value;

// The variables transformers always passes, then the case's own.
Dict chat_variables(const nlohmann::ordered_json& variables) {
  Dict dict;
  dict.set("messages", Value::none());
  dict.set("tools", Value::none());
  dict.set("documents", Value::none());
  dict.set("add_generation_prompt", Value(false));
  for (const auto& [key, value] : variables.items()) dict.set(key, jinja::value_from_json(value));
  return dict;
}

std::string render(const std::string& source, const Dict& variables = {},
                   const jinja::RenderOptions& options = {}) {
  return Template(source, "test.jinja").render(variables, options).text;
}

TEST(Jinja, EveryFixtureCaseRendersAsTransformersDoes) {
  std::ifstream in(tandem::testing::source_path("tests/fixtures/jinja/cases.json"));
  ASSERT_TRUE(in) << "tests/fixtures/jinja/cases.json";
  const nlohmann::ordered_json fixture = nlohmann::ordered_json::parse(in);
  int rendered = 0, refused = 0;
  for (const auto& item : fixture["cases"]) {
    const std::string name = item["name"];
    SCOPED_TRACE(name);
    const Dict variables = chat_variables(item["variables"]);
    if (item["error"].get<bool>()) {
      const std::string error = tandem::testing::error_of(
          [&] { Template(item["template"].get<std::string>(), name).render(variables); });
      EXPECT_NE(error.find("[chat template] " + name), std::string::npos)
          << "transformers refused it (" << item["reference_error"] << "); tandem said: " << error;
      ++refused;
      continue;
    }
    jinja::Rendered out;
    try {
      out = Template(item["template"].get<std::string>(), name).render(variables);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    EXPECT_EQ(out.text, item["text"].get<std::string>());
    std::vector<std::pair<size_t, size_t>> spans;
    for (const auto& span : item["generation_spans"]) spans.emplace_back(span[0], span[1]);
    EXPECT_EQ(out.generation_spans, spans);
    ++rendered;
  }
  EXPECT_GE(rendered, 80);
  EXPECT_GE(refused, 8);
}

TEST(Jinja, ErrorsNameTheLineAndColumn) {
  EXPECT_NE(
      tandem::testing::error_of([] { render("line one\n  {{ 1 + }}"); }).find("test.jinja:2:10:"),
      std::string::npos);
  const std::string undefined = tandem::testing::error_of([] { render("a\nb {{ user.name }}"); });
  EXPECT_NE(undefined.find("test.jinja:2:"), std::string::npos) << undefined;
  EXPECT_NE(undefined.find("'user' is undefined"), std::string::npos) << undefined;
  const std::string raised =
      tandem::testing::error_of([] { render("{{ raise_exception('no system role') }}"); });
  EXPECT_NE(raised.find("the template raised an error: no system role"), std::string::npos)
      << raised;
}

TEST(Jinja, UnsupportedConstructsAreNamedNotSkipped) {
  for (const char* statement : {"include 'x'", "import 'x' as y", "extends 'x'", "block b", "with",
                                "do x", "autoescape true"}) {
    const std::string error =
        tandem::testing::error_of([&] { render(std::string("{% ") + statement + " %}"); });
    EXPECT_NE(error.find("is not supported in chat templates"), std::string::npos) << error;
  }
  EXPECT_NE(tandem::testing::error_of([] {
              render("{{ 'a' | wordwrap }}");
            }).find("the filter 'wordwrap'"),
            std::string::npos);
  EXPECT_NE(
      tandem::testing::error_of([] { render("{{ 1 is escaped }}"); }).find("the test 'escaped'"),
      std::string::npos);
  EXPECT_NE(tandem::testing::error_of([] {
              render("{% for x in y recursive %}{% endfor %}");
            }).find("recursive for loops are not supported"),
            std::string::npos);
  EXPECT_NE(
      tandem::testing::error_of([] { render("{{ 1 < 2 < 3 }}"); }).find("chained comparisons"),
      std::string::npos);
  EXPECT_NE(
      tandem::testing::error_of([] { render("{{ '%s' % 1 }}"); }).find("'%' is not supported"),
      std::string::npos);
  EXPECT_NE(tandem::testing::error_of([] {
              render("{% macro m() %}{% generation %}x{% endgeneration %}{% endmacro %}{{ m() }}");
            }).find("{% generation %} inside a macro"),
            std::string::npos);
}

TEST(Jinja, HostileTemplatesHitBoundsNotTheMachine) {
  // Steps: nested loops that would run 10^12 iterations.
  jinja::RenderOptions options;
  options.max_steps = 100000;
  EXPECT_NE(
      tandem::testing::error_of([&] {
        render(
            "{% for a in range(1000000) %}{% for b in range(1000000) %}x{% endfor %}{% endfor %}",
            {}, options);
      }).find("ran more than 100000 steps"),
      std::string::npos);
  // Recursion without end.
  EXPECT_NE(tandem::testing::error_of([] {
              render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}");
            }).find("macros call each other more than 32 deep"),
            std::string::npos);
  // Output size.
  options = {};
  options.max_output_bytes = 1000;
  EXPECT_NE(tandem::testing::error_of([&] {
              render("{% for i in range(100) %}0123456789abcdef{% endfor %}", {}, options);
            }).find("wrote more than 1000 bytes"),
            std::string::npos);
  // Deep nesting is a parse error, not a stack overflow.
  std::string deep = "{{ ";
  deep.append(100000, '(').append("1").append(100000, ')').append(" }}");
  EXPECT_NE(tandem::testing::error_of([&] { render(deep); }).find("nests deeper than"),
            std::string::npos);
  std::string open_lists = "{{ ";
  open_lists.append(20000, '[');
  EXPECT_NE(tandem::testing::error_of([&] { render(open_lists); }).find("[chat template]"),
            std::string::npos);
  // Huge values a builtin would build.
  EXPECT_NE(tandem::testing::error_of([] {
              render("{{ range(100000000) | length }}");
            }).find("range() of more than"),
            std::string::npos);
  EXPECT_NE(tandem::testing::error_of([] { render("{{ 'ab' * 100000000 }}"); }).find("too large"),
            std::string::npos);
  EXPECT_NE(tandem::testing::error_of([] { render("{{ 2 ** 100 }}"); }).find("integer overflow"),
            std::string::npos);
  // Found by the fuzz target: a float beyond int64 through the int filter (undefined behaviour
  // before), and its neighbours.
  EXPECT_NE(tandem::testing::error_of([] {
              render("{{ 6.6e119 | int }}");
            }).find("does not fit in a 64-bit integer"),
            std::string::npos);
  EXPECT_NE(tandem::testing::error_of([] {
              render("{{ '1e300' | int }}");
            }).find("does not fit in a 64-bit integer"),
            std::string::npos);
  EXPECT_NE(tandem::testing::error_of([] {
              render("{{ (-9223372036854775807 - 1) | abs }}");
            }).find("integer overflow"),
            std::string::npos);
  EXPECT_EQ(render("{{ range(9223372036854775800, 9223372036854775807, 5) | list }}"),
            "[9223372036854775800, 9223372036854775805]");
  EXPECT_EQ(render("[{{ '' * 1000000000000 }}]"), "[]");
  EXPECT_EQ(render("{{ [{'a': 1}] | map(attribute='99999999999999999999999') | list }}"),
            "[Undefined]");
  // A string doubled in a loop reaches the value bound in 27 steps, not the memory's.
  EXPECT_NE(tandem::testing::error_of([] {
              render(
                  "{% set ns = namespace(s='x') %}{% for i in range(40) %}"
                  "{% set ns.s = ns.s ~ ns.s %}{% endfor %}");
            }).find("a string longer than 64 MiB"),
            std::string::npos);
  // Invalid UTF-8 in the template.
  EXPECT_NE(tandem::testing::error_of([] { render("ok \xff"); }).find("invalid UTF-8 at byte 3"),
            std::string::npos);
  // Unterminated pieces.
  for (const char* bad : {"{{ 'a", "{% if x", "{# c", "{% raw %}x", "{{ x | }}", "{% if x %}"})
    EXPECT_NE(tandem::testing::error_of([&] { render(bad); }).find("[chat template] test.jinja:"),
              std::string::npos)
        << bad;
}

TEST(Jinja, StrftimeNowFormatsTheGivenTime) {
  jinja::RenderOptions options;
  options.now = 1753920000;  // 2025-07-31 00:00:00 UTC
  EXPECT_EQ(render("{{ strftime_now('%d %b %Y') }}", {}, options), "31 Jul 2025");
}

TEST(Jinja, ValuesPrintAsPython) {
  EXPECT_EQ(jinja::float_repr(0.1), "0.1");
  EXPECT_EQ(jinja::float_repr(1e16), "1e+16");
  EXPECT_EQ(jinja::float_repr(123456789012345.0), "123456789012345.0");
  EXPECT_EQ(jinja::float_repr(1.5e-5), "1.5e-05");
  EXPECT_EQ(jinja::float_repr(-2.0), "-2.0");
  EXPECT_EQ(jinja::to_repr(Value("it's")), "\"it's\"");
  EXPECT_EQ(jinja::to_repr(Value("a\nb")), "'a\\nb'");
  EXPECT_EQ(jinja::to_json(Value("é🙂"), {std::nullopt, ", ", ": ", false, true}),
            "\"\\u00e9\\ud83d\\ude42\"");
}

}  // namespace
