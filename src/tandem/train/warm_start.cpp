#include "tandem/train/warm_start.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <filesystem>
#include <map>
#include <optional>
#include <sstream>

#include "tandem/core/config.h"
#include "tandem/core/config_schema.h"
#include "tandem/core/error.h"
#include "tandem/io/hf_checkpoint.h"
#include "tandem/models/frozen.h"
#include "tandem/objectives/description.h"
#include "tandem/train/checkpoint.h"
#include "tandem/train/sharded_model.h"

namespace tandem {

namespace {

namespace fs = std::filesystem;

bool trains_a_draft(const ObjectiveDescription& objective) {
  for (const KeyGroup* group : objective.keys)
    if (group == &keys::draft::group) return true;
  return false;
}

// The tensors of a tandem checkpoint (a step dir, or a run dir's newest valid one), if `source`
// is one; `described` says which.
std::optional<std::map<std::string, at::Tensor>> checkpoint_tensors(const std::string& source,
                                                                    std::string& described) {
  if (fs::exists(fs::path(source) / "manifest.json")) {
    const CheckpointReader reader = CheckpointReader::open(source);
    described = "checkpoint " + reader.dir();
    return read_full_checkpoint_tensors(reader, "model");
  }
  if (list_checkpoints(source).empty()) return std::nullopt;
  CheckpointSearch search = find_latest_valid(source);
  check(search.checkpoint.has_value(), "[warm start] ", source,
        ": a run directory with no valid checkpoint");
  described = "checkpoint " + search.checkpoint->dir();
  return read_full_checkpoint_tensors(*search.checkpoint, "model");
}

}  // namespace

std::string read_init_from(const Config& config, const ObjectiveDescription& objective,
                           std::string& where) {
  const StringKey& key =
      trains_a_draft(objective) ? keys::draft::init_from : keys::model::init_from;
  where = key.where(config);
  return key.read(config);
}

std::string warm_start(torch::nn::Module& trained, const std::string& source,
                       const ObjectiveDescription& objective, const std::string& where) {
  check(fs::is_directory(source), "[warm start] ", where, " = ", source, ": no such directory");
  std::string described;
  std::optional<std::map<std::string, at::Tensor>> tensors = checkpoint_tensors(source, described);
  std::optional<HfCheckpoint> exported;
  if (!tensors) {
    std::string dir = source;
    if (objective.find_export)
      if (const std::optional<std::string> found = objective.find_export(source)) dir = *found;
    exported.emplace(HfCheckpoint::open(dir));
    described = "export " + dir;
  }
  // Every tensor first, so that a mismatch changes nothing.
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // (trained tensor, stored values)
  std::vector<std::string> missing, differing;
  for (const auto& [name, tensor] : model_state(trained)) {
    at::Tensor stored;
    if (tensors) {
      const auto found = tensors->find(name);
      if (found != tensors->end()) stored = found->second;
    } else if (exported->contains(name)) {  // integer buffers (a vocabulary map) as stored
      stored = at::isFloatingType(tensor.scalar_type()) ? exported->read_weight(name)
                                                        : exported->read(name);
    }
    if (!stored.defined()) {
      missing.push_back(name);
    } else if (stored.sizes() != tensor.sizes()) {
      std::ostringstream line;
      line << name << " is " << stored.sizes() << " there, " << tensor.sizes() << " here";
      differing.push_back(line.str());
    } else {
      copies.emplace_back(tensor, stored);
    }
  }
  auto some = [](const std::vector<std::string>& names) {
    std::string text;
    for (size_t i = 0; i < names.size() && i < 4; ++i) text += (i ? "; " : "") + names[i];
    if (names.size() > 4) text += "; ... (" + std::to_string(names.size()) + " in all)";
    return text;
  };
  check(differing.empty(), "[warm start] ", where, " = ", source, " (", described,
        "): shapes differ from the configured model: ", some(differing),
        ". Configure the model as the one that was saved");
  check(missing.empty(), "[warm start] ", where, " = ", source, " (", described,
        ") lacks tensors of the configured model: ", some(missing),
        ". Point it at a checkpoint or export of this objective's ",
        trains_a_draft(objective) ? "draft" : "model");
  at::NoGradGuard no_gradients;
  for (auto& [tensor, stored] : copies) tensor.copy_(stored);
  return "[train] warm start from " + described + ": " + std::to_string(copies.size()) +
         " tensors (optimizer, data position and step count fresh)";
}

}  // namespace tandem
