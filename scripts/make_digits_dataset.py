#!/usr/bin/env python3
"""Writes scikit-learn's handwritten digits (1,797 8x8 images, 10 classes) as JPEG files, for
training and evaluating on real images without a download.

Usage: make_digits_dataset.py OUT [--size 32] [--shards N]

OUT/train/<digit>/<index>.jpg   every sample but each fifth (1,437 images)
OUT/val/<digit>/<index>.jpg     each fifth sample (360 images), held out
with --shards N also, in WebDataset's layout (NAME.jpg + NAME.cls):
OUT/train-shards/digits-train-{000..N-1}.tar and OUT/val-shards/digits-val-000.tar

The 8x8 images (0..16) are scaled to 0..255 and resized to --size pixels with PIL's bicubic
filter, as grayscale JPEGs of quality 95. Then:
  train --data OUT/train --eval-data OUT/val --model vit_tiny ...
Needs python3 with scikit-learn and PIL (Debian: python3-sklearn, python3-pil).
"""
import argparse
import io
import os
import tarfile

import numpy as np
from PIL import Image
from sklearn.datasets import load_digits


def jpeg_bytes(pixels, size):
    img = Image.fromarray(np.clip(pixels * (255.0 / 16.0), 0, 255).astype(np.uint8), mode="L")
    img = img.resize((size, size), Image.BICUBIC)
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=95)
    return out.getvalue()


def write_shards(samples, folder, stem, shards):
    os.makedirs(folder, exist_ok=True)
    per = (len(samples) + shards - 1) // shards
    for s in range(shards):
        path = os.path.join(folder, f"{stem}-{s:03d}.tar")
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for key, label, data in samples[s * per:(s + 1) * per]:
                for name, payload in ((f"{key}.jpg", data), (f"{key}.cls", str(label).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(payload)
                    tar.addfile(info, io.BytesIO(payload))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--shards", type=int, default=0)
    a = p.parse_args()
    digits = load_digits()
    split = {"train": [], "val": []}
    for i, (pixels, label) in enumerate(zip(digits.images, digits.target)):
        part = "val" if i % 5 == 0 else "train"
        data = jpeg_bytes(pixels, a.size)
        folder = os.path.join(a.out, part, str(label))
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{i:04d}.jpg"), "wb") as f:
            f.write(data)
        split[part].append((f"{i:04d}", int(label), data))
    if a.shards > 0:
        write_shards(split["train"], os.path.join(a.out, "train-shards"), "digits-train", a.shards)
        write_shards(split["val"], os.path.join(a.out, "val-shards"), "digits-val", 1)
    print(f"digits: {len(split['train'])} train and {len(split['val'])} val images of {a.size}x{a.size} in {a.out}")


if __name__ == "__main__":
    main()
