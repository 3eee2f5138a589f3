#include "framework/cpu/orthogonalize.h"
#include "framework/cuda/check.h"
#include "framework/cuda/kernel_utils.cuh"
#include "framework/cuda/op_profiler.h"
#include "framework/cuda/stream.h"

namespace vitddp::cuda {
namespace {

// One block per matrix: Gram-Schmidt over its columns with block-wide reductions.
__global__ void orthogonalize_kernel(float* base, const int64_t* offsets, const int64_t* rows, int64_t c, float eps) {
  __shared__ float scratch[32];
  float* m = base + offsets[blockIdx.x];
  const int64_t n = rows[blockIdx.x];
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
  const int64_t count = static_cast<int64_t>(batch.offsets.size());
  std::vector<int64_t> meta(batch.offsets);
  meta.insert(meta.end(), batch.rows.begin(), batch.rows.end());
  Tensor device_meta = Tensor::from_vector_i64(meta, {2 * count}).to(flat.device());
  const int64_t* offsets = device_meta.data<int64_t>();
  orthogonalize_kernel<<<static_cast<unsigned>(count), 256, 0, current_stream()>>>(
      flat.data<float>(), offsets, offsets + count, batch.cols, static_cast<float>(eps));
  CUDA_CHECK_LAUNCH();
}

}  // namespace vitddp::cuda
