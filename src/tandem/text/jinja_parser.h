#pragma once
// Parses a chat template's tokens into statements (text/jinja_ast.h). Statements other than
// those chat templates use (include, import, extends, block, with, do, autoescape, ...) are an
// error naming the statement and where it is, never a silent skip.
#include <string>
#include <string_view>

#include "tandem/text/jinja_ast.h"

namespace tandem::jinja {

/// The template's statements; throws Error("[chat template] <origin>:<line>:<column>: ...").
Body parse_template(std::string_view source, const std::string& origin);

}  // namespace tandem::jinja
