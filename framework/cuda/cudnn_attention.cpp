// cuDNN fused attention: one cuDNN graph per (device, dtype, shape, direction), built on first
// use and kept for the process, like the cuBLASLt handle of context.h.
#include "framework/cuda/cudnn_attention.h"

#if VITDDP_WITH_CUDNN_SDPA
#include <cudnn.h>
#include <cudnn_frontend.h>
#endif

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "framework/cuda/check.h"
#include "framework/cuda/stream.h"

namespace vitddp::cuda {

#if VITDDP_WITH_CUDNN_SDPA

namespace fe = cudnn_frontend;

#define CUDNN_CHECK(call)                                                                          \
  do {                                                                                             \
    cudnnStatus_t st_ = (call);                                                                    \
    if (st_ != CUDNN_STATUS_SUCCESS)                                                               \
      ::vitddp::cuda::throw_cuda_error("cuDNN", #call, cudnnGetErrorString(st_), __FILE__, __LINE__); \
  } while (0)

namespace {

// The graphs' tensors are named by these ids, so a kept graph runs on any call's pointers.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kLse, kDO, kDQ, kDK, kDV };
enum class Direction { kInference, kTraining, kBackward };

struct Key {
  int device;
  DType dtype;
  int64_t batch, seq_len, heads, head_dim;
  Direction direction;
  bool operator<(const Key& o) const {
    return std::tie(device, dtype, batch, seq_len, heads, head_dim, direction) <
           std::tie(o.device, o.dtype, o.batch, o.seq_len, o.heads, o.head_dim, o.direction);
  }
};

struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;  // null: cuDNN refused the shape (why says so)
  int64_t workspace_bytes = 0;
  std::string why;
};

// One handle per device, shared by the threads that use the device: cudnnSetStream and the
// launch are made under its mutex, so each launch goes to its caller's stream. Kept until exit.
struct DeviceHandle {
  cudnnHandle_t handle = nullptr;
  std::mutex mutex;
};

DeviceHandle& handle_for(int device) {
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<DeviceHandle>> handles;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<DeviceHandle>& h = handles[device];
  if (!h) {
    int previous = 0;
    CUDA_CHECK(cudaGetDevice(&previous));
    CUDA_CHECK(cudaSetDevice(device));
    auto made = std::make_unique<DeviceHandle>();
    CUDNN_CHECK(cudnnCreate(&made->handle));
    CUDA_CHECK(cudaSetDevice(previous));
    h = std::move(made);
  }
  return *h;
}

fe::DataType_t io_type(DType dtype) { return dtype == DType::kBF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF; }

// The packed layouts as (B, H, N, head_dim) views: q, k and v inside qkv (B, N, 3D) (k and v
// start D and 2D elements in), out and dout (B, N, D), the log-sum-exp (B, H, N, 1).
struct Layout {
  std::vector<int64_t> dims, qkv_strides, out_strides, lse_dims, lse_strides;
};
Layout layout(const Key& k) {
  const int64_t b = k.batch, n = k.seq_len, h = k.heads, d = k.head_dim, dim = h * d;
  return {{b, h, n, d}, {n * 3 * dim, d, 3 * dim, 1}, {n * dim, d, dim, 1}, {b, h, n, 1}, {h * n, n, 1, 1}};
}

// Builds the graph for `key` with cuDNN's heuristics' first plan that supports it. The backward
// asks for cuDNN's deterministic algorithm (the same gradients on every run and in every graph
// replay) and takes the other one only where that is refused.
Plan build(const Key& key, cudnnHandle_t handle, bool deterministic) {
  const Layout l = layout(key);
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(io_type(key.dtype))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto tensor = [&](const char* name, int64_t uid, const std::vector<int64_t>& strides) {
    return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(l.dims).set_stride(strides));
  };
  auto q = tensor("q", kQ, l.qkv_strides), k = tensor("k", kK, l.qkv_strides), v = tensor("v", kV, l.qkv_strides);
  const float scale = 1.0f / std::sqrt(static_cast<float>(key.head_dim));
  if (key.direction == Direction::kBackward) {
    auto o = tensor("o", kO, l.out_strides), d_o = tensor("do", kDO, l.out_strides);
    auto lse = g->tensor(fe::graph::Tensor_attributes()
                             .set_name("lse")
                             .set_uid(kLse)
                             .set_dim(l.lse_dims)
                             .set_stride(l.lse_strides)
                             .set_data_type(fe::DataType_t::FLOAT));
    auto options = fe::graph::SDPA_backward_attributes().set_name("attention_backward").set_attn_scale(scale);
    options.set_deterministic_algorithm(deterministic);
    auto grads = g->sdpa_backward(q, k, v, o, d_o, lse, options);
    const int64_t uids[3] = {kDQ, kDK, kDV};
    for (int i = 0; i < 3; ++i) grads[i]->set_output(true).set_uid(uids[i]).set_dim(l.dims).set_stride(l.qkv_strides);
  } else {
    const bool training = key.direction == Direction::kTraining;
    auto options = fe::graph::SDPA_attributes().set_name("attention").set_generate_stats(training).set_attn_scale(scale);
    auto [o, lse] = g->sdpa(q, k, v, options);
    o->set_output(true).set_uid(kO).set_dim(l.dims).set_stride(l.out_strides);
    if (training)
      lse->set_output(true).set_uid(kLse).set_dim(l.lse_dims).set_stride(l.lse_strides).set_data_type(fe::DataType_t::FLOAT);
  }
  Plan plan;
  auto failed = [&](const char* step, fe::error_t e) {
    plan.why = std::string(step) + ": " + e.get_message();
    return e.is_bad();
  };
  if (failed("validate", g->validate()) || failed("operation graph", g->build_operation_graph(handle)) ||
      failed("execution plans", g->create_execution_plans({fe::HeurMode_t::A})) ||
      failed("support", g->check_support(handle)) ||
      failed("build", g->build_plans(handle, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE)) ||
      failed("workspace", g->get_workspace_size(plan.workspace_bytes)))
    return plan;
  plan.graph = std::move(g);
  plan.why.clear();
  return plan;
}

const Plan& plan_for(const Key& key) {
  static std::mutex mutex;
  static std::map<Key, Plan> plans;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = plans.find(key);
  if (it != plans.end()) return it->second;
  cudnnHandle_t handle = handle_for(key.device).handle;
  Plan plan = build(key, handle, /*deterministic=*/true);
  if (!plan.graph && key.direction == Direction::kBackward) {
    Plan other = build(key, handle, /*deterministic=*/false);
    if (other.graph) {
      std::fprintf(stderr, "vitddp: cuDNN has no deterministic attention backward for %s (%s); using its other one\n",
                   dtype_name(key.dtype), plan.why.c_str());
      plan = std::move(other);
    }
  }
  return plans.emplace(key, std::move(plan)).first->second;
}

Key key_of(const Tensor& qkv, int64_t num_heads, Direction direction) {
  return Key{qkv.device().index, qkv.dtype(),  qkv.size(0), qkv.size(1), num_heads, qkv.size(2) / 3 / num_heads,
             direction};
}

bool aligned(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

void run(const Key& key, std::unordered_map<int64_t, void*>& pointers, const char* what) {
  const Plan& plan = plan_for(key);
  VITDDP_CHECK(plan.graph, what, ": cuDNN's fused attention does not take this shape (", plan.why, ")");
  Tensor workspace;
  if (plan.workspace_bytes > 0)
    workspace = Tensor::empty({(plan.workspace_bytes + 3) / 4}, DType::kF32, Device::cuda(key.device));
  DeviceHandle& dh = handle_for(key.device);
  std::lock_guard<std::mutex> lock(dh.mutex);
  CUDNN_CHECK(cudnnSetStream(dh.handle, current_stream()));
  fe::error_t e = plan.graph->execute(dh.handle, pointers, workspace.defined() ? workspace.data_ptr() : nullptr);
  VITDDP_CHECK(e.is_good(), what, ": cuDNN's fused attention failed: ", e.get_message());
}

}  // namespace

bool sdpa_compiled() { return true; }

bool sdpa_available(const Tensor& qkv, int64_t num_heads, bool training) {
  if (qkv.dtype() != DType::kBF16 && qkv.dtype() != DType::kF16) return false;
  if (!qkv.device().is_cuda() || qkv.dim() != 3 || num_heads <= 0 || qkv.size(2) % (3 * num_heads) != 0) return false;
  // cuDNN reads 16-byte vectors: head dims in multiples of 8 elements, up to the 128 both
  // directions take on every GPU it supports.
  const int64_t head_dim = qkv.size(2) / 3 / num_heads;
  if (head_dim % 8 != 0 || head_dim > 128 || qkv.size(1) < 2) return false;
  if (!plan_for(key_of(qkv, num_heads, training ? Direction::kTraining : Direction::kInference)).graph) return false;
  return !training || plan_for(key_of(qkv, num_heads, Direction::kBackward)).graph != nullptr;
}

void sdpa_forward(const Tensor& qkv, int64_t num_heads, const Tensor& out, const Tensor& lse) {
  VITDDP_CHECK(qkv.is_contiguous() && out.is_contiguous() && aligned(qkv) && aligned(out),
               "multi_head_attention: cuDNN attention takes contiguous, 16-byte aligned qkv and out");
  const Key key = key_of(qkv, num_heads, lse.defined() ? Direction::kTraining : Direction::kInference);
  char* base = static_cast<char*>(qkv.data_ptr());
  const int64_t dim_bytes = qkv.size(2) / 3 * static_cast<int64_t>(dtype_size(qkv.dtype()));
  std::unordered_map<int64_t, void*> pointers{
      {kQ, base}, {kK, base + dim_bytes}, {kV, base + 2 * dim_bytes}, {kO, out.data_ptr()}};
  if (lse.defined()) pointers[kLse] = lse.data_ptr();
  run(key, pointers, "multi_head_attention");
}

void sdpa_backward(const Tensor& qkv, const Tensor& out, const Tensor& lse, const Tensor& dout, int64_t num_heads,
                   const Tensor& dqkv) {
  for (const Tensor* t : {&qkv, &out, &lse, &dout, &dqkv})
    VITDDP_CHECK(t->is_contiguous() && aligned(*t),
                 "multi_head_attention backward: cuDNN attention takes contiguous, 16-byte aligned tensors");
  const Key key = key_of(qkv, num_heads, Direction::kBackward);
  char* in = static_cast<char*>(qkv.data_ptr());
  char* grad = static_cast<char*>(dqkv.data_ptr());
  const int64_t dim_bytes = qkv.size(2) / 3 * static_cast<int64_t>(dtype_size(qkv.dtype()));
  std::unordered_map<int64_t, void*> pointers{
      {kQ, in},   {kK, in + dim_bytes},   {kV, in + 2 * dim_bytes},   {kO, out.data_ptr()},
      {kLse, lse.data_ptr()}, {kDO, dout.data_ptr()}, {kDQ, grad}, {kDK, grad + dim_bytes},
      {kDV, grad + 2 * dim_bytes}};
  run(key, pointers, "multi_head_attention backward");
}

#else  // !VITDDP_WITH_CUDNN_SDPA

bool sdpa_compiled() { return false; }
bool sdpa_available(const Tensor&, int64_t, bool) { return false; }
void sdpa_forward(const Tensor&, int64_t, const Tensor&, const Tensor&) {
  VITDDP_CHECK(false, "multi_head_attention: this build has no cuDNN fused attention");
}
void sdpa_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t, const Tensor&) {
  VITDDP_CHECK(false, "multi_head_attention backward: this build has no cuDNN fused attention");
}

#endif

}  // namespace vitddp::cuda
