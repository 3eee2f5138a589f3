#!/usr/bin/env python3
"""Checks vitddp's training-recipe pieces against PyTorch and torchvision.

Usage: recipe_parity.py CASE DUMP.safetensors

DUMP holds what the C++ side computed (tests/train/recipe_parity_test.cpp) and the metadata
that fixes the case. Each case recomputes it with PyTorch and compares:

  cross_entropy  F.cross_entropy(logits, target, label_smoothing=eps): loss and gradient (f64)
  schedule       SequentialLR(LinearLR, CosineAnnealingLR or StepLR or ConstantLR) at every step
  clip           clip_grad_norm_ then one SGD step on the same weights and gradients
  ema            torchvision's ExponentialMovingAverage over a sequence of weights
  mixup          torchvision v2's MixUp and CutMix for a fixed draw (lam, box centre)

Exit status 0 when everything matches, 1 otherwise.
"""
import math
import sys
import warnings

import torch
import torch.nn.functional as F

from safetensors_io import read_safetensors, rel

failures = []
# SequentialLR steps its schedulers with an epoch argument in torch 1.13, which warns.
warnings.filterwarnings("ignore", message="The epoch parameter")


def check(what, got, want, rtol):
    e = rel(got, want)
    print(f"{what}: rel {e:.2e} (tolerance {rtol:g})")
    if not e <= rtol:
        failures.append(f"{what} rel {e:.2e}")


def cross_entropy(t, meta):
    for k in range(int(meta["cases"])):
        logits = t[f"logits.{k}"].clone().requires_grad_(True)
        target = t[f"target.{k}"]
        eps = float(meta[f"eps.{k}"])
        loss = F.cross_entropy(logits, target, label_smoothing=eps)
        loss.backward()
        check(f"case {k} (eps {eps}, {'labels' if target.dtype == torch.int64 else 'soft'}) loss",
              t[f"loss.{k}"].reshape(1), loss.detach().reshape(1), 1e-12)
        check(f"case {k} gradient", t[f"grad.{k}"], logits.grad, 1e-12)


def schedule(t, meta):
    steps, warmup = int(meta["steps"]), int(meta["warmup_steps"])
    base_lr, kind = float(meta["base_lr"]), meta["kind"]
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=base_lr)
    if kind == "cosine":
        main = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps - warmup, eta_min=float(meta["min_lr"]))
    elif kind == "step":
        main = torch.optim.lr_scheduler.StepLR(opt, step_size=int(meta["step_size"]), gamma=float(meta["gamma"]))
    else:
        main = torch.optim.lr_scheduler.ConstantLR(opt, factor=1.0, total_iters=0)
    warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=float(meta["warmup_decay"]), total_iters=warmup)
    sched = torch.optim.lr_scheduler.SequentialLR(opt, schedulers=[warm, main], milestones=[warmup])
    want = []
    for _ in range(steps):
        want.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    want = torch.tensor(want, dtype=torch.float64)
    got = t["lr"]
    worst = float(((got - want).abs() / want.abs().clamp(min=1e-300)).max())
    print(f"{kind} over {steps} steps ({warmup} warm-up): worst relative difference {worst:.2e}")
    if not worst <= 1e-9:
        bad = int(((got - want).abs() / want.abs().clamp(min=1e-300)).argmax())
        failures.append(f"{kind}: step {bad}: vitddp {float(got[bad])!r} PyTorch {float(want[bad])!r}")


def clip(t, meta):
    names = meta["names"].split(",")
    params = [torch.nn.Parameter(t[f"before.{n}"].clone()) for n in names]
    for p, n in zip(params, names):
        p.grad = t[f"grad.{n}"].clone()
    norm = torch.nn.utils.clip_grad_norm_(params, float(meta["max_norm"]))
    check("norm", t["norm"].reshape(1).double(), norm.reshape(1).double(), 1e-5)
    torch.optim.SGD(params, lr=float(meta["lr"]), momentum=float(meta["momentum"])).step()
    for p, n in zip(params, names):
        check(f"{n} after the clipped step", t[f"after.{n}"], p.detach(), 1e-5)


def ema(t, meta):
    names = meta["names"].split(",")
    steps = int(meta["steps"])

    class Weights(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.ParameterList([torch.nn.Parameter(t[f"step0.{n}"].clone()) for n in names])

    model = Weights()
    ExponentialMovingAverage = _torchvision_ema()
    averaged = ExponentialMovingAverage(model, decay=float(meta["decay"]), device="cpu")
    for s in range(1, steps + 1):
        with torch.no_grad():
            for p, n in zip(model.w, names):
                p.copy_(t[f"step{s}.{n}"])
        averaged.update_parameters(model)
    for p, n in zip(averaged.module.w, names):
        check(f"EMA of {n} after {steps} steps", t[f"ema.{n}"], p.detach(), 1e-6)


def _torchvision_ema():
    """torchvision's references/classification/utils.py ExponentialMovingAverage (not in the
    package): an AveragedModel whose average is decay * avg + (1 - decay) * param."""
    class ExponentialMovingAverage(torch.optim.swa_utils.AveragedModel):
        def __init__(self, model, decay, device="cpu"):
            def ema_avg(avg_model_param, model_param, num_averaged):
                return decay * avg_model_param + (1 - decay) * model_param
            super().__init__(model, device, ema_avg, use_buffers=True)
    return ExponentialMovingAverage


def mixup(t, meta):
    # torchvision.transforms.v2 MixUp and CutMix, for the draw the C++ side made: lam from
    # Beta(alpha, alpha), and for CutMix the box centre (r_x, r_y); the batch is mixed with
    # itself rolled by one, and the one-hot labels by the same weights.
    classes = int(meta["classes"])
    images, labels = t["images"], t["labels"]
    one_hot = F.one_hot(labels, num_classes=classes).double()
    rolled_images, rolled_labels = images.roll(1, 0), one_hot.roll(1, 0)
    lam = float(meta["mixup_lam"])
    want_images = rolled_images * (1.0 - lam) + images * lam
    want_labels = rolled_labels * (1.0 - lam) + one_hot * lam
    check("mixup images", t["mixup_images"], want_images, 1e-6)
    # The targets are f32: lam's rounding to f32 is their only difference.
    check("mixup targets", t["mixup_targets"].double(), want_labels, 1e-7)
    lam = float(meta["cutmix_lam"])
    r_x, r_y = int(meta["cutmix_rx"]), int(meta["cutmix_ry"])
    H, W = images.shape[-2:]
    r = 0.5 * math.sqrt(1.0 - lam)
    r_w_half, r_h_half = int(r * W), int(r * H)
    x1, y1 = max(r_x - r_w_half, 0), max(r_y - r_h_half, 0)
    x2, y2 = min(r_x + r_w_half, W), min(r_y + r_h_half, H)
    out = images.clone()
    out[..., y1:y2, x1:x2] = rolled_images[..., y1:y2, x1:x2]
    lam_adjusted = float(1.0 - (x2 - x1) * (y2 - y1) / (W * H))
    print(f"cutmix box x {x1}:{x2} y {y1}:{y2}, lam {lam:.4f} adjusted {lam_adjusted:.4f}")
    check("cutmix images", t["cutmix_images"], out, 0)
    check("cutmix targets", t["cutmix_targets"].double(), rolled_labels * (1.0 - lam_adjusted) + one_hot * lam_adjusted,
          1e-7)


CASES = {"cross_entropy": cross_entropy, "schedule": schedule, "clip": clip, "ema": ema, "mixup": mixup}


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in CASES:
        print(__doc__, file=sys.stderr)
        return 2
    tensors, meta = read_safetensors(sys.argv[2])
    CASES[sys.argv[1]](tensors, meta)
    for f in failures:
        print("MISMATCH", f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
