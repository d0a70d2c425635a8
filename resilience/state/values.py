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
    if not local_shape:
        return torch.zeros((), dtype=torch.int64)
    idx = None
    stride = 1
    for dim in reversed(range(len(local_shape))):
        coord = torch.arange(offset[dim], offset[dim] + local_shape[dim], dtype=torch.int64)
        if stride != 1:
            coord = coord * stride
        view = [1] * len(local_shape)
        view[dim] = local_shape[dim]
        idx = coord.view(view) if idx is None else idx + coord.view(view)  # broadcast: the full local shape
        stride *= global_shape[dim]
    assert idx is not None
    return idx


WIDE_EXPONENT = 40  # wide values reach 2**-40 .. 2**40: beyond fp16 at both ends, every bit of fp32 used


def element_values(seed: int, key: str, index: torch.Tensor, wide: bool = False) -> torch.Tensor:
    """Values in [-0.5, 0.5) (float32), a pure function of (seed, key, index). With `wide`, each is
    scaled by a power of two in 2**-40 .. 2**40 (exact), so the values span most of fp32's and bf16's
    range, and many of them overflow or underflow fp16."""
    return _values(index, _key_hash(seed, key), wide)


def element_values_of(seed: int, parts: list[tuple[str, torch.Tensor]], wide: bool = False) -> list[torch.Tensor]:
    """element_values(seed, key, index, wide) of every (key, index) of `parts`, bit for bit (each step is
    an integer or a correctly rounded operation, element by element), in one pass over all of them: a
    state's few dozen small tensors cost one call's overhead, not one per tensor. Each result is a view of
    one shared buffer: clone what is kept."""
    if not parts:
        return []
    values = element_values_flat(seed, parts, wide)
    return [v.view(index.shape) for v, (_, index) in zip(values.split([i.numel() for _, i in parts]), parts)]


def element_values_flat(seed: int, parts: list[tuple[str, torch.Tensor]], wide: bool = False) -> torch.Tensor:
    """The values of element_values_of, one part after another in one flat tensor."""
    if not parts:
        return torch.zeros(0, dtype=torch.float32)
    sizes = [index.numel() for _, index in parts]
    flat = torch.cat([index.reshape(-1) for _, index in parts])
    hashes = torch.tensor([_key_hash(seed, key) for key, _ in parts], dtype=torch.int64)
    return _values(flat, hashes.repeat_interleave(torch.tensor(sizes)), wide)


def _values(index: torch.Tensor, key_hash: int | torch.Tensor, wide: bool) -> torch.Tensor:
    x = (index % _P * _A + key_hash) % _P
    x = (x * _B + _C) % _P
    v = x.to(torch.float64) / _P - 0.5
    if wide:
        e = (x * _A + _C) % _P % (2 * WIDE_EXPONENT + 1) - WIDE_EXPONENT
        v = torch.ldexp(v, e)
    return v.to(torch.float32)
