#!/usr/bin/env python3
"""Prints torchvision's ImageFolder listing of ROOT: the classes on one line, then one line
"LABEL PATH" per sample, in torchvision's order (tests/data/image_data_test.cpp compares it with
vitddp's).

Usage: image_folder_listing.py ROOT
"""
import sys

from torchvision import datasets


def main():
    data = datasets.ImageFolder(sys.argv[1], loader=lambda path: path)
    print("classes " + "/".join(data.classes))
    for path, label in data.samples:
        print(f"{label} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
