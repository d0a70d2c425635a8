"""torch.load(weights_only=True) over bytes held in memory (storage.held), without copying the tensors.

torch.load copies every tensor's bytes out of its file into fresh memory; a loader that then copies each
tensor into its place pays two copies and the fresh memory's page faults. Over a held buffer the tensors
can be views of it instead, as torch.load(mmap=True) makes them views of a mapped file: the bytes parsed
are the bytes that were hashed, and each is copied once, into its place. torch.load(mmap=True) takes a
path only, so this calls the step it runs after mapping (`_load` with the whole file as one storage);
where that step is missing or the bytes are not a zip archive it is plain torch.load, copies and all.

Tensors loaded here share the buffer: the caller copies them into place, or clones what it keeps.

DCP writes every tensor item as an archive of its own, and a load parses thousands of them, most with
the same pickle (same dtype, shape and strides: only the bytes of `data/0` differ). The weights-only
unpickler, pure Python, is most of an item's cost. What it builds is a function of the pickle's bytes,
the byte order and the storages it is handed, so once a pickle gave one plain tensor over `data/0`,
another archive with the same pickle gets the same tensor over its own `data/0` without unpickling
(`_Recipe`). Anything else (a pickle not seen, or not one plain tensor) is unpickled as before."""

from __future__ import annotations

import pickle
import sys
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, BinaryIO

import torch
from torch import serialization

from .held import MemoryFile, release_span
from .torch_save import is_plain

_LOAD_STEP = getattr(serialization, "_load", None)


def load(f: BinaryIO) -> Any:
    """torch.load(f, weights_only=True, map_location="cpu"); when `f` is a held file (MemoryFile) over a
    writable buffer, its tensors are views of that buffer."""
    memory = f.memory() if isinstance(f, MemoryFile) else None
    if memory is None or memory.readonly or not len(memory) or _LOAD_STEP is None or f.tell() != 0:
        return torch.load(f, weights_only=True, map_location="cpu")
    is_zip = serialization._is_zipfile(f)
    f.seek(0)
    if not is_zip:  # a legacy (pre-zip) file: torch.load reads it its own way
        return torch.load(f, weights_only=True, map_location="cpu")
    whole = torch.frombuffer(memory, dtype=torch.uint8).untyped_storage()
    from torch import _weights_only_unpickler

    with serialization._open_zipfile_reader(f) as archive:
        if serialization._is_torchscript_zip(archive):
            raise pickle.UnpicklingError("a TorchScript archive, not a torch.save file: refused with weights_only")
        known = _recipe_key(archive)
        recipe = _RECIPES.get(known) if known is not None else None
        if recipe is not None:
            tensor = recipe.apply(archive, whole)
            if tensor is not None:
                return tensor
        result = _LOAD_STEP(archive, "cpu", _weights_only_unpickler, overall_storage=whole, encoding="utf-8")
        if known is not None and recipe is None:
            _learn(known, archive, whole, result)
        return result


def release(t: torch.Tensor) -> None:
    """`t`, loaded as a view of a held mapping and now copied into place, leaves this process's memory
    (storage.held.release_span); any other tensor is left alone."""
    storage = t.untyped_storage()
    release_span(storage.data_ptr(), storage.nbytes())


_DATA = "data/0"  # the record torch.save writes a lone tensor's storage to
_MAX_RECIPES = 4096  # distinct pickles remembered (a model has a few dozen tensor shapes)


@dataclass(frozen=True)
class _Recipe:
    """The one plain tensor a pickle builds: a view of `nbytes` bytes at `data/0`."""

    dtype: torch.dtype
    nbytes: int
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]

    def apply(self, archive, whole) -> torch.Tensor | None:
        """The tensor over this archive's bytes, as _LOAD_STEP makes it; None where that step would not
        make it so (no data/0, or fewer bytes after it than the storage needs): it runs then."""
        if not archive.has_record(_DATA):
            return None
        at = archive.get_record_offset(_DATA)
        if at + self.nbytes > whole.nbytes():
            return None
        tensor = torch.empty((0,), dtype=self.dtype).set_(
            whole[at : at + self.nbytes], self.offset, self.size, self.stride
        )
        tensor._backward_hooks = OrderedDict()  # what torch's rebuild sets
        return tensor


_RECIPES: dict[bytes, _Recipe] = {}


def _recipe_key(archive) -> bytes | None:
    """The archive's pickle when a recipe may stand for it: torch's byte order mark says this machine's
    order (no byte swap), and no fake or meta tensors are being made."""
    if not archive.has_record("byteorder") or archive.get_record("byteorder") != sys.byteorder.encode():
        return None
    if getattr(serialization._serialization_tls, "skip_data", False):
        return None
    return archive.get_record("data.pkl")


def _learn(known: bytes, archive, whole, result: Any) -> None:
    """Remember what `known` built when it is one plain CPU tensor over exactly this archive's data/0."""
    if not is_plain(result) or not archive.has_record(_DATA) or len(_RECIPES) >= _MAX_RECIPES:
        return
    storage = result.untyped_storage()
    if storage.data_ptr() != whole.data_ptr() + archive.get_record_offset(_DATA):
        return
    _RECIPES[known] = _Recipe(
        result.dtype,
        storage.nbytes(),
        int(result.storage_offset()),
        tuple(int(n) for n in result.size()),
        tuple(int(n) for n in result.stride()),
    )
