#!/usr/bin/env python3
"""Trains torchvision's VisionTransformer on the digits JPEGs with the recipe of
configs/digits_vit.json, for the figure docs/performance.md sets beside vitddp's: one CPU
process of batch 64 (vitddp's two ranks of 32), AdamW lr 2e-3 with weight decay 0.05 on the
matrices only (not biases, norms, class token, position embedding), 50 linear warm-up steps from
lr/100 then cosine to 0 over 1400 steps in all, label smoothing 0.1, an EMA of decay 0.99 updated
every step (torchvision's ExponentialMovingAverage), RandomResizedCrop(32, scale 0.35-1) without
flip; evaluated on the EMA with Resize(37) + CenterCrop(32).

Usage: torchvision_digits.py DIGITS   (DIGITS: what scripts/make_digits_dataset.py wrote)
Prints one JSON line: top-1, top-5 and loss on DIGITS/val, and the wall time.
"""
import json
import sys
import time

import torch
import torch.nn.functional as F
from torchvision import datasets, transforms
from torchvision.models.vision_transformer import VisionTransformer

STEPS, WARMUP, BATCH, LR, WD, EMA_DECAY = 1400, 50, 64, 2e-3, 0.05, 0.99
NORMALIZE = transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])


class ExponentialMovingAverage(torch.optim.swa_utils.AveragedModel):
    """torchvision's references/classification/utils.py ExponentialMovingAverage."""

    def __init__(self, model, decay):
        def ema_avg(avg, param, num_averaged):
            return decay * avg + (1 - decay) * param
        super().__init__(model, "cpu", ema_avg, use_buffers=True)


def main():
    root = sys.argv[1]
    torch.manual_seed(0)
    torch.set_num_threads(2)
    train = datasets.ImageFolder(root + "/train", transforms.Compose([
        transforms.RandomResizedCrop(32, scale=(0.35, 1.0)), transforms.ToTensor(), NORMALIZE]))
    val = datasets.ImageFolder(root + "/val", transforms.Compose([
        transforms.Resize(37), transforms.CenterCrop(32), transforms.ToTensor(), NORMALIZE]))
    model = VisionTransformer(image_size=32, patch_size=8, num_layers=4, num_heads=4, hidden_dim=128, mlp_dim=256,
                              num_classes=10)
    decay = [p for n, p in model.named_parameters() if p.ndim > 1 and n not in ("class_token", "encoder.pos_embedding")]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim > 1 and n not in ("class_token", "encoder.pos_embedding"))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}], lr=LR)
    warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.01, total_iters=WARMUP)
    main_sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=STEPS - WARMUP)
    sched = torch.optim.lr_scheduler.SequentialLR(opt, [warm, main_sched], milestones=[WARMUP])
    ema = ExponentialMovingAverage(model, EMA_DECAY)
    loader = torch.utils.data.DataLoader(train, batch_size=BATCH, shuffle=True, num_workers=0)
    start = time.time()
    step = 0
    while step < STEPS:
        for images, labels in loader:
            model.train()
            loss = F.cross_entropy(model(images), labels, label_smoothing=0.1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            ema.update_parameters(model)
            step += 1
            if step == STEPS:
                break
    net = ema.module
    net.eval()
    correct1 = correct5 = 0
    loss_sum = 0.0
    with torch.no_grad():
        for images, labels in torch.utils.data.DataLoader(val, batch_size=128):
            logits = net(images)
            loss_sum += float(F.cross_entropy(logits, labels, reduction="sum"))
            top5 = logits.topk(5, dim=1).indices
            correct1 += int((top5[:, 0] == labels).sum())
            correct5 += int((top5 == labels[:, None]).any(dim=1).sum())
    n = len(val)
    print(json.dumps({"system": "torchvision", "torch": torch.__version__, "steps": STEPS, "samples": n,
                      "top1": correct1 / n, "top5": correct5 / n, "loss": loss_sum / n,
                      "seconds": round(time.time() - start, 1)}))


if __name__ == "__main__":
    main()
