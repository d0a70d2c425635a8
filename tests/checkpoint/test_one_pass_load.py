"""The verified load reads each byte once: the rank that hashes a file loads it from the bytes it hashed,
and a bit flipped in such a file is still caught (checksum, naming the file) before anything loads."""

import os

import pytest

from resilience import storage
from resilience.checkpoint import ReferenceBackend
from resilience.checkpoint.loading import readers
from resilience.checkpoint.manifest import Manifest, verify_file
from resilience.errors import CheckpointNotFound, IntegrityError
from resilience.launch import run_ranks
from resilience.state import ModelSpec, Topology, TrainingState, fingerprint
from resilience.storage.held import HeldFiles, MemoryFile, read_hashed
from resilience.storage.local import LocalFileSystem
from resilience.vocab import valid_combinations
from resilience.vocab.combos import CheckpointType

TOPO = Topology(2, 1, 1)
SPEC = ModelSpec()
SYNC = [pytest.param(c, id=str(c).replace("/", "-")) for c in valid_combinations() if not c.is_async]


class CountingFileSystem(LocalFileSystem):
    """Counts open_read per path."""

    def __init__(self):
        self.opened: dict[str, int] = {}

    def open_read(self, path):
        key = os.path.abspath(str(path))
        self.opened[key] = self.opened.get(key, 0) + 1
        return super().open_read(path)


def _save_and_load(ctx, combo, root, flip):
    state = TrainingState(SPEC, TOPO, ctx.rank)
    state.train(2)
    backend = ReferenceBackend(combo)
    backend.save(state, root)
    backend.finalize()
    saved = fingerprint(state.sharded_state_dict())
    import torch.distributed as dist

    dist.barrier()
    if flip is not None and ctx.rank == 0:
        with open(flip(root), "r+b") as f:  # a bit flipped in the middle of a file this rank hashes
            f.seek(os.path.getsize(f.name) // 2)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0x10]))
    dist.barrier()
    fresh = TrainingState(SPEC, TOPO, ctx.rank)
    counting = CountingFileSystem()
    with storage.use(counting):
        try:
            ReferenceBackend(combo, strict=True).load(fresh, root)
            error = None
        except (IntegrityError, CheckpointNotFound) as e:  # LOCAL: no other save to fall back to
            error = str(e)
    return {
        "saved": saved,
        "loaded": fingerprint(fresh.sharded_state_dict()),
        "error": error,
        "opened": counting.opened,
    }


def _folder(root, combo, rank):
    name = "iter_0000002"
    if combo.type is CheckpointType.LOCAL:
        return os.path.join(root, "local", f"rank_{rank:05d}", name)
    return os.path.join(root, name)


def _hashed_by(root, combo, rank):
    """The files of the checkpoint rank `rank` hashes on load (absolute paths)."""
    from resilience.checkpoint.formats.base import RankInfo
    from resilience.checkpoint.reference import ReferenceBackend as Ref

    folder = _folder(root, combo, rank)
    manifest = Manifest.read(folder, os.path.dirname(folder))
    if combo.type is CheckpointType.LOCAL:
        return [os.path.join(folder, rel) for rel in manifest.files]
    info = RankInfo(rank, TOPO.world, TOPO, TOPO.coords(rank), SPEC, combo)
    owners = readers(manifest.files, info, Ref(combo).format)
    return [os.path.join(folder, rel) for rel, r in owners.items() if r == rank]


def _largest_of_rank0(combo):
    def pick(root):
        return max(_hashed_by(root, combo, 0), key=os.path.getsize)

    return pick


@pytest.mark.multiprocess
@pytest.mark.parametrize("combo", SYNC)
def test_each_hashed_file_is_read_once_and_the_load_is_exact(combo, tmp_path):
    results = run_ranks(_save_and_load, TOPO.world, args=(combo, str(tmp_path), None), timeout=60)
    for rank, out in enumerate(results):
        assert out["error"] is None and out["loaded"] == out["saved"]
        hashed = _hashed_by(str(tmp_path), combo, rank)
        assert hashed
        for path in hashed:  # hashed and loaded from one read
            assert out["opened"].get(path) == 1, (path, out["opened"])


@pytest.mark.multiprocess
@pytest.mark.parametrize("combo", SYNC)
def test_a_bit_flip_in_a_file_loaded_from_memory_is_caught(combo, tmp_path):
    results = run_ranks(_save_and_load, TOPO.world, args=(combo, str(tmp_path), _largest_of_rank0(combo)), timeout=60)
    flipped = max(_hashed_by(str(tmp_path), combo, 0), key=os.path.getsize)
    errors = {out["error"] for out in results}
    assert len(errors) == 1 and None not in errors, errors  # every rank raises the same error
    message = errors.pop()
    assert flipped in message and "checksum failed" in message
    assert results[0]["opened"].get(flipped) == 1  # caught on the one read, not by a second pass


def test_read_hashed_matches_the_checksum_of_any_file(tmp_path):
    for size in (0, 1, 300_000, 1 << 20):
        path = tmp_path / f"f{size}"
        path.write_bytes(os.urandom(size))
        data, digest = read_hashed(str(path), size)
        assert bytes(data) == path.read_bytes()
        expected = {"size": size, "xxh3_128": digest}
        assert bytes(verify_file(str(tmp_path), path.name, expected, True) or b"") == path.read_bytes()


def test_a_file_longer_than_the_manifest_says_fails_its_size_check(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 1000)
    _, digest = read_hashed(str(path), 1000)
    with pytest.raises(IntegrityError, match="size failed"):
        verify_file(str(tmp_path), "f", {"size": 999, "xxh3_128": digest}, True)
    with pytest.raises(IntegrityError, match="checksum failed"):
        verify_file(str(tmp_path), "f", {"size": 1000, "xxh3_128": "0" * 32}, True)


def test_held_files_answer_from_memory_and_pass_the_rest_through(tmp_path):
    on_disk = tmp_path / "disk"
    on_disk.write_bytes(b"from disk")
    held = HeldFiles(LocalFileSystem(), {str(tmp_path / "held"): bytearray(b"0123456789")})
    with held.open_read(str(tmp_path / "held")) as f:
        assert isinstance(f, MemoryFile)
        f.seek(2)
        assert f.read(3) == b"234"
        assert f.view(5, 3).read() == b"567"
        assert f.read() == b"56789"
    with held.open_read(str(on_disk)) as f:
        assert f.read() == b"from disk"
    assert held.exists(str(on_disk))


def test_a_file_on_plain_disk_is_mapped_and_one_under_fuse_is_read(tmp_path):
    import mmap

    from resilience.fusefs import fuse_available, mounted

    backing, mnt = tmp_path / "backing", tmp_path / "mnt"
    backing.mkdir()
    mnt.mkdir()
    (backing / "f").write_bytes(b"abc" * 1000)
    data, digest = read_hashed(str(backing / "f"), 3000)
    assert isinstance(data, mmap.mmap)
    ok, why = fuse_available()
    if not ok:
        pytest.skip(f"FUSE: {why}")
    with mounted(str(backing), str(mnt)):
        # a read error injected there must stay an OSError, never a SIGBUS through a mapping
        through, same = read_hashed(str(mnt / "f"), 3000)
        assert isinstance(through, bytearray) and same == digest and bytes(through) == b"abc" * 1000


def test_a_held_torch_file_fills_from_its_bytes_and_keeps_no_object_sharing_them(tmp_path):
    import torch

    from resilience.checkpoint.formats import torchfile

    path = str(tmp_path / "model_optim_rng.pt")
    torchfile.save(
        path,
        {"w": {"data": torch.arange(6.0), "global_offset": [0], "global_shape": [6]}},
        {"rng": torch.arange(4, dtype=torch.uint8)},
    )
    data, _ = read_hashed(path, os.path.getsize(path))
    with storage.use(HeldFiles(LocalFileSystem(), {path: data}), this_thread=True):
        doc = torchfile.load(path)
    start = torch.frombuffer(memoryview(data), dtype=torch.uint8).data_ptr()
    assert start <= doc["tensors"]["w"]["data"].data_ptr() < start + len(data)  # parsed in place
    rng = doc["objects"]["rng"]
    assert torch.equal(rng, torch.arange(4, dtype=torch.uint8))
    assert not start <= rng.data_ptr() < start + len(data)  # kept by the state: a copy of its own
