#pragma once
// Publishing an export directory whole: a crash, a full disk or a failed write never leaves half
// an export where an engine would load it, and a previous export stays until the new one is in
// place.
#include <functional>
#include <string>

namespace tandem {

/// Runs `fill(staging)` to write every file into `dir`.tmp (created empty), then moves it to
/// `dir`: an existing `dir` is first renamed to `dir`.old and removed once the new one is there.
/// If `fill` throws, `dir` is untouched.
void publish_export_dir(const std::string& dir,
                        const std::function<void(const std::string& staging)>& fill);

}  // namespace tandem
