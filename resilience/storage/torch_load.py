"""torch.load(weights_only=True) over bytes held in memory (storage.held), without copying the tensors.

torch.load copies every tensor's bytes out of its file into fresh memory; a loader that then copies each
tensor into its place pays two copies and the fresh memory's page faults. Over a held buffer the tensors
can be views of it instead, as torch.load(mmap=True) makes them views of a mapped file: the bytes parsed
are the bytes that were hashed, and each is copied once, into its place. torch.load(mmap=True) takes a
path only, so this calls the step it runs after mapping (`_load` with the whole file as one storage);
where that step is missing or the bytes are not a zip archive it is plain torch.load, copies and all.

Tensors loaded here share the buffer: the caller copies them into place, or clones what it keeps."""

from __future__ import annotations

import pickle
from typing import Any, BinaryIO

import torch
from torch import serialization

from .held import MemoryFile

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
        return _LOAD_STEP(archive, "cpu", _weights_only_unpickler, overall_storage=whole, encoding="utf-8")
