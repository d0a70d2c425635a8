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


def element_values(seed: int, key: str, index: torch.Tensor) -> torch.Tensor:
    """Values in [-0.5, 0.5) (float32), a pure function of (seed, key, index)."""
    x = (index % _P * _A + _key_hash(seed, key)) % _P
    x = (x * _B + _C) % _P
    return (x.to(torch.float64) / _P - 0.5).to(torch.float32)
