// multi_head_attention: cuDNN's fused attention, the project's fused kernels, and the composed
// path (every other case); Note [Which attention runs] says which.
#include "framework/autograd/node.h"
#include "framework/cuda/cudnn_attention.h"
#include "framework/cuda/flash_attention_f32.h"
#include "framework/cuda/multi_head_attention.h"
#include "framework/ops/attention.h"
#include "framework/ops/dispatch.h"
#include "framework/ops/shape_ops.h"

namespace vitddp {
namespace {

// Note [Which attention runs]
// On the GPU, in this order: (1) the project's tensor-core kernels where they fit (bf16/f16/f32
// heads of 64 dims over at most 64 tokens, ViT-L/32's shape: one block per head, no log-sum-exp
// kept, the backward recomputing the probabilities); (2) for f32 otherwise, the project's flash
// kernels (framework/cuda/flash_attention_f32.h: tiles over keys with an online softmax, any
// sequence length, head dims 64, 80 and 128, no N x N probabilities kept); (3) for bf16/f16
// otherwise, cuDNN's fused attention (the same scheme on tensor cores) where the build has it and
// cuDNN takes the shape; (4) the project's SIMT kernels where a head fits in shared memory;
// (5) the composed ops (head split, scaled_dot_product_attention, head merge), which also serve
// the CPU and f64. All read the packed qkv except (5).
enum class Path { kFused, kFlashF32, kCudnn, kComposed };

// The flash kernels read 16-byte words: a tensor at an odd offset (a view) is copied.
Tensor aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 ? t : t.clone(); }

// The fused paths' backward. The project's kernels (kFused) recompute the probabilities from
// qkv; cuDNN's and the f32 flash kernels read the forward's output and softmax log-sum-exp
// instead (kept here, `out` detached since it is this node's own output).
class MultiHeadAttentionBackward final : public Node {
 public:
  MultiHeadAttentionBackward(Path path, const Tensor& qkv, int64_t num_heads, const Tensor& out = Tensor(),
                             const Tensor& lse = Tensor())
      : path_(path), num_heads_(num_heads) {
    save(qkv);
    if (path_ != Path::kFused) {
      save(out.detach());
      save(lse);
    }
  }
  std::string name() const override {
    return path_ == Path::kCudnn      ? "CudnnAttentionBackward"
           : path_ == Path::kFlashF32 ? "FlashAttentionF32Backward"
                                      : "MultiHeadAttentionBackward";
  }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor& qkv = saved(0);
    Tensor dout = grads[0].to(qkv.dtype()).contiguous();
    Tensor dqkv = Tensor::empty(qkv.shape(), qkv.dtype(), qkv.device());
    on_device(
        qkv.device(), "multi_head_attention backward",
        [&] { VITDDP_ASSERT(false, "the fused attention paths are CUDA only"); },
        [&] {
          if (path_ == Path::kCudnn) {
            cuda::sdpa_backward(qkv, saved(1), saved(2), dout, num_heads_, dqkv);
          } else if (path_ == Path::kFlashF32) {
            cuda::flash_f32_backward(qkv, saved(1), saved(2), aligned16(dout), num_heads_, dqkv);
          } else {
            cuda::mha_backward(qkv, dout, num_heads_, dqkv);
          }
        });
    return {dqkv};
  }

 private:
  Path path_;  // kFused, kFlashF32 or kCudnn
  int64_t num_heads_;
};

// The composed form: split heads, scaled_dot_product_attention, merge heads.
Tensor composed(const Tensor& qkv, int64_t num_heads) {
  const int64_t b = qkv.size(0), n = qkv.size(1), dim = qkv.size(2) / 3, hd = dim / num_heads;
  Tensor heads = permute(reshape(qkv, {b, n, 3, num_heads, hd}), {2, 0, 3, 1, 4});  // (3, B, H, N, hd)
  Tensor o = scaled_dot_product_attention(select(heads, 0, 0), select(heads, 0, 1), select(heads, 0, 2));
  return reshape(permute(o, {0, 2, 1, 3}), {b, n, dim});  // (B, N, D)
}


Path choose(const Tensor& qkv, int64_t num_heads, bool training) {
#if VITDDP_WITH_CUDA
  if (!qkv.device().is_cuda() || qkv.dtype() == DType::kF64) return Path::kComposed;
  const int64_t n = qkv.size(1), hd = qkv.size(2) / 3 / num_heads;
  if (cuda::tensor_core_attention_fits(qkv.dtype(), n, hd)) return Path::kFused;
  if (cuda::flash_f32_fits(qkv, num_heads)) return Path::kFlashF32;
  if (cuda::sdpa_available(qkv, num_heads, training)) return Path::kCudnn;
  return cuda::fused_attention_fits(n, hd) ? Path::kFused : Path::kComposed;
#else
  (void)qkv;
  (void)num_heads;
  (void)training;
  return Path::kComposed;
#endif
}

}  // namespace

Tensor multi_head_attention(const Tensor& qkv_in, int64_t num_heads) {
  check_tensor(qkv_in.dim() == 3 && qkv_in.size(2) % 3 == 0, "multi_head_attention", "qkv (B, N, 3D)", qkv_in);
  VITDDP_CHECK(num_heads > 0 && (qkv_in.size(2) / 3) % num_heads == 0, "multi_head_attention: ", num_heads,
               " heads do not divide dim ", qkv_in.size(2) / 3);
  const bool training = any_requires_grad({qkv_in});
  const Path path = choose(qkv_in, num_heads, training);
  if (path == Path::kComposed) return composed(qkv_in, num_heads);
  Tensor qkv = qkv_in.contiguous();
  Tensor out = Tensor::empty({qkv.size(0), qkv.size(1), qkv.size(2) / 3}, qkv.dtype(), qkv.device());
  if (path == Path::kCudnn || path == Path::kFlashF32) {
    const bool flash = path == Path::kFlashF32;
    if (flash) qkv = aligned16(qkv);
    const Tensor lse =
        training ? Tensor::empty({qkv.size(0), num_heads, qkv.size(1)}, DType::kF32, qkv.device()) : Tensor();
    on_device(
        qkv.device(), "multi_head_attention", [&] { VITDDP_ASSERT(false, "fused attention is CUDA only"); },
        [&] {
          if (flash)
            cuda::flash_f32_forward(qkv, num_heads, out, lse);
          else
            cuda::sdpa_forward(qkv, num_heads, out, lse);
        });
    if (training)
      record(std::make_shared<MultiHeadAttentionBackward>(path, qkv, num_heads, out, lse), {qkv_in}, out);
    return out;
  }
  on_device(
      qkv.device(), "multi_head_attention", [&] { VITDDP_ASSERT(false, "the fused attention path is CUDA only"); },
      [&] { cuda::mha_forward(qkv, num_heads, out); });
  if (any_requires_grad({qkv_in})) record(std::make_shared<MultiHeadAttentionBackward>(Path::kFused, qkv, num_heads), {qkv_in}, out);
  return out;
}

}  // namespace vitddp
