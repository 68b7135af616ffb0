#!/usr/bin/env python3
"""A safetensors file written by the safetensors package itself, for zinf's reader.

Writes OUT (default build/ref/safetensors.bin) holding the tensors listed in TENSORS,
element i of tensor k being (i % 17) * 0.5 - 4 + k (exact in every dtype), plus
metadata. test_model_safetensors.c recomputes the values and compares.
"""
import sys

import torch
from safetensors.torch import save_file

TENSORS = [  # name, dtype, shape
    ("transformer.wte.weight", torch.float32, (7, 5)),
    ("h.0.attn.c_attn.weight", torch.bfloat16, (3, 4, 2)),
    ("ln_f.bias", torch.float16, (9,)),
    ("scalar", torch.float32, ()),
    ("empty", torch.float32, (0, 3)),
]


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "build/ref/safetensors.bin"
    tensors = {}
    for k, (name, dtype, shape) in enumerate(TENSORS):
        n = 1
        for d in shape:
            n *= d
        values = (torch.arange(n) % 17).to(torch.float32) * 0.5 - 4 + k
        tensors[name] = values.reshape(shape).to(dtype)
    save_file(tensors, path, metadata={"format": "pt", "written_by": "safetensors"})


if __name__ == "__main__":
    main()
