// multi_head_attention: the fused CUDA path and the composed path (every other case).
#include "framework/autograd/node.h"
#include "framework/cuda/multi_head_attention.h"
#include "framework/ops/attention.h"
#include "framework/ops/dispatch.h"
#include "framework/ops/shape_ops.h"

namespace vitddp {
namespace {

class MultiHeadAttentionBackward final : public Node {
 public:
  MultiHeadAttentionBackward(const Tensor& qkv, int64_t num_heads) : num_heads_(num_heads) { save(qkv); }
  std::string name() const override { return "MultiHeadAttentionBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor& qkv = saved(0);
    Tensor dout = grads[0].to(qkv.dtype()).contiguous();
    Tensor dqkv = Tensor::empty(qkv.shape(), qkv.dtype(), qkv.device());
    on_device(
        qkv.device(), "multi_head_attention backward",
        [&] { VITDDP_ASSERT(false, "the fused attention path is CUDA only"); },
        [&] { cuda::mha_backward(qkv, dout, num_heads_, dqkv); });
    return {dqkv};
  }

 private:
  int64_t num_heads_;
};

// The composed form: split heads, scaled_dot_product_attention, merge heads.
Tensor composed(const Tensor& qkv, int64_t num_heads) {
  const int64_t b = qkv.size(0), n = qkv.size(1), dim = qkv.size(2) / 3, hd = dim / num_heads;
  Tensor heads = permute(reshape(qkv, {b, n, 3, num_heads, hd}), {2, 0, 3, 1, 4});  // (3, B, H, N, hd)
  Tensor o = scaled_dot_product_attention(select(heads, 0, 0), select(heads, 0, 1), select(heads, 0, 2));
  return reshape(permute(o, {0, 2, 1, 3}), {b, n, dim});  // (B, N, D)
}

bool use_fused(const Tensor& qkv, int64_t num_heads) {
#if VITDDP_WITH_CUDA
  return qkv.device().is_cuda() && qkv.dtype() != DType::kF64 &&
         cuda::fused_attention_fits(qkv.size(1), qkv.size(2) / 3 / num_heads);
#else
  (void)qkv;
  (void)num_heads;
  return false;
#endif
}

}  // namespace

Tensor multi_head_attention(const Tensor& qkv_in, int64_t num_heads) {
  check_tensor(qkv_in.dim() == 3 && qkv_in.size(2) % 3 == 0, "multi_head_attention", "qkv (B, N, 3D)", qkv_in);
  VITDDP_CHECK(num_heads > 0 && (qkv_in.size(2) / 3) % num_heads == 0, "multi_head_attention: ", num_heads,
               " heads do not divide dim ", qkv_in.size(2) / 3);
  if (!use_fused(qkv_in, num_heads)) return composed(qkv_in, num_heads);
  Tensor qkv = qkv_in.contiguous();
  Tensor out = Tensor::empty({qkv.size(0), qkv.size(1), qkv.size(2) / 3}, qkv.dtype(), qkv.device());
  on_device(
      qkv.device(), "multi_head_attention", [&] { VITDDP_ASSERT(false, "the fused attention path is CUDA only"); },
      [&] { cuda::mha_forward(qkv, num_heads, out); });
  if (any_requires_grad({qkv_in})) record(std::make_shared<MultiHeadAttentionBackward>(qkv, num_heads), {qkv_in}, out);
  return out;
}

}  // namespace vitddp
