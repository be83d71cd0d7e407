// The memory-efficient attention kernels (models/banded_attention.h and the paths built on it)
// against the dense kernels they replace (AttentionKernel::Dense, kept as the reference):
// outputs and every gradient, fp32 and bf16, packed documents, padding, grouped-query attention,
// every TTT unroll step, DFlash block sizes 8 and 16 with anchors at document starts and ends,
// sliding windows, and two chunk sizes (the results must not depend on them).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "gradients.h"
#include "tandem/core/config.h"
#include "tandem/core/error.h"
#include "tandem/models/causal_attention.h"
#include "tandem/models/decoder.h"
#include "tandem/models/dflash.h"
#include "tandem/models/dflash_attention.h"
#include "tandem/models/fused_dflash_attention.h"
#include "tandem/models/fused_ttt_attention.h"
#include "tandem/models/ttt_attention.h"
#include "tandem/models/varlen_attention.h"
#include "tandem/train/training_options.h"

namespace {

using tandem::AttentionKernel;
using tandem::AttentionOptions;

// Two chunkings of the blockwise kernel: tiles smaller than a document (queries not a multiple of
// the tile) and one tile for everything.
const std::vector<AttentionOptions> kBlockwise = {{AttentionKernel::Blockwise, 16, 24},
                                                  {AttentionKernel::Blockwise, 512, 1024}};
const AttentionOptions kDense{AttentionKernel::Dense, 512, 1024};

using tandem::test::output_and_gradients;
using tandem::test::relative_error;

// Each of `kernels` equals dense: output and each named gradient.
void expect_kernels_equal_dense(const std::vector<AttentionOptions>& kernels,
                                const std::function<at::Tensor(const std::vector<at::Tensor>&,
                                                               const AttentionOptions&)>& attend,
                                const std::vector<at::Tensor>& inputs,
                                const std::vector<std::string>& names, at::ScalarType dtype,
                                const std::string& what) {
  const double bound = dtype == at::kBFloat16 ? 2e-2 : 1e-5;
  std::vector<at::Tensor> cast;
  for (const at::Tensor& input : inputs) cast.push_back(input.to(dtype));
  at::manual_seed(99);
  const auto probe = attend(cast, kDense);
  const at::Tensor weights = at::randn(probe.sizes());
  const auto dense = output_and_gradients(
      [&](const std::vector<at::Tensor>& x) { return attend(x, kDense); }, cast, weights);
  for (const AttentionOptions& options : kernels) {
    const auto blockwise = output_and_gradients(
        [&](const std::vector<at::Tensor>& x) { return attend(x, options); }, cast, weights);
    const std::string kernel = options.kernel == AttentionKernel::Fused ? "fused" : "blockwise";
    const std::string where = what + " (" + kernel + ", chunks " +
                              std::to_string(options.query_chunk) + " x " +
                              std::to_string(options.key_chunk) + ", " + c10::toString(dtype) + ")";
    EXPECT_EQ(blockwise.out.scalar_type(), dtype) << where;
    EXPECT_LE(relative_error(blockwise.out, dense.out), bound) << where << ": output";
    for (size_t i = 0; i < inputs.size(); ++i) {
      ASSERT_TRUE(dense.grads[i].defined()) << where << ": " << names[i];
      ASSERT_TRUE(blockwise.grads[i].defined()) << where << ": no gradient for " << names[i];
      EXPECT_LE(relative_error(blockwise.grads[i], dense.grads[i]), bound)
          << where << ": gradient of " << names[i];
    }
  }
}

// Row 0: documents [0, 37), [37, 80), [80, 91), then padding clamped onto the last one; row 1:
// one document over the whole row. (2, 100)
tandem::AttentionLayout packed_layout() {
  at::Tensor documents = at::zeros({2, 100}, at::kLong);
  documents[0].narrow(0, 37, 43).fill_(1);
  documents[0].narrow(0, 80, 20).fill_(2);
  return {at::zeros({2, 100}, at::kLong), documents, documents};
}

// Blockwise at both chunkings equals dense.
void expect_blockwise_equals_dense(const std::function<at::Tensor(const std::vector<at::Tensor>&,
                                                                  const AttentionOptions&)>& attend,
                                   const std::vector<at::Tensor>& inputs,
                                   const std::vector<std::string>& names, at::ScalarType dtype,
                                   const std::string& what) {
  expect_kernels_equal_dense(kBlockwise, attend, inputs, names, dtype, what);
}

// The TTT kernels (blockwise at both chunkings, and fused: ATen's flash kernel per document
// merged by log-sum-exp) equal dense at every unroll step: packed documents, padding, GQA.
TEST(LongContextAttention, TttEveryStepEqualsTheDenseKernel) {
  const int64_t batch = 2, heads = 4, kv_heads = 2, length = 100, dim = 16, steps = 7;
  const tandem::AttentionLayout layout = packed_layout();
  const tandem::KeyBands bands = tandem::causal_key_bands(layout);
  at::manual_seed(7);
  const at::Tensor q = at::randn({batch, heads, length, dim});
  const at::Tensor k = at::randn({batch, kv_heads, length, dim});
  const at::Tensor v = at::randn({batch, kv_heads, length, dim});
  std::vector<at::Tensor> step_keys, step_values;
  for (int64_t j = 0; j < steps - 1; ++j) {
    step_keys.push_back(at::randn({batch, kv_heads, length, dim}));
    step_values.push_back(at::randn({batch, kv_heads, length, dim}));
  }
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16})
    for (int64_t step = 0; step < steps; ++step) {
      std::vector<at::Tensor> inputs = {q, k, v};
      std::vector<std::string> names = {"q", "context_k", "context_v"};
      for (int64_t j = 0; j < step; ++j) {
        inputs.push_back(step_keys[j]);
        inputs.push_back(step_values[j]);
        names.push_back("step_k " + std::to_string(j + 1));
        names.push_back("step_v " + std::to_string(j + 1));
      }
      std::vector<AttentionOptions> kernels = kBlockwise;
      kernels.push_back({AttentionKernel::Fused, 512, 1024});
      expect_kernels_equal_dense(
          kernels,
          [&](const std::vector<at::Tensor>& x, const AttentionOptions& options) {
            std::vector<at::Tensor> ks, vs;
            for (size_t j = 3; j < x.size(); j += 2) {
              ks.push_back(x[j]);
              vs.push_back(x[j + 1]);
            }
            return tandem::ttt_attention(x[0], x[1], x[2], bands, ks, vs, options);
          },
          inputs, names, dtype, "TTT step " + std::to_string(step));
    }
}

// Anchors (sorted, valid first) at a document start (no context), just before a document's end
// (the block ends on its last token), mid-document, and invalid slots on row 1.
tandem::DFlashBlocks dflash_blocks(int64_t block_size) {
  // Row 0's documents: [0, 37), [37, 80), [80, 91); row 1: [0, 100).
  const std::vector<int64_t> row0 = {0, 37 - block_size, 37, 50, 80 - block_size, 80},
                             row1 = {3, 40, 100 - block_size, 0, 0, 0};
  std::vector<int64_t> anchors(row0), valid = {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0};
  anchors.insert(anchors.end(), row1.begin(), row1.end());
  return {block_size, at::tensor(anchors, at::kLong).view({2, 6}),
          at::tensor(valid, at::kLong).to(at::kBool).view({2, 6})};
}

TEST(LongContextAttention, DFlashBlocksEqualTheDenseKernel) {
  const int64_t batch = 2, heads = 6, kv_heads = 2, length = 100, dim = 16;
  const tandem::AttentionLayout layout = packed_layout();
  at::Tensor padding = at::ones({batch, length}, at::kByte);
  padding[0].narrow(0, 91, 9).zero_();
  for (const int64_t block_size : {8, 16}) {
    const tandem::DFlashBlocks blocks = dflash_blocks(block_size);
    const tandem::KeyBands bands = tandem::dflash_key_bands(layout.document_ids, blocks, c10::kCPU);
    // The bands say exactly what the dense context mask says.
    EXPECT_TRUE(bands.dense_mask(length)
                    .slice(1, 0, c10::nullopt, block_size)
                    .equal(tandem::dflash_context_mask(layout.document_ids, padding, blocks)))
        << "block size " << block_size;
    const int64_t queries = blocks.num_anchors() * block_size;
    at::manual_seed(block_size);
    const std::vector<at::Tensor> inputs = {
        at::randn({batch, heads, queries, dim}), at::randn({batch, kv_heads, length, dim}),
        at::randn({batch, kv_heads, length, dim}), at::randn({batch, kv_heads, queries, dim}),
        at::randn({batch, kv_heads, queries, dim})};
    // The fused kernel one block per call (queries of a chunk rounded down to whole blocks) and
    // every block of a row in one call.
    std::vector<AttentionOptions> kernels = kBlockwise;
    kernels.push_back({AttentionKernel::Fused, 1, 1024});
    kernels.push_back({AttentionKernel::Fused, 512, 1024});
    for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16})
      expect_kernels_equal_dense(
          kernels,
          [&](const std::vector<at::Tensor>& x, const AttentionOptions& options) {
            return tandem::dflash_attention(x[0], x[1], x[2], x[3], x[4], bands,
                                            blocks.anchor_valid, options);
          },
          inputs, {"q", "context_k", "context_v", "block_k", "block_v"}, dtype,
          "DFlash block size " + std::to_string(block_size));
  }
}

TEST(LongContextAttention, DecoderAttentionEqualsTheDenseMaskPath) {
  const int64_t batch = 2, heads = 4, kv_heads = 2, length = 100, dim = 16;
  const tandem::AttentionLayout packed = packed_layout();
  const tandem::AttentionLayout causal = tandem::AttentionLayout::causal(batch, length, c10::kCPU);
  at::manual_seed(3);
  const std::vector<at::Tensor> inputs = {at::randn({batch, heads, length, dim}),
                                          at::randn({batch, kv_heads, length, dim}),
                                          at::randn({batch, kv_heads, length, dim})};
  struct Case {
    const tandem::AttentionLayout* layout;
    int64_t window;
    const char* name;
  };
  for (const Case& c :
       {Case{&causal, 0, "causal"}, Case{&packed, 0, "packed documents"},
        Case{&causal, 7, "sliding window 7"}, Case{&packed, 30, "packed documents, window 30"}})
    for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16})
      expect_blockwise_equals_dense(
          [&](const std::vector<at::Tensor>& x, const AttentionOptions& options) {
            const tandem::CausalAttentionPlan plan =
                tandem::plan_causal_attention(*c.layout, c.window, options);
            return tandem::causal_attention({x[0], x[1], x[2]}, plan);
          },
          inputs, {"q", "k", "v"}, dtype, c.name);
}

// The blockwise plans hold no (T, T) tensor: packed documents are cut into per-document SDPA
// calls, a window into per-query bands.
TEST(LongContextAttention, PlansHoldNoDenseMask) {
  const tandem::AttentionLayout packed = packed_layout();
  const tandem::CausalAttentionPlan plan = tandem::plan_causal_attention(packed, 0, {});
  EXPECT_FALSE(plan.dense_mask.defined());
  ASSERT_EQ(plan.document_bounds.size(), 2u);
  EXPECT_EQ(plan.document_bounds[0], (std::vector<int64_t>{0, 37, 80, 100}));
  EXPECT_EQ(plan.document_bounds[1], (std::vector<int64_t>{0, 100}));
  const tandem::CausalAttentionPlan window = tandem::plan_causal_attention(packed, 30, {});
  EXPECT_FALSE(window.dense_mask.defined());
  EXPECT_EQ(window.window_bands.first.sizes(), (std::vector<int64_t>{2, 100}));
  EXPECT_EQ(window.window_bands.first_host[0][50].item<int64_t>(), 37);  // its document's start
  EXPECT_EQ(window.window_bands.first_host[0][75].item<int64_t>(), 46);  // 75 - 30 + 1
  const tandem::CausalAttentionPlan dense = tandem::plan_causal_attention(packed, 0, kDense);
  EXPECT_EQ(dense.dense_mask.sizes(), (std::vector<int64_t>{2, 1, 100, 100}));
}

// A window at least as long as the row hides nothing: the plan is the windowless one (per-document
// SDPA, whose flash kernel runs on a GPU), not the blockwise kernel. One token shorter, it bands.
TEST(LongContextAttention, AWindowNoShorterThanTheRowIsNoWindow) {
  const tandem::AttentionLayout packed = packed_layout();  // rows of 100
  for (const int64_t window : {100, 4096}) {
    const tandem::CausalAttentionPlan plan = tandem::plan_causal_attention(packed, window, {});
    EXPECT_FALSE(plan.window_bands.first.defined()) << window;
    EXPECT_EQ(plan.document_bounds, tandem::plan_causal_attention(packed, 0, {}).document_bounds);
  }
  EXPECT_TRUE(tandem::plan_causal_attention(packed, 99, {}).window_bands.first.defined());
  const tandem::AttentionLayout causal = tandem::AttentionLayout::causal(2, 100, c10::kCPU);
  const tandem::CausalAttentionPlan plain = tandem::plan_causal_attention(causal, 100, {});
  EXPECT_FALSE(plain.window_bands.first.defined());
  EXPECT_TRUE(plain.document_bounds.empty());  // one SDPA call with is_causal
}

// Which calls sdpa() hands to SDPA with GQA and which with K/V repeated: on CUDA, every grouped
// call flash cannot take (fp32, a mask, head_dim over 256 or not a multiple of 8) is repeated,
// so the memory-efficient kernel runs instead of math's (heads, T, T) scores.
TEST(SdpaPolicy, GroupedCallsFlashCannotTakeRepeatKeysAndValuesOnCuda) {
  using tandem::SdpaCall;
  const auto repeats = [](c10::DeviceType device, c10::ScalarType dtype, int64_t kv_heads,
                          int64_t head_dim, bool masked) {
    return tandem::sdpa_repeats_kv(SdpaCall{device, dtype, 32, kv_heads, head_dim, masked});
  };
  // Flash takes it as is: bf16/fp16, GQA, head_dim 64/128/256, causal without a mask.
  for (const c10::ScalarType dtype : {c10::kBFloat16, c10::kHalf})
    for (const int64_t head_dim : {64, 128, 256})
      EXPECT_FALSE(repeats(c10::kCUDA, dtype, 8, head_dim, false)) << head_dim;
  EXPECT_TRUE(repeats(c10::kCUDA, c10::kFloat, 8, 128, false));     // fp32: no flash
  EXPECT_TRUE(repeats(c10::kCUDA, c10::kBFloat16, 8, 128, true));   // a mask: no flash
  EXPECT_TRUE(repeats(c10::kCUDA, c10::kBFloat16, 8, 512, false));  // head_dim > 256
  EXPECT_FALSE(repeats(c10::kCUDA, c10::kBFloat16, 8, 72, false));  // 72 % 8 == 0: flash
  EXPECT_TRUE(repeats(c10::kCUDA, c10::kBFloat16, 8, 100, false));  // 100 % 8 != 0
  // Not grouped: nothing to repeat. On the CPU (and meta), SDPA takes GQA as is.
  EXPECT_FALSE(repeats(c10::kCUDA, c10::kFloat, 32, 128, true));
  EXPECT_FALSE(repeats(c10::kCPU, c10::kFloat, 8, 128, true));
  EXPECT_FALSE(repeats(c10::kMeta, c10::kFloat, 8, 128, false));

  // The operands follow the policy; on the CPU the result is SDPA's either way.
  const at::Tensor q = at::randn({1, 4, 6, 8}), k = at::randn({1, 2, 6, 8}),
                   v = at::randn({1, 2, 6, 8});
  const tandem::SdpaOperands grouped = tandem::sdpa_operands(q, k, v, at::Tensor());
  EXPECT_TRUE(grouped.enable_gqa);
  EXPECT_TRUE(grouped.k.is_same(k));
  const at::Tensor repeated_k = k.repeat_interleave(2, 1), repeated_v = v.repeat_interleave(2, 1);
  EXPECT_TRUE(at::allclose(tandem::sdpa(q, k, v, at::Tensor()),
                           at::scaled_dot_product_attention(q, repeated_k, repeated_v, {}, 0.0,
                                                            /*is_causal=*/true),
                           1e-6, 1e-6));
}

// Where the fused TTT kernel runs: fp32, bf16 and fp16 on the CPU; on CUDA what the flash kernel
// takes (bf16/fp16, head dim a multiple of 8 up to 256, a GPU that runs it); blockwise and dense
// when asked.
TEST(TttKernelPolicy, FusedWhereTheFlashKernelsTakeTheCallBlockwiseElsewhere) {
  using tandem::choose_ttt_kernel;
  const AttentionKernel fused = AttentionKernel::Fused, blockwise = AttentionKernel::Blockwise;
  EXPECT_EQ(choose_ttt_kernel(fused, c10::kCPU, at::kFloat, 16, false).kernel, fused);
  EXPECT_EQ(choose_ttt_kernel(fused, c10::kCPU, at::kBFloat16, 100, false).kernel, fused);
  EXPECT_EQ(choose_ttt_kernel(fused, c10::kCPU, at::kDouble, 16, false).kernel, blockwise);
  EXPECT_EQ(choose_ttt_kernel(fused, c10::kCUDA, at::kBFloat16, 128, true).kernel, fused);
  EXPECT_EQ(choose_ttt_kernel(fused, c10::kCUDA, at::kHalf, 256, true).kernel, fused);
  const tandem::KernelChoice fp32 = choose_ttt_kernel(fused, c10::kCUDA, at::kFloat, 128, true);
  EXPECT_EQ(fp32.kernel, blockwise);
  EXPECT_NE(fp32.reason.find("bf16 or fp16"), std::string::npos) << fp32.reason;
  const tandem::KernelChoice old_gpu =
      choose_ttt_kernel(fused, c10::kCUDA, at::kBFloat16, 128, false);
  EXPECT_EQ(old_gpu.kernel, blockwise);
  EXPECT_NE(old_gpu.reason.find("compute capability"), std::string::npos) << old_gpu.reason;
  EXPECT_EQ(choose_ttt_kernel(fused, c10::kCUDA, at::kBFloat16, 100, true).kernel, blockwise);
  EXPECT_EQ(choose_ttt_kernel(fused, c10::kCUDA, at::kBFloat16, 512, true).kernel, blockwise);
  EXPECT_EQ(choose_ttt_kernel(fused, c10::kMeta, at::kBFloat16, 128, true).kernel, blockwise);
  EXPECT_EQ(choose_ttt_kernel(blockwise, c10::kCPU, at::kFloat, 16, false).kernel, blockwise);
  EXPECT_EQ(choose_ttt_kernel(AttentionKernel::Dense, c10::kCUDA, at::kBFloat16, 128, true).kernel,
            AttentionKernel::Dense);
}

// Where the fused DFlash kernel runs: fp32, bf16 and fp16 on the CPU; on CUDA where the
// memory-efficient kernel was verified against the dense kernel for the dtype and head dim, and
// the head dim is a multiple of 8 up to 256; blockwise and dense when asked.
TEST(DFlashKernelPolicy, FusedWhereVerifiedBlockwiseElsewhere) {
  using tandem::choose_dflash_kernel;
  const AttentionKernel fused = AttentionKernel::Fused, blockwise = AttentionKernel::Blockwise;
  EXPECT_EQ(choose_dflash_kernel(fused, c10::kCPU, at::kFloat, 100, false).kernel, fused);
  EXPECT_EQ(choose_dflash_kernel(fused, c10::kCPU, at::kHalf, 16, false).kernel, fused);
  EXPECT_EQ(choose_dflash_kernel(fused, c10::kCPU, at::kDouble, 16, false).kernel, blockwise);
  EXPECT_EQ(choose_dflash_kernel(fused, c10::kCUDA, at::kBFloat16, 128, true).kernel, fused);
  EXPECT_EQ(choose_dflash_kernel(fused, c10::kCUDA, at::kFloat, 256, true).kernel, fused);
  const tandem::KernelChoice unverified =
      choose_dflash_kernel(fused, c10::kCUDA, at::kBFloat16, 128, false);
  EXPECT_EQ(unverified.kernel, blockwise);
  EXPECT_NE(unverified.reason.find("differed"), std::string::npos) << unverified.reason;
  EXPECT_EQ(choose_dflash_kernel(fused, c10::kCUDA, at::kBFloat16, 100, true).kernel, blockwise);
  EXPECT_EQ(choose_dflash_kernel(fused, c10::kCUDA, at::kBFloat16, 512, true).kernel, blockwise);
  EXPECT_EQ(choose_dflash_kernel(fused, c10::kMeta, at::kBFloat16, 128, true).kernel, blockwise);
  EXPECT_EQ(choose_dflash_kernel(blockwise, c10::kCPU, at::kFloat, 16, false).kernel, blockwise);
  EXPECT_EQ(choose_dflash_kernel(AttentionKernel::Dense, c10::kCPU, at::kFloat, 16, false).kernel,
            AttentionKernel::Dense);
}

// Where the decoders' variable-length flash call runs: CUDA in bf16/fp16 with a head dim that is
// a multiple of 8 up to 256, where it was verified; never on the CPU (no such kernel there) or
// when another kernel is asked for.
TEST(VarlenKernelPolicy, CudaBf16WhereVerifiedThePerDocumentPathsElsewhere) {
  using tandem::choose_varlen_kernel;
  const AttentionKernel fused = AttentionKernel::Fused, blockwise = AttentionKernel::Blockwise;
  EXPECT_EQ(choose_varlen_kernel(fused, c10::kCUDA, at::kBFloat16, 128, true).kernel, fused);
  EXPECT_EQ(choose_varlen_kernel(fused, c10::kCUDA, at::kHalf, 64, true).kernel, fused);
  EXPECT_EQ(choose_varlen_kernel(fused, c10::kCUDA, at::kBFloat16, 128, false).kernel, blockwise);
  EXPECT_EQ(choose_varlen_kernel(fused, c10::kCUDA, at::kFloat, 128, true).kernel, blockwise);
  EXPECT_EQ(choose_varlen_kernel(fused, c10::kCUDA, at::kBFloat16, 100, true).kernel, blockwise);
  EXPECT_EQ(choose_varlen_kernel(fused, c10::kCPU, at::kBFloat16, 128, true).kernel, blockwise);
  EXPECT_EQ(choose_varlen_kernel(blockwise, c10::kCUDA, at::kBFloat16, 128, true).kernel,
            blockwise);
  EXPECT_EQ(
      choose_varlen_kernel(AttentionKernel::Dense, c10::kCUDA, at::kBFloat16, 128, true).kernel,
      AttentionKernel::Dense);
}

// The documents of every row laid end to end: offsets shifted by each row's start, the longest
// document; no bounds means one document per row.
TEST(VarlenKernelPolicy, PackedSequencesLayTheRowsDocumentsEndToEnd) {
  const tandem::PackedSequences packed =
      tandem::packed_sequences({{0, 37, 80, 100}, {0, 100}}, 2, 100, c10::kCPU);
  EXPECT_TRUE(packed.offsets.equal(at::tensor({0, 37, 80, 100, 200}, at::kInt))) << packed.offsets;
  EXPECT_EQ(packed.longest, 100);
  const tandem::PackedSequences rows = tandem::packed_sequences({}, 3, 8, c10::kCPU);
  EXPECT_TRUE(rows.offsets.equal(at::tensor({0, 8, 16, 24}, at::kInt))) << rows.offsets;
  EXPECT_EQ(rows.longest, 8);
  EXPECT_THROW(tandem::packed_sequences({{0, 50}}, 1, 100, c10::kCPU), tandem::Error);
}

// The self-check that guards the fused DFlash kernel on a GPU passes wherever the kernel is right:
// here on the CPU, in fp32, bf16 and fp16 (whose mask cannot hold -1e30), at two head dims.
TEST(DFlashKernelPolicy, TheFusedKernelsSelfCheckPassesOnTheCpu) {
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf})
    for (const int64_t head_dim : {16, 64})
      EXPECT_TRUE(tandem::fused_dflash_attention_verified(c10::kCPU, dtype, head_dim))
          << c10::toString(dtype) << " head_dim " << head_dim;
}

// The self-check that guards the fused TTT kernel on a GPU passes wherever the kernel is right:
// here on the CPU, in fp32, bf16 and fp16.
TEST(TttKernelPolicy, TheFusedKernelsSelfCheckPassesOnTheCpu) {
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf})
    EXPECT_TRUE(tandem::fused_ttt_attention_verified(c10::kCPU, dtype, 16)) << c10::toString(dtype);
}

// The fused kernel reads the documents from the bands; bands it cannot express (a window, a query
// that sees nothing) have no segments, and ttt_attention runs the blockwise kernel for them.
TEST(TttKernelPolicy, SegmentsAreTheDocumentsOfCausalBandsAndNothingElse) {
  const tandem::KeyBands bands = tandem::causal_key_bands(packed_layout());
  const at::Tensor segments = tandem::causal_document_segments(bands);
  ASSERT_TRUE(segments.defined());
  EXPECT_TRUE(segments.equal(
      at::tensor({0, 0, 37, 0, 37, 43, 0, 80, 20, 1, 0, 100}, at::kLong).view({4, 3})))
      << segments;
  EXPECT_FALSE(
      tandem::causal_document_segments(tandem::causal_key_bands(packed_layout(), 8)).defined());
  const tandem::KeyBands nothing = tandem::KeyBands::from_host(
      at::zeros({1, 4}, at::kLong), at::full({1, 4}, -1, at::kLong), c10::kCPU);
  EXPECT_FALSE(tandem::causal_document_segments(nothing).defined());
}

// A query that sees no key (an invalid DFlash block) gives 0 and no NaN, forward and backward.
TEST(LongContextAttention, AQueryThatSeesNothingGivesZeroAndFiniteGradients) {
  const tandem::KeyBands nothing = tandem::KeyBands::from_host(
      at::zeros({1, 4}, at::kLong), at::full({1, 4}, -1, at::kLong), c10::kCPU);
  const at::Tensor q = at::randn({1, 2, 4, 8}).requires_grad_(true);
  const at::Tensor k = at::randn({1, 2, 6, 8}).requires_grad_(true);
  const at::Tensor v = at::randn({1, 2, 6, 8}).requires_grad_(true);
  const at::Tensor out = tandem::ttt_attention(q, k, v, nothing, {}, {}, AttentionOptions{});
  EXPECT_EQ(out.abs().max().item<double>(), 0.0);
  out.sum().backward();
  for (const at::Tensor& grad : {q.grad(), k.grad(), v.grad()}) {
    EXPECT_TRUE(at::isfinite(grad).all().item<bool>());
    EXPECT_EQ(grad.abs().max().item<double>(), 0.0);
  }
}

}  // namespace

namespace {

// The `attention` section: defaults, both kernels, and chunk sizes out of range named by key.
TEST(LongContextAttention, TheAttentionSectionIsReadAndCheckedByKey) {
  const auto read = [](const std::string& yaml) {
    return tandem::read_attention_options(
        tandem::Config::parse(yaml, "run.yaml").section("attention"));
  };
  const AttentionOptions defaults = read("training: {steps: 1}\n");
  EXPECT_EQ(defaults.kernel, AttentionKernel::Fused);
  EXPECT_EQ(defaults.query_chunk, 512);
  EXPECT_EQ(defaults.key_chunk, 1024);
  const AttentionOptions dense =
      read("attention: {kernel: dense, query_chunk: 64, key_chunk: 128}\n");
  EXPECT_EQ(dense.kernel, AttentionKernel::Dense);
  EXPECT_EQ(dense.query_chunk, 64);
  EXPECT_EQ(dense.key_chunk, 128);
  for (const std::string& bad : {std::string("attention: {query_chunk: 0}\n"),
                                 std::string("attention: {key_chunk: 2000000}\n"),
                                 std::string("attention: {kernel: flash}\n")}) {
    try {
      read(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const tandem::Error& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("run.yaml"), std::string::npos) << message;
      EXPECT_NE(message.find("attention."), std::string::npos) << message;
    }
  }
}

}  // namespace
