// fp16 / bf16 compression: the bucket is divided by the world size, cast to 16 bits,
// all-reduced (sum) and cast back into the bucket. Dividing first keeps the 16-bit sum inside
// fp16's range where the plain sum would overflow (PyTorch's fp16_compress_hook does the same).
#include "distributed/comm_hook.h"
#include "framework/core/nvtx.h"
#include "framework/core/tensor_math.h"

namespace vitddp {
namespace {

// Waits for the collective on the compressed copy, then decompresses into the bucket (on the
// caller's current stream, which the inner wait has ordered after the collective).
class DecompressWork final : public Work {
 public:
  DecompressWork(std::shared_ptr<Work> inner, Tensor compressed, Tensor bucket, size_t index)
      : inner_(std::move(inner)), compressed_(std::move(compressed)), bucket_(std::move(bucket)), index_(index) {}
  void wait() override {
    inner_->wait();
    NvtxRange range(nvtx_decompress_name(index_), NvtxColor::kCompress);
    if (!decompressed_ && !compressed_.same_impl(bucket_)) bucket_.copy_(compressed_);
    decompressed_ = true;
  }
  bool done() override { return decompressed_ || inner_->done(); }

 private:
  std::shared_ptr<Work> inner_;
  Tensor compressed_;
  Tensor bucket_;
  size_t index_;
  bool decompressed_ = false;
};

class CastCompressHook final : public CommHook {
 public:
  explicit CastCompressHook(DType dtype) : dtype_(dtype) {}
  std::string name() const override { return dtype_ == DType::kF16 ? "fp16" : "bf16"; }
  std::shared_ptr<Work> run(ProcessGroup& group, GradBucket& bucket) override {
    NvtxRange range(nvtx_compress_name(bucket.index), NvtxColor::kCompress);
    add_inplace(bucket.buffer, bucket.buffer, 1.0 / group.size() - 1.0);  // divide before the 16-bit sum
    Tensor compressed = bucket.buffer.to(dtype_);  // the bucket itself when it is already 16-bit
    return std::make_shared<DecompressWork>(group.allreduce(compressed, ReduceOp::kSum), compressed, bucket.buffer,
                                            bucket.index);
  }

 private:
  DType dtype_;
};

}  // namespace

std::unique_ptr<CommHook> make_cast_compress_hook(DType dtype) {
  VITDDP_CHECK(dtype == DType::kF16 || dtype == DType::kBF16, "cast-compress hook: fp16 or bf16, got ",
               dtype_name(dtype));
  return std::make_unique<CastCompressHook>(dtype);
}

}  // namespace vitddp
