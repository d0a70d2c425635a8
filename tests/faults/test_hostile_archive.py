"""The hostile pickle in a torch.save archive: the rewritten data.pkl runs the command under
torch.load(weights_only=False) and gives back exactly the original object, weights_only=True refuses it,
every other record stays byte-identical and aligned, and planting runs nothing and follows no symlink."""

import json
import os
import pickle
import pickletools
import random
import struct
import zipfile

import pytest
import torch

from resilience.faults import NothingToDamage, corrupt, fault_from_dict
from resilience.faults.damage_records import NotApplicable
from resilience.faults.hostile_pickle import MARKER, command_opcodes, hostile_archive, plant_among
from resilience.faults.torch_archive import read as read_archive


def _object() -> dict:
    weights = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    return {
        "weights": weights,
        "row": weights[1],  # a view: shares the storage of `weights`
        "half": torch.full((3,), 1.5, dtype=torch.bfloat16),
        "empty": torch.zeros(0),
        "objects": {"iteration": 3, "names": ["a", "b"], "nested": (1.0, None)},
    }


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return a == b


def _saved(tmp_path, protocol: int = 2) -> str:
    path = str(tmp_path / "shard.pt")
    torch.save(_object(), path, pickle_protocol=protocol)
    return path


def _data_offsets(raw: bytes) -> dict[str, int]:
    """Where each record's data begins, from its local header."""
    out = {}
    with zipfile.ZipFile(_as_file(raw)) as z:
        for info in z.infolist():
            n, m = struct.unpack_from("<HH", raw, info.header_offset + 26)
            out[info.filename] = info.header_offset + 30 + n + m
    return out


def _as_file(raw: bytes):
    import io

    return io.BytesIO(raw)


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
@pytest.mark.parametrize("protocol", [2, 4])
def test_rewritten_archive_runs_the_command_and_loads_the_original(tmp_path, protocol):
    path = _saved(tmp_path, protocol)
    with open(path, "rb") as f:
        raw = f.read()
    marker = str(tmp_path / MARKER)
    new, record = hostile_archive(raw, marker)
    hostile = tmp_path / "hostile.pt"
    hostile.write_bytes(new)

    with pytest.raises(pickle.UnpicklingError, match="posix.system"):
        torch.load(hostile, weights_only=True)
    assert not os.path.exists(marker)  # the refusal ran nothing
    loaded = torch.load(hostile, weights_only=False)
    assert _equal(loaded, _object())
    assert loaded["row"].untyped_storage().data_ptr() == loaded["weights"].untyped_storage().data_ptr()
    with open(marker) as f:
        assert f.read() == "ran\n"

    old, rewritten = zipfile.ZipFile(path), zipfile.ZipFile(hostile)
    assert rewritten.testzip() is None  # every record's crc holds
    assert rewritten.namelist() == old.namelist()
    assert record == old.namelist()[0] and record.endswith("/data.pkl")
    assert all(i.compress_type == zipfile.ZIP_STORED for i in rewritten.infolist())
    for name in old.namelist():
        if name != record:
            assert rewritten.read(name) == old.read(name), name
    before, after = _data_offsets(raw), _data_offsets(new)
    assert {k: v % 64 for k, v in after.items()} == {k: v % 64 for k, v in before.items()}
    assert all(v % 64 == 0 for v in after.values())  # torch aligns every record's data
    assert rewritten.read(record)[2:].endswith(old.read(record)[2:])  # the original pickle, unchanged


def test_command_opcodes_are_pickled_not_typed():
    ops = [(op.name, arg) for op, arg, _ in pickletools.genops(command_opcodes("/x/M") + pickle.STOP)]
    assert ops == [
        ("GLOBAL", "posix system"),
        ("BINUNICODE", "echo ran >> /x/M"),
        ("TUPLE1", None),
        ("REDUCE", None),
        ("POP", None),
        ("STOP", None),
    ]  # no memo opcode: the memo indices of the pickle they go into stay as they were


def test_planting_runs_nothing_from_the_checkpoint(tmp_path):
    """A file that already runs a command when unpickled is planted again: the first command never runs."""
    path = _saved(tmp_path)
    root = str(tmp_path)
    with open(path, "rb") as f:
        first, _ = hostile_archive(f.read(), str(tmp_path / "FIRST"))
    with open(path, "wb") as f:
        f.write(first)
    planted = plant_among(root, [path], random.Random(0), root)
    assert not os.path.exists(tmp_path / "FIRST")
    torch.load(path, weights_only=False)
    assert os.path.exists(planted.marker) and os.path.exists(tmp_path / "FIRST")


def _zip(path, entries, compression=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compression) as z:
        for name, data in entries.items():
            z.writestr(name, data)


def test_what_is_not_a_torch_archive_says_why(tmp_path):
    good = tmp_path / "good.pt"
    torch.save(_object(), good)
    raw = good.read_bytes()
    _zip(tmp_path / "deflated.zip", {"a/data.pkl": b"\x80\x02N."}, zipfile.ZIP_DEFLATED)
    _zip(tmp_path / "nopickle.zip", {"a/data/0": b"x", "a/version": b"3"})
    torch.save(_object(), tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    cases = {
        b"{}": "does not begin with a zip record",
        raw + b"junk": "bytes after its zip archive",
        (tmp_path / "deflated.zip").read_bytes(): "compressed or encrypted record",
        (tmp_path / "nopickle.zip").read_bytes(): "without a data.pkl",
        (tmp_path / "legacy.pt").read_bytes(): "does not begin with a zip record",
    }
    for data, why in cases.items():
        got = read_archive(data)
        assert isinstance(got, str) and why in got, (why, got)
    assert not isinstance(read_archive(raw), str)


def test_a_folder_without_a_pickle_is_not_applicable(tmp_path):
    folder = tmp_path / "ckpt" / "iter_0000003"
    folder.mkdir(parents=True)
    (folder / "index.json").write_text("{}")
    (folder / "shard.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    _zip(folder / "notes.zip", {"notes/readme.txt": b"not a checkpoint"})
    with pytest.raises(
        NothingToDamage, match=r"iter_0000003 holds no pickle: no \.metadata and no torch.save archive"
    ) as e:
        corrupt(fault_from_dict({"kind": "hostile_pickle"}), tmp_path / "ckpt")
    assert "iter_0000003/notes.zip is a zip without a data.pkl under one folder" in str(e.value)


def test_symlinks_leading_outside_are_not_followed(tmp_path):
    """An archive reached through a symlink (to a file, or a whole iteration folder outside the root) is
    neither read nor rewritten: the case is N/A, the file outside unchanged."""
    outside = tmp_path / "outside"
    outside.mkdir()
    torch.save(_object(), outside / "shard.pt")
    before = (outside / "shard.pt").read_bytes()
    root = tmp_path / "ckpt"
    (root / "iter_0000003").mkdir(parents=True)
    os.symlink(outside / "shard.pt", root / "iter_0000003" / "shard.pt")
    with pytest.raises(NothingToDamage, match="1 not followed: symlinks"):
        corrupt(fault_from_dict({"kind": "hostile_pickle"}), root)
    os.unlink(root / "iter_0000003" / "shard.pt")
    os.rmdir(root / "iter_0000003")
    os.symlink(outside, root / "iter_0000003")
    with pytest.raises(NothingToDamage, match="not followed"):
        corrupt(fault_from_dict({"kind": "hostile_pickle"}), root)
    assert (outside / "shard.pt").read_bytes() == before
    assert not os.path.exists(root / MARKER)


def test_a_fifo_is_not_opened(tmp_path):
    root = tmp_path / "ckpt"
    (root / "iter_0000003").mkdir(parents=True)
    os.mkfifo(root / "iter_0000003" / "shard.pt")  # opening it to read would block
    with pytest.raises(NothingToDamage, match="holds no pickle"):
        corrupt(fault_from_dict({"kind": "hostile_pickle"}), root)


def _rank_archives(tmp_path, n: int):
    """A checkpoint root whose iter_0000003 holds n torch.save archives rank_K.pt: (root, that folder)."""
    root = tmp_path / "ckpt"
    folder = root / "iter_0000003"
    folder.mkdir(parents=True)
    for k in range(n):
        torch.save({"k": torch.tensor([k])}, folder / f"rank_{k}.pt")
    return root, folder


def test_the_archive_is_drawn_from_the_seed(tmp_path):
    root, folder = _rank_archives(tmp_path, 4)
    pristine = {p: p.read_bytes() for p in folder.iterdir()}
    picked = []
    for seed in (0, 0, 1, 2, 3):
        for p, data in pristine.items():
            p.write_bytes(data)
        picked.append(corrupt(fault_from_dict({"kind": "hostile_pickle", "seed": seed}), root).rel)
    assert picked[0] == picked[1]  # the same seed, the same file
    assert len(set(picked)) > 1


def test_the_target_path_names_the_file(tmp_path):
    root, folder = _rank_archives(tmp_path, 3)
    (folder / "index.json").write_text("{}")
    d = corrupt(fault_from_dict({"kind": "hostile_pickle", "target": {"path": "*/rank_2.pt"}}), root)
    assert d.rel == "iter_0000003/rank_2.pt"
    with pytest.raises(NothingToDamage, match=r"holds no pickle.*\(iter_0000003/index.json\)"):
        corrupt(fault_from_dict({"kind": "hostile_pickle", "target": {"path": "*.json"}}), root)


FOREIGN_MANIFESTS = {
    "a list, no body": {"version": 3, "files": [{"name": "rank_0.pt", "size": 1, "sha256": "00"}]},
    "a body of another shape": {"body": {"files": {"rank_0.pt": {"size": 1}}}, "digest": "x"},
    "not an object": ["rank_0.pt"],
}


@pytest.mark.parametrize("manifest", FOREIGN_MANIFESTS.values(), ids=list(FOREIGN_MANIFESTS))
def test_another_librarys_manifest_is_never_forged_as_the_references(tmp_path, manifest):
    """A manifest.json of another format beside the archive: the pickle is planted, the manifest is left as
    it is and said so (was a ConfigError: 'manifest.json is not a manifest to rewrite: 'body'')."""
    folder = tmp_path / "step-3"
    folder.mkdir()
    torch.save(_object(), folder / "rank_0.pt")
    text = json.dumps(manifest)
    (folder / "manifest.json").write_text(text)
    planted = plant_among(str(tmp_path), [str(folder / "rank_0.pt")], random.Random(0), "step 3")
    assert "not a resilience-checkpoint-manifest (another format): left as it is" in planted.manifest
    assert (folder / "manifest.json").read_text() == text


def test_a_path_is_forged_only_into_the_references_manifest(tmp_path):
    from resilience.faults.kinds import EscapingManifestPath
    from resilience.faults.layout import Layout, LayoutFile
    from resilience.faults.layout_damage import escaping_path

    folder = tmp_path / "step-3"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps(FOREIGN_MANIFESTS["a body of another shape"]))
    layout = Layout(3, (LayoutFile("step-{iteration}/manifest.json", "metadata"),), False, "scan")
    fault = fault_from_dict({"kind": "escaping_path"})
    assert isinstance(fault, EscapingManifestPath)
    with pytest.raises(NotApplicable, match="no file list of the reference's manifest format"):
        escaping_path(str(tmp_path), fault, layout, random.Random(0))
