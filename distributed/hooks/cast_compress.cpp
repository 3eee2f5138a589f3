// fp16 / bf16 compression: the bucket is divided by the world size, cast to 16 bits,
// all-reduced (sum) and cast back into the bucket. Dividing first keeps the 16-bit sum inside
// fp16's range where the plain sum would overflow (PyTorch's fp16_compress_hook does the same).
#include <cmath>
#include <limits>

#include "distributed/comm_hook.h"
#include "framework/core/nvtx.h"
#include "framework/core/tensor_math.h"
#if VITDDP_WITH_CUDA
#include "framework/cuda/nonfinite.h"
#endif

namespace vitddp {
namespace {

// Note [Compression overflow]
// A gradient whose share |g| / world, or whose average over the ranks, lies beyond fp16's 65504
// becomes Inf in the cast or in the 16-bit sum (bf16 has fp32's range: only values within
// rounding of its maximum overflow). We detect and report rather than scale: a scale common to
// all ranks costs a max all-reduce per bucket (the latency the hook exists to save) or is a
// stale one that a sudden spike defeats; clamping would hide the problem in a wrong value. The
// cast writes every non-finite input as NaN, so after the sum an Inf can only be an overflow of
// finite values, the same on every rank: no communication is needed. Decompression records
// such steps on the device without the host waiting (a ring of kSlots; the trainer asks at most
// one step later, two under `update next-forward`); the Inf travels on to NonfiniteCheck and
// --nonfinite decides, the message carrying explain_nonfinite()'s reason. Buckets that are
// 16-bit already (mixed precision) are not checked: their non-finite values cannot be told apart.
constexpr int64_t kSlots = 4;

// Waits for the collective on the compressed copy, then decompresses into the f32 bucket (on
// the caller's current stream, which the inner wait has ordered after the collective), noting
// an Inf in `overflow`'s slot for the step. Without `overflow` (16-bit buckets) it only copies.
class DecompressWork final : public Work {
 public:
  DecompressWork(std::shared_ptr<Work> inner, Tensor compressed, Tensor bucket, size_t index, Tensor overflow,
                 int64_t step)
      : inner_(std::move(inner)), compressed_(std::move(compressed)), bucket_(std::move(bucket)), index_(index),
        overflow_(std::move(overflow)), step_(step) {}
  void wait() override {
    inner_->wait();
    NvtxRange range(nvtx_decompress_name(index_), NvtxColor::kCompress);
    if (!decompressed_ && overflow_.defined()) {
      decompress();
    } else if (!decompressed_ && !compressed_.same_impl(bucket_)) {
      bucket_.copy_(compressed_);
    }
    decompressed_ = true;
  }
  bool done() override { return decompressed_ || inner_->done(); }

 private:
  void decompress() {
    if (bucket_.device().is_cuda()) {
#if VITDDP_WITH_CUDA
      return cuda::widen_recording_inf(compressed_, bucket_, overflow_, step_ % kSlots, step_);
#endif
    }
    bucket_.copy_(compressed_);
    const float* v = bucket_.data<float>();
    for (int64_t i = 0; i < bucket_.numel(); ++i)
      if (std::isinf(v[i])) {
        overflow_.data<int64_t>()[step_ % kSlots] = step_;
        return;
      }
  }

  std::shared_ptr<Work> inner_;
  Tensor compressed_;
  Tensor bucket_;
  size_t index_;
  Tensor overflow_;
  int64_t step_;
  bool decompressed_ = false;
};

class CastCompressHook final : public CommHook {
 public:
  explicit CastCompressHook(DType dtype) : dtype_(dtype) {}
  std::string name() const override { return dtype_ == DType::kF16 ? "fp16" : "bf16"; }

  std::shared_ptr<Work> run(ProcessGroup& group, GradBucket& bucket) override {
    NvtxRange range(nvtx_compress_name(bucket.index), NvtxColor::kCompress);
    world_ = group.size();
    const int64_t step = steps_;
    if (bucket.is_last) ++steps_;
    const double scale = 1.0 / group.size();  // divide before the 16-bit sum
    if (bucket.buffer.dtype() != DType::kF32) {
      // 16-bit already (mixed precision): divided in place, cast only to the other 16-bit type.
      add_inplace(bucket.buffer, bucket.buffer, scale - 1.0);
      Tensor compressed = bucket.buffer.to(dtype_);  // the bucket itself when of dtype_
      return std::make_shared<DecompressWork>(group.allreduce(compressed, ReduceOp::kSum), compressed, bucket.buffer,
                                              bucket.index, Tensor(), step);
    }
    if (!overflow_.defined() || overflow_.device() != bucket.buffer.device())
      overflow_ = Tensor::full({kSlots}, -1.0, DType::kI64, bucket.buffer.device());
    Tensor compressed = compress(bucket.buffer, scale);
    return std::make_shared<DecompressWork>(group.allreduce(compressed, ReduceOp::kSum), compressed, bucket.buffer,
                                            bucket.index, overflow_, step);
  }

  std::string explain_nonfinite(int64_t step) const override {
    if (!overflow_.defined() || step < 0) return "";
    if (overflow_.to(Device::cpu()).data<int64_t>()[step % kSlots] != step) return "";
    const bool fp16 = dtype_ == DType::kF16;
    return detail::concat("the ", name(), " hook turned finite gradients into Inf: divided by the ", world_,
                          " ranks, or summed, they exceed ", name(), "'s largest value (", fp16 ? "65504" : "3.39e38",
                          ")", fp16 ? "; --hook bf16 has fp32's range" : "");
  }

 private:
  // f32 bucket -> bucket * scale in dtype_, non-finite values as NaN (Note [Compression overflow]).
  Tensor compress(const Tensor& buffer, double scale) const {
    Tensor out = Tensor::empty(buffer.shape(), dtype_, buffer.device());
    if (buffer.device().is_cuda()) {
#if VITDDP_WITH_CUDA
      cuda::scale_cast_nonfinite_as_nan(buffer, scale, out);
      return out;
#endif
    }
    add_inplace(buffer, buffer, scale - 1.0);
    float* v = buffer.data<float>();
    for (int64_t i = 0; i < buffer.numel(); ++i)
      if (!std::isfinite(v[i])) v[i] = std::numeric_limits<float>::quiet_NaN();
    out.copy_(buffer);
    return out;
  }

  DType dtype_;
  int64_t steps_ = 0;  // steps communicated (the last bucket of each counts it)
  int world_ = 1;
  Tensor overflow_;    // (kSlots) i64 on the bucket's device: slot s % kSlots = s if step s overflowed
};

}  // namespace

std::unique_ptr<CommHook> make_cast_compress_hook(DType dtype) {
  VITDDP_CHECK(dtype == DType::kF16 || dtype == DType::kBF16, "cast-compress hook: fp16 or bf16, got ",
               dtype_name(dtype));
  return std::make_unique<CastCompressHook>(dtype);
}

}  // namespace vitddp
