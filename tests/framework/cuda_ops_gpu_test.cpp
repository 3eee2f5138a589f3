// Every CUDA op against its CPU reference on fresh random inputs, forward and backward, with
// new device memory poisoned (NaN bytes) so unwritten outputs fail. Tolerances by precision:
// fp32 1e-5, tf32 1e-3, bf16 1e-2 (norm-wise relative).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <cstdlib>

#include "common/gpu.h"
#include "framework/cpu/gelu.h"
#include "framework/cpu/linear.h"
#include "framework/cuda/context.h"
#include "framework/cuda/gelu.h"
#include "framework/cuda/linear.h"
#include "framework/cuda/op_profiler.h"
#include "framework/ops/ops.h"

namespace vitddp {
namespace {

// Before any device allocation: every new block is filled with 0xFF bytes (NaN).
const bool kPoisonAllocations = (setenv("VITDDP_POISON_ALLOC", "1", 1), true);

using testing::cuda_matches_cpu;
using testing::random_tensor;

Tensor input(const Shape& shape, Generator& gen, bool grad = true, double low = -1, double high = 1) {
  Tensor t = random_tensor(shape, gen, DType::kF32, low, high);
  if (grad) t.set_requires_grad(true);
  return t;
}

struct Precision {
  const char* name;
  DType dtype;
  cuda::MatmulPrecision matmul;
  double rtol;
};

class CudaOps : public ::testing::TestWithParam<Precision> {
 protected:
  void SetUp() override {
    VITDDP_REQUIRE_GPU();
    ASSERT_TRUE(kPoisonAllocations);
    cuda::set_matmul_precision(GetParam().matmul);
  }
  void TearDown() override {
    if (testing::gpu_available()) cuda::set_matmul_precision(cuda::MatmulPrecision::kFp32);
  }
  ::testing::AssertionResult matches(const testing::TensorFn& fn, const std::vector<Tensor>& in) {
    return cuda_matches_cpu(fn, in, GetParam().rtol, GetParam().dtype);
  }
  Generator gen_{static_cast<uint64_t>(::testing::UnitTest::GetInstance()->random_seed()) + 17};
};

TEST_P(CudaOps, Linear) {
  auto fn = [](const std::vector<Tensor>& t) { return linear(t[0], t[1], t[2]); };
  EXPECT_TRUE(matches(fn, {input({4, 7, 96}, gen_), input({80, 96}, gen_), input({80}, gen_)}));
  auto no_bias = [](const std::vector<Tensor>& t) { return linear(t[0], t[1], Tensor()); };
  EXPECT_TRUE(matches(no_bias, {input({33, 64}, gen_), input({48, 64}, gen_)}));
}

// Products planned with the heuristic's first algorithm and with the fastest of its candidates
// (Note [Choosing a GEMM algorithm]) give the CPU's results, and so does the bias gradient that
// the weight-gradient product's epilogue reduces (CUBLASLT_EPILOGUE_BGRADB) over 1600 rows.
TEST_P(CudaOps, LinearWithAndWithoutAutotune) {
  auto fn = [](const std::vector<Tensor>& t) { return linear(t[0], t[1], t[2]); };
  for (bool autotune : {false, true}) {
    cuda::set_gemm_autotune(autotune);
    const int64_t in = autotune ? 192 : 128;  // a new shape: plans are cached per shape
    EXPECT_TRUE(matches(fn, {input({32, 50, in}, gen_), input({320, in}, gen_), input({320}, gen_)})) << autotune;
  }
  cuda::set_gemm_autotune(false);
}

// Strided batches (MatmulStrides, as PowerSGD uses them) on the GPU against the CPU's.
TEST(CudaMatmulStrides, StridedBatchesMatchTheCpu) {
  VITDDP_REQUIRE_GPU();
  cuda::set_matmul_precision(cuda::MatmulPrecision::kFp32);
  Generator gen(22);
  const int64_t batch = 4, M = 33, K = 17, N = 3;
  const MatmulStrides st{M * K + 9, K * N + 2, M * N + 4};
  Tensor a = random_tensor({batch * st.a}, gen, DType::kF32), b = random_tensor({batch * st.b}, gen, DType::kF32),
         dc = random_tensor({batch * st.c}, gen, DType::kF32);
  Tensor c = Tensor::zeros({batch * st.c}, DType::kF32), da = Tensor::zeros({batch * st.a}, DType::kF32),
         db = Tensor::zeros({batch * st.b}, DType::kF32);
  cpu::matmul_forward(a, b, c, batch, M, K, N, false, st);
  cpu::matmul_backward(a, b, dc, da, db, batch, M, K, N, false, st);
  const Device g = Device::cuda(0);
  Tensor gc = Tensor::zeros({batch * st.c}, DType::kF32, g), gda = Tensor::zeros({batch * st.a}, DType::kF32, g),
         gdb = Tensor::zeros({batch * st.b}, DType::kF32, g);
  cuda::matmul_forward(a.to(g), b.to(g), gc, batch, M, K, N, false, st);
  cuda::matmul_backward(a.to(g), b.to(g), dc.to(g), gda, gdb, batch, M, K, N, false, st);
  EXPECT_LT(testing::max_abs_diff(gc.to(Device::cpu()), c), 1e-4);
  EXPECT_LT(testing::max_abs_diff(gda.to(Device::cpu()), da), 1e-4);
  EXPECT_LT(testing::max_abs_diff(gdb.to(Device::cpu()), db), 1e-4);
}

TEST_P(CudaOps, Matmul) {
  auto fn = [](const std::vector<Tensor>& t) { return matmul(t[0], t[1]); };
  EXPECT_TRUE(matches(fn, {input({2, 3, 17, 24}, gen_), input({2, 3, 24, 40}, gen_)}));
  EXPECT_TRUE(matches(fn, {input({5, 17, 24}, gen_), input({24, 40}, gen_)}));
}

TEST_P(CudaOps, ElementwiseAndReductions) {
  auto add_fn = [](const std::vector<Tensor>& t) { return add(t[0], t[1]); };
  EXPECT_TRUE(matches(add_fn, {input({4, 50, 64}, gen_), input({1, 50, 64}, gen_)}));
  // Same shapes, contiguous: the 16-byte-word path, forward and (through the shared input's
  // gradient sum) add_gradients; 1003 elements: no whole number of words, strided path.
  auto residual_fn = [](const std::vector<Tensor>& t) { return add(add(t[0], t[1]), t[0]); };
  EXPECT_TRUE(matches(residual_fn, {input({4, 50, 64}, gen_), input({4, 50, 64}, gen_)}));
  EXPECT_TRUE(matches(residual_fn, {input({17, 59}, gen_), input({17, 59}, gen_)}));
  auto mul_fn = [](const std::vector<Tensor>& t) { return mul(t[0], t[1]); };
  EXPECT_TRUE(matches(mul_fn, {input({6, 5, 8}, gen_), input({5, 1}, gen_)}));
  auto scale_fn = [](const std::vector<Tensor>& t) { return scale(permute(t[0], {1, 0}), -2.5); };
  EXPECT_TRUE(matches(scale_fn, {input({13, 9}, gen_)}));
  auto mean_fn = [](const std::vector<Tensor>& t) { return mean(t[0]); };
  // Positive inputs: the mean of 2310 values drawn around zero is near zero, and bf16's rounding
  // of the inputs then moved it by more than 1% in some draws.
  EXPECT_TRUE(matches(mean_fn, {input({70, 33}, gen_, true, 0.5, 1.5)}));
  auto sum_to_fn = [](const std::vector<Tensor>& t) { return sum_to_shape(t[0], {1, 5, 1}); };
  EXPECT_TRUE(matches(sum_to_fn, {input({3, 4, 5, 6}, gen_)}));
}

TEST_P(CudaOps, ShapeOps) {
  auto fn = [](const std::vector<Tensor>& t) {
    Tensor cls = expand(t[1], {3, 1, 16});
    Tensor x = concat({cls, t[0]}, 1);                         // (3, 6, 16)
    Tensor y = permute(reshape(x, {3, 6, 2, 8}), {2, 0, 1, 3});  // (2, 3, 6, 8)
    Tensor z = add(select(y, 0, 1), slice(select(y, 0, 0), 1, 0, 6));  // (3, 6, 8)
    return slice(z, 2, 2, 7);
  };
  EXPECT_TRUE(matches(fn, {input({3, 5, 16}, gen_), input({1, 1, 16}, gen_)}));
}

TEST_P(CudaOps, GeluSoftmaxLayerNorm) {
  auto gelu_fn = [](const std::vector<Tensor>& t) { return gelu(t[0]); };
  EXPECT_TRUE(matches(gelu_fn, {input({1000, 37}, gen_, true, -4, 4)}));
  auto softmax_fn = [](const std::vector<Tensor>& t) { return softmax(t[0]); };
  EXPECT_TRUE(matches(softmax_fn, {input({19, 77}, gen_, true, -5, 5)}));
  auto ln_fn = [](const std::vector<Tensor>& t) { return layer_norm(t[0], t[1], t[2], 1e-6); };
  // Widths for the vectorised row kernels (96, 1024: ViT-L's; 100: only f32's 4-element words)
  // and for the scalar ones (1100: more than a warp's registers hold; 37: no whole words).
  for (int64_t d : {96, 1024, 100, 1100, 37}) {
    SCOPED_TRACE("layer_norm width " + std::to_string(d));
    EXPECT_TRUE(matches(ln_fn, {input({4, 25, d}, gen_, true, -3, 3), input({d}, gen_, true, 0.5, 1.5),
                                input({d}, gen_)}));
  }
  // ViT-L/32's rows (32 images x 50 tokens): 200 blocks of partial weight and bias gradients
  // (Note [Layer norm backward in one pass]) summed in order.
  EXPECT_TRUE(matches(ln_fn, {input({32, 50, 1024}, gen_, true, -3, 3), input({1024}, gen_, true, 0.5, 1.5),
                              input({1024}, gen_)}));
}

// A residual stream, x + layer_norm(x) scaled: the skip's gradient is pending at x when the layer
// norm's backward runs, which adds it in its own kernel (Note [Sums in the producing kernel]),
// on every width of the vectorised and the scalar row kernels.
TEST_P(CudaOps, LayerNormSumsTheResidualGradient) {
  auto residual_fn = [](const std::vector<Tensor>& t) {
    Tensor branch = mul(layer_norm(t[0], t[1], t[2], 1e-6), t[3]);
    return add(branch, mul(t[0], t[4]));
  };
  for (int64_t d : {96, 1024, 100, 1100, 37}) {
    SCOPED_TRACE("layer_norm width " + std::to_string(d));
    EXPECT_TRUE(matches(residual_fn, {input({4, 25, d}, gen_, true, -3, 3), input({d}, gen_, true, 0.5, 1.5),
                                      input({d}, gen_), input({4, 25, d}, gen_, false),
                                      input({4, 25, d}, gen_, false)}));
  }
}

// add_layer_norm: the sum and its layer norm in one kernel on the vectorised widths (96 and
// 1024; 100 in f32 only), add then layer_norm on the others; both outputs and every input's gradient against the
// CPU's, and on the GPU the same bits as add, then layer_norm.
TEST_P(CudaOps, AddLayerNormMatchesAddThenLayerNorm) {
  auto fn = [](const std::vector<Tensor>& t) {
    const AddLayerNorm r = add_layer_norm(t[0], t[1], t[2], t[3], 1e-6);
    Tensor normed = mul(r.normed, t[4]);  // apart: argument order is unspecified
    return add(normed, mul(r.sum, t[5]));
  };
  for (int64_t d : {96, 1024, 100, 1100, 37}) {
    SCOPED_TRACE("width " + std::to_string(d));
    const Shape shape{4, 25, d};
    EXPECT_TRUE(matches(fn, {input(shape, gen_, true, -2, 2), input(shape, gen_, true, -2, 2),
                             input({d}, gen_, true, 0.5, 1.5), input({d}, gen_), input(shape, gen_, false),
                             input(shape, gen_, false)}));
    const Device g = Device::cuda(0);
    const DType dt = GetParam().dtype;
    Tensor a = input(shape, gen_, false).to(dt).to(g), b = input(shape, gen_, false).to(dt).to(g);
    Tensor w = input({d}, gen_, false, 0.5, 1.5).to(dt).to(g), bias = input({d}, gen_, false).to(dt).to(g);
    const AddLayerNorm fused = add_layer_norm(a, b, w, bias, 1e-6);
    Tensor sum = add(a, b);
    EXPECT_EQ(fused.sum.to_vector(), sum.to_vector());
    EXPECT_EQ(fused.normed.to_vector(), layer_norm(sum, w, bias, 1e-6).to_vector());
  }
}

// Which kernels ran, by the op profiler's names: the fused op where the row kernels take the
// width, add and layer_norm where they do not; and in backward, the skip's gradient summed in
// the layer norm's kernel (no add_gradients).
TEST_P(CudaOps, AddLayerNormRunsOneKernelAndItsBackwardSumsTheSkip) {
  const Device g = Device::cuda(0);
  const DType dt = GetParam().dtype;
  auto ops_of = [&](int64_t d, bool backward) {
    Tensor a = input({4, 25, d}, gen_, false).to(dt).to(g).set_requires_grad(true);
    Tensor b = input({4, 25, d}, gen_, false).to(dt).to(g);
    Tensor w = input({d}, gen_, false, 0.5, 1.5).to(dt).to(g), bias = input({d}, gen_, false).to(dt).to(g);
    cuda::OpProfiler& profiler = cuda::OpProfiler::instance();
    profiler.set_enabled(true);
    const AddLayerNorm r = add_layer_norm(a, b, w, bias, 1e-6);
    if (backward) {
      // The skip's gradient must be contiguous to be summed in the kernel (sum's is a broadcast
      // view, which the engine adds apart): a product with a constant gives a dense one, as the
      // model's next block does. Made after the normed branch, so that it arrives first.
      Tensor scale_by = input({4, 25, d}, gen_, false).to(dt).to(g);
      Tensor normed = sum(r.normed);
      Tensor skip = sum(mul(r.sum, scale_by));
      sum(add(normed, skip)).backward();
    }
    std::map<std::string, int> calls;
    for (const cuda::OpProfiler::Entry& e : profiler.collect()) calls[e.name] = e.calls;
    profiler.set_enabled(false);
    return calls;
  };
  std::map<std::string, int> fused = ops_of(1024, false);
  EXPECT_EQ(fused["add_layer_norm"], 1);
  EXPECT_EQ(fused.count("add"), 0u);
  EXPECT_EQ(fused.count("layer_norm"), 0u);
  std::map<std::string, int> apart = ops_of(37, false);
  EXPECT_EQ(apart.count("add_layer_norm"), 0u);
  EXPECT_EQ(apart["add"], 1);
  EXPECT_EQ(apart["layer_norm"], 1);
  std::map<std::string, int> both = ops_of(1024, true);
  EXPECT_EQ(both["layer_norm backward"], 1);
  EXPECT_EQ(both.count("add_gradients"), 0u) << "the skip's gradient was summed apart";
}

// An input used by two ops gets the sum of both gradients (the engine's add_new: one kernel on
// the GPU, out = a + b).
TEST_P(CudaOps, GradientsOfAnInputUsedTwiceAreSummed) {
  auto fn = [](const std::vector<Tensor>& t) { return add(mul(t[0], t[1]), gelu(t[0])); };
  EXPECT_TRUE(matches(fn, {input({8, 50, 64}, gen_, true, -3, 3), input({8, 50, 64}, gen_)}));
  EXPECT_TRUE(matches(fn, {input({3, 7}, gen_, true, -3, 3), input({3, 7}, gen_)}));  // not whole words
}

// The GELU kernels go four elements at a time over quad-aligned operands and one at a time
// over the rest: a length with a tail, and views one element in (not aligned), both agree.
TEST_P(CudaOps, GeluTailsAndUnalignedViews) {
  auto gelu_fn = [](const std::vector<Tensor>& t) { return gelu(t[0]); };
  EXPECT_TRUE(matches(gelu_fn, {input({3, 333}, gen_, true, -4, 4)}));
  const DType dtype = GetParam().dtype;
  Tensor x = input({1003}, gen_, false, -4, 4).to(dtype).to(Device::cuda(0));
  Tensor dy = input({1003}, gen_, false).to(dtype).to(Device::cuda(0));
  Tensor dx = Tensor::empty({1003}, dtype, Device::cuda(0));
  Tensor y = Tensor::empty({1003}, dtype, Device::cuda(0));
  auto one_in = [](const Tensor& t) { return t.as_strided({1001}, {1}, 1); };
  cuda::gelu_forward(one_in(x), one_in(y));
  cuda::gelu_backward(one_in(x), one_in(dy), one_in(dx));
  auto host_f32 = [&](const Tensor& t) { return one_in(t).to(Device::cpu()).to(DType::kF32).contiguous(); };
  Tensor y_ref = Tensor::empty({1001}, DType::kF32, Device::cpu());
  Tensor dx_ref = Tensor::empty({1001}, DType::kF32, Device::cpu());
  cpu::gelu_forward(host_f32(x), y_ref);
  cpu::gelu_backward(host_f32(x), host_f32(dy), dx_ref);
  EXPECT_LE(testing::relative_error(host_f32(y), y_ref), GetParam().rtol);
  EXPECT_LE(testing::relative_error(host_f32(dx), dx_ref), GetParam().rtol);
  // Nothing written outside the views: the first and last elements keep their poison (NaN).
  for (const Tensor& out : {y, dx}) {
    const std::vector<double> all = out.to(Device::cpu()).to(DType::kF32).to_vector();
    EXPECT_TRUE(std::isnan(all.front()) && std::isnan(all.back())) << all.front() << " " << all.back();
  }
}

TEST_P(CudaOps, Attention) {
  auto fn = [](const std::vector<Tensor>& t) { return scaled_dot_product_attention(t[0], t[1], t[2]); };
  EXPECT_TRUE(matches(fn, {input({2, 3, 50, 64}, gen_), input({2, 3, 50, 64}, gen_), input({2, 3, 50, 64}, gen_)}));
}

TEST_P(CudaOps, PatchEmbedAndCrossEntropy) {
  auto pe = [](const std::vector<Tensor>& t) { return patch_embed(t[0], t[1], t[2], 8); };
  EXPECT_TRUE(matches(pe, {input({2, 3, 32, 48}, gen_), input({40, 3, 8, 8}, gen_), input({40}, gen_)}));
  std::vector<int64_t> labels;
  for (int i = 0; i < 9; ++i) labels.push_back(static_cast<int64_t>(gen_.next_u64() % 100));
  Tensor lab = Tensor::from_vector_i64(labels, {9});
  auto ce = [](const std::vector<Tensor>& t) { return cross_entropy(t[0], t[1]); };
  EXPECT_TRUE(matches(ce, {input({9, 100}, gen_, true, -4, 4), lab}));
}

TEST_P(CudaOps, DropoutMaskMatchesTheCpu) {
  Tensor x = input({300, 7}, gen_, false);
  Generator a(5, 100), b(5, 100);
  Tensor cpu = dropout(x, 0.3, true, a);
  Tensor gpu = dropout(x.to(GetParam().dtype).to(Device::cuda(0)), 0.3, true, b);
  EXPECT_EQ(a.counter(), b.counter());
  EXPECT_LE(testing::relative_error(gpu, cpu), GetParam().rtol);
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaOps,
                         ::testing::Values(Precision{"fp32", DType::kF32, cuda::MatmulPrecision::kFp32, 1e-5},
                                           Precision{"tf32", DType::kF32, cuda::MatmulPrecision::kTf32, 1e-3},
                                           Precision{"bf16", DType::kBF16, cuda::MatmulPrecision::kFp32, 1e-2}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(CudaTensor, CopiesConversionsAndPeakMemory) {
  VITDDP_REQUIRE_GPU();
  Generator gen(4);
  Tensor host = random_tensor({64, 33}, gen, DType::kF32);
  Tensor dev = host.to(Device::cuda(0));
  Tensor strided = dev.as_strided({33, 64}, {1, 33}, 0).contiguous();  // transpose on the GPU
  Tensor expected = host.as_strided({33, 64}, {1, 33}, 0).contiguous();
  EXPECT_EQ(testing::max_abs_diff(strided, expected), 0.0);
  EXPECT_LE(testing::relative_error(dev.to(DType::kBF16).to(DType::kF32), host), 1e-2);
  EXPECT_TRUE(testing::throws_with([] { Tensor::zeros({2}, DType::kF32, Device::cuda(999)); }, {"cuda"}));
}

}  // namespace
}  // namespace vitddp

namespace vitddp {
namespace {

// The fused kernels (ViT-L/32's 50 tokens x 64 dims, odd small shapes, the f32 flash kernels at
// 160 tokens x 128 dims) and the composed fallback (a head dim the flash kernels do not take, too
// large for shared memory) against the CPU's composed form.
TEST_P(CudaOps, MultiHeadAttentionFusedAndFallback) {
  for (auto [n, heads, hd] : {std::tuple<int64_t, int64_t, int64_t>{50, 4, 64}, {5, 3, 4}, {33, 2, 24}, {160, 2, 128},
                              {160, 2, 96}}) {
    auto fn = [heads = heads](const std::vector<Tensor>& t) { return multi_head_attention(t[0], heads); };
    EXPECT_TRUE(matches(fn, {input({3, n, 3 * heads * hd}, gen_, true, -2, 2)})) << n << " " << heads << " " << hd;
  }
}

}  // namespace
}  // namespace vitddp

namespace vitddp {
namespace {

// fill_: zero on contiguous memory goes through cudaMemsetAsync, anything else through the
// kernel; on poisoned (NaN) allocations, every element of the target is written and nothing
// outside it.
TEST(CudaFill, ZeroAndValuesOnContiguousAndStridedTargets) {
  VITDDP_REQUIRE_GPU();
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kI64}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor full = Tensor::empty({6, 10}, dtype, Device::cuda(0));
    full.fill_(7.0);
    Tensor inner = full.as_strided({40}, {1}, full.storage_offset() + 10);  // rows 1..4, contiguous
    inner.fill_(0.0);
    Tensor column = full.as_strided({6}, {10}, full.storage_offset() + 3);  // strided
    column.fill_(0.0);
    Tensor corner = full.as_strided({2}, {1}, full.storage_offset() + 58);
    corner.fill_(-2.0);
    std::vector<double> v = full.to(Device::cpu()).to_vector();
    for (int64_t i = 0; i < 60; ++i) {
      const bool zero = (i >= 10 && i < 50) || i % 10 == 3;
      const double expected = i >= 58 ? -2.0 : zero ? 0.0 : 7.0;
      EXPECT_EQ(v[i], expected) << "element " << i;
    }
  }
}

}  // namespace
}  // namespace vitddp
