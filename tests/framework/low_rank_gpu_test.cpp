// PowerSGD's fused bucket passes on the GPU against the CPU versions (framework/cpu/low_rank.h),
// at ViT-L/32's largest group shape class (rows of 1024 and more than one block of threads) and
// narrow ones, with 5 and 21 rows a matrix, in f32 and bf16 buckets with f32 and bf16 errors,
// ranks 4 and 8.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <utility>

#include "common/gpu.h"
#include "common/test_utils.h"
#include "framework/cpu/low_rank.h"
#include "framework/cpu/low_rank_project.h"
#include "framework/cpu/orthogonalize.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/check.h"
#include "framework/cuda/stream.h"
#endif

namespace vitddp {
namespace {

// max |a - b| / max(1, |b|): one rounding step of a 16-bit value is at most 2^-7 of it.
double worst_relative_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]) / std::max(1.0, std::abs(y[i])));
  return worst;
}

// max |a - b| / max(1, max |b|): summation order changes each sum by rounding steps of its
// largest terms, not of itself (a sum that cancels to near zero keeps them).
double worst_normwise_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  double worst = 0, largest = 1;
  for (size_t i = 0; i < x.size(); ++i) {
    worst = std::max(worst, std::abs(x[i] - y[i]));
    largest = std::max(largest, std::abs(y[i]));
  }
  return worst / largest;
}

TEST(LowRankGpu, FusedPassesMatchTheCpu) {
  VITDDP_REQUIRE_GPU();
#if VITDDP_WITH_CUDA
  const Device gpu = Device::cuda(0);
  Generator gen(3);
  for (DType dtype : {DType::kF32, DType::kBF16})
    for (bool error_in_bucket_dtype : {false, true})
      for (int64_t rank : {4, 8}) {  // both take the kernel of Note [The expansion's Q reads] in quads
        if (error_in_bucket_dtype && dtype == DType::kF32) continue;
        const DType error_dtype = error_in_bucket_dtype ? dtype : DType::kF32;
        // 1024, 2048 and 12: quads (aligned rows); 5, 21 and 130 rows a matrix (16 rows a block of
        // the row kernel: 1, 2 and 9 blocks; 64 of the column kernel without a residual: 1, 1 and 3).
        for (auto [m, n] : {std::pair<int64_t, int64_t>{1030, 5}, {7, 5}, {1024, 5}, {1024, 21}, {12, 21}, {2048, 130}})
          for (bool with_residual : {true, false}) {
            SCOPED_TRACE(std::string(dtype_name(dtype)) + " error " + dtype_name(error_dtype) + " rank " +
                         std::to_string(rank) + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                         (with_residual ? "" : " without a residual"));
            LowRankGroup g;
            const bool quads = m % 4 == 0;
            g.count = 3, g.n = n, g.m = m, g.rank = rank, g.offset = quads ? 16 : 9, g.stride = n * m + (quads ? 8 : 3);
            g.p_offset = quads ? 4 : 2, g.q_offset = quads ? 8 : 6;  // quads: P's and Q's rows aligned too
            const int64_t numel = g.offset + 3 * g.stride;
            Tensor grad = testing::random_tensor({numel}, gen, DType::kF32).to(dtype);
            Tensor error = testing::random_tensor({numel}, gen, DType::kF32).to(error_dtype);
            Tensor p = testing::random_tensor({g.p_offset + 3 * n * rank}, gen, DType::kF32);
            Tensor q = testing::random_tensor({g.q_offset + 3 * m * rank}, gen, DType::kF32);

            Tensor cpu_comp = Tensor::empty({numel}, error_dtype), gpu_comp = Tensor::empty({numel}, error_dtype, gpu);
            cpu::add_widened(grad, error, cpu_comp);
            cuda::add_widened(grad.to(gpu), error.to(gpu), gpu_comp);
            EXPECT_EQ(gpu_comp.to_vector(), cpu_comp.to_vector());

            Tensor cpu_out = grad.clone(), gpu_out = grad.to(gpu);
            Tensor cpu_flag = Tensor::zeros({1}, DType::kI64), gpu_flag = Tensor::zeros({1}, DType::kI64, gpu);
            cpu::expand_low_rank(p, q, g, cpu_out, with_residual ? cpu_comp : Tensor(), cpu_flag);
            cuda::expand_low_rank(p.to(gpu), q.to(gpu), g, gpu_out, with_residual ? gpu_comp : Tensor(), gpu_flag);
            // f32: summation order only (fused multiply-adds); 16 bits: at most one rounding step (2^-7 of the value).
            EXPECT_LE(worst_relative_diff(gpu_out.to(Device::cpu()), cpu_out), dtype == DType::kF32 ? 1e-5 : 0.0079);
            EXPECT_LE(worst_relative_diff(gpu_comp.to(Device::cpu()), cpu_comp),
                      error_dtype == DType::kF32 ? 1e-5 : 0.0079);
            EXPECT_EQ(gpu_flag.to_vector()[0], 0);
            double moved = 0;  // the expansion did write something
            std::vector<double> before = grad.to_vector(), after = cpu_out.to_vector();
            for (size_t i = 0; i < before.size(); ++i) moved += std::abs(after[i] - before[i]);
            EXPECT_GT(moved, 1.0);
          }
      }
#endif
}

// Note [PowerSGD's products as bucket passes]: the compensation fused with P = M Q, and Q = M^T P
// in row blocks (of 128, or down to 16 for a group that would not fill the GPU) summed by a
// second launch, against the CPU. Rows of 1024 to 4096 (1 to 8 column slabs of 512), 5 to 1300
// rows (one to 82 row blocks; a warp's second row missing),
// f32 and bf16 buckets with f32 and bf16 errors, ranks 4 and 8, M apart and in place (the error
// becoming M), with and without a sent P subtracted (Note [The error settled a step late]);
// groups the kernels do not take are named as such and refused.
TEST(LowRankGpu, ProjectionPassesMatchTheCpu) {
  VITDDP_REQUIRE_GPU();
#if VITDDP_WITH_CUDA
  const Device gpu = Device::cuda(0);
  Generator gen(13);
  for (DType dtype : {DType::kF32, DType::kBF16})
    for (DType error_dtype : {DType::kF32, dtype})
      for (int64_t rank : {4, 8})
        for (auto [m, n] : {std::pair<int64_t, int64_t>{1024, 5}, {12, 21}, {2048, 129}, {1024, 300}, {4096, 17},
                            {4096, 1300}})
          for (int variant = 0; variant < 4; ++variant) {
            const bool in_place = variant % 2 == 1, with_sent = variant >= 2;
            if (dtype == DType::kF32 && error_dtype != dtype) continue;  // f32 listed once
            // Large enough for Q's row blocks of 128 (264 blocks); the smaller groups take fewer rows
            // a block. Once per dtype pair and rank: its CPU reference is slow.
            if (n == 1300 && variant != 3) continue;
            SCOPED_TRACE(std::string(dtype_name(dtype)) + " error " + dtype_name(error_dtype) + " rank " +
                         std::to_string(rank) + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                         (in_place ? " in place" : "") + (with_sent ? " sent P" : ""));
            LowRankGroup g;
            g.count = 3, g.n = n, g.m = m, g.rank = rank, g.offset = 16, g.stride = n * m + 8;
            g.p_offset = 4, g.q_offset = 8;
            const int64_t numel = g.offset + 3 * g.stride + 4;
            Tensor grad = testing::random_tensor({numel}, gen, DType::kF32).to(dtype);
            Tensor error = testing::random_tensor({numel}, gen, DType::kF32).to(error_dtype);
            Tensor q = testing::random_tensor({g.q_offset + 3 * m * rank}, gen, DType::kF32);
            Tensor p0 = testing::random_tensor({g.p_offset + 3 * n * rank}, gen, DType::kF32);
            Tensor m0 = testing::random_tensor({numel}, gen, DType::kF32).to(error_dtype);
            const Tensor sent = with_sent ? testing::random_tensor({p0.numel()}, gen, DType::kF32) : Tensor();

            Tensor cpu_m = in_place ? error.clone() : m0.clone(), cpu_p = p0.clone();
            cpu::compensate_and_project(grad, in_place ? cpu_m : error, sent, q, g, cpu_m, cpu_p);
            Tensor gpu_error = error.to(gpu), gpu_q = q.to(gpu), gpu_p = p0.to(gpu);
            Tensor gpu_m = in_place ? gpu_error : m0.to(gpu);
            const Tensor gpu_grad = grad.to(gpu);
            ASSERT_TRUE(cuda::projection_kernels_take(gpu_grad, gpu_error, gpu_m, gpu_p, gpu_q, g));
            cuda::compensate_and_project(gpu_grad, gpu_error, with_sent ? sent.to(gpu) : Tensor(), gpu_q, g, gpu_m,
                                         gpu_p);
            if (!with_sent) {
              EXPECT_EQ(gpu_m.to_vector(), cpu_m.to_vector());  // one rounding of the same sum, and gaps untouched
              EXPECT_LE(worst_normwise_diff(gpu_p.to(Device::cpu()), cpu_p), 1e-5);  // summation order only
            } else {
              // S Q^T summed with fused multiply-adds on the GPU: an f32 M differs in its last bits,
              // and a 16-bit one where that moves the rounding; the gaps stay as they were.
              const double tolerance = error_dtype == DType::kF32 ? 1e-6 : 1.0 / 128;  // one bf16 step
              EXPECT_LE(worst_normwise_diff(gpu_m.to(Device::cpu()), cpu_m), tolerance);
              EXPECT_LE(worst_normwise_diff(gpu_p.to(Device::cpu()), cpu_p), error_dtype == DType::kF32 ? 1e-5 : 1e-3);
              const std::vector<double> gm = gpu_m.to_vector(), cm = cpu_m.to_vector();
              for (int64_t at : {int64_t(0), g.offset - 1, g.offset + g.n * g.m, numel - 1})
                EXPECT_EQ(gm[at], cm[at]) << at;
            }

            Tensor cpu_q = q.clone();  // from the GPU's M and P: the Q pass's own summation order only
            cpu::project_transposed(gpu_m.to(Device::cpu()), gpu_p.to(Device::cpu()), g, cpu_q);
            cuda::project_transposed(gpu_m, gpu_p, g, gpu_q);
            EXPECT_LE(worst_normwise_diff(gpu_q.to(Device::cpu()), cpu_q), 1e-5);
            const std::vector<double> before = q.to_vector(), after = cpu_q.to_vector();
            EXPECT_EQ(gpu_q.to_vector()[0], before[0]);  // before the group's Q
            EXPECT_NE(after[g.q_offset], before[g.q_offset]);
          }
  // Not taken: rank 3; a bf16 bucket's group starting off a quad; Q's rows off a quad.
  LowRankGroup g;
  g.count = 1, g.n = 8, g.m = 16, g.rank = 4, g.offset = 0, g.stride = 128, g.p_offset = 0, g.q_offset = 0;
  Tensor grad = Tensor::zeros({200}, DType::kBF16, gpu), error = Tensor::zeros({200}, DType::kBF16, gpu);
  Tensor p = Tensor::zeros({64}, DType::kF32, gpu), q = Tensor::zeros({80}, DType::kF32, gpu);
  EXPECT_TRUE(cuda::projection_kernels_take(grad, error, error, p, q, g));
  LowRankGroup rank3 = g, shifted = g, q_shifted = g;
  rank3.rank = 3;
  shifted.offset = 2;
  q_shifted.q_offset = 2;
  for (const LowRankGroup& bad : {rank3, shifted, q_shifted}) {
    EXPECT_FALSE(cuda::projection_kernels_take(grad, error, error, p, q, bad));
    EXPECT_THROW(cuda::compensate_and_project(grad, error, Tensor(), q, bad, error, p), Error);
    EXPECT_THROW(cuda::project_transposed(error, p, bad, q), Error);
  }
  // M overlapping the error in part, or the gradient: refused (the kernels take them as unaliased).
  Tensor wide = Tensor::zeros({400}, DType::kBF16, gpu);
  const Tensor front = wide.as_strided({200}, {1}, 0), shifted_half = wide.as_strided({200}, {1}, 100);
  EXPECT_THROW(cuda::compensate_and_project(grad, front, Tensor(), q, g, shifted_half, p), Error);
  EXPECT_THROW(cuda::compensate_and_project(front, error, Tensor(), q, g, front, p), Error);
  // A sent P that is P itself, or off a quad.
  EXPECT_THROW(cuda::compensate_and_project(grad, error, p, q, g, error, p), Error);
  const Tensor sent_wide = Tensor::zeros({68}, DType::kF32, gpu);
  EXPECT_THROW(cuda::compensate_and_project(grad, error, sent_wide.as_strided({66}, {1}, 2), q, g, error, p), Error);
#endif
}

// The uncompressed tensors of a bucket: more runs than one launch takes (96), some empty, one
// longer than a block's grid row; GPU against CPU, bf16 bucket, residual and flag; and the
// compensation over the same runs.
TEST(LowRankGpu, RunsGatherAndScatterMatchTheCpu) {
  VITDDP_REQUIRE_GPU();
#if VITDDP_WITH_CUDA
  const Device gpu = Device::cuda(0);
  Generator gen(9);
  BucketRuns runs;
  int64_t at = 5;
  for (int i = 0; i < 150; ++i) {
    const int64_t numel = i == 7 ? 70000 : (i % 11 == 0 ? 0 : 1 + (i * 37) % 300);
    runs.offsets.push_back(at);
    runs.numels.push_back(numel);
    at += numel + i % 3;
  }
  const int64_t numel = at + 4;
  Tensor src = testing::random_tensor({numel}, gen, DType::kF32);
  Tensor cpu_flat = Tensor::empty({runs.total()}, DType::kF32);
  Tensor gpu_flat = Tensor::empty({runs.total()}, DType::kF32, gpu);
  cpu::gather_runs(src, runs, 0.25, cpu_flat);
  cuda::gather_runs(src.to(gpu), runs, 0.25, gpu_flat);
  EXPECT_EQ(gpu_flat.to_vector(), cpu_flat.to_vector());

  Tensor bucket = testing::random_tensor({numel}, gen, DType::kF32).to(DType::kBF16);
  Tensor residual = testing::random_tensor({numel}, gen, DType::kF32);
  Tensor cpu_bucket = bucket.clone(), cpu_residual = residual.clone(), cpu_flag = Tensor::zeros({1}, DType::kI64);
  Tensor gpu_bucket = bucket.to(gpu), gpu_residual = residual.to(gpu), gpu_flag = Tensor::zeros({1}, DType::kI64, gpu);
  cpu::scatter_runs(cpu_flat, runs, cpu_bucket, cpu_residual, cpu_flag);
  cuda::scatter_runs(gpu_flat, runs, gpu_bucket, gpu_residual, gpu_flag);
  EXPECT_EQ(gpu_bucket.to_vector(), cpu_bucket.to_vector());
  EXPECT_EQ(gpu_residual.to_vector(), cpu_residual.to_vector());
  EXPECT_EQ(gpu_flag.to_vector()[0], 0);
  EXPECT_NE(cpu_bucket.to_vector(), bucket.to_vector());  // something was written

  // The compensation outside PowerSGD's matrices: grad + error over the runs only.
  Tensor error = testing::random_tensor({numel}, gen, DType::kF32);
  Tensor cpu_out = testing::random_tensor({numel}, gen, DType::kF32), gpu_out = cpu_out.to(gpu);
  cpu::add_widened_runs(bucket, error, runs, cpu_out);
  cuda::add_widened_runs(bucket.to(gpu), error.to(gpu), runs, gpu_out);
  EXPECT_EQ(gpu_out.to_vector(), cpu_out.to_vector());
#endif
}

// PowerSGD's P matrices of a whole-model bucket: more than one launch's worth (128), rows from 1
// to more than a block of threads. The GPU gives the CPU's columns, and the call returns while
// its stream is still held up (PowerSGD's side stream waits there for P's all-reduce; a host
// wait would stall the issue of backward once per bucket).
TEST(LowRankGpu, OrthogonalizeMatchesTheCpuWithoutWaitingForTheStream) {
  VITDDP_REQUIRE_GPU();
#if VITDDP_WITH_CUDA
  const Device gpu = Device::cuda(0);
  Generator gen(11);
  MatrixBatch batch;
  batch.cols = 4;
  int64_t numel = 3;  // the first matrix does not start at 0
  for (int k = 0; k < 131; ++k) {
    const int64_t rows = k % 3 == 0 ? 4 + 37 * k : 4 + k % 7;
    batch.offsets.push_back(numel);
    batch.rows.push_back(rows);
    numel += rows * batch.cols + 2;  // a gap the kernel must leave alone
  }
  Tensor host = testing::random_tensor({numel}, gen, DType::kF32);
  Tensor device = host.to(gpu);
  cpu::orthogonalize_columns(host, batch);
  // Once first: the kernel's first launch loads its module (CUDA's lazy loading), which may
  // synchronise; that happens once per process, not per bucket.
  cuda::orthogonalize_columns(host.to(gpu), batch);

  // Hold the stream up for 300 ms behind a host function on another stream.
  cuda::Stream blocker = cuda::Stream::create(0, cuda::compute_priority());
  cuda::Stream held = cuda::Stream::create(0, cuda::compute_priority());
  CUDA_CHECK(cudaLaunchHostFunc(
      blocker.get(), [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(300)); }, nullptr));
  cuda::Event released = cuda::Event::create();
  released.record(blocker.get());
  released.block(held.get());
  double call_ms = 0;
  {
    cuda::StreamGuard on_held(held.get());
    const auto start = std::chrono::steady_clock::now();
    cuda::orthogonalize_columns(device, batch);
    call_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }
  held.synchronize();
  EXPECT_LT(call_ms, 150.0) << "the call waited for its stream";
  const std::vector<double> want = host.to_vector(), got = device.to(Device::cpu()).to_vector();
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(want[i] - got[i]));
  EXPECT_LE(worst, 1e-4);
  double norm = 0;  // the last matrix's first column came out of unit length
  for (int64_t r = 0; r < batch.rows.back(); ++r) {
    const double v = got[batch.offsets.back() + r * batch.cols];
    norm += v * v;
  }
  EXPECT_NEAR(norm, 1.0, 1e-4);
#endif
}

}  // namespace
}  // namespace vitddp
