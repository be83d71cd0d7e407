#pragma once
// What the CLI knows about an objective, declared once beside it (objectives/<name>.cpp:
// <name>_description()) and listed in objectives/registry.cpp. `tandem train --help`, `capture`,
// `eval` and `export` read these descriptions; none of them names an algorithm. Adding an
// objective = its files under objectives/ + one line in registry.cpp (docs/adding-an-objective.md).
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/core/run_context.h"
#include "tandem/eval/draft_proposer.h"
#include "tandem/eval/speculative.h"

namespace tandem {

class Config;
class KeyGroup;
class Objective;
class FrozenModel;

/// What `tandem capture` stores for an objective's offline training: the outputs of the target
/// layers its draft reads, and the last layer's when its loss needs it.
struct CaptureRequest {
  std::string target_path;
  c10::ScalarType target_dtype = c10::ScalarType::Float;
  std::vector<int64_t> layer_ids;  // 0-based decoder layers
  bool last_hidden = false;
};

/// A trained draft loaded from its export, ready for speculative decoding against its target.
class DraftDecoder {
 public:
  virtual ~DraftDecoder() = default;
  /// "EAGLE-3", "DFlash": for reports.
  virtual std::string type() const = 0;
  /// Draft tokens per step when --draft-tokens is not given.
  virtual int64_t default_draft_tokens() const = 0;
  /// Errors naming the export when it was trained for another target (vocab, widths, layers).
  virtual void check_target(const FrozenModel& target, const std::string& target_dir) const = 0;
  /// Its proposer (eval/draft_proposer.h) against `target`, `draft_tokens` tokens per step;
  /// `options` for what a draft may read from them (options.confidence_threshold).
  virtual std::unique_ptr<DraftProposer> proposer(const FrozenModel& target, int64_t draft_tokens,
                                                  const DecodeOptions& options) const = 0;
  /// Whether its proposals can stop early by a confidence head (DSpark).
  virtual bool has_confidence_head() const { return false; }
  /// Speculative decoding of `prompt` with that proposer (eval/speculative.h).
  SpeculativeOutput decode(const FrozenModel& target, const std::vector<int64_t>& prompt,
                           int64_t draft_tokens, const DecodeOptions& options) const;

 protected:
  /// Errors naming `draft_dir` unless the draft's vocabulary and the hidden width it reads are
  /// the target's (every draft reads the target's hidden states and shares its vocabulary).
  static void check_vocab_and_width(const std::string& draft_dir, int64_t vocab_size,
                                    int64_t target_hidden_size, const FrozenModel& target,
                                    const std::string& target_dir);
};

struct ObjectiveDescription {
  std::string name;     // training.objective
  std::string summary;  // one line: what it trains against what
  // The config keys it reads beyond every objective's (core/config_schema.h): `tandem train
  // --help`, `tandem config-keys` and docs/training.md list them.
  std::vector<const KeyGroup*> keys;
  /// Builds it from a config, placed and loaded as `run` says.
  std::function<std::unique_ptr<Objective>(const Config&, const RunContext&)> make;
  /// Offline training (`tandem capture`): what to store. Unset: the objective has no capture.
  std::function<CaptureRequest(const Config&, const RunContext&)> capture;
  /// Drafts (`tandem eval`): the export directory inside `dir` this objective wrote, if `dir` is
  /// one of its exports (a run's export directory or the format directory inside it).
  std::function<std::optional<std::string>(const std::string& dir)> find_export;
  /// Loads that export in `dtype` on `device`. Set together with find_export.
  std::function<std::unique_ptr<DraftDecoder>(const std::string& export_dir, c10::ScalarType dtype,
                                              const c10::Device& device)>
      load_draft;
};

/// Every objective, in the order `tandem train --help` lists them.
const std::vector<ObjectiveDescription>& objective_descriptions();

/// The description named `name`; an Error naming `where` and listing the names otherwise.
const ObjectiveDescription& find_objective(const std::string& name, const std::string& where);

/// The description training.objective names in `config`.
const ObjectiveDescription& configured_objective(const Config& config);

/// "a, b, c": the names of the objectives for which `has` is true.
std::string objective_names(const std::function<bool(const ObjectiveDescription&)>& has);

}  // namespace tandem
