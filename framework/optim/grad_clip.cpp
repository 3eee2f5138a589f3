#include "framework/optim/grad_clip.h"

#include <algorithm>
#include <cmath>

#include "framework/core/error.h"
#include "framework/core/scalar_types.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/grad_norm.h"
#endif

namespace vitddp {

GradNormClip::GradNormClip(const ParamArena& arena, double max_norm) : arena_(arena), max_norm_(max_norm) {
  VITDDP_CHECK(std::isfinite(max_norm) && max_norm > 0, "gradient clipping: the maximum norm must be positive, got ",
               max_norm);
  const Device device = arena.device();
  squares_ = Tensor::zeros({1}, DType::kF64, device);
  norm_ = Tensor::zeros({1}, DType::kF32, device);
  scale_ = Tensor::zeros({1}, DType::kF32, device);
  scale_.fill_(1.0);
#if VITDDP_WITH_CUDA
  if (device.is_cuda()) scratch_ = Tensor::zeros({cuda::kGradNormBlocks}, DType::kF64, device);
#endif
}

void GradNormClip::begin() {
  if (arena_.device().is_cuda()) {
#if VITDDP_WITH_CUDA
    cuda::zero_sum_of_squares(squares_.data<double>());
    return;
#endif
  }
  squares_.data<double>()[0] = 0;
}

void GradNormClip::add_squares(int64_t begin, int64_t end) {
  VITDDP_ASSERT(0 <= begin && begin <= end && end <= arena_.numel(), "gradient clipping: range outside the arena");
  const Tensor grads = arena_.flat_grads();
  if (arena_.device().is_cuda()) {
#if VITDDP_WITH_CUDA
    cuda::add_sum_of_squares(static_cast<const char*>(grads.data_ptr()) + begin * dtype_size(grads.dtype()),
                             grads.dtype(), end - begin, squares_.data<double>(), scratch_.data<double>());
    return;
#endif
  }
  VITDDP_CHECK(grads.dtype() == DType::kF32, "gradient clipping on the CPU needs f32 gradients");
  const float* g = grads.data<float>();
  double s = 0;
  for (int64_t i = begin; i < end; ++i) s += static_cast<double>(g[i]) * g[i];
  squares_.data<double>()[0] += s;
}

void GradNormClip::finish() {
  if (arena_.device().is_cuda()) {
#if VITDDP_WITH_CUDA
    cuda::clip_scale_from_squares(squares_.data<double>(), max_norm_, norm_.data<float>(), scale_.data<float>());
    return;
#endif
  }
  const double total = std::sqrt(squares_.data<double>()[0]);
  norm_.data<float>()[0] = static_cast<float>(total);
  scale_.data<float>()[0] = static_cast<float>(std::min(1.0, max_norm_ / (total + 1e-6)));
}

void GradNormClip::measure_all() {
  begin();
  add_squares(0, arena_.numel());
  finish();
}

}  // namespace vitddp
