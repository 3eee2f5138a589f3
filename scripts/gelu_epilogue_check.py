"""Which GELU cuBLASLt's GELU epilogue computes, through PyTorch's torch._addmm_activation(use_gelu=True),
which takes cuBLASLt's GELU_BIAS epilogue on CUDA: its output against addmm followed by the exact (erf)
GELU, which torchvision's ViT uses, and by the tanh approximation. Decides whether bias+GELU can move into
the fc1 product's epilogue without changing the model (docs/performance.md, "What was tried").
Run on a GPU machine: python3 scripts/gelu_epilogue_check.py"""
import torch
import torch.nn.functional as F

torch.manual_seed(0)
for dtype in (torch.float32, torch.bfloat16):
    # ViT-L/32's fc1 at batch 32: 1600 tokens x 1024 -> 4096; values spread over GELU's curved part.
    x = (torch.randn(1600, 1024, device="cuda") * 0.5).to(dtype)
    w = (torch.randn(1024, 4096, device="cuda") * 0.05).to(dtype)
    b = (torch.randn(4096, device="cuda") * 0.5).to(dtype)
    fused = torch._addmm_activation(b, x, w, use_gelu=True).float()
    pre = torch.addmm(b, x, w).float()
    exact = F.gelu(pre)
    tanh = F.gelu(pre, approximate="tanh")
    print(f"{str(dtype):15s} max |fused - exact erf GELU| {(fused - exact).abs().max().item():.3e}  "
          f"max |fused - tanh GELU| {(fused - tanh).abs().max().item():.3e}  "
          f"max |exact - tanh| {(exact - tanh).abs().max().item():.3e}")
