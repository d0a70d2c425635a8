"""torch.load over held bytes: tensors are views of the verified buffer, values exactly torch.load's."""

import io
import pickle

import pytest
import torch

from resilience.storage import torch_load
from resilience.storage.held import MemoryFile, read_hashed


def _saved(tmp_path, obj, **kwargs):
    path = tmp_path / "f.pt"
    torch.save(obj, path, **kwargs)
    return str(path)


def test_tensors_of_a_held_file_share_its_bytes_and_equal_torch_load(tmp_path):
    obj = {"a": torch.arange(1000, dtype=torch.float32), "b": [torch.ones(3, 4, dtype=torch.bfloat16), 7]}
    obj["view"] = obj["a"][10:20]  # a view saved with its storage offset
    path = _saved(tmp_path, obj)
    data, _ = read_hashed(path, (tmp_path / "f.pt").stat().st_size)
    loaded = torch_load.load(MemoryFile(data))
    expected = torch.load(path, weights_only=True)
    assert torch.equal(loaded["a"], expected["a"]) and torch.equal(loaded["view"], expected["view"])
    assert torch.equal(loaded["b"][0], expected["b"][0]) and loaded["b"][1] == 7
    start = torch.frombuffer(memoryview(data), dtype=torch.uint8).data_ptr()
    assert start <= loaded["a"].data_ptr() < start + len(data)  # no copy of its own
    loaded["a"].add_(1)  # writable: copy on write, never reaching the file
    assert torch.equal(torch.load(path, weights_only=True)["a"], expected["a"])


def test_anything_else_is_plain_torch_load(tmp_path):
    path = _saved(tmp_path, {"t": torch.ones(5)})
    raw = open(path, "rb").read()
    for f in (io.BytesIO(raw), MemoryFile(raw)):  # not held / a read-only buffer: copied, as torch.load does
        assert torch.equal(torch_load.load(f)["t"], torch.ones(5))
    legacy = _saved(tmp_path, {"t": torch.ones(5)}, _use_new_zipfile_serialization=False)
    data, _ = read_hashed(legacy, len(open(legacy, "rb").read()))
    assert torch.equal(torch_load.load(MemoryFile(data))["t"], torch.ones(5))


def test_weights_only_still_refuses_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("ran",))

    path = _saved(tmp_path, {"x": Evil()})
    data, _ = read_hashed(path, len(open(path, "rb").read()))
    with pytest.raises(pickle.UnpicklingError):
        torch_load.load(MemoryFile(data))
