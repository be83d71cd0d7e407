// tandem forward: run a checkpoint (frozen) on given ids and write logits and hidden states, the
// hook for checking tandem against any other implementation.
#include <ATen/ATen.h>

#include <iostream>
#include <sstream>

#include "tandem/cli/commands.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/io/tensor_io.h"
#include "tandem/models/frozen.h"

namespace tandem::cli {

namespace {

struct ForwardOptions {
  std::string model_dir;
  std::string input_ids;  // "1,2,3" or "1,2,3;4,5,6" (rows of equal length)
  std::string layers;     // "0,5"
  std::string dtype = "fp32";
  std::string device = "auto";
  std::string out;
};

at::Tensor parse_id_rows(const std::string& text) {
  std::vector<std::vector<int64_t>> rows;
  std::stringstream stream(text);
  std::string row;
  while (std::getline(stream, row, ';')) rows.push_back(parse_int_list(row, "--input-ids"));
  check(!rows.empty(), "[forward] --input-ids is empty");
  for (const auto& r : rows)
    check(r.size() == rows[0].size(), "[forward] --input-ids: rows separated by ';' must have ",
          "equal lengths (", rows[0].size(), " vs ", r.size(), ")");
  at::Tensor ids = at::empty(
      {static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size())}, at::kLong);
  for (size_t b = 0; b < rows.size(); ++b)
    for (size_t t = 0; t < rows[b].size(); ++t) ids[b][t] = rows[b][t];
  return ids;
}

int run_forward(const ForwardOptions& options) {
  const c10::ScalarType dtype = parse_compute_dtype(options.dtype, "--dtype");
  const at::Device device = device_from_option(options.device);
  at::Tensor ids = parse_id_rows(options.input_ids);
  std::vector<int64_t> layers;
  if (!options.layers.empty()) layers = parse_int_list(options.layers, "--layers");

  const FrozenModel model = FrozenModel::load(options.model_dir, dtype, device);
  const int64_t vocab = model.config().vocab_size;
  const int64_t low = ids.min().item<int64_t>(), high = ids.max().item<int64_t>();
  check(low >= 0 && high < vocab, "[forward] --input-ids: token id ", low < 0 ? low : high,
        " is outside the vocabulary of ", options.model_dir, " [0, ", vocab, ")");
  for (int64_t layer : layers)
    check(layer >= 0 && layer < model.config().num_hidden_layers, "[forward] --layers: ", layer,
          " is not a decoder layer of ", options.model_dir, " (0..",
          model.config().num_hidden_layers - 1, ")");

  ids = ids.to(device);
  const auto layout = AttentionLayout::causal(ids.size(0), ids.size(1), device);
  const FrozenModel::Output output = model.forward(ids, layout, layers);

  std::vector<std::pair<std::string, at::Tensor>> tensors = {{"input_ids", ids},
                                                             {"logits", output.logits}};
  for (const auto& [layer, hidden] : output.hidden)
    tensors.emplace_back("hidden." + std::to_string(layer), hidden);
  write_tensors(options.out, tensors,
                {{"model", options.model_dir}, {"dtype", compute_dtype_name(dtype)}});
  std::cout << "wrote " << options.out << ": logits " << output.logits.sizes();
  for (int64_t layer : layers) std::cout << ", hidden." << layer;
  std::cout << " (" << compute_dtype_name(dtype) << ")\n";
  return 0;
}

}  // namespace

Runner add_forward_command(CLI::App& root) {
  auto options = std::make_shared<ForwardOptions>();
  CLI::App* command = root.add_subcommand(
      "forward", "run a checkpoint on token ids; write logits and hidden states to safetensors");
  command->add_option("--model", options->model_dir, "HF checkpoint directory")->required();
  command
      ->add_option("--input-ids", options->input_ids,
                   "token ids, comma-separated; ';' separates rows of a batch")
      ->required();
  command->add_option("--layers", options->layers,
                      "decoder layers whose raw outputs to write as hidden.{i} (0-based)");
  command->add_option("--dtype", options->dtype, "compute dtype: fp32, bf16, fp16")
      ->capture_default_str();
  add_device_option(*command, options->device);
  command->add_option("--out", options->out, "output .safetensors file")->required();
  return [options]() { return run_forward(*options); };
}

}  // namespace tandem::cli
