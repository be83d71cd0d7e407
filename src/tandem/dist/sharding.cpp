#include "tandem/dist/sharding.h"

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <unordered_map>

#include "tandem/core/error.h"
#include "tandem/core/fp32_gradients.h"
#include "tandem/dist/process_group.h"

namespace tandem {

namespace {

struct ShardedTensor {
  at::Tensor full;   // the tensor models use; its storage is empty unless gathered
  at::Tensor shard;  // (chunk,) this rank's slice, zero-padded
  ShardLayout layout;
  dist::ProcessGroup* group = nullptr;
  int gathered = 0;  // nesting count of the calls that need the full values
};

using ShardedPtr = std::shared_ptr<ShardedTensor>;

// Every sharded tensor alive, by the TensorImpl that models hold (training is single-threaded).
std::unordered_map<const c10::TensorImpl*, ShardedPtr>& registry() {
  static std::unordered_map<const c10::TensorImpl*, ShardedPtr> tensors;
  return tensors;
}

ShardedPtr find_sharded(const at::Tensor& tensor) {
  if (!tensor.defined() || registry().empty()) return nullptr;
  auto found = registry().find(tensor.unsafeGetTensorImpl());
  return found == registry().end() ? nullptr : found->second;
}

size_t full_nbytes(const at::Tensor& tensor) {
  return static_cast<size_t>(tensor.numel()) * tensor.element_size();
}

// The full tensor's storage gets memory again (same StorageImpl: every handle and view sees it).
// A device allocator allocates on the CURRENT device, whatever device the tensor names: the guard
// makes it the tensor's (rank N's gathered weight on cuda:N, not cuda:0), and the check catches
// any allocator that still answers with memory elsewhere.
void allocate_storage(const at::Tensor& full) {
  c10::StorageImpl* storage = full.storage().unsafeGetStorageImpl();
  at::Allocator* allocator = storage->allocator();
  if (allocator == nullptr) allocator = c10::GetAllocator(full.device().type());
  const c10::DeviceGuard on_its_device(full.device());
  at::DataPtr memory = allocator->allocate(full_nbytes(full));
  check(memory.device() == full.device(), "[shard] a gathered weight on ", full.device().str(),
        " got memory on ", memory.device().str(), " from its allocator");
  storage->set_data_ptr_noswap(std::move(memory));
  storage->set_nbytes(full_nbytes(full));
}

void free_storage(const at::Tensor& full) {
  c10::StorageImpl* storage = full.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, full.device()));
  storage->set_nbytes(0);
}

void gather(ShardedTensor& sharded) {
  if (sharded.gathered++ > 0) return;
  allocate_storage(sharded.full);
  const at::Tensor all = sharded.group->all_gather(sharded.shard);  // (ranks * chunk,)
  at::NoGradGuard no_grad;
  sharded.full.detach().view(-1).copy_(all.narrow(0, 0, sharded.layout.numel));
}

void release(ShardedTensor& sharded) {
  if (--sharded.gathered == 0) free_storage(sharded.full);
}

// Gathers the listed tensors for a scope (null entries: not sharded).
class GatherScope {
 public:
  explicit GatherScope(std::vector<ShardedPtr> tensors) : tensors_(std::move(tensors)) {
    for (const ShardedPtr& sharded : tensors_)
      if (sharded) gather(*sharded);
  }
  ~GatherScope() {
    for (auto it = tensors_.rbegin(); it != tensors_.rend(); ++it)
      if (*it) release(**it);
  }
  GatherScope(const GatherScope&) = delete;
  GatherScope& operator=(const GatherScope&) = delete;

 private:
  std::vector<ShardedPtr> tensors_;
};

// The reduce-scattered gradient of a sharded tensor's slice from this rank's full gradient
// (undefined: this rank's call did not reach it, which counts as zeros), in fp32.
at::Tensor slice_gradient(const ShardedTensor& sharded, const at::Tensor& full_gradient) {
  const ShardLayout& layout = sharded.layout;
  at::Tensor flat =
      at::zeros({layout.ranks * layout.chunk()}, sharded.shard.options().dtype(at::kFloat));
  if (full_gradient.defined()) flat.narrow(0, 0, layout.numel).copy_(full_gradient.reshape({-1}));
  return sharded.group->reduce_scatter_sum(flat);
}

// What autograd gets for a leaf's gradient: nothing when the gradient went to the leaf's fp32
// sum (core/fp32_gradients.h), else the gradient in the leaf's dtype.
at::Tensor leaf_gradient(const at::Tensor& leaf, const at::Tensor& gradient) {
  if (add_to_fp32_gradient_sum(leaf, gradient)) return at::Tensor();
  return gradient.defined() ? gradient.to(leaf.scalar_type()) : gradient;
}

struct ShardedCallState : torch::CustomClassHolder {
  ParameterBody body;
  std::vector<at::Tensor> parameters;  // the full tensors the body reads
  std::vector<ShardedPtr> sharded;     // per parameter; null when not sharded
  size_t num_inputs = 0;
};

// One layer call as one autograd node: forward on gathered weights without a graph; backward
// re-gathers, recomputes the call with a graph, and differentiates it.
struct ShardedCall : torch::autograd::Function<ShardedCall> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                at::TensorList tensors,
                                                c10::intrusive_ptr<ShardedCallState> state) {
    const std::vector<at::Tensor> inputs(tensors.begin(), tensors.begin() + state->num_inputs);
    std::vector<at::Tensor> outputs;
    {
      GatherScope gathered(state->sharded);
      outputs = state->body(inputs, state->parameters);
    }
    ctx->save_for_backward(inputs);
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    for (const at::Tensor& output : outputs)
      if (!at::isFloatingType(output.scalar_type())) ctx->mark_non_differentiable({output});
    return outputs;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto state =
        c10::static_intrusive_pointer_cast<ShardedCallState>(ctx->saved_data["state"].toCapsule());
    const std::vector<at::Tensor> saved = ctx->get_saved_variables();
    const size_t num_inputs = state->num_inputs, num_parameters = state->parameters.size();
    GatherScope gathered(state->sharded);

    // Leaves for the recomputation: the saved inputs and the (gathered) parameters.
    std::vector<at::Tensor> inputs, parameters, wanted;
    std::vector<size_t> wanted_slot;  // index among the node's inputs
    for (size_t i = 0; i < num_inputs; ++i) {
      inputs.push_back(saved[i].detach());
      if (ctx->needs_input_grad(i)) {
        inputs.back().requires_grad_(true);
        wanted.push_back(inputs.back());
        wanted_slot.push_back(i);
      }
    }
    for (size_t j = 0; j < num_parameters; ++j) {
      parameters.push_back(state->parameters[j].detach());
      if (ctx->needs_input_grad(num_inputs + j)) {
        parameters.back().requires_grad_(true);
        wanted.push_back(parameters.back());
        wanted_slot.push_back(num_inputs + j);
      }
    }
    std::vector<at::Tensor> outputs, seeds;
    {
      at::AutoGradMode enable(true);
      const std::vector<at::Tensor> recomputed = state->body(inputs, parameters);
      for (size_t k = 0; k < recomputed.size() && k < grad_outputs.size(); ++k)
        if (recomputed[k].requires_grad() && grad_outputs[k].defined()) {
          outputs.push_back(recomputed[k]);
          seeds.push_back(grad_outputs[k]);
        }
    }
    std::vector<at::Tensor> gradients(wanted.size());
    if (!outputs.empty())
      gradients = torch::autograd::grad(outputs, wanted, seeds, /*retain_graph=*/false,
                                        /*create_graph=*/false, /*allow_unused=*/true);

    // One gradient per node input, then one (undefined) for the state argument.
    torch::autograd::variable_list result(num_inputs + num_parameters + 1);
    for (size_t w = 0; w < wanted.size(); ++w) {
      const size_t slot = wanted_slot[w];
      if (slot < num_inputs) {
        result[slot] = gradients[w];
        continue;
      }
      const ShardedPtr& sharded = state->sharded[slot - num_inputs];
      result[slot] = sharded ? leaf_gradient(sharded->shard, slice_gradient(*sharded, gradients[w]))
                             : leaf_gradient(state->parameters[slot - num_inputs], gradients[w]);
    }
    return result;
  }
};

}  // namespace

ParameterShards::ParameterShards(std::shared_ptr<dist::ProcessGroup> group)
    : group_(std::move(group)) {}

ParameterShards::~ParameterShards() {
  for (const at::Tensor& tensor : tensors_) registry().erase(tensor.unsafeGetTensorImpl());
}

at::Tensor ParameterShards::shard(const at::Tensor& tensor, bool trainable) {
  if (const ShardedPtr existing = find_sharded(tensor)) {
    if (trainable) {
      existing->shard.set_requires_grad(true);
      const_cast<at::Tensor&>(tensor).set_requires_grad(false);
    }
    return existing->shard;
  }
  check(tensor.defined() && tensor.numel() > 0, "[shard] cannot shard an empty tensor");
  at::NoGradGuard no_grad;
  const bool owns_storage = tensor.is_contiguous() && tensor.storage_offset() == 0 &&
                            tensor.storage().nbytes() == full_nbytes(tensor);
  // A view (or a slice of a mapped file) gets storage of its own first.
  if (!owns_storage) const_cast<at::Tensor&>(tensor).set_data(tensor.detach().clone());
  auto sharded = std::make_shared<ShardedTensor>();
  sharded->full = tensor;
  sharded->layout = {tensor.numel(), group_->size()};
  sharded->group = group_.get();
  const ShardLayout& layout = sharded->layout;
  const int64_t begin = layout.begin(group_->rank()), count = layout.count(group_->rank());
  sharded->shard = at::zeros({layout.chunk()}, tensor.options().requires_grad(false));
  sharded->shard.narrow(0, 0, count).copy_(tensor.detach().reshape({-1}).narrow(0, begin, count));
  // The slice is the optimizer's leaf; the full tensor only ever holds gathered copies.
  const_cast<at::Tensor&>(tensor).set_requires_grad(false);
  sharded->shard.set_requires_grad(trainable);
  free_storage(tensor);
  registry()[tensor.unsafeGetTensorImpl()] = sharded;
  tensors_.push_back(tensor);
  return sharded->shard;
}

at::Tensor ParameterShards::local_shard(const at::Tensor& tensor) const {
  const ShardedPtr sharded = find_sharded(tensor);
  check(sharded != nullptr, "[shard] the tensor is not sharded");
  return sharded->shard;
}

ShardLayout ParameterShards::layout(const at::Tensor& tensor) const {
  const ShardedPtr sharded = find_sharded(tensor);
  check(sharded != nullptr, "[shard] the tensor is not sharded");
  return sharded->layout;
}

bool is_sharded(const at::Tensor& tensor) { return find_sharded(tensor) != nullptr; }

int64_t held_bytes(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.has_storage()) return 0;
  const ShardedPtr sharded = find_sharded(tensor);
  return static_cast<int64_t>(tensor.storage().nbytes()) +
         (sharded ? static_cast<int64_t>(sharded->shard.nbytes()) : 0);
}

void shard_on_load(ParameterShards* shards, const at::Tensor& weight) {
  if (shards) shards->shard(weight, /*trainable=*/false);
}

FullParameters::FullParameters(std::vector<at::Tensor> tensors) {
  for (const at::Tensor& tensor : tensors) {
    const ShardedPtr sharded = find_sharded(tensor);
    if (!sharded) continue;
    gather(*sharded);
    gathered_.push_back(tensor);
  }
}

FullParameters::~FullParameters() {
  for (auto it = gathered_.rbegin(); it != gathered_.rend(); ++it)
    if (const ShardedPtr sharded = find_sharded(*it)) release(*sharded);
}

std::vector<at::Tensor> with_full_parameters(const std::vector<at::Tensor>& parameters,
                                             const std::vector<at::Tensor>& inputs,
                                             const ParameterBody& body) {
  if (registry().empty() && !any_fp32_gradient_sums()) return body(inputs, parameters);
  std::vector<ShardedPtr> sharded;
  bool any_sharded = false;
  for (const at::Tensor& parameter : parameters) {
    sharded.push_back(find_sharded(parameter));
    any_sharded = any_sharded || sharded.back();
  }
  if (!any_sharded) {
    // Each call is one use of its weights: their gradients go to fp32 sums where registered.
    std::vector<at::Tensor> used;
    for (const at::Tensor& parameter : parameters)
      used.push_back(use_with_fp32_gradient(parameter));
    return body(inputs, used);
  }

  // The node's inputs: the data, then per parameter what carries its gradient (the slice of a
  // sharded one, the tensor itself otherwise).
  std::vector<at::Tensor> node_inputs = inputs;
  bool needs_graph = false;
  for (const at::Tensor& input : inputs) needs_graph = needs_graph || input.requires_grad();
  for (size_t j = 0; j < parameters.size(); ++j) {
    node_inputs.push_back(sharded[j] ? sharded[j]->shard : parameters[j]);
    needs_graph = needs_graph || node_inputs.back().requires_grad();
  }
  if (!at::GradMode::is_enabled() || !needs_graph) {
    GatherScope gathered(sharded);
    return body(inputs, parameters);
  }
  auto state = c10::make_intrusive<ShardedCallState>();
  state->body = body;
  state->parameters = parameters;
  state->sharded = std::move(sharded);
  state->num_inputs = inputs.size();
  return ShardedCall::apply(at::TensorList(node_inputs), state);
}

}  // namespace tandem
