"""DCP's `.metadata` read without running code: the restricted unpickler admits DCP's metadata types only,
and the files the metadata names must stay inside the folder. Built in memory: no save, no ranks."""

from __future__ import annotations

import collections
import io
import os
import pickle

import pytest
import torch
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorProperties,
    TensorStorageMetadata,
)

from resilience.errors import IntegrityError
from resilience.storage import safe_pickle

PATH = "ckpt/iter_0000002/.metadata"


def _metadata(rel: str = "__0_0.distcp", offset: int = 0, length: int = 64) -> Metadata:
    tensor = TensorStorageMetadata(
        TensorProperties(dtype=torch.bfloat16),
        torch.Size([4, 8]),
        [ChunkStorageMetadata(torch.Size([0, 0]), torch.Size([4, 8]))],
    )
    return Metadata(
        {"model.weight": tensor, "extra": BytesStorageMetadata()},
        storage_data={MetadataIndex("model.weight", [0, 0]): _StorageInfo(rel, offset, length)},
    )


def test_dcp_metadata_round_trips():
    back = safe_pickle.load_metadata(io.BytesIO(pickle.dumps(_metadata())), PATH)
    assert back.state_dict_metadata["model.weight"].size == torch.Size([4, 8])
    assert back.state_dict_metadata["model.weight"].properties.dtype is torch.bfloat16
    [(index, info)] = back.storage_data.items()
    assert (index.fqn, info.relative_path, info.offset, info.length) == ("model.weight", "__0_0.distcp", 0, 64)


class _RunsCode:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_runs_a_command_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "ran"
    data = pickle.dumps(_RunsCode(str(marker)))
    with pytest.raises(IntegrityError, match="refused to load posix.system"):
        safe_pickle.loads(data, PATH)
    assert not marker.exists()


@pytest.mark.parametrize(
    "obj, named",
    [
        (os.getcwd, "posix.getcwd"),
        (collections.Counter(a=1), "collections.Counter"),  # harmless, but not a type of DCP's metadata
        (print, "builtins.print"),
        (torch.nn.Linear, "torch.nn.modules.linear.Linear"),
        (torch.load, "torch.serialization.load"),  # in torch, beside allowed names, but not one of them
        (torch.is_tensor, "torch.is_tensor"),  # of module torch itself, but neither a dtype nor a layout
    ],
)
def test_a_class_outside_the_allowlist_is_refused_by_name(obj, named):
    data = pickle.dumps(obj)
    with pytest.raises(IntegrityError) as e:
        safe_pickle.loads(data, PATH)
    assert str(e.value) == (
        f"{PATH}: safe unpickling failed: refused to load {named}: not a type of DCP's "
        "metadata (a pickle naming it could run code)"
    )


def test_allowlisted_torch_values_and_containers_load():
    value = {
        "size": torch.Size([2, 3]),
        "dtype": torch.float16,
        "layout": torch.strided,
        "ordered": collections.OrderedDict(a=1),
        "plain": [1, 2.5, "x", None, (True, b"b")],
    }
    assert safe_pickle.loads(pickle.dumps(value), PATH) == value


def test_a_persistent_id_is_refused():
    class Persisting(pickle.Pickler):
        def persistent_id(self, obj):
            return "storage-7" if obj == "tensor" else None

    buf = io.BytesIO()
    Persisting(buf).dump(["tensor"])
    with pytest.raises(IntegrityError, match="safe unpickling failed: refused a persistent id 'storage-7'"):
        safe_pickle.loads(buf.getvalue(), PATH)


@pytest.mark.parametrize("data", [b"", b"not a pickle", pickle.dumps([1, 2])[:-3]])
def test_bytes_that_are_not_a_pickle_are_a_parse_error(data):
    with pytest.raises(IntegrityError, match=rf"^{PATH}: metadata parse failed: not DCP metadata"):
        safe_pickle.loads(data, PATH)


def test_a_pickle_of_something_else_is_not_metadata():
    with pytest.raises(IntegrityError, match="metadata type failed: holds a dict, not DCP's Metadata"):
        safe_pickle.load_metadata(io.BytesIO(pickle.dumps({"a": 1})), PATH)


@pytest.mark.parametrize(
    "rel", ["../outside.distcp", "/etc/passwd", "a/../../x", "..", "", "a\\..\\b", "shard\x00.distcp"]
)
def test_a_file_named_outside_the_folder_is_refused(rel):
    with pytest.raises(IntegrityError, match=f"{PATH}: path safety failed: item 'model.weight' names file"):
        safe_pickle.check_metadata(_metadata(rel=rel), PATH)


@pytest.mark.parametrize("offset, length", [(-1, 8), (0, -8), (True, 8), (0, 2.0), (0, 1 << 63)])
def test_offsets_and_lengths_must_be_byte_counts(offset, length):
    with pytest.raises(IntegrityError, match="metadata fields failed: the (offset|length) of 'model.weight' is"):
        safe_pickle.check_metadata(_metadata(offset=offset, length=length), PATH)


def test_inside_paths_and_plain_counts_pass():
    safe_pickle.check_metadata(_metadata(rel="sub/./__1_0.distcp", offset=1 << 40, length=0), PATH)


def test_an_oversized_metadata_file_is_refused_before_unpickling(monkeypatch):
    monkeypatch.setattr(safe_pickle, "MAX_BYTES", 16)
    with pytest.raises(IntegrityError, match="metadata size failed: more than 16 bytes"):
        safe_pickle.load_metadata(io.BytesIO(pickle.dumps(_metadata())), PATH)
