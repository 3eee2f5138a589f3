#!/usr/bin/env python3
"""Checks a vitddp run against torchvision's VisionTransformer.

Usage: torchvision_parity.py DUMP.safetensors [--rtol 1e-5]

DUMP holds what the C++ side computed (tests/models/torchvision_parity_test.cpp): every
parameter as "param.<torchvision name>", its gradient as "grad.<name>", the batch as "images"
and "labels", the loss as "loss", and the model dims in the metadata. This script builds the
same torchvision model, loads the parameters by name (strict: every name and shape must
match), recomputes loss and gradients in float32 and compares them, norm-wise relative.
Exit status 0 when everything matches, 1 otherwise.
"""
import argparse
import sys

import torch
import torch.nn.functional as F
from torchvision.models.vision_transformer import VisionTransformer

from safetensors_io import read_safetensors, rel

def main():
    p = argparse.ArgumentParser()
    p.add_argument("dump")
    p.add_argument("--rtol", type=float, default=1e-5)
    p.add_argument("--device", default="cpu", help="where torchvision computes (fp32, TF32 off)")
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    tensors, meta = read_safetensors(a.dump)
    dims = {k: int(v) for k, v in meta.items()}
    model = VisionTransformer(image_size=dims["image_size"], patch_size=dims["patch_size"],
                              num_layers=dims["num_layers"], num_heads=dims["num_heads"],
                              hidden_dim=dims["hidden_dim"], mlp_dim=dims["mlp_dim"],
                              num_classes=dims["num_classes"])
    state = {k[len("param."):]: v for k, v in tensors.items() if k.startswith("param.")}
    model.load_state_dict(state, strict=True)
    model = model.to(a.device)
    names = [n for n, _ in model.named_parameters()]
    ours = [k[len("param."):] for k in tensors if k.startswith("param.")]
    if sorted(names) != sorted(ours):
        print("parameter names differ", file=sys.stderr)
        return 1
    model.train()
    loss = F.cross_entropy(model(tensors["images"].to(a.device)), tensors["labels"].to(a.device))
    loss.backward()
    worst = 0.0
    failures = []
    e = rel(loss.detach().cpu().reshape(1), tensors["loss"].reshape(1).to(torch.float32))
    print(f"loss torchvision {loss.item():.8f} vitddp {tensors['loss'].item():.8f} rel {e:.2e}")
    if not e <= a.rtol:
        failures.append(f"loss rel {e:.2e}")
    for name, param in model.named_parameters():
        e = rel(tensors["grad." + name], param.grad.cpu())
        worst = max(worst, e)
        if not e <= a.rtol:
            failures.append(f"grad {name} rel {e:.2e}")
    print(f"{len(names)} gradients compared, worst relative error {worst:.2e} (tolerance {a.rtol:g})")
    for f in failures:
        print("MISMATCH", f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
