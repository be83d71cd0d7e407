#pragma once
// A Jinja engine for Hugging Face chat templates, native C++: parses a template once and renders
// it with the variables transformers passes (messages, tools, add_generation_prompt, the special
// tokens, extra kwargs), in the environment transformers configures (trim_blocks, lstrip_blocks,
// loop controls, `{% generation %}`, `raise_exception`, `strftime_now`, its `tojson`).
//
// Templates are programs from downloaded files, so rendering is bounded (steps, macro depth,
// output size) and does nothing but produce text; a construct the engine does not have is an
// error naming it, never a different rendering. Errors read
// "[chat template] <origin>:<line>:<column>: <what>".
#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tandem/text/jinja_value.h"

namespace tandem::jinja {

struct Stmt;

struct RenderOptions {
  int64_t max_steps = 20'000'000;       // statements run and expressions evaluated
  int max_call_depth = 32;              // macros calling macros
  size_t max_output_bytes = 64u << 20;  // the rendered text
  std::optional<std::time_t> now;       // strftime_now's time (default: the clock, UTC)
};

struct Rendered {
  std::string text;
  /// The byte ranges [begin, end) that `{% generation %}` blocks wrote, in order.
  std::vector<std::pair<size_t, size_t>> generation_spans;
};

class Template {
 public:
  /// Parses `source`; `origin` names it in errors (a file path, "tokenizer_config.json", ...).
  Template(const std::string& source, std::string origin);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  /// Renders with `variables` (the template's globals; builtins such as range and namespace
  /// are added unless `variables` names them).
  Rendered render(const Dict& variables, const RenderOptions& options = {}) const;

  const std::string& origin() const { return origin_; }
  /// Whether the template has a `{% generation %}` block.
  bool has_generation() const { return has_generation_; }

 private:
  std::string origin_;
  std::shared_ptr<const std::vector<std::unique_ptr<Stmt>>> body_;
  bool has_generation_ = false;
};

}  // namespace tandem::jinja
