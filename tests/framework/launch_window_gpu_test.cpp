// The launch window (Note [Launch window]): with a window of 8 ops the host cannot get more than
// that far past a long product; without one it queues everything at once.
#include <gtest/gtest.h>

#include <chrono>

#include "common/gpu.h"
#include "common/test_utils.h"
#include "framework/ops/linear.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/launch_window.h"
#include "framework/cuda/stream.h"
#endif

namespace vitddp {
namespace {

#if VITDDP_WITH_CUDA
// Host milliseconds to queue one long product and then 24 small ones; the product's GPU time
// goes to `product_ms`.
double host_ms_to_queue(const Tensor& a, const Tensor& small, double* product_ms) {
  cuda::Event start = cuda::Event::create(true), stop = cuda::Event::create(true);
  cuda::Event idle = cuda::Event::create();
  idle.record(cuda::current_stream());
  idle.synchronize();
  const auto host_start = std::chrono::steady_clock::now();
  start.record(cuda::current_stream());
  Tensor product = matmul(a, a);
  stop.record(cuda::current_stream());
  for (int i = 0; i < 24; ++i) Tensor sum = matmul(small, small);
  const double host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - host_start).count();
  stop.synchronize();
  *product_ms = stop.elapsed_ms_since(start);
  return host_ms;
}
#endif

TEST(LaunchWindowGpu, TheHostWaitsOnlyWithAWindow) {
  VITDDP_REQUIRE_GPU();
#if VITDDP_WITH_CUDA
  Generator gen(11);
  const Tensor a = testing::random_tensor({8192, 8192}, gen, DType::kF32).to(Device::cuda(0));
  const Tensor small = testing::random_tensor({8, 8}, gen, DType::kF32).to(Device::cuda(0));
  double product_ms = 0;
  host_ms_to_queue(a, small, &product_ms);  // warm-up: cuBLASLt's choices, the pool's blocks
  const int before = cuda::launch_window();
  cuda::set_launch_window(0);
  const double free_ms = host_ms_to_queue(a, small, &product_ms);
  ASSERT_GT(product_ms, 5.0) << "the product is too short to tell the two apart";
  EXPECT_LT(free_ms, 0.5 * product_ms) << "without a window the host should not wait for the product";
  cuda::set_launch_window(8);
  EXPECT_EQ(cuda::launch_window(), 8);
  const double windowed_ms = host_ms_to_queue(a, small, &product_ms);
  cuda::set_launch_window(before);
  // 25 ops with a window of 8: the host waits at op 16 for the mark after op 8, which follows the product.
  EXPECT_GT(windowed_ms, 0.8 * product_ms) << "the host ran " << windowed_ms << " ms past a " << product_ms
                                           << " ms product with a window of 8 ops";
  cuda::set_launch_window(5);
  EXPECT_EQ(cuda::launch_window(), 8);  // rounded up to the mark stride
  cuda::set_launch_window(before);
  EXPECT_THROW(cuda::set_launch_window(-1), Error);
#endif
}

}  // namespace
}  // namespace vitddp
