// Row-major products expressed in cuBLAS's column-major terms: a row-major (R, C) buffer is a
// column-major (C, R) matrix, so row-major Y = X W^T is column-major Y^T = W X^T.
#include <optional>
#include <unordered_map>

#include "framework/cuda/check.h"
#include "framework/cuda/context.h"
#include "framework/cuda/gemm.h"
#include "framework/cuda/linear.h"
#include "framework/cuda/reduce.h"
#include "framework/cuda/stream.h"

namespace vitddp::cuda {

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  const int64_t n = w.size(0), k = w.size(1), m = x.numel() / k;
  if (m == 0) return;
  GemmArgs g;
  g.trans_a = true;  // W (N, K) row-major = (K, N) col-major; op = T gives (N, K)
  g.m = n;
  g.n = m;
  g.k = k;
  g.a = w.data_ptr();
  g.lda = k;
  g.b = x.data_ptr();
  g.ldb = k;
  g.c = y.data_ptr();
  g.ldc = n;
  g.dtype = x.dtype();
  if (b.defined()) {
    g.epilogue = GemmEpilogue::kBias;
    g.bias = b.data_ptr();
  }
  gemm(g, current_stream());
}

// Note [Weight gradient beside the input gradient]
// A linear layer's backward is two independent products, dX = dY W and dW = dY^T X. ViT-L's are
// 1600 rows by 1024-4096 columns: each fills the GPU in one or two waves of tiles and a partial
// last one, in which most SMs idle. Run one after the other, both pay their tail; on two
// streams the second one's tiles fill the first one's tail. So dW (with the bias gradient) goes
// to a stream of this thread's own, forked from the current stream after what came before, and
// the current stream waits for it before the op returns: to everything else the op is as
// before. Until a shape's plan exists both run on the current stream, so that autotuning times
// candidates on an otherwise idle stream, not beside the other product. The bytes written do
// not depend on the stream, so results are bit-identical either way.
namespace {
struct BesideStream {
  Stream stream;
  Event fork_point, joined;
};
// Never destroyed (like the compute streams): nothing to tear down after the driver at exit.
BesideStream& beside_stream(int device) {
  thread_local auto* by_device = new std::unordered_map<int, BesideStream>();
  auto it = by_device->find(device);
  if (it == by_device->end()) {
    it = by_device->emplace(device, BesideStream{Stream::create(device, compute_priority()), Event::create(),
                                                 Event::create()}).first;
    CudaContext::for_device(device).workspace(it->second.stream.get());  // its cuBLASLt workspace now, not mid-product
  }
  return it->second;
}

GemmArgs input_grad_args(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx) {
  const int64_t n = w.size(0), k = w.size(1), m = x.numel() / k;
  GemmArgs g;  // dX (M, K) = dY (M, N) W (N, K)  ->  col-major dX^T = W^T dY^T
  g.m = k;
  g.n = m;
  g.k = n;
  g.a = w.data_ptr();
  g.lda = k;
  g.b = dy.data_ptr();
  g.ldb = n;
  g.c = dx.data_ptr();
  g.ldc = k;
  g.dtype = x.dtype();
  return g;
}

GemmArgs weight_grad_args(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dw, GradWrite writes) {
  const int64_t n = w.size(0), k = w.size(1), m = x.numel() / k;
  GemmArgs g;  // dW (N, K) = dY^T X  ->  col-major dW^T = X^T dY
  g.trans_b = true;
  g.m = k;
  g.n = n;
  g.k = m;
  g.a = x.data_ptr();
  g.lda = k;
  g.b = dy.data_ptr();
  g.ldb = n;
  g.c = dw.data_ptr();
  g.ldc = k;
  g.dtype = x.dtype();
  if (writes == GradWrite::kAccumulate) g.beta = 1.0f;
  return g;
}

// A written (not accumulated) bias gradient comes out of the weight-gradient product: the
// epilogue sums dY's columns while dY passes through (one read of dY and one launch fewer). In
// training that is the step's first gradient of a layer (Note [Gradients in place]); an added
// one (a second micro-batch) takes the column sum, as no cuBLASLt epilogue adds.
bool bias_grad_in_epilogue(const Tensor& x, const Tensor& db, GradWrite writes) {
  return db.defined() && writes == GradWrite::kOverwrite && db.dtype() == x.dtype();
}
GemmArgs with_bias_grad(GemmArgs g, const Tensor& db) {
  g.epilogue = GemmEpilogue::kBiasGradB;
  g.bias = db.data_ptr();
  return g;
}

void weight_and_bias_grads(const GemmArgs& g, const Tensor& x, const Tensor& dy, const Tensor& db, GradWrite writes) {
  bool bias_done = false;
  if (bias_grad_in_epilogue(x, db, writes)) bias_done = try_gemm(with_bias_grad(g, db), current_stream());
  if (!bias_done) gemm(g, current_stream());
  if (db.defined() && !bias_done) {
    const int64_t n = g.n, m = g.k;
    sum_rows(dy.data_ptr(), dy.dtype(), m, n, db.data_ptr(), writes == GradWrite::kAccumulate);
  }
}
}  // namespace

void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx, const Tensor& dw,
                     const Tensor& db, GradWrite weight_grads) {
  const int64_t k = w.size(1), m = x.numel() / k;
  const std::optional<GemmArgs> input = dx.defined() ? std::optional(input_grad_args(x, w, dy, dx)) : std::nullopt;
  if (!dw.defined()) {
    if (input) gemm(*input, current_stream());
    if (db.defined()) sum_rows(dy.data_ptr(), dy.dtype(), m, w.size(0), db.data_ptr(),
                               weight_grads == GradWrite::kAccumulate);
    return;
  }
  const GemmArgs weight = weight_grad_args(x, w, dy, dw, weight_grads);
  const GemmArgs first_weight = bias_grad_in_epilogue(x, db, weight_grads) ? with_bias_grad(weight, db) : weight;
  const bool beside = input && concurrent_weight_grads() && gemm_planned(*input) && gemm_planned(first_weight);
  if (!beside) {
    if (input) gemm(*input, current_stream());
    weight_and_bias_grads(weight, x, dy, db, weight_grads);
    return;
  }
  BesideStream& side = beside_stream(current_device());
  const cudaStream_t main = current_stream();
  {
    ForkedStreamScope scope(side.stream.get(), side.fork_point);  // forks before dX is queued
    // Joined on every way out: an error must not leave the side stream reading tensors the
    // caller then frees on the main stream.
    struct JoinOnError {
      BesideStream& side;
      cudaStream_t main;
      bool joined = false;
      ~JoinOnError() {
        if (joined) return;
        CUDA_WARN(cudaEventRecord(side.joined.get(), side.stream.get()));
        CUDA_WARN(cudaStreamWaitEvent(main, side.joined.get(), 0));
      }
    } join{side, main};
    gemm(*input, main);  // dX first: the next op waits for it
    weight_and_bias_grads(weight, x, dy, db, weight_grads);
    side.joined.record(side.stream.get());
    side.joined.block(main);
    join.joined = true;
  }
}

void matmul_forward(const Tensor& a, const Tensor& b, const Tensor& c, int64_t batch, int64_t M, int64_t K, int64_t N,
                    bool b_shared, const MatmulStrides& strides) {
  // C (M, N) = A (M, K) B (K, N)  ->  col-major C^T = B^T A^T; a shared B folds the batch into M.
  GemmArgs g;
  g.m = N;
  g.n = b_shared ? batch * M : M;
  g.k = K;
  g.a = b.data_ptr();
  g.lda = N;
  g.b = a.data_ptr();
  g.ldb = K;
  g.c = c.data_ptr();
  g.ldc = N;
  g.dtype = a.dtype();
  VITDDP_CHECK(b.dtype() == a.dtype() && (c.dtype() == a.dtype() || c.dtype() == DType::kF32), "matmul: ",
               a.description(), " times ", b.description(), " into ", c.description());
  g.c_f32 = c.dtype() != a.dtype();  // 16-bit operands, an f32 product
  if (!b_shared) {
    g.batch = batch;
    g.stride_a = strides.b_or(K * N);  // column-major operands are swapped: g.a is b
    g.stride_b = strides.a_or(M * K);
    g.stride_c = strides.c_or(M * N);
  }
  gemm(g, current_stream());
}

void matmul_backward(const Tensor& a, const Tensor& b, const Tensor& dc, const Tensor& da, const Tensor& db,
                     int64_t batch, int64_t M, int64_t K, int64_t N, bool b_shared, const MatmulStrides& strides) {
  if (da.defined()) {  // dA (M, K) = dC (M, N) B^T  ->  col-major dA^T = B dC^T
    GemmArgs g;
    g.trans_a = true;
    g.m = K;
    g.n = b_shared ? batch * M : M;
    g.k = N;
    g.a = b.data_ptr();
    g.lda = N;
    g.b = dc.data_ptr();
    g.ldb = N;
    g.c = da.data_ptr();
    g.ldc = K;
    g.dtype = a.dtype();
    VITDDP_CHECK(b.dtype() == a.dtype() && dc.dtype() == a.dtype() &&
                     (da.dtype() == a.dtype() || da.dtype() == DType::kF32),
                 "matmul backward: dA ", da.description(), " from ", dc.description(), " and ", b.description());
    g.c_f32 = da.dtype() != a.dtype();
    if (!b_shared) {
      g.batch = batch;
      g.stride_a = strides.b_or(K * N);  // g.a is b, g.b is dc, g.c is da
      g.stride_b = strides.c_or(M * N);
      g.stride_c = strides.a_or(M * K);
    }
    gemm(g, current_stream());
  }
  if (db.defined()) {  // dB (K, N) = A^T dC  ->  col-major dB^T = dC^T A; a shared B sums over the batch
    GemmArgs g;
    g.trans_b = true;
    g.m = N;
    g.n = K;
    g.k = b_shared ? batch * M : M;
    g.a = dc.data_ptr();
    g.lda = N;
    g.b = a.data_ptr();
    g.ldb = K;
    g.c = db.data_ptr();
    g.ldc = N;
    g.dtype = a.dtype();
    VITDDP_CHECK(dc.dtype() == a.dtype() && (db.dtype() == a.dtype() || db.dtype() == DType::kF32),
                 "matmul backward: dB ", db.description(), " from ", a.description(), " and ", dc.description());
    g.c_f32 = db.dtype() != a.dtype();
    if (!b_shared) {
      g.batch = batch;
      g.stride_a = strides.c_or(M * N);  // g.a is dc, g.b is a, g.c is db
      g.stride_b = strides.a_or(M * K);
      g.stride_c = strides.b_or(K * N);
    }
    gemm(g, current_stream());
  }
}

}  // namespace vitddp::cuda
