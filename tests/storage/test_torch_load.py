"""torch.load over held bytes: tensors are views of the verified buffer, values exactly torch.load's."""

import io
import pickle

import pytest
import torch

from resilience.storage import torch_load
from resilience.storage.held import MemoryFile, read_buffer, read_hashed


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


def _archive(t: torch.Tensor) -> bytearray:
    b = io.BytesIO()
    torch.save(t, b)
    return bytearray(b.getvalue())


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and a.stride() == b.stride()
        and a.storage_offset() == b.storage_offset()
        and torch.equal(a, b)
    )


SHAPES = [
    torch.arange(12, dtype=torch.float32).reshape(3, 4),
    torch.arange(40, dtype=torch.float32).reshape(5, 8)[1:, 2:],  # a view: offset and strides of its storage
    torch.arange(40, dtype=torch.int64).reshape(5, 8).t(),
    torch.ones(7, dtype=torch.bfloat16),
    torch.tensor(3.5),
    torch.zeros(0, 4),
]


@pytest.mark.parametrize("make", range(len(SHAPES)))
def test_an_item_of_a_known_pickle_is_built_without_unpickling(monkeypatch, make):
    """DCP's items: each a torch.save of one tensor. The second archive with the same pickle is built from
    the recipe the first left, equal to what unpickling gives, and a view of its own bytes."""
    monkeypatch.setattr(torch_load, "_RECIPES", {})
    first = SHAPES[make]
    second = _like(first, first * 3)
    unpickled = []
    real = torch_load._LOAD_STEP
    monkeypatch.setattr(torch_load, "_LOAD_STEP", lambda *a, **k: unpickled.append(1) or real(*a, **k))
    for t in (first, second):
        data = _archive(t)
        loaded = torch_load.load(MemoryFile(data))
        assert _same(loaded, torch.load(io.BytesIO(bytes(data)), weights_only=True))
        start = torch.frombuffer(memoryview(data), dtype=torch.uint8).data_ptr()
        assert not loaded.numel() or start <= loaded.data_ptr() < start + len(data)
    assert len(unpickled) == 1


def _like(first: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """`values` laid out as `first` is (same storage size, offset and strides): the same pickle."""
    storage = torch.zeros(first.untyped_storage().nbytes() // first.element_size(), dtype=first.dtype)
    out = storage.as_strided(first.shape, first.stride(), first.storage_offset())
    out.copy_(values)
    return out


def test_a_known_pickle_over_too_few_bytes_fails_as_torch_load_does(monkeypatch):
    monkeypatch.setattr(torch_load, "_RECIPES", {})
    t = torch.arange(256, dtype=torch.float32)
    torch_load.load(MemoryFile(_archive(t)))
    assert len(torch_load._RECIPES) == 1
    data = _archive(t + 1)
    at = bytes(data).index(b"data/0") + 64  # inside the storage: the archive cut there
    cut = bytearray(data[:at])
    with pytest.raises(Exception) as ours:
        torch_load.load(MemoryFile(cut))
    with pytest.raises(Exception) as theirs:
        torch.load(io.BytesIO(bytes(cut)), weights_only=True)
    assert type(ours.value) is type(theirs.value)


def test_only_one_plain_tensor_is_learned(monkeypatch):
    monkeypatch.setattr(torch_load, "_RECIPES", {})
    for obj in ({"t": torch.ones(3)}, torch.nn.Parameter(torch.ones(3)), torch.ones(3, requires_grad=True)):
        loaded = torch_load.load(MemoryFile(_archive(obj)))
        assert type(loaded) is type(torch.load(io.BytesIO(bytes(_archive(obj))), weights_only=True))
    assert torch_load._RECIPES == {}


class _ReadOnly:
    """A stream with read() alone, as some wrappers are."""

    def __init__(self, raw: bytes):
        self.inner = io.BytesIO(raw)

    def read(self, n: int = -1) -> bytes:
        return self.inner.read(min(n, 7) if n > 0 else n)  # short reads, as a pipe or FUSE may give


def test_an_item_read_into_a_buffer_of_its_own_loads_as_a_view_of_it(tmp_path):
    path = _saved(tmp_path, torch.arange(50, dtype=torch.float64))
    raw = open(path, "rb").read()
    for stream in (io.BufferedReader(io.BytesIO(raw)), _ReadOnly(raw)):
        buf = read_buffer(stream, len(raw))
        assert buf == raw
        loaded = torch_load.load(MemoryFile(buf))
        assert torch.equal(loaded, torch.arange(50, dtype=torch.float64))
        start = torch.frombuffer(buf, dtype=torch.uint8).data_ptr()
        assert start <= loaded.data_ptr() < start + len(buf)  # parsed in place, not through torch.load's copy
    assert read_buffer(io.BytesIO(raw[:10]), len(raw)) == raw[:10]  # a short file: what is there


def test_a_size_past_the_end_of_the_file_gets_no_buffer_of_that_size():
    raw = b"x" * 100
    # an index claiming a terabyte: what the file holds comes back, nothing is allocated for the rest
    assert read_buffer(io.BufferedReader(io.BytesIO(raw)), 1 << 40) == raw


def _rss_file_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssFile:"))


def test_a_held_file_leaves_the_process_memory_once_hashed_and_each_tensor_once_released(tmp_path):
    """A verified load holds no more than its state: the hash pass drops each piece of the mapping after
    hashing it, and a tensor copied into place drops its pages (the bytes stay right when touched again)."""
    big = torch.arange(8 << 20, dtype=torch.float32)  # 32 MiB
    path = _saved(tmp_path, {"big": big, "small": torch.ones(10)})
    before = _rss_file_kib()
    data, _ = read_hashed(path, (tmp_path / "f.pt").stat().st_size)
    assert _rss_file_kib() - before < 8 << 10  # hashed, 32 MiB read, under 8 MiB of it left resident
    loaded = torch_load.load(MemoryFile(data))
    target = torch.empty_like(big)
    target.copy_(loaded["big"])  # faults the file's pages in again
    assert _rss_file_kib() - before > 24 << 10
    torch_load.release(loaded["big"])
    assert _rss_file_kib() - before < 8 << 10
    torch_load.release(target)  # memory of its own: left alone
    assert torch.equal(loaded["big"], big) and torch.equal(target, big)  # read back from the page cache
