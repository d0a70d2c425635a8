"""Hostile checkpoint folders: nothing in them runs, no read blocks, no number crashes a reader.

Each folder is a real checkpoint (two saves, iterations 2 and 3) with one hostile change to the newest
or to the tracker: a pickle that runs a command, FIFOs where files belong, symlinks leading outside,
numbers that do not fit. For each: no marker file appears, `resilience inspect` gives one clear verdict
in a subprocess with a timeout (never a hang, a traceback, or a byte of a file outside the folder), a
load falls back to iteration 2 (or, strict, raises IntegrityError), and on two ranks every rank
reaches the same answer."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import xxhash

import resilience.checkpoint.formats.torch_dcp  # noqa: F401  imported before forking: ranks skip the imports
import resilience.checkpoint.formats.torch_dist  # noqa: F401
from resilience.checkpoint import ReferenceBackend
from resilience.checkpoint.commit import read_tracker
from resilience.checkpoint.manifest import Manifest
from resilience.errors import IntegrityError
from resilience.faults import corrupt, fault_from_dict
from resilience.faults.hostile_pickle import MARKER
from resilience.launch import run_ranks
from resilience.state import ModelSpec, Topology, TrainingState
from resilience.storage import safe_pickle
from resilience.vocab.combos import Combination
from resilience.vocab.folders import MANIFEST, TRACKER

SPEC = ModelSpec(num_layers=2, hidden=8, ffn_hidden=16, heads=2, vocab=16)
DIST = "GLOBAL/torch_dist/sync"
DCP_COMBOS = [
    "GLOBAL/torch_dist/sync",
    "GLOBAL/torch_dist/async",
    "TORCH_DCP/torch_dcp/sync",
    "TORCH_DCP/torch_dcp/async",
]
SECRET = "SECRET-OUTSIDE-CONTENT"
TIMEOUT = 60


def _save_two(root: str, combo: str = DIST) -> None:
    """Iterations 2 and 3, in this process (one rank, no process group)."""
    state = TrainingState(SPEC, Topology(1, 1, 1), 0)
    backend = ReferenceBackend(Combination.parse(combo))
    state.train(2)
    backend.save(state, root)
    state.train(1)
    backend.save(state, root)
    backend.finalize()


def _forge(folder: str, change) -> None:
    """Rewrite a manifest's body with `change(body)` and a matching digest: damage a checksum cannot see."""
    path = os.path.join(folder, MANIFEST)
    with open(path) as f:
        doc = json.load(f)
    change(doc["body"])
    canonical = json.dumps(doc["body"], sort_keys=True, separators=(",", ":"))
    doc["digest"] = xxhash.xxh3_128_hexdigest(canonical.encode())
    with open(path, "w") as f:
        json.dump(doc, f)


def _shard(folder: str) -> str:
    return next(n for n in sorted(os.listdir(folder)) if n.endswith(".distcp"))


def _outside(root: str) -> str:
    out = os.path.join(os.path.dirname(root), "outside")
    os.makedirs(out, exist_ok=True)
    return out


# ---- the hostile folders: each damages root's newest checkpoint (iter_0000003) or its tracker -----------
def fifo_manifest(root):
    path = os.path.join(root, "iter_0000003", MANIFEST)
    os.unlink(path)
    os.mkfifo(path)


def fifo_tracker(root):
    path = os.path.join(root, TRACKER)
    os.unlink(path)
    os.mkfifo(path)


def fifo_shard(root):
    folder = os.path.join(root, "iter_0000003")
    name = _shard(folder)
    os.unlink(os.path.join(folder, name))
    os.mkfifo(os.path.join(folder, name))
    _forge(folder, lambda b: b["files"].__setitem__(name, {"size": 0, "xxh3_128": xxhash.xxh3_128_hexdigest(b"")}))


def symlink_shard(root):
    folder = os.path.join(root, "iter_0000003")
    name = _shard(folder)
    moved = os.path.join(_outside(root), name)
    shutil.move(os.path.join(folder, name), moved)
    os.symlink(moved, os.path.join(folder, name))


def symlink_iteration(root):
    folder = os.path.join(root, "iter_0000003")
    moved = os.path.join(_outside(root), "iter_0000003")
    shutil.move(folder, moved)
    os.symlink(moved, folder)


def symlink_tracker(root):
    secret = os.path.join(_outside(root), "secret.txt")
    with open(secret, "w") as f:
        f.write(SECRET)
    os.unlink(os.path.join(root, TRACKER))
    os.symlink(secret, os.path.join(root, TRACKER))


def symlink_manifest(root):
    """A manifest that is a symlink to a file outside: never read, never quoted."""
    secret = os.path.join(_outside(root), "secret-manifest.json")
    with open(secret, "w") as f:
        f.write(SECRET)
    path = os.path.join(root, "iter_0000003", MANIFEST)
    os.unlink(path)
    os.symlink(secret, path)


def infinite_size(root):
    folder = os.path.join(root, "iter_0000003")
    _forge(folder, lambda b: b["files"][_shard(folder)].__setitem__("size", float("inf")))


def nan_iteration(root):
    _forge(os.path.join(root, "iter_0000003"), lambda b: b.__setitem__("iteration", float("nan")))


def infinite_iteration(root):
    _forge(os.path.join(root, "iter_0000003"), lambda b: b.__setitem__("iteration", float("inf")))


def negative_size(root):
    folder = os.path.join(root, "iter_0000003")
    _forge(folder, lambda b: b["files"][_shard(folder)].__setitem__("size", -1))


def huge_tracker(root):
    with open(os.path.join(root, TRACKER), "w") as f:
        f.write("9" * 5000)


def superscript_tracker(root):
    with open(os.path.join(root, TRACKER), "w") as f:
        f.write("²")


def iteration_is_a_file(root):
    folder = os.path.join(root, "iter_0000003")
    shutil.rmtree(folder)
    with open(folder, "w") as f:
        f.write("not a folder")


def dangling_iteration(root):
    folder = os.path.join(root, "iter_0000003")
    shutil.rmtree(folder)
    os.symlink(os.path.join(root, "nowhere"), folder)


def hostile_pickle(root):
    corrupt(fault_from_dict({"kind": "hostile_pickle"}), root)


NEWEST_DAMAGED = [
    fifo_manifest,
    fifo_shard,
    symlink_shard,
    symlink_iteration,
    symlink_manifest,
    infinite_size,
    nan_iteration,
    infinite_iteration,
    negative_size,
    iteration_is_a_file,
    dangling_iteration,
    hostile_pickle,
]
TRACKER_DAMAGED = [fifo_tracker, symlink_tracker, huge_tracker, superscript_tracker]
ALL = NEWEST_DAMAGED + TRACKER_DAMAGED


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("clean") / "ckpt")
    _save_two(root)
    return root


def _hostile(clean: str, tmp_path, make) -> str:
    root = str(tmp_path / "case" / "ckpt")
    shutil.copytree(clean, root, symlinks=True)
    make(root)
    return root


def _marker(root: str) -> str:
    return os.path.join(root, MARKER)


# ---- the restricted unpickler ------------------------------------------------------------------------
def test_safe_pickle_reads_real_metadata_and_refuses_code(clean, tmp_path):
    path = os.path.join(clean, "iter_0000003", ".metadata")
    with open(path, "rb") as f:
        data = f.read()
    assert safe_pickle.loads(data, path).state_dict_metadata  # what DCP wrote loads
    root = _hostile(clean, tmp_path, hostile_pickle)
    hostile = os.path.join(root, "iter_0000003", ".metadata")
    with open(hostile, "rb") as f:
        with pytest.raises(IntegrityError, match=r"\.metadata: safe unpickling failed: refused to load _operator"):
            safe_pickle.load_metadata(f, hostile)
    assert not os.path.exists(_marker(root))


def test_hostile_pickle_runs_under_plain_pickle(clean, tmp_path):
    """The corruption is real: plain pickle runs it (and still yields the metadata)."""
    import pickle

    root = _hostile(clean, tmp_path, hostile_pickle)
    with open(os.path.join(root, "iter_0000003", ".metadata"), "rb") as f:
        metadata = pickle.load(f)
    assert os.path.exists(_marker(root))
    assert metadata.state_dict_metadata
    assert Manifest.read(os.path.join(root, "iter_0000003")).files[".metadata"]["size"] == os.path.getsize(
        os.path.join(root, "iter_0000003", ".metadata")
    )  # the manifest was updated to match


def test_safe_pickle_refuses_paths_outside_the_folder(clean):
    import pickle

    path = os.path.join(clean, "iter_0000003", ".metadata")
    with open(path, "rb") as f:
        metadata = pickle.load(f)
    index, info = next(iter(metadata.storage_data.items()))
    info.relative_path = "../../etc/passwd"
    with pytest.raises(IntegrityError, match="path safety"):
        safe_pickle.check_metadata(metadata, path)


@pytest.mark.parametrize("combo", DCP_COMBOS, ids=lambda c: c.replace("/", "-"))
def test_hostile_pickle_never_runs_on_load(combo, tmp_path):
    root = str(tmp_path / "ckpt")
    _save_two(root, combo)
    hostile_pickle(root)
    state = TrainingState(SPEC, Topology(1, 1, 1), 0)
    result = ReferenceBackend(Combination.parse(combo)).load(state, root)
    assert not os.path.exists(_marker(root))
    # DCP's .metadata is the pickle planted: its first global is refused, before anything could run
    assert result.iteration == 2 and any("refused to load _operator.getitem" in w for w in result.warnings)
    with pytest.raises(IntegrityError, match="safe unpickling"):
        ReferenceBackend(Combination.parse(combo), strict=True).load(TrainingState(SPEC, Topology(1, 1, 1), 0), root)
    assert not os.path.exists(_marker(root))


@pytest.mark.parametrize("combo", ["LEGACY/torch/sync", "LOCAL/torch/sync"], ids=lambda c: c.split("/")[0])
def test_hostile_pickle_in_a_torch_file_never_runs_on_load(combo, tmp_path):
    """With no .metadata, the pickle of a torch.save file is replaced (manifest updated to match): the
    reference's torch.load(weights_only=True) refuses it, and the load falls back or, strict, raises."""
    import torch

    root = str(tmp_path / "ckpt")
    _save_two(root, combo)
    damage = corrupt(fault_from_dict({"kind": "hostile_pickle"}), root)
    assert damage.rel.endswith(
        "iter_0000003/" + ("mp_rank_00/" if combo.startswith("LEGACY") else "") + "model_optim_rng.pt"
    )
    assert "manifest size and xxh3 updated" in damage.detail
    state = TrainingState(SPEC, Topology(1, 1, 1), 0)
    result = ReferenceBackend(Combination.parse(combo)).load(state, root)
    assert result.iteration == 2 and any("UnpicklingError" in w and "posix.system" in w for w in result.warnings)
    with pytest.raises(IntegrityError, match="posix.system"):
        ReferenceBackend(Combination.parse(combo), strict=True).load(TrainingState(SPEC, Topology(1, 1, 1), 0), root)
    assert not os.path.exists(_marker(root))
    doc = torch.load(damage.file, weights_only=False)  # the file is hostile, not broken: it loads and runs
    assert doc["format_version"] == 1 and os.path.exists(_marker(root))


# ---- every hostile folder: inspect, load -------------------------------------------------------------
# `resilience inspect` on each folder given, in one process (one torch import): exit code, stdout, stderr
_INSPECT_EACH = """
import contextlib, io, json, sys, traceback
from resilience.cli import main
out = {}
for root in sys.argv[1:]:
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        try:
            code = main(["inspect", root])
        except SystemExit as x:
            code = x.code
        except BaseException:
            code = "Traceback"
            traceback.print_exc(file=e)
    out[root] = [code, o.getvalue(), e.getvalue()]
print(json.dumps(out))
"""


def test_inspect_gives_one_clear_verdict_on_every_hostile_folder(clean, tmp_path):
    roots = {make.__name__: _hostile(clean, tmp_path / make.__name__, make) for make in ALL}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd()] + sys.path))
    try:  # a FIFO read blocks forever: the bound is the timeout, not a duration this test judges
        done = subprocess.run(
            [sys.executable, "-c", _INSPECT_EACH, *roots.values()],
            env=env,
            capture_output=True,
            text=True,
            timeout=4 * TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"resilience inspect did not finish within {4 * TIMEOUT} s on {len(roots)} folders")
    outcomes = json.loads(done.stdout)
    bad = {}
    for make in ALL:
        root = roots[make.__name__]
        code, out, err = outcomes[root]
        want = 1 if make in NEWEST_DAMAGED else 0  # a bad tracker is a warning: loaders scan the folders
        verdict = "NOT LOADABLE" if make in NEWEST_DAMAGED else "WARNING: tracker failed"
        if (
            code != want
            or "Traceback" in err
            or SECRET in out + err
            or os.path.exists(_marker(root))
            or verdict not in out
        ):
            bad[make.__name__] = (code, out[-600:], err[-600:])
    assert not bad, bad


def _load_twice(ctx, root: str) -> dict:
    """A load (fallback) and a strict load of `root`: what each returned or raised."""
    out = {}
    result = ReferenceBackend(Combination.parse(DIST)).load(TrainingState(SPEC, Topology(1, 1, 1), 0), root)
    out["iteration"], out["warnings"] = result.iteration, list(result.warnings)
    try:
        ReferenceBackend(Combination.parse(DIST), strict=True).load(TrainingState(SPEC, Topology(1, 1, 1), 0), root)
        out["strict"] = "no error"
    except IntegrityError as e:
        out["strict"] = type(e).__name__
    return out


FIFOS = (fifo_manifest, fifo_shard, fifo_tracker)


@pytest.mark.parametrize("make", ALL, ids=lambda m: m.__name__)
def test_load_falls_back_or_refuses(make, clean, tmp_path):
    root = _hostile(clean, tmp_path, make)
    if make in FIFOS:  # a reader that opened the FIFO would block: load in a rank process with a timeout
        got = run_ranks(_load_twice, 1, args=(root,), timeout=TIMEOUT)[0]
    else:
        got = _load_twice(None, root)
    assert got["iteration"] == (2 if make in NEWEST_DAMAGED else 3)
    assert got["warnings"]
    assert not any(SECRET in w for w in got["warnings"])
    assert got["strict"] == "IntegrityError"
    assert not os.path.exists(_marker(root))


def test_tracker_numbers_are_checked(tmp_path):
    for text, why in [
        ("9" * 5000, "longer than"),
        ("²", "not a number"),
        ("-3", "not a number"),
        ("3.0", "not a number"),
        ("1" * 40, "not a number"),
    ]:
        with open(tmp_path / TRACKER, "w") as f:
            f.write(text)
        iteration, problem = read_tracker(str(tmp_path))
        assert iteration is None and why in problem, (text, problem)


def _load_each(ctx, roots: dict, strict: bool) -> dict:
    out = {}
    for name, root in roots.items():
        state = TrainingState(SPEC, Topology(1, 1, 2), ctx.rank)
        try:
            out[name] = ReferenceBackend(Combination.parse(DIST), strict=strict).load(state, root).iteration
        except Exception as e:
            out[name] = type(e).__name__
        out[name + ":marker"] = os.path.exists(os.path.join(root, MARKER))
    return out


@pytest.mark.multiprocess
@pytest.mark.parametrize("strict", [False, True], ids=["fallback", "strict"])
def test_two_ranks_agree_on_every_hostile_folder(strict, clean, tmp_path):
    """Every rank reaches the same answer at once (a fallback, or IntegrityError on every rank), with no
    rank left waiting on the others: the job would time out."""
    roots = {make.__name__: _hostile(clean, tmp_path / make.__name__, make) for make in ALL}
    ranks = run_ranks(_load_each, 2, args=(roots, strict), timeout=TIMEOUT)
    assert ranks[0] == ranks[1]
    for make in ALL:
        got = ranks[0][make.__name__]
        if strict:
            assert got == "IntegrityError", (make.__name__, got)
        else:
            assert got == (2 if make in NEWEST_DAMAGED else 3), (make.__name__, got)
        assert ranks[0][make.__name__ + ":marker"] is False


def test_local_rank_folder_leading_outside_is_refused(tmp_path):
    from resilience.checkpoint.inspect import inspect
    from resilience.errors import CheckpointNotFound

    root = str(tmp_path / "ckpt")
    _save_two(root, "LOCAL/torch/sync")
    rank_folder = os.path.join(root, "local", "rank_00000")
    moved = os.path.join(_outside(root), "rank_00000")
    shutil.move(rank_folder, moved)
    os.symlink(moved, rank_folder)
    result = inspect(root)
    assert not result.ok
    assert all(p.check == "inside the checkpoint folder" for c in result.checkpoints for p in c.problems)
    with pytest.raises(CheckpointNotFound, match="inside the checkpoint folder failed"):
        ReferenceBackend(Combination.parse("LOCAL/torch/sync")).load(TrainingState(SPEC, Topology(1, 1, 1), 0), root)


def _as_a_user_without_access(ctx, root: str) -> dict:
    """inspect and a load of `root` by a user the iteration folder's mode shuts out (root reads any mode)."""
    from resilience.checkpoint.inspect import inspect

    if os.geteuid() == 0:
        os.setgid(65534)
        os.setuid(65534)
    result = inspect(root)
    problems = [f"{p.check}: {p.detail}" for c in result.checkpoints if c.iteration == 3 for p in c.problems]
    return {"ok": result.ok, "problems": problems, **_load_twice(ctx, root)}


def test_unreadable_iteration_folder_is_reported_as_unreadable(clean, tmp_path):
    """An iteration folder the reader may not list is named as unreadable, not "an uncommitted save"; a
    load falls back to iteration 2."""
    import tempfile

    base = tempfile.mkdtemp(prefix="hostile-unreadable-")  # outside tmp_path, whose parents are closed to others
    try:
        os.chmod(base, 0o755)
        root = os.path.join(base, "ckpt")
        shutil.copytree(clean, root, symlinks=True)
        os.chmod(os.path.join(root, "iter_0000003"), 0)
        got = run_ranks(_as_a_user_without_access, 1, args=(root,), timeout=TIMEOUT)[0]
    finally:
        shutil.rmtree(base)  # this process reads any mode
    assert got["ok"] is False
    assert got["problems"] and all("readable" in p and "Permission" in p for p in got["problems"]), got["problems"]
    assert got["iteration"] == 2 and got["warnings"]
    assert got["strict"] == "IntegrityError"
