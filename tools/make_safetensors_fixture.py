"""Writes tests/fixtures/safetensors/hf_written.safetensors with HF's `safetensors` library.

tests/test_safetensors.cpp recomputes every value below, so keep the two in sync:
  bf16      BF16 (2, 3)  arange(6) * 0.5 - 1
  f16       F16  (4,)    arange(4) * 0.25 - 0.5
  f32       F32  (3, 2)  arange(6) / 8
  f64       F64  ()      3.25
  i64       I64  (5,)    2**40 - 3 * arange(5)
  i32       I32  (2, 2)  arange(4) - 2
  u8        U8   (3,)    arange(3) + 250
  bool      BOOL (5,)    arange(5) % 2 == 0
  f8_e4m3   F8_E4M3 (4,) arange(4) * 0.5
  empty     F32  (0, 3)  no elements
Run: python tools/make_safetensors_fixture.py (needs torch and safetensors).
"""
import pathlib

import torch
from safetensors.torch import save_file

OUT = (pathlib.Path(__file__).resolve().parents[1]
       / "tests/fixtures/safetensors/hf_written.safetensors")


def arange(n):
    return torch.arange(n, dtype=torch.float64)


def main():
    tensors = {
        "bf16": (arange(6) * 0.5 - 1).to(torch.bfloat16).reshape(2, 3),
        "f16": (arange(4) * 0.25 - 0.5).to(torch.float16),
        "f32": (arange(6) / 8).to(torch.float32).reshape(3, 2),
        "f64": torch.tensor(3.25, dtype=torch.float64),
        "i64": 2**40 - 3 * torch.arange(5, dtype=torch.int64),
        "i32": (torch.arange(4, dtype=torch.int32) - 2).reshape(2, 2),
        "u8": torch.arange(3, dtype=torch.int64).add(250).to(torch.uint8),
        "bool": torch.arange(5) % 2 == 0,
        "f8_e4m3": (arange(4) * 0.5).to(torch.float8_e4m3fn),
        "empty": torch.zeros(0, 3, dtype=torch.float32),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(OUT), metadata={"format": "pt", "source": "make_safetensors_fixture.py"})
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
