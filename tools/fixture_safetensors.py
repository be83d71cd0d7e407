"""The deterministic safetensors writer every fixture generator under tools/ uses.

safetensors' own save_file orders __metadata__ keys through a hash map, so its bytes change
from run to run. This writer lays tensors out in sorted name order with offsets contiguous
from 0, sorts __metadata__, pads the header JSON with spaces to a multiple of 8, writes to a
temporary name and renames, then reads the file back with the reference reader.
"""

import json
import os
import struct

import torch
from safetensors import safe_open

DTYPES = {torch.float32: "F32", torch.int64: "I64", torch.uint8: "U8", torch.bool: "BOOL",
          torch.bfloat16: "BF16"}


def tensor_bytes(t):
    """Little-endian bytes of a contiguous CPU tensor (bf16 through its int16 view)."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().astype("<i2").tobytes()
    a = t.numpy()
    return a.astype(a.dtype.newbyteorder("<")).tobytes()


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
            assert torch.equal(f.get_tensor(name), tensors[name]), name
