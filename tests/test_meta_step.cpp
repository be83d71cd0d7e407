// Whole steps on the meta device, placed as a GPU run places them (a dry run planning for
// cuda:0: every model, batch, gradient and optimizer state on meta, with the dtypes a GPU gets).
// Meta tensors have shapes and no values, so on meta every read of a device value on the host
// (.item(), .cpu(), a data pointer) throws, and so does every op that mixes a device tensor with
// a non-scalar host one: on a GPU each of those is a wait for the device or a hidden copy, which
// no CPU timing shows. A step that runs here reads nothing from the device except through
// read_on_host (core/host_read.h), and the reasons it gives must be exactly those listed below:
// one training step of every objective (SFT, EAGLE-3 online and offline, DFlash, distillation,
// DPO, GSPO, and SFT of a mixture-of-experts model), and one speculative decode of each draft
// and one batched generation.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <gtest/gtest.h>
#include <torch/library.h>

#include <map>
#include <string>

#include "step_configs.h"
#include "tandem/core/config.h"
#include "tandem/core/host_read.h"
#include "tandem/core/run_context.h"
#include "tandem/eval/dflash_decode.h"
#include "tandem/eval/eagle3_decode.h"
#include "tandem/eval/generation.h"
#include "tandem/eval/speculative.h"
#include "tandem/models/frozen.h"
#include "tandem/objectives/dflash.h"
#include "tandem/objectives/eagle3.h"
#include "tandem/objectives/objective.h"
#include "tandem/train/optimizer.h"
#include "tandem/train/step_metrics.h"
#include "tandem/train/training_data.h"
#include "test_util.h"

// libtorch's C++ build lacks Meta kernels for a few ops that Python supplies itself
// (torch/_meta_registrations.py): the ones tandem's steps use get shape-only kernels here, for
// this test binary only. Each refuses operands that are not all meta (a 0-dim host scalar
// aside), which on a GPU would be host tensors fed to a device op.
namespace meta_kernels {

void require_meta(const char* op, std::initializer_list<const at::Tensor*> tensors) {
  for (const at::Tensor* tensor : tensors)
    TORCH_CHECK(!tensor->defined() || tensor->is_meta() || (tensor->is_cpu() && tensor->dim() == 0),
                op, ": an operand on ", tensor->device(),
                " beside meta ones (on a GPU: a host "
                "tensor used by a device op)");
}

at::Tensor index_select_meta(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  require_meta("index_select", {&self, &index});
  TORCH_CHECK(index.dim() <= 1, "index_select: index must be 0-D or 1-D");
  std::vector<int64_t> shape = self.sizes().vec();
  if (!shape.empty())
    shape[static_cast<size_t>(c10::maybe_wrap_dim(dim, self.dim()))] = index.numel();
  return at::empty(shape, self.options());
}

at::Tensor& index_select_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                             at::Tensor& out) {
  out.resize_(index_select_meta(self, dim, index).sizes());
  return out;
}

template <const char* Name>
at::Tensor& logical_binary_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
  require_meta(Name, {&self, &other});
  out.resize_(at::infer_size(self.sizes(), other.sizes()));
  return out;
}
constexpr char kLogicalAnd[] = "logical_and", kLogicalOr[] = "logical_or";

at::Tensor& logical_not_out(const at::Tensor& self, at::Tensor& out) {
  require_meta("logical_not", {&self});
  out.resize_(self.sizes());
  return out;
}

at::Tensor where_self(const at::Tensor& condition, const at::Tensor& self,
                      const at::Tensor& other) {
  require_meta("where", {&condition, &self, &other});
  const std::vector<int64_t> shape =
      at::infer_size(at::infer_size(condition.sizes(), self.sizes()), other.sizes());
  return at::empty(shape, self.options().device(at::kMeta).dtype(at::result_type(self, other)));
}

at::Tensor& where_self_out(const at::Tensor& condition, const at::Tensor& self,
                           const at::Tensor& other, at::Tensor& out) {
  out.resize_(where_self(condition, self, other).sizes());
  return out;
}

at::Tensor full_reduction(const at::Tensor& self) {
  require_meta("max/min", {&self});
  return at::empty({}, self.options());
}

at::Tensor relu(const at::Tensor& self) {
  require_meta("relu", {&self});
  return at::empty_like(self);
}

at::Tensor remainder_scalar_tensor(const at::Scalar& self, const at::Tensor& other) {
  require_meta("remainder", {&other});
  return at::empty_like(other);
}

at::Tensor& same_shape_out(const at::Tensor& self, at::Tensor& out) {
  require_meta("abs", {&self});
  out.resize_(self.sizes());
  return out;
}

at::Tensor isnan(const at::Tensor& self) {
  require_meta("isnan", {&self});
  return at::empty(self.sizes(), self.options().dtype(at::kBool));
}

at::Tensor rsub(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  require_meta("rsub", {&self, &other});
  return at::empty(at::infer_size(self.sizes(), other.sizes()),
                   self.options().dtype(at::result_type(self, other)));
}

std::tuple<at::Tensor, at::Tensor> log_sigmoid_forward(const at::Tensor& self) {
  require_meta("log_sigmoid", {&self});
  return {at::empty_like(self), at::empty({0}, self.options())};
}

at::Tensor log_sigmoid_backward(const at::Tensor& grad, const at::Tensor& self,
                                const at::Tensor& buffer) {
  require_meta("log_sigmoid_backward", {&grad, &self, &buffer});
  return at::empty_like(self);
}

at::Tensor embedding_dense_backward(const at::Tensor& grad, const at::Tensor& indices,
                                    c10::SymInt num_weights, c10::SymInt padding_idx,
                                    bool scale_grad_by_freq) {
  require_meta("embedding_dense_backward", {&grad, &indices});
  return at::empty({num_weights.expect_int(), grad.size(-1)}, grad.options());
}

}  // namespace meta_kernels

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("index_select", TORCH_FN(meta_kernels::index_select_meta));
  m.impl("index_select.out", TORCH_FN(meta_kernels::index_select_out));
  m.impl("logical_and.out", TORCH_FN(meta_kernels::logical_binary_out<meta_kernels::kLogicalAnd>));
  m.impl("logical_or.out", TORCH_FN(meta_kernels::logical_binary_out<meta_kernels::kLogicalOr>));
  m.impl("logical_not.out", TORCH_FN(meta_kernels::logical_not_out));
  m.impl("where.self", TORCH_FN(meta_kernels::where_self));
  m.impl("where.self_out", TORCH_FN(meta_kernels::where_self_out));
  m.impl("max", TORCH_FN(meta_kernels::full_reduction));
  m.impl("min", TORCH_FN(meta_kernels::full_reduction));
  m.impl("relu", TORCH_FN(meta_kernels::relu));
  m.impl("remainder.Scalar_Tensor", TORCH_FN(meta_kernels::remainder_scalar_tensor));
  m.impl("abs.out", TORCH_FN(meta_kernels::same_shape_out));
  m.impl("isnan", TORCH_FN(meta_kernels::isnan));
  m.impl("rsub.Tensor", TORCH_FN(meta_kernels::rsub));
  m.impl("log_sigmoid_forward", TORCH_FN(meta_kernels::log_sigmoid_forward));
  m.impl("log_sigmoid_backward", TORCH_FN(meta_kernels::log_sigmoid_backward));
  m.impl("embedding_dense_backward", TORCH_FN(meta_kernels::embedding_dense_backward));
}

namespace {

using Reads = std::map<std::string, int64_t>;
using tandem::testing::StepConfigs;

// A GPU run, planned: tensors go to the meta device, dtypes follow cuda:0.
tandem::RunContext planned_gpu_run() {
  tandem::RunContext run(at::Device(at::kCUDA, 0));
  run.dry_run = true;
  return run;
}

// One training step as the trainer runs it (trainer.cpp: TrainingRun::step): the micro-batch to
// the device, forward, backward, the optimizer's gradient sums, norm and update, then the step's
// metrics read in one transfer. Returns the reads it made through read_on_host.
Reads training_step_on_meta(const std::string& yaml) {
  const tandem::Config config = tandem::Config::parse(yaml, "step.yaml");
  const tandem::TrainingData data = tandem::read_training_data(config);
  std::unique_ptr<tandem::Objective> objective = tandem::make_objective(config, planned_gpu_run());
  objective->attach_data({data.dataset ? &*data.dataset : nullptr,
                          data.dataset ? nullptr : &data.rollouts, data.cache_dir,
                          data.packing.seq_len});
  tandem::MixedPrecisionAdamW optimizer(tandem::trainable_parameters(objective->trainable()), {});
  tandem::SamplerOptions sampler_options;
  sampler_options.dataset_size = data.num_records();
  tandem::DataCursor cursor(sampler_options);
  const tandem::PackedBatch batch = tandem::next_micro_batch(cursor, data);
  const tandem::StepTotals totals = objective->count(batch);  // on the host batch, as the trainer

  tandem::reset_meta_host_reads();
  tandem::ObjectiveOutput output = objective->compute(batch.to(at::kMeta), totals);
  EXPECT_TRUE(output.loss.is_meta());
  output.loss.backward();
  optimizer.accumulate_gradients();
  const at::Tensor norm = optimizer.gradient_norm();
  optimizer.update(1e-3);
  optimizer.zero_grad();
  tandem::StepMetrics metrics;
  metrics.add(output.metrics);
  metrics.add({{"grad_norm", norm}, {"step_loss", output.loss.detach()}});
  metrics.read();
  for (const at::Tensor& parameter : objective->trainable().parameters())
    EXPECT_TRUE(parameter.is_meta());
  return tandem::meta_host_reads();
}

// The one wait of a training step: its metrics, loss and gradient norm, read together.
const Reads kTrainingStepReads = {{"step_metrics", 1}};

TEST(TrainingStepOnMeta, EveryObjectiveReadsOnlyItsStepMetricsFromTheDevice) {
  const StepConfigs configs;
  for (const char* objective : tandem::testing::kObjectives) {
    SCOPED_TRACE(objective);
    EXPECT_EQ(training_step_on_meta(configs.config(objective)), kTrainingStepReads);
  }
  SCOPED_TRACE("eagle3 offline");
  EXPECT_EQ(training_step_on_meta(configs.eagle3_offline()), kTrainingStepReads);
}

// A mixture-of-experts layer of a planned GPU run (bf16) goes through the grouped matmul with the
// experts' offsets on the device: no wait for the token counts (the per-expert loop would read
// them once per MoE layer).
TEST(TrainingStepOnMeta, AMixtureOfExpertsModelReadsNothingMoreThanItsStepMetrics) {
  const StepConfigs configs;
  const std::string moe = tandem::testing::model_fixture("qwen3_moe");
  const std::string yaml = "model: {path: " + moe + "}\nloss: {chunk_tokens: 16}\n" +
                           configs.data() + "training: {objective: sft, seed: 0}\n";
  EXPECT_EQ(training_step_on_meta(yaml), kTrainingStepReads);
}

// Speculative decoding reads, by design, the draft's vocabulary map once and each proposed and
// verified token: nothing else. On meta every read token is 0, so each step accepts what the
// draft proposed as 0; the loop still ends at max_new_tokens.
TEST(SpeculativeDecodingOnMeta, ReadsOnlyTheDecodedTokensAndTheVocabularyMap) {
  const StepConfigs configs;
  const tandem::RunContext run = planned_gpu_run();
  const tandem::DecodeOptions decode{/*max_new_tokens=*/6, {}, /*kv_cache=*/true};
  const std::vector<int64_t> prompt = {5, 6, 7, 8, 9, 10};
  {
    SCOPED_TRACE("eagle3");
    std::unique_ptr<tandem::Objective> objective =
        tandem::make_objective(tandem::Config::parse(configs.config("eagle3"), "e.yaml"), run);
    auto& eagle3 = dynamic_cast<tandem::Eagle3Objective&>(*objective);
    const auto target =
        tandem::FrozenModel::load(tandem::testing::model_fixture("llama3"), at::kFloat, run);
    tandem::reset_meta_host_reads();
    const auto output = tandem::eagle3_decode(target, *eagle3.draft(), prompt, 3, decode);
    EXPECT_EQ(static_cast<int64_t>(output.tokens.size()), 6);
    const Reads reads = tandem::meta_host_reads();
    EXPECT_EQ(reads.size(), 2u);
    EXPECT_EQ(reads.count("draft_vocab_map"), 1u);
    EXPECT_GT(reads.count("decoded_tokens"), 0u);
  }
  {
    SCOPED_TRACE("dflash");
    std::unique_ptr<tandem::Objective> objective =
        tandem::make_objective(tandem::Config::parse(configs.config("dflash"), "d.yaml"), run);
    auto& dflash = dynamic_cast<tandem::DFlashObjective&>(*objective);
    const auto target =
        tandem::FrozenModel::load(tandem::testing::model_fixture("qwen3"), at::kFloat, run);
    tandem::reset_meta_host_reads();
    const auto output =
        tandem::dflash_decode(target, *dflash.draft(), at::Tensor(), prompt, 3, decode);
    EXPECT_EQ(static_cast<int64_t>(output.tokens.size()), 6);
    const Reads reads = tandem::meta_host_reads();
    EXPECT_EQ(reads.size(), 1u);
    EXPECT_GT(reads.count("decoded_tokens"), 0u);
  }
  {
    SCOPED_TRACE("generate");
    const auto target =
        tandem::FrozenModel::load(tandem::testing::model_fixture("llama3"), at::kFloat, run);
    tandem::reset_meta_host_reads();
    const auto generations = tandem::generate(target, {prompt, {5, 6}}, decode, {});
    ASSERT_EQ(generations.size(), 2u);
    EXPECT_EQ(generations[0].tokens.size(), 6u);
    // One read per generated position: the batch's logits, all rows at once.
    EXPECT_EQ(tandem::meta_host_reads(), (Reads{{"decoded_tokens", 6}}));
  }
}

}  // namespace
