// Work on a second stream beside the compute stream (PowerSGD's compression: Note [PowerSGD
// beside backward]): a forked scope runs after what was enqueued before it and restores the
// current stream; cuBLASLt gets a workspace per stream, and products on two streams at once
// give the CPU's results.
#include <gtest/gtest.h>

#include "common/gpu.h"
#include "common/test_utils.h"
#include "framework/ops/linear.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/context.h"
#include "framework/cuda/linear.h"
#include "framework/cuda/stream.h"
#endif

namespace vitddp {
namespace {

TEST(CudaStreams, ForkedScopeRunsAfterEarlierWorkAndRestoresTheStream) {
  VITDDP_REQUIRE_GPU();
#if VITDDP_WITH_CUDA
  const cudaStream_t before = cuda::current_stream();
  cuda::Stream side = cuda::Stream::create(cuda::current_device(), cuda::compute_priority());
  cuda::Event fork_point = cuda::Event::create();
  Tensor x = Tensor::empty({1 << 24}, DType::kF32, Device::cuda(0));
  Tensor y = Tensor::empty({1 << 24}, DType::kF32, Device::cuda(0));
  for (double value : {3.0, -2.0, 7.0}) {
    x.fill_(value);  // compute stream
    {
      cuda::ForkedStreamScope scope(side.get(), fork_point);
      EXPECT_EQ(cuda::current_stream(), side.get());
      y.copy_(x);  // side stream, after the fill
    }
    EXPECT_EQ(cuda::current_stream(), before);
    side.synchronize();
    const std::vector<double> got = y.to(Device::cpu()).to_vector();
    EXPECT_EQ(got.front(), value);
    EXPECT_EQ(got.back(), value);
  }
#endif
}

TEST(CudaStreams, EachStreamHasItsOwnCublasWorkspace) {
  VITDDP_REQUIRE_GPU();
#if VITDDP_WITH_CUDA
  cuda::CudaContext& ctx = cuda::CudaContext::for_device(cuda::current_device());
  cuda::Stream a = cuda::Stream::create(cuda::current_device(), cuda::compute_priority());
  cuda::Stream b = cuda::Stream::create(cuda::current_device(), cuda::compute_priority());
  void* wa = ctx.workspace(a.get());
  EXPECT_NE(wa, nullptr);
  EXPECT_NE(wa, ctx.workspace(b.get()));
  EXPECT_EQ(wa, ctx.workspace(a.get()));
#endif
}

// Products enqueued on two streams in turn, so that they can overlap, each equal to the CPU's.
TEST(CudaStreams, ProductsOnTwoStreamsAtOnceMatchTheCpu) {
  VITDDP_REQUIRE_GPU();
#if VITDDP_WITH_CUDA
  Generator gen(77);
  // Long k and few outputs: the shape for which cuBLASLt picks split-k algorithms with workspace.
  Tensor a = testing::random_tensor({64, 8192}, gen, DType::kF32);
  Tensor b = testing::random_tensor({48, 8192}, gen, DType::kF32);
  Tensor c = testing::random_tensor({48, 8192}, gen, DType::kF32);
  const Tensor want_b = linear(a, b, Tensor()), want_c = linear(a, c, Tensor());
  const Tensor ga = a.to(Device::cuda(0)), gb = b.to(Device::cuda(0)), gc = c.to(Device::cuda(0));
  cuda::Stream side = cuda::Stream::create(cuda::current_device(), cuda::compute_priority());
  cuda::Event fork_point = cuda::Event::create();
  for (int round = 0; round < 4; ++round) {
    Tensor on_compute = linear(ga, gb, Tensor());
    Tensor on_side;
    {
      cuda::ForkedStreamScope scope(side.get(), fork_point);
      on_side = linear(ga, gc, Tensor());
    }
    side.synchronize();
    EXPECT_LE(testing::relative_error(on_compute.to(Device::cpu()), want_b), 1e-5) << "round " << round;
    EXPECT_LE(testing::relative_error(on_side.to(Device::cpu()), want_c), 1e-5) << "round " << round;
  }
#endif
}

// A linear layer's weight gradient on the second stream (Note [Weight gradient beside the input
// gradient]): the same bits as one product after the other, written and accumulated, in f32
// and bf16, and the op's results are ready on the current stream when it returns.
TEST(CudaStreams, WeightGradientBesideTheInputGradientGivesTheSameBits) {
  VITDDP_REQUIRE_GPU();
#if VITDDP_WITH_CUDA
  const Device gpu = Device::cuda(0);
  Generator gen(5);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = testing::random_tensor({300, 256}, gen, DType::kF32).to(dtype).to(gpu);
    const Tensor w = testing::random_tensor({520, 256}, gen, DType::kF32).to(dtype).to(gpu);
    const Tensor dy = testing::random_tensor({300, 520}, gen, DType::kF32).to(dtype).to(gpu);
    const Tensor start_dw = testing::random_tensor({520, 256}, gen, DType::kF32).to(dtype).to(gpu);
    const Tensor start_db = testing::random_tensor({520}, gen, DType::kF32).to(dtype).to(gpu);
    std::vector<std::vector<double>> results[2];
    for (bool beside : {false, true}) {
      cuda::set_concurrent_weight_grads(beside);
      for (GradWrite writes : {GradWrite::kOverwrite, GradWrite::kAccumulate}) {
        for (int call = 0; call < 2; ++call) {  // the first call makes the plans (one stream)
          Tensor dx = Tensor::empty({300, 256}, dtype, gpu), dw = start_dw.clone(), db = start_db.clone();
          cuda::linear_backward(x, w, dy, dx, dw, db, writes);
          // Read back through the current stream only: the op has joined the second stream.
          if (call == 1)
            for (const Tensor& t : {dx, dw, db}) results[beside].push_back(t.to(Device::cpu()).to_vector());
        }
      }
    }
    cuda::set_concurrent_weight_grads(false);
    ASSERT_EQ(results[0].size(), results[1].size());
    for (size_t i = 0; i < results[0].size(); ++i) EXPECT_EQ(results[0][i], results[1][i]) << "result " << i;
    EXPECT_NE(results[0][1], results[0][4]);  // accumulating into dW did add
  }
#endif
}

}  // namespace
}  // namespace vitddp
