#include <algorithm>
#include <climits>
#include <cstdint>

#include "framework/cpu/orthogonalize.h"
#include "framework/cuda/check.h"
#include "framework/cuda/kernel_utils.cuh"
#include "framework/cuda/op_profiler.h"
#include "framework/cuda/stream.h"

namespace vitddp::cuda {
namespace {

// Where each matrix of one launch lies, passed by value as a kernel argument: uploading it
// from pageable host memory would make the host wait for the stream (which, for PowerSGD,
// waits for P's all-reduce), stalling the issue of backward once per bucket.
constexpr int kMatricesPerLaunch = 128;  // 1.5 KB of arguments, within the 4 KB limit
struct MatrixSpans {
  int64_t offsets[kMatricesPerLaunch];
  int32_t rows[kMatricesPerLaunch];
};

// One block per matrix: Gram-Schmidt over its columns with block-wide reductions.
__global__ void orthogonalize_kernel(float* base, MatrixSpans spans, int64_t c, float eps) {
  __shared__ float scratch[32];
  float* m = base + spans.offsets[blockIdx.x];
  const int64_t n = spans.rows[blockIdx.x];
  for (int64_t i = 0; i < c; ++i) {
    for (int64_t j = 0; j < i; ++j) {
      float dot = 0.0f;
      for (int64_t r = threadIdx.x; r < n; r += blockDim.x) dot += m[r * c + i] * m[r * c + j];
      dot = block_sum(dot, scratch);
      for (int64_t r = threadIdx.x; r < n; r += blockDim.x) m[r * c + i] -= dot * m[r * c + j];
      __syncthreads();
    }
    float norm = 0.0f;
    for (int64_t r = threadIdx.x; r < n; r += blockDim.x) norm += m[r * c + i] * m[r * c + i];
    norm = block_sum(norm, scratch);
    const float inv = 1.0f / (sqrtf(norm) + eps);
    for (int64_t r = threadIdx.x; r < n; r += blockDim.x) m[r * c + i] *= inv;
    __syncthreads();
  }
}

}  // namespace

void orthogonalize_columns(const Tensor& flat, const MatrixBatch& batch, double eps) {
  check_tensor(flat.dtype() == DType::kF32 && flat.is_contiguous(), "orthogonalize", "a contiguous f32 buffer", flat);
  if (batch.offsets.empty()) return;
  OpScope scope("powersgd orthogonalize");
  const size_t count = batch.offsets.size();
  VITDDP_CHECK(batch.rows.size() == count, "orthogonalize: ", count, " offsets but ", batch.rows.size(), " row counts");
  for (size_t first = 0; first < count; first += kMatricesPerLaunch) {
    const size_t here = std::min<size_t>(kMatricesPerLaunch, count - first);
    MatrixSpans spans{};
    for (size_t k = 0; k < here; ++k) {
      VITDDP_CHECK(batch.rows[first + k] <= INT32_MAX, "orthogonalize: a matrix of ", batch.rows[first + k], " rows");
      spans.offsets[k] = batch.offsets[first + k];
      spans.rows[k] = static_cast<int32_t>(batch.rows[first + k]);
    }
    orthogonalize_kernel<<<static_cast<unsigned>(here), 256, 0, current_stream()>>>(flat.data<float>(), spans,
                                                                                   batch.cols, static_cast<float>(eps));
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace vitddp::cuda
