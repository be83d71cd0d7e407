"""The deterministic safetensors writer every fixture generator under tools/ uses, with the
bit-exact comparison and the file digest the generators check their outputs with, and a reader
for the generators that start from another fixture.

safetensors' own save_file orders __metadata__ keys through a hash map, so its bytes change
from run to run. This writer lays tensors out in sorted name order with offsets contiguous
from 0, sorts __metadata__, pads the header JSON with spaces to a multiple of 8, writes to a
temporary name and renames, then reads the file back with the reference reader.
"""

import hashlib
import json
import os
import struct

import torch
from safetensors import safe_open

DTYPES = {torch.float32: "F32", torch.int64: "I64", torch.uint8: "U8", torch.bool: "BOOL",
          torch.bfloat16: "BF16", torch.float8_e4m3fn: "F8_E4M3"}


def tensor_bytes(t):
    """Little-endian bytes of a contiguous CPU tensor (bf16 through its int16 view, float8
    through its uint8 view: numpy has neither)."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().astype("<i2").tobytes()
    if t.dtype == torch.float8_e4m3fn:
        return t.view(torch.uint8).numpy().tobytes()
    a = t.numpy()
    return a.astype(a.dtype.newbyteorder("<")).tobytes()


def same_bits(a, b):
    """Same dtype, shape and bits: float32 by bit pattern (-0.0 != 0.0, NaN == NaN), float8
    through uint8 (torch.equal does not take it), everything else by torch.equal."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype == torch.float8_e4m3fn:
        return torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    if a.dtype == torch.float32:
        return torch.equal(a.view(torch.int32), b.view(torch.int32))
    return torch.equal(a, b)


def file_sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def read_safetensors(path):
    """(tensors {name: tensor}, __metadata__) of a safetensors file."""
    with safe_open(path, "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata()


def write_safetensors(path, tensors, metadata):
    header = {"__metadata__": {k: metadata[k] for k in sorted(metadata)}}
    blobs, off = [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        data = tensor_bytes(t)
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    hb = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))
    os.replace(path + ".tmp", path)
    with safe_open(path, "pt") as f:
        assert sorted(f.keys()) == sorted(tensors) and f.metadata() == header["__metadata__"]
        for name in tensors:
            assert same_bits(f.get_tensor(name), tensors[name].contiguous()), name
