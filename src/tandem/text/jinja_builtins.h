#pragma once
// What chat templates call besides their own macros: Jinja's filters and tests, the string, dict
// and list methods of Python that templates use, and attribute and item lookup as Jinja does it
// (`a.b` tries the attribute, then the item; `a['b']` the item, then the attribute). Each throws
// Problem (no position: the renderer adds it) for a wrong argument, and names what it does not
// support.
#include <string>

#include "tandem/text/jinja_value.h"

namespace tandem::jinja {

/// `input | name(args)`; throws Problem for an unknown filter, naming it.
Value apply_filter(const std::string& name, const Value& input, CallArgs& args);
/// `input is name(args)`; throws Problem for an unknown test, naming it.
bool apply_test(const std::string& name, const Value& input, CallArgs& args);
/// `object.name`: an undefined value when missing; throws Problem when `object` is undefined.
Value get_attribute(const Value& object, const std::string& name);
/// `object[key]`: an undefined value when missing; throws Problem when `object` is undefined.
Value get_item(const Value& object, const Value& key);
/// `object[start:stop:step]` of a string or a list (null Values: absent).
Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step);
/// Python's len(): code points of a string, items of a list or dict; throws Problem otherwise.
int64_t length_of(const Value& value);
/// Python's iteration: a list's items, a dict's keys, a string's characters, nothing for undefined.
std::vector<Value> iterate(const Value& value);
/// `needle in haystack`.
bool contains(const Value& haystack, const Value& needle);

/// Code-point strings, for slicing and case (UTF-8 in, UTF-8 out).
std::u32string to_code_points(const std::string& text);
std::string from_code_points(const std::u32string& text);

}  // namespace tandem::jinja
