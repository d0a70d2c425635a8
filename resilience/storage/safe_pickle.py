"""DCP's `.metadata` without running code from it: a restricted unpickler.

DCP writes its metadata with plain pickle, and unpickling calls whatever a pickle names: a `.metadata`
whose `__reduce__` names os.system runs a command on every rank that loads it (a checksum manifest
is no defence: whoever can write the file can write the manifest). This unpickler admits only the
types DCP's metadata is made of, as measured on torch 2.13 for every DCP-based combination (sync and
async, torch_dist and torch_dcp, distributed optimizer, bf16; stock DCP's and megatron-core's own
checkpoints): the dataclasses of torch.distributed.checkpoint.metadata, FileSystemWriter's
_StorageInfo, the save-plan dataclasses megatron-core keeps there, torch.Size, torch dtypes and
layouts, and builtin containers and scalars (which pickle writes as opcodes, not classes). Anything
else is refused with IntegrityError naming the file and the class it tried to load.

The relative paths, offsets and lengths the metadata names for each item are checked too: a reader
opens those files, so they must stay inside the checkpoint folder and be plain, non-negative numbers."""

from __future__ import annotations

import io
import os
import pickle
from typing import Any

from ..errors import IntegrityError

# (module, name) -> why it is safe to call or build. Dataclasses are rebuilt with NEWOBJ + BUILD (no
# constructor code), enums and torch.Size are called with plain values.
_METADATA = "torch.distributed.checkpoint.metadata"
ALLOWED: frozenset[tuple[str, str]] = frozenset(
    {
        (_METADATA, "Metadata"),
        (_METADATA, "MetadataIndex"),
        (_METADATA, "ChunkStorageMetadata"),
        (_METADATA, "TensorStorageMetadata"),
        (_METADATA, "BytesStorageMetadata"),
        (_METADATA, "TensorProperties"),
        (_METADATA, "StorageMeta"),
        (_METADATA, "_MEM_FORMAT_ENCODING"),
        ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
        # megatron-core's torch_dist strategy keeps its cached save plan in the metadata
        ("torch.distributed.checkpoint.planner", "SavePlan"),
        ("torch.distributed.checkpoint.planner", "WriteItem"),
        ("torch.distributed.checkpoint.planner", "WriteItemType"),
        ("torch.distributed.checkpoint.planner", "TensorWriteData"),
        ("torch", "Size"),
        ("torch.serialization", "_get_layout"),  # a lookup of torch.strided & co. by name
        ("collections", "OrderedDict"),
    }
)
MAX_BYTES = 1 << 30  # a .metadata this large is not one DCP wrote for a model that fits anywhere


def _torch_attr(name: str):
    """torch.<name> when it is a dtype or a layout (pickled by name), else None."""
    import torch

    value = getattr(torch, name, None)
    return value if isinstance(value, (torch.dtype, torch.layout)) else None


class _Restricted(pickle.Unpickler):
    def __init__(self, file, path: str):
        super().__init__(file)
        self.path = path

    def find_class(self, module: str, name: str):
        if (module, name) in ALLOWED:
            return super().find_class(module, name)
        if module == "torch" and _torch_attr(name) is not None:
            return _torch_attr(name)
        raise IntegrityError(
            self.path,
            "safe unpickling",
            f"refused to load {module}.{name}: not a type of DCP's metadata (a pickle naming it could run code)",
        )

    def persistent_load(self, pid):
        raise IntegrityError(self.path, "safe unpickling", f"refused a persistent id {str(pid)[:80]!r}")


def loads(data: bytes, path: str) -> Any:
    """Unpickle `data` (the bytes of `path`) admitting only DCP's metadata types."""
    try:
        return _Restricted(io.BytesIO(data), path).load()
    except IntegrityError:
        raise
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        AttributeError,
        KeyError,
        IndexError,
        OverflowError,
        MemoryError,
        RecursionError,
        UnicodeDecodeError,
        ImportError,
    ) as e:
        raise IntegrityError(path, "metadata parse", f"not DCP metadata ({type(e).__name__}: {e})") from None


def load_metadata(stream, path: str):
    """DCP's Metadata from an open `.metadata` stream, unpickled safely and checked (see module doc)."""
    data = stream.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise IntegrityError(path, "metadata size", f"more than {MAX_BYTES} bytes")
    metadata = loads(data, path)
    check_metadata(metadata, path)
    return metadata


def _is_count(value) -> bool:
    return type(value) is int and 0 <= value <= 1 << 62


def _safe_relpath(rel) -> bool:
    norm = os.path.normpath(rel) if isinstance(rel, str) and rel else ""
    return not (
        not isinstance(rel, str)
        or not norm
        or os.path.isabs(rel)
        or norm == ".."
        or norm.startswith("../")
        or "\x00" in rel
        or "\\" in rel
    )


def check_metadata(metadata, path: str) -> None:
    """The object is DCP's Metadata, and every file it sends a reader to stays inside its folder."""
    from torch.distributed.checkpoint.metadata import Metadata

    if not isinstance(metadata, Metadata):
        raise IntegrityError(path, "metadata type", f"holds a {type(metadata).__name__}, not DCP's Metadata")
    if not isinstance(metadata.state_dict_metadata, dict):
        raise IntegrityError(path, "metadata fields", "state_dict_metadata is not a mapping")
    storage = metadata.storage_data
    if storage is None:
        return
    if not isinstance(storage, dict):
        raise IntegrityError(path, "metadata fields", "storage_data is not a mapping")
    safe: set[str] = set()  # every item of a file names it: each name is checked once
    for index, info in storage.items():
        rel = getattr(info, "relative_path", None)
        if not (isinstance(rel, str) and rel in safe):
            if not isinstance(rel, str) or not _safe_relpath(rel):
                raise IntegrityError(
                    path, "path safety", f"item {getattr(index, 'fqn', index)!r} names file {rel!r} outside the folder"
                )
            safe.add(rel)
        for what in ("offset", "length"):
            value = getattr(info, what, None)
            if not _is_count(value):
                raise IntegrityError(
                    path,
                    "metadata fields",
                    f"the {what} of {getattr(index, 'fqn', index)!r} is {value!r}, not a byte count",
                )
