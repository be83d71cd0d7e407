#pragma once
// Publishing an export directory whole: a crash, a full disk or a failed write never leaves half
// an export where an engine would load it, and a previous export stays until the new one is in
// place.
#include <ATen/core/Tensor.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace tandem {

/// Runs `fill(staging)` to write every file into `dir`.tmp (created empty), then moves it to
/// `dir`: an existing `dir` is first renamed to `dir`.old and removed once the new one is there.
/// If `fill` throws, `dir` is untouched.
void publish_export_dir(const std::string& dir,
                        const std::function<void(const std::string& staging)>& fill);

/// An HF-style export directory, published as above: `config` as config.json and `weights` as
/// model.safetensors (sharded with an index when large).
void write_export_dir(const std::string& dir, const nlohmann::json& config,
                      const std::vector<std::pair<std::string, at::Tensor>>& weights);

}  // namespace tandem
