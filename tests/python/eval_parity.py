#!/usr/bin/env python3
"""Evaluates saved vitddp weights with torchvision and compares the counts a vitddp run reported.

Usage: eval_parity.py WEIGHTS.safetensors EVAL_FOLDER --dims I,P,L,H,D,M,C --correct1 N
                      --correct5 N --samples N --loss X

WEIGHTS is what `train --save` wrote (torchvision's parameter names); EVAL_FOLDER an image folder
read by torchvision's ImageFolder with the eval preset vitddp uses for a model of image size I:
Resize(round(I * 256 / 224)) of the shorter side (bilinear, antialiased), CenterCrop(I),
ToTensor, Normalize(ImageNet's mean and std). The dims are image size, patch size, layers,
heads, hidden, MLP and classes. The top-1 and top-5 counts must be equal and the mean loss
within 1e-4 (relative). Exit status 0 when they are, 1 otherwise.
"""
import argparse
import sys

import torch
import torch.nn.functional as F
from torchvision import datasets, transforms
from torchvision.models.vision_transformer import VisionTransformer

from safetensors_io import read_safetensors


def main():
    p = argparse.ArgumentParser()
    p.add_argument("weights")
    p.add_argument("folder")
    p.add_argument("--dims", required=True)
    for k in ("correct1", "correct5", "samples"):
        p.add_argument("--" + k, type=int, required=True)
    p.add_argument("--loss", type=float, required=True)
    a = p.parse_args()
    size, patch, layers, heads, hidden, mlp, classes = (int(x) for x in a.dims.split(","))
    model = VisionTransformer(image_size=size, patch_size=patch, num_layers=layers, num_heads=heads,
                              hidden_dim=hidden, mlp_dim=mlp, num_classes=classes)
    state, _ = read_safetensors(a.weights)
    model.load_state_dict(state, strict=True)
    model.eval()
    preset = transforms.Compose([
        transforms.Resize(int(size * 256 / 224 + 0.5), interpolation=transforms.InterpolationMode.BILINEAR),
        transforms.CenterCrop(size),
        transforms.ToTensor(),
        transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ])
    data = datasets.ImageFolder(a.folder, transform=preset)
    loader = torch.utils.data.DataLoader(data, batch_size=64, shuffle=False)
    correct1 = correct5 = 0
    loss_sum = 0.0
    with torch.no_grad():
        for images, labels in loader:
            logits = model(images)
            loss_sum += float(F.cross_entropy(logits, labels, reduction="sum").double())
            top5 = logits.topk(min(5, classes), dim=1).indices
            correct1 += int((top5[:, 0] == labels).sum())
            correct5 += int((top5 == labels[:, None]).any(dim=1).sum())
    loss = loss_sum / len(data)
    print(f"torchvision: {len(data)} images, top-1 {correct1}, top-5 {correct5}, loss {loss:.6f}")
    print(f"vitddp:      {a.samples} images, top-1 {a.correct1}, top-5 {a.correct5}, loss {a.loss:.6f}")
    ok = (len(data), correct1, correct5) == (a.samples, a.correct1, a.correct5)
    ok = ok and abs(loss - a.loss) <= 1e-4 * abs(loss)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
