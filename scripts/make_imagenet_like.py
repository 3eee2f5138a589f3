#!/usr/bin/env python3
"""Writes a folder of ImageNet-like JPEG photographs for the loader benchmark and the file-data
training run, without a download: windows of scikit-learn's two sample photographs (china,
flower), each resized, flipped, shifted in colour and lightly noised, saved at ImageNet's
typical 500x375 (or 375x500) and quality 90, which makes them about 100 KB like ImageNet's.

Usage: make_imagenet_like.py OUT [--images 8000] [--classes 100] [--seed 0]

OUT/<class>/<index>.jpg, classes c000, c001, ... Then:
  train bench loader --data OUT --model vit_l_32 --batch-size 256
  train --gpus 1 --data OUT --model vit_l_32 --precision bf16 ...
Needs python3 with numpy, PIL and scikit-learn (Debian: python3-numpy, python3-pil, python3-sklearn).
"""
import argparse
import multiprocessing
import os

import numpy as np
from PIL import Image
from sklearn.datasets import load_sample_images

PHOTOS = [Image.fromarray(x) for x in load_sample_images().images]  # 640x427 each
NOISE = 10.0  # with QUALITY, what brings the files to ImageNet's ~100 KB
QUALITY = 93


def write_image(args):
    out, classes, seed, i = args
    rng = np.random.default_rng([seed, i])
    photo = PHOTOS[i % len(PHOTOS)]
    w, h = (500, 375) if rng.random() < 0.8 else (375, 500)
    # A window of 60-100% of the photo's side, stretched to the target size.
    s = rng.uniform(0.6, 1.0)
    cw, ch = int(photo.width * s), int(photo.height * s)
    x0, y0 = int(rng.integers(0, photo.width - cw + 1)), int(rng.integers(0, photo.height - ch + 1))
    img = photo.crop((x0, y0, x0 + cw, y0 + ch)).resize((w, h), Image.BILINEAR)
    if rng.random() < 0.5:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    pixels = np.asarray(img, dtype=np.float32) * rng.uniform(0.8, 1.2, size=3) + rng.uniform(-20, 20, size=3)
    pixels += rng.normal(0, NOISE, size=pixels.shape)
    img = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    folder = os.path.join(out, f"c{i % classes:03d}")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{i:06d}.jpg")
    img.save(path, format="JPEG", quality=QUALITY)
    return os.path.getsize(path)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--images", type=int, default=8000)
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    with multiprocessing.Pool() as pool:
        sizes = pool.map(write_image, [(a.out, a.classes, a.seed, i) for i in range(a.images)], chunksize=16)
    print(f"imagenet-like: {a.images} JPEGs in {a.classes} classes in {a.out}, mean {sum(sizes) / a.images / 1000:.0f} KB")


if __name__ == "__main__":
    main()
