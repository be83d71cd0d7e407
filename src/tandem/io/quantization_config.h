#pragma once
// config.json's `quantization_config`: tandem reads block-wise FP8 checkpoints (DeepSeek-V3/R1,
// Kimi-K2, MiniMax-M2, Qwen3-*-FP8), whose config says
//   "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
//                           "weight_block_size": [B0, B1]}
// and gpt-oss's MXFP4 experts,
//   "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [...]}
// and refuses every other method by name. How such weights are stored and dequantized:
// io/block_fp8.h, io/mxfp4.h.
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace tandem {

/// The block of a block-wise FP8 checkpoint; both 0: the checkpoint is not quantized.
struct BlockFp8 {
  int64_t block_rows = 0;
  int64_t block_cols = 0;

  bool enabled() const { return block_rows > 0; }
};

/// How a checkpoint's weights are quantized, as config.json says.
struct QuantizationConfig {
  BlockFp8 fp8;        // quant_method fp8: its block
  bool mxfp4 = false;  // quant_method mxfp4: gpt-oss's experts as *_blocks + *_scales (io/mxfp4.h)

  bool quantized() const { return fp8.enabled() || mxfp4; }
};

/// config.json's `quantization_config` (absent or null: not quantized). Block-wise FP8 (e4m3)
/// gives its block, MXFP4 says so; any other method or a malformed block is an Error naming
/// `path`, the field and what to do.
QuantizationConfig read_quantization_config(const nlohmann::json& config, const std::string& path);

/// The name of the scale of weight `name` (`X.weight` -> `X.weight_scale_inv`).
std::string fp8_scale_name(const std::string& name);

}  // namespace tandem
