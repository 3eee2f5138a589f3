// HostCopyTransport on its own, two ranks on threads sharing one GPU: all-reduces issued back to
// back after their inputs, as ProcessGroupNccl issues DDP's buckets (Note [Back-to-back host
// copies]), with the additions beside the copies and on the receiving stream (Note [Reductions
// beside the copies]): every sum exact, f32 and bf16, many chunks per ring, a slice again and one
// twice in a row. On one GPU the two ranks' streams must not share hardware queues (Note
// [Host-copy all-reduce]: one rank's wait could stand before the other's signal; it hung at
// f753006 with the default 8), so it runs only with CUDA_DEVICE_MAX_CONNECTIONS >= 16 (device_run.sh
// sets 32 for it), and a hang fails after 60 s (the waits released) instead of blocking.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "common/gpu.h"
#include "common/multiprocess.h"
#include "framework/core/tensor.h"
#if VITDDP_WITH_NCCL
#include "distributed/nccl/host_copy_transport.h"
#include "framework/cuda/check.h"
#include "framework/cuda/stream.h"
#endif

namespace vitddp {
namespace {

#if VITDDP_WITH_NCCL

// Rank r's element i: (r + 1) + (i mod 13); the sum 3 + 2 (i mod 13) is exact in every dtype here.
Tensor pattern(int rank, int64_t n, DType dtype) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = rank + 1.0 + static_cast<double>(i % 13);
  return Tensor::from_vector(v, {n}, DType::kF32).to(dtype).to(Device::cuda(0));
}

int64_t first_wrong(const Tensor& t, double scale) {
  const std::vector<double> v = t.to_vector();
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != scale * (3.0 + 2.0 * static_cast<double>(i % 13))) return static_cast<int64_t>(i);
  return -1;
}

// Waits for `stream` for at most 60 s; on a hang releases the transport's waits (so its streams
// drain and the test can end) and says so.
bool finishes(const cuda::Stream& stream, HostCopyTransport& transport) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (cudaStreamQuery(stream.get()) == cudaErrorNotReady) {
    if (std::chrono::steady_clock::now() > deadline) {
      transport.release_waits();
      stream.synchronize();
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(HostCopyTransportGpu, TwoRanksOnOneGpuSumBackToBack) {
  VITDDP_REQUIRE_GPU();
  const char* connections = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  if (!connections || std::atoi(connections) < 16)
    GTEST_SKIP() << "two ranks on one GPU need CUDA_DEVICE_MAX_CONNECTIONS >= 16 (their streams must not share "
                    "hardware queues)";
  for (bool beside : {true, false}) {
    SCOPED_TRACE(beside ? "additions beside the copies" : "additions on the receiving stream");
    testing::TempFolder folder("vitddp_host_copy_transport");
    std::vector<std::string> errors(2);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < 2; ++rank)
      threads.emplace_back([&, rank] {
        try {
          cuda::set_device(0);
          HostCopyOptions options;
          options.rank = rank;
          options.world_size = 2;
          options.device = 0;
          options.rendezvous = folder.path();
          options.key_prefix = "one_gpu/";
          options.timeout = std::chrono::milliseconds(30000);
          options.chunk_bytes = 1 << 20;  // small chunks: many per ring, every slot and staging chunk reused
          options.reduce_beside = beside;  // and back to back after their inputs either way
          HostCopyTransport transport(options);
          cuda::Stream stream = cuda::Stream::create(0, 0);
          cuda::Event ready = cuda::Event::create();
          // Slices of one buffer, each written on the stream just before its all-reduce, which
          // starts after that write only; then slice 0 again (its last all-reduce four back) and
          // slice 1 twice in a row (in order, as it must be: each reads what the last one wrote).
          const int64_t slice = 3 * 1024 * 1024 + 320;
          for (DType dtype : {DType::kBF16, DType::kF32}) {
            Tensor pristine = pattern(rank, 5 * slice, dtype);
            Tensor buffer = Tensor::empty({5 * slice}, dtype, Device::cuda(0));
            CUDA_CHECK(cudaDeviceSynchronize());
            for (int k = 0; k < 5; ++k) {
              const size_t offset = static_cast<size_t>(k * slice) * dtype_size(dtype);
              CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(buffer.data_ptr()) + offset,
                                         static_cast<const char*>(pristine.data_ptr()) + offset,
                                         static_cast<size_t>(slice) * dtype_size(dtype), cudaMemcpyDeviceToDevice,
                                         stream.get()));
              ready.record(stream.get());
              transport.allreduce(static_cast<char*>(buffer.data_ptr()) + offset, slice, dtype, ReduceOp::kSum,
                                  stream.get(), ready.get());
            }
            char* second = static_cast<char*>(buffer.data_ptr()) + static_cast<size_t>(slice) * dtype_size(dtype);
            transport.allreduce(buffer.data_ptr(), slice, dtype, ReduceOp::kSum, stream.get(), ready.get());
            transport.allreduce(second, slice, dtype, ReduceOp::kSum, stream.get(), ready.get());
            transport.allreduce(second, slice, dtype, ReduceOp::kSum, stream.get(), ready.get());
            ASSERT_TRUE(finishes(stream, transport)) << dtype_name(dtype) << ": hung (waits released)";
            // Slice 0 summed twice, slice 1 three times (x2, x4), the rest once; the pattern runs
            // on across slices.
            const std::vector<double> v = buffer.to_vector();
            int64_t wrong = -1;
            for (int64_t i = 0; i < 5 * slice && wrong < 0; ++i) {
              const double scale = i < slice ? 2.0 : i < 2 * slice ? 4.0 : 1.0;
              if (v[i] != scale * (3.0 + 2.0 * static_cast<double>(i % 13))) wrong = i;
            }
            EXPECT_EQ(wrong, -1) << dtype_name(dtype);
          }
          Tensor averaged = pattern(rank, 777777, DType::kF32);
          CUDA_CHECK(cudaDeviceSynchronize());
          ready.record(stream.get());
          transport.allreduce(averaged.data_ptr(), averaged.numel(), DType::kF32, ReduceOp::kAvg, stream.get(),
                              ready.get());
          ASSERT_TRUE(finishes(stream, transport)) << "average: hung (waits released)";
          EXPECT_EQ(first_wrong(averaged, 0.5), -1) << "average";
          EXPECT_TRUE(transport.idle());
        } catch (const std::exception& e) {
          errors[rank] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    EXPECT_EQ(errors, std::vector<std::string>({"", ""}));
  }
}

#endif

}  // namespace
}  // namespace vitddp
