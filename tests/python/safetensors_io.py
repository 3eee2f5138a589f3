"""Reads safetensors files with json + numpy only (Debian's python3-torch has no safetensors)."""
import json
import struct

import numpy as np
import torch

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64}


def read_safetensors(path):
    """Returns ({name: torch tensor}, {metadata key: string})."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        arr = np.frombuffer(blob[base + begin:base + end], dtype=DTYPES[info["dtype"]])
        tensors[name] = torch.from_numpy(arr.reshape(info["shape"]).copy())
    return tensors, meta


def rel(a, b):
    """Norm-wise relative difference of a from b, in f64."""
    return float((a.double() - b.double()).norm() / max(float(b.double().norm()), 1e-30))
