// HostCopyTransport on its own, two ranks as two processes sharing one GPU (each its own CUDA
// context, which the GPU time-slices; two ranks as threads of one process would share the
// context's hardware queues, where one rank's flag wait can stand before the other's signal:
// Note [Host-copy all-reduce]). All-reduces issued back to back after their inputs, as
// ProcessGroupNccl issues DDP's buckets with host-copy-overlap (Note [Back-to-back host
// copies]), with the additions on the receiving stream and beside the copies (Note [Reductions
// beside the copies]): every sum exact, f32 and bf16, many chunks per ring, a slice again and one
// twice in a row. A hang is a failure after 120 s (the children are killed), not a blocked test.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/ddp_harness.h"
#include "common/multiprocess.h"
#include "framework/core/tensor.h"
#if VITDDP_WITH_NCCL
#include "distributed/nccl/host_copy_transport.h"
#include "framework/cuda/check.h"
#include "framework/cuda/device.h"
#include "framework/cuda/stream.h"
#endif

namespace vitddp {
namespace {

#if VITDDP_WITH_NCCL

// Rank r's element i: (r + 1) + (i mod 13); sums of it stay exact in every dtype here.
Tensor pattern(int rank, int64_t n, DType dtype) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = rank + 1.0 + static_cast<double>(i % 13);
  return Tensor::from_vector(v, {n}, DType::kF32).to(dtype).to(Device::cuda(0));
}

// One rank's part (a child process): 0 when every sum is exact.
int run_rank(int rank, const std::string& rendezvous, bool beside) {
  cuda::set_device(0);
  HostCopyOptions options;
  options.rank = rank;
  options.world_size = 2;
  options.device = 0;
  options.rendezvous = rendezvous;
  options.key_prefix = "one_gpu/";
  options.timeout = std::chrono::milliseconds(30000);
  options.chunk_bytes = 1 << 20;  // small chunks: many per ring, every slot and staging chunk reused
  options.reduce_beside = beside;
  HostCopyTransport transport(options);
  cuda::Stream stream = cuda::Stream::create(0, 0);
  cuda::Event ready = cuda::Event::create();
  // Slices of one buffer, each written on the stream just before its all-reduce, which starts
  // after that write only; then slice 0 again (its last all-reduce four back) and slice 1 twice
  // in a row (in order, as it must be: each reads what the last one wrote).
  const int64_t slice = 3 * 1024 * 1024 + 320;
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    const size_t element = dtype_size(dtype);
    Tensor pristine = pattern(rank, 5 * slice, dtype);
    Tensor buffer = Tensor::empty({5 * slice}, dtype, Device::cuda(0));
    CUDA_CHECK(cudaDeviceSynchronize());
    char* base = static_cast<char*>(buffer.data_ptr());
    for (int k = 0; k < 5; ++k) {
      const size_t offset = static_cast<size_t>(k * slice) * element;
      CUDA_CHECK(cudaMemcpyAsync(base + offset, static_cast<const char*>(pristine.data_ptr()) + offset,
                                 static_cast<size_t>(slice) * element, cudaMemcpyDeviceToDevice, stream.get()));
      ready.record(stream.get());
      transport.allreduce(base + offset, slice, dtype, ReduceOp::kSum, stream.get(), ready.get());
    }
    transport.allreduce(base, slice, dtype, ReduceOp::kSum, stream.get(), ready.get());
    transport.allreduce(base + slice * element, slice, dtype, ReduceOp::kSum, stream.get(), ready.get());
    transport.allreduce(base + slice * element, slice, dtype, ReduceOp::kSum, stream.get(), ready.get());
    stream.synchronize();
    // Slice 0 summed twice, slice 1 three times (x2, x4), the rest once; the pattern runs on
    // across slices.
    const std::vector<double> v = buffer.to_vector();
    for (int64_t i = 0; i < 5 * slice; ++i) {
      const double scale = i < slice ? 2.0 : i < 2 * slice ? 4.0 : 1.0;
      VITDDP_CHILD_CHECK(v[i] == scale * (3.0 + 2.0 * static_cast<double>(i % 13)), dtype_name(dtype), ": element ",
                         i, " is ", v[i]);
    }
  }
  Tensor averaged = pattern(rank, 777777, DType::kF32);
  CUDA_CHECK(cudaDeviceSynchronize());
  ready.record(stream.get());
  transport.allreduce(averaged.data_ptr(), averaged.numel(), DType::kF32, ReduceOp::kAvg, stream.get(), ready.get());
  stream.synchronize();
  const std::vector<double> a = averaged.to_vector();
  for (size_t i = 0; i < a.size(); ++i)
    VITDDP_CHILD_CHECK(a[i] == 0.5 * (3.0 + 2.0 * static_cast<double>(i % 13)), "average: element ", i, " is ", a[i]);
  VITDDP_CHILD_CHECK(transport.idle(), "the transport's streams are not idle after the last wait");
  return 0;
}

TEST(HostCopyTransportGpu, TwoRanksOnOneGpuSumBackToBack) {
  // No CUDA call in this process before the fork: the children could not use CUDA after one.
  if (testing::gpus_without_cuda_init() < 1) GTEST_SKIP() << "needs a GPU";
  for (bool beside : {false, true}) {
    SCOPED_TRACE(beside ? "additions beside the copies" : "additions on the receiving stream");
    testing::TempFolder folder("vitddp_host_copy_transport");
    const std::vector<int> codes = testing::run_in_processes(
        2, [&](int rank) { return run_rank(rank, folder.path(), beside); }, std::chrono::seconds(120));
    EXPECT_EQ(codes, std::vector<int>({0, 0})) << testing::describe_exit_codes(codes);
  }
}

#endif

}  // namespace
}  // namespace vitddp
