#include "tandem/io/quantization_config.h"

#include <nlohmann/json.hpp>
#include <set>

#include "tandem/core/error.h"

namespace tandem {

using nlohmann::json;

namespace {

constexpr int64_t kMaxBlock = 1 << 16;

int64_t block_side(const json& value, const std::string& path) {
  check(value.is_number_integer() && value.get<int64_t>() >= 1 && value.get<int64_t>() <= kMaxBlock,
        "[config] ", path,
        ": quantization_config.weight_block_size entries must be integers in 1..", kMaxBlock,
        ", got ", value.dump());
  return value.get<int64_t>();
}

}  // namespace

QuantizationConfig read_quantization_config(const json& config, const std::string& path) {
  if (!config.is_object() || !config.contains("quantization_config") ||
      config["quantization_config"].is_null())
    return QuantizationConfig();
  const json& quant = config["quantization_config"];
  check(quant.is_object(), "[config] ", path, ": 'quantization_config' must be an object");
  const std::string method = quant.contains("quant_method") && quant["quant_method"].is_string()
                                 ? quant["quant_method"].get<std::string>()
                                 : "(none given)";
  if (method == "mxfp4") {
    // What transformers' Mxfp4Config holds; which modules stayed unquantized changes nothing
    // here (a weight is quantized when its blocks are stored).
    static const std::set<std::string> mxfp4_known = {"quant_method", "modules_to_not_convert",
                                                      "dequantize"};
    for (const auto& item : quant.items())
      check(mxfp4_known.count(item.key()) > 0, "[config] ", path,
            ": unsupported quantization_config field '", item.key(), "' for mxfp4");
    QuantizationConfig out;
    out.mxfp4 = true;
    return out;
  }
  check(method == "fp8", "[config] ", path, ": the checkpoint is quantized with quant_method '",
        method,
        "'; tandem reads float weights (bf16, fp16, fp32), block-wise FP8 (quant_method fp8 "
        "with weight_block_size, as DeepSeek-V3 and MiniMax-M2 publish) and gpt-oss's MXFP4 "
        "experts (quant_method mxfp4): dequantize it to bf16 first");
  // The keys transformers' fine-grained FP8 config reads or writes; what would change the
  // weights is checked, the rest (which modules stayed unquantized, how the engine stores or
  // applies them) changes nothing here: a weight is quantized when its scale is stored.
  static const std::set<std::string> known = {"quant_method",
                                              "fmt",
                                              "activation_scheme",
                                              "weight_block_size",
                                              "modules_to_not_convert",
                                              "ignored_layers",
                                              "dequantize",
                                              "scale_fmt",
                                              "expert_dtype"};
  for (const auto& item : quant.items())
    check(known.count(item.key()) > 0, "[config] ", path,
          ": unsupported quantization_config field '", item.key(), "' for block-wise FP8");
  if (quant.contains("fmt") && !quant["fmt"].is_null())
    check(quant["fmt"] == "e4m3" || quant["fmt"] == "float8_e4m3fn", "[config] ", path,
          ": unsupported quantization_config.fmt ", quant["fmt"].dump(),
          " (tandem reads e4m3 weights: e4m3 or float8_e4m3fn)");
  if (quant.contains("activation_scheme") && !quant["activation_scheme"].is_null())
    check(quant["activation_scheme"] == "dynamic", "[config] ", path,
          ": unsupported quantization_config.activation_scheme ", quant["activation_scheme"].dump(),
          " (tandem reads dynamic-scheme checkpoints, which store no activation scales)");
  check(quant.contains("weight_block_size") && quant["weight_block_size"].is_array() &&
            quant["weight_block_size"].size() == 2,
        "[config] ", path,
        ": quantization_config.weight_block_size must list two block sides (per-tensor FP8 is "
        "not supported: dequantize it to bf16 first)");
  QuantizationConfig out;
  out.fp8 = {block_side(quant["weight_block_size"][0], path),
             block_side(quant["weight_block_size"][1], path)};
  return out;
}

std::string fp8_scale_name(const std::string& name) { return name + "_scale_inv"; }

}  // namespace tandem
