"""Deterministic element values from (seed, key, global index), identical on every topology."""

from __future__ import annotations

import torch
import xxhash

_P = 2_147_483_647  # 2**31 - 1: index * multiplier stays inside int64
_A, _B, _C = 1_103_515_245, 48_271, 12_345


def _key_hash(seed: int, key: str) -> int:
    return xxhash.xxh64_intdigest(f"{seed}:{key}".encode()) % _P


def global_index(global_shape: tuple[int, ...], offset: tuple[int, ...], local_shape: tuple[int, ...]) -> torch.Tensor:
    """Row-major global linear index of every element of a piece (int64, local shape).
    Only dims after the first enter the stride, so padding rows never shift the index of real rows."""
    idx = torch.zeros(local_shape, dtype=torch.int64)
    stride = 1
    for dim in reversed(range(len(local_shape))):
        coord = torch.arange(offset[dim], offset[dim] + local_shape[dim], dtype=torch.int64)
        view = [1] * len(local_shape)
        view[dim] = local_shape[dim]
        idx = idx + coord.view(view) * stride
        stride *= global_shape[dim]
    return idx


WIDE_EXPONENT = 40  # wide values reach 2**-40 .. 2**40: beyond fp16 at both ends, every bit of fp32 used


def element_values(seed: int, key: str, index: torch.Tensor, wide: bool = False) -> torch.Tensor:
    """Values in [-0.5, 0.5) (float32), a pure function of (seed, key, index). With `wide`, each is
    scaled by a power of two in 2**-40 .. 2**40 (exact), so the values span most of fp32's and bf16's
    range, and many of them overflow or underflow fp16."""
    x = (index % _P * _A + _key_hash(seed, key)) % _P
    x = (x * _B + _C) % _P
    v = x.to(torch.float64) / _P - 0.5
    if wide:
        e = (x * _A + _C) % _P % (2 * WIDE_EXPONENT + 1) - WIDE_EXPONENT
        v = torch.ldexp(v, e)
    return v.to(torch.float32)
