"""The reference implementation on real ranks: round trip, topology table, integrity, fallback, re-save,
retention, LOCAL agreement, and `resilience inspect` on what it wrote.

Tests that hold for every combination are parametrized over valid_combinations(); a combination whose
format module is not written yet is skipped and starts running once the module exists. To keep the
suite fast, the cases of one scenario run in one job per combination (a module-scoped cache) and
each case is still its own test."""

import errno
import fcntl
import importlib.util
import json
import os
import pickle
import shutil
import subprocess
import sys

import pytest

from resilience import storage
from resilience.checkpoint import ReferenceBackend
from resilience.cli import main
from resilience.errors import AsyncSaveFailed, RankFailure
from resilience.launch import run_ranks
from resilience.state import TOPOLOGY_BOUND_KEYS, ModelSpec, Topology, TrainingState, fingerprint
from resilience.vocab import phases, valid_combinations
from resilience.vocab.combos import CheckpointType, CkptFormat

pytestmark = pytest.mark.multiprocess

TIMEOUT = 60
FORMAT_MODULE = {CkptFormat.TORCH_DIST: "torch_dist", CkptFormat.TORCH_DCP: "torch_dcp"}
DISTOPT = ModelSpec(dtype="bf16", optimizer="distributed")
TOPO = Topology(2, 1, 1)  # LEGACY: two mp_rank files; LOCAL: two rank folders
SPEC = ModelSpec()


def _combos(*types):
    out = []
    for c in valid_combinations():
        if types and c.type not in types:
            continue
        marks = []
        module = FORMAT_MODULE.get(c.format)
        if module and importlib.util.find_spec(f"resilience.checkpoint.formats.{module}") is None:
            marks.append(pytest.mark.skip(reason=f"resilience/checkpoint/formats/{module}.py does not exist yet"))
        elif module:  # imported once here, not by every forked rank of every test
            try:
                importlib.import_module(f"resilience.checkpoint.formats.{module}")
            except Exception:  # broken: its own tests fail (in the ranks), the other combinations still run
                pass
        out.append(pytest.param(c, id=str(c).replace("/", "-"), marks=marks))
    return out


ALL = _combos()
LOCAL = _combos(CheckpointType.LOCAL)


def _is_local(combo) -> bool:
    return combo.type is CheckpointType.LOCAL


def _strip(fp: dict) -> dict:
    return {k: v for k, v in fp.items() if k not in TOPOLOGY_BOUND_KEYS}


# ---- rank functions (run on every rank) ------------------------------------------------------------
def _save(ctx, combo, spec, topo, root, iterations, keep_last=None, continue_steps=0, state=None):
    """Train to each iteration in turn and save it; fingerprints by iteration (and after more steps)."""
    state = state or TrainingState(spec, topo, ctx.rank)
    backend = ReferenceBackend(combo, keep_last=keep_last)
    fps = {}
    for it in iterations:
        state.train(it - state.iteration)
        backend.save(state, root)
        backend.finalize()
        fps[it] = fingerprint(state.sharded_state_dict())
    out = {"fps": fps}
    if continue_steps:
        state.train(continue_steps)
        out["continued"] = fingerprint(state.sharded_state_dict())
    return out


def _load_one(ctx, combo, spec, topo, root, strict=False, train_after=0):
    """Load into a fresh state: what it loaded and its fingerprint, or the error it raised."""
    state = TrainingState(spec, topo, ctx.rank)
    try:
        result = ReferenceBackend(combo, strict=strict).load(state, root)
    except Exception as e:
        return {
            "error": type(e).__name__,
            "message": str(e),
            "iteration": state.iteration,
            "fp": fingerprint(state.sharded_state_dict()),
        }
    out = {
        "iteration": result.iteration,
        "warnings": result.warnings,
        "rng_restored": result.rng_restored,
        "fp": fingerprint(state.sharded_state_dict()),
    }
    if train_after:
        state.train(train_after)
        out["after"] = fingerprint(state.sharded_state_dict())
    return out


def _load_many(ctx, combo, spec, topo, roots, stricts=(False, True)):
    """{name: {strict: outcome}} for every named root."""
    return {name: {s: _load_one(ctx, combo, spec, topo, root, s) for s in stricts} for name, root in roots.items()}


def _run(fn, topo, *args, **kwargs):
    return run_ranks(fn, topo.world, args=args, kwargs=kwargs, timeout=TIMEOUT)


def _agreed(outs: list[dict]) -> dict:
    """Every rank loaded the same iteration (or raised the same error); rank 0's outcome."""
    assert len({(o.get("iteration"), o.get("error")) for o in outs}) == 1, outs
    return outs[0]


@pytest.fixture(scope="module")
def cached(tmp_path_factory):
    """cached(name, combo, build): build(folder) once per run, shared by the xdist workers (a file lock:
    whichever worker comes first builds, the other reads its result)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    memo = {}

    def get(name, combo, build):
        key = f"cached-{name}-{combo}".replace("/", "-")
        if key not in memo:
            folder, done = shared / key, shared / f"{key}.pickle"
            with open(shared / f"{key}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if done.exists():
                    memo[key] = pickle.loads(done.read_bytes())
                else:
                    shutil.rmtree(folder, ignore_errors=True)  # what a failed build left
                    folder.mkdir()
                    memo[key] = build(str(folder))
                    done.write_bytes(pickle.dumps(memo[key]))
        return memo[key]

    return get


# ---- round trip -------------------------------------------------------------------------------------
def _round_trip(ctx, combo, spec, topo, root):
    saved = _save(ctx, combo, spec, topo, root, [2, 3], continue_steps=2)
    return saved, _load_one(ctx, combo, spec, topo, root, strict=True, train_after=2)


@pytest.mark.parametrize(
    "topo, spec",
    [
        (Topology(2, 1, 1), ModelSpec()),
        (Topology(1, 2, 1), ModelSpec()),
        (Topology(1, 1, 2), DISTOPT),
        (Topology(2, 1, 2), DISTOPT),
    ],
    ids=["tp2", "pp2", "dp2-distopt-bf16", "tp2dp2-distopt-bf16"],
)
@pytest.mark.parametrize("combo", ALL)
def test_round_trip_is_bit_exact(combo, topo, spec, tmp_path):
    results = _run(_round_trip, topo, combo, spec, topo, str(tmp_path))
    saved, loaded = results[0]
    assert "error" not in loaded, loaded
    assert {r[1]["iteration"] for r in results} == {3}
    assert loaded["fp"] == saved["fps"][3]  # model, optimizer, scheduler, data position, iteration, RNG
    assert loaded["rng_restored"]
    assert loaded["after"] == saved["continued"]  # training on ends as if it had never stopped
    assert loaded["warnings"] == []


# ---- topology changes (LEGACY and LOCAL; the DCP formats' transitions: test_dcp_formats.py) ------------
TRANSITIONS = [
    (Topology(1, 1, 2), Topology(1, 1, 1), SPEC),
    (Topology(1, 1, 2), Topology(1, 1, 1), DISTOPT),
    (Topology(1, 1, 1), Topology(1, 1, 2), DISTOPT),
    (Topology(2, 1, 1), Topology(1, 1, 2), SPEC),
    (Topology(1, 2, 1), Topology(1, 1, 2), SPEC),
    (Topology(2, 1, 1), Topology(1, 2, 1), SPEC),
]


def _save_then(ctx, combo, spec, topo, root):
    return _save(ctx, combo, spec, topo, root, [2], continue_steps=2)


@pytest.mark.parametrize(
    "save, load, spec", TRANSITIONS, ids=[f"{a}-{b}-{s.optimizer}-{s.dtype}" for a, b, s in TRANSITIONS]
)
@pytest.mark.parametrize("combo", _combos(CheckpointType.LEGACY, CheckpointType.LOCAL))
def test_topology_change(combo, save, load, spec, tmp_path):
    root = str(tmp_path)
    saved = _run(_save_then, save, combo, spec, save, root)[0]
    out = _agreed(_run(_load_one, load, combo, spec, load, root, train_after=2))
    changed = [d for d in ("tp", "pp", "dp") if getattr(save, d) != getattr(load, d)]
    allowed = changed == ["dp"] if combo.type is CheckpointType.LEGACY else not changed
    if allowed:  # LEGACY, dp only: the distributed optimizer's state is re-split
        assert "error" not in out, out
        assert out["iteration"] == 2 and out["rng_restored"]
        assert out["fp"] == saved["fps"][2]
        assert out["after"] == saved["continued"]
    else:
        assert out["error"] == "TopologyChangeRefused", out
        assert out["iteration"] == 0  # refused before anything was loaded
        if combo.type is CheckpointType.LEGACY:
            for d in (d for d in changed if d != "dp"):  # names the dimension that forbids it
                assert f"{d} {getattr(save, d)} -> {getattr(load, d)}" in out["message"]
        else:
            assert str(save) in out["message"] and str(load) in out["message"]
        assert "GLOBAL/torch_dist" in out["message"]  # says which combination would allow it


# ---- corrupting a checkpoint on disk ------------------------------------------------------------------
def _folders(root, combo, iteration):
    """The folders of one checkpoint: the global one, or every rank's."""
    name = f"iter_{iteration:07d}"
    if _is_local(combo):
        local = os.path.join(root, "local")
        return [
            os.path.join(local, r, name)
            for r in sorted(os.listdir(local))
            if os.path.isdir(os.path.join(local, r, name))
        ]
    return [os.path.join(root, name)]


def _tracker(root, combo):
    """The tracker a corruption hits: the global one, or the last rank's."""
    if _is_local(combo):
        local = os.path.join(root, "local")
        return os.path.join(local, sorted(os.listdir(local))[-1], "latest_checkpointed_iteration.txt")
    return os.path.join(root, "latest_checkpointed_iteration.txt")


def _manifest_doc(folder):
    with open(os.path.join(folder, "manifest.json")) as f:
        return json.load(f)


def _write_manifest(folder, doc, redigest=True):
    import xxhash

    if redigest:  # a consistent manifest: only the content check can catch what it says
        canonical = json.dumps(doc["body"], sort_keys=True, separators=(",", ":"))
        doc["digest"] = xxhash.xxh3_128_hexdigest(canonical.encode())
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump(doc, f)


def _data_file(folder):
    """The largest file the manifest lists."""
    files = _manifest_doc(folder)["body"]["files"]
    rel = max(sorted(files), key=lambda r: files[r]["size"])
    return os.path.join(folder, rel)


def _truncate(folder):
    path = _data_file(folder)
    os.truncate(path, os.path.getsize(path) // 2)
    return path, "size"


def _bit_flip(folder):
    path = _data_file(folder)
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x10]))
    return path, "checksum"


def _missing_file(folder):
    path = _data_file(folder)
    os.unlink(path)
    return path, "file present"


def _empty_file(folder):
    path = _data_file(folder)
    os.truncate(path, 0)
    return path, "size"


def _garbled_manifest(folder):
    path = os.path.join(folder, "manifest.json")
    with open(path, "r+b") as f:
        f.write(b"{\x00garbled")
    return path, "manifest parse"


def _edited_manifest(folder):
    doc = _manifest_doc(folder)
    rel = sorted(doc["body"]["files"])[0]
    doc["body"]["files"][rel]["size"] += 1
    _write_manifest(folder, doc, redigest=False)
    return os.path.join(folder, "manifest.json"), "manifest checksum"


def _manifest_nested(folder):
    path = os.path.join(folder, "manifest.json")
    with open(path, "w") as f:
        f.write("[" * 100_000)  # deeper than any JSON parser recurses
    return path, "manifest parse"


def _manifest_is_a_folder(folder):
    path = os.path.join(folder, "manifest.json")
    os.unlink(path)
    os.mkdir(path)
    return path, "manifest readable"


def _nonsense_topology(folder):
    doc = _manifest_doc(folder)
    doc["body"]["topology"] = {"tp": "two"}
    _write_manifest(folder, doc)  # digest matches: only the field check can catch it
    return os.path.join(folder, "manifest.json"), "manifest fields"


def _manifest_deleted(folder):
    path = os.path.join(folder, "manifest.json")
    os.unlink(path)
    return path, "manifest present"


def _escape(target):
    def corrupt(folder):
        doc = _manifest_doc(folder)
        doc["body"]["files"][target] = {"size": 1, "xxh3_128": "0" * 32}
        _write_manifest(folder, doc)
        return os.path.join(folder, "manifest.json"), "path safety"

    return corrupt


def _older_copied_over(folder):
    """The folder holds a complete, intact older checkpoint (an operator's copy, a bad sync)."""
    older = os.path.join(os.path.dirname(folder), "iter_0000002")
    shutil.rmtree(folder)
    shutil.copytree(older, folder)
    return folder, "iteration"


FILE_CORRUPTIONS = {
    "truncated": _truncate,
    "bit-flip": _bit_flip,
    "missing-file": _missing_file,
    "empty-file": _empty_file,
    "garbled-manifest": _garbled_manifest,
    "edited-manifest": _edited_manifest,
    "manifest-deleted": _manifest_deleted,
    "nested-manifest": _manifest_nested,
    "nonsense-topology": _nonsense_topology,
    "manifest-is-a-folder": _manifest_is_a_folder,
    "escape-relative": _escape("../x"),
    "escape-absolute": _escape("/etc/hostname"),
    "older-copied-over": _older_copied_over,
}
TRACKER_CORRUPTIONS = {
    "stale": b"2",
    "empty": b"",
    "non-numeric": b"four",
    "future": b"99",
    "missing": None,
    "a-folder": "folder",
}


def _corrupt_tracker(root, combo, kind):
    tracker = _tracker(root, combo)
    if TRACKER_CORRUPTIONS[kind] is None:
        os.unlink(tracker)
    elif TRACKER_CORRUPTIONS[kind] == "folder":
        os.unlink(tracker)
        os.mkdir(tracker)
    else:
        with open(tracker, "wb") as f:
            f.write(TRACKER_CORRUPTIONS[kind])
    return tracker, "tracker"


def _base(cached, combo):
    """Checkpoints at iterations 2 and 4 (on TOPO) and the fingerprints saved at each."""

    def build(root):
        return root, _run(_save, TOPO, combo, SPEC, TOPO, root, [2, 4])[0]["fps"]

    return cached("base", combo, build)


@pytest.fixture
def copy_of(cached, tmp_path):
    def get(combo):
        src, fps = _base(cached, combo)
        dst = str(tmp_path / "ckpt")
        shutil.copytree(src, dst)
        return dst, fps

    return get


def _integrity(cached, combo):
    """Every corruption on its own copy of the base checkpoints, all loaded (strict and not) in one job.
    {case: (outcomes of every rank, file, check)}, plus the base fingerprints."""

    def build(folder):
        src, fps = _base(cached, combo)
        roots, expect = {}, {}
        for case in [
            *FILE_CORRUPTIONS,
            *(f"tracker-{k}" for k in TRACKER_CORRUPTIONS),
            "all-corrupt",
            *(["missing-on-one-rank", "rank-folder-missing"] if _is_local(combo) else []),
        ]:
            root = roots[case] = os.path.join(folder, case)
            shutil.copytree(src, root)
            if case in FILE_CORRUPTIONS:  # LOCAL: only the last rank's part of iteration 4
                expect[case] = FILE_CORRUPTIONS[case](_folders(root, combo, 4)[-1])
            elif case.startswith("tracker-"):
                expect[case] = _corrupt_tracker(root, combo, case.removeprefix("tracker-"))
            elif case == "all-corrupt":
                expect[case] = (_bit_flip(_folders(root, combo, 4)[-1])[0], _truncate(_folders(root, combo, 2)[0])[0])
            elif case == "missing-on-one-rank":
                shutil.rmtree(_folders(root, combo, 4)[-1])
            else:
                shutil.rmtree(os.path.dirname(_folders(root, combo, 4)[-1]))
        results = _run(_load_many, TOPO, combo, SPEC, TOPO, roots)
        return {case: ([r[case] for r in results], expect.get(case)) for case in roots}, fps

    return cached("integrity", combo, build)


@pytest.mark.parametrize("case", list(FILE_CORRUPTIONS))
@pytest.mark.parametrize("combo", ALL)
def test_corruption_is_detected_and_the_loader_falls_back(combo, case, cached):
    cases, fps = _integrity(cached, combo)
    outs, (path, check) = cases[case]

    out = _agreed([o[False] for o in outs])
    assert "error" not in out, out
    assert out["iteration"] == 2
    assert out["fp"] == fps[2]  # the older checkpoint's values exactly: never wrong values
    assert any(path in w and f"{check} failed" in w for w in out["warnings"]), out["warnings"]

    strict = _agreed([o[True] for o in outs])
    assert strict["error"] == "IntegrityError", strict
    assert path in strict["message"] and f"{check} failed" in strict["message"]
    assert strict["iteration"] == 0 and strict["fp"] != fps[2]  # nothing loaded


@pytest.mark.parametrize("kind", list(TRACKER_CORRUPTIONS))
@pytest.mark.parametrize("combo", ALL)
def test_bad_tracker_is_reported_and_the_folders_win(combo, kind, cached):
    cases, fps = _integrity(cached, combo)
    outs, (tracker, _) = cases[f"tracker-{kind}"]

    out = _agreed([o[False] for o in outs])
    assert "error" not in out, out
    assert out["iteration"] == 4 and out["fp"] == fps[4]  # the newest complete, verified checkpoint
    assert any(tracker in w and "tracker failed" in w for w in out["warnings"]), out["warnings"]

    strict = _agreed([o[True] for o in outs])
    assert strict["error"] == "IntegrityError" and tracker in strict["message"], strict


@pytest.mark.parametrize("combo", ALL)
def test_every_checkpoint_corrupt_is_not_found_with_every_problem(combo, cached):
    cases, _ = _integrity(cached, combo)
    outs, (p4, p2) = cases["all-corrupt"]
    out = _agreed([o[False] for o in outs])
    assert out["error"] == "CheckpointNotFound", out
    assert p4 in out["message"] and p2 in out["message"]
    assert out["iteration"] == 0


@pytest.mark.parametrize("combo", LOCAL)
def test_local_checkpoint_missing_on_one_rank_is_not_used(combo, cached):
    cases, fps = _integrity(cached, combo)
    outs, _ = cases["missing-on-one-rank"]
    out = _agreed([o[False] for o in outs])
    assert out["iteration"] == 2 and out["fp"] == fps[2]
    assert any("iteration 4 is not present and valid on every rank" in w for w in out["warnings"])
    assert _agreed([o[True] for o in outs])["error"] == "IntegrityError"


@pytest.mark.parametrize("combo", LOCAL)
def test_local_rank_folder_missing_entirely_is_not_found(combo, cached):
    cases, _ = _integrity(cached, combo)
    outs, _ = cases["rank-folder-missing"]
    assert _agreed([o[False] for o in outs])["error"] == "CheckpointNotFound"


# ---- re-save, failed saves, retention ----------------------------------------------------------------
RESAVE_FAILURES = {None: "b", "write": "a", "manifest": "a", "commit_rename": "a", "tracker_update": "b"}


def _resave(ctx, combo, spec, topo, folder):
    """Per failure phase, in its own root: save iteration 2 (A), change the state, save iteration 2 again
    (B) failing at that phase, then load. Before the swap the old one must load whole; after it, the new."""
    out = {}
    for phase in RESAVE_FAILURES:
        root = os.path.join(folder, str(phase))
        state = TrainingState(spec, topo, ctx.rank)
        backend = ReferenceBackend(combo)
        state.train(2)
        backend.save(state, root)
        backend.finalize()
        a = fingerprint(state.sharded_state_dict())
        state.train(1)
        state.iteration = 2  # same iteration, different content
        b = fingerprint(state.sharded_state_dict())

        def fail(reached, info, phase=phase):
            if reached == phase:
                raise OSError(f"injected failure at {reached}")

        remove = phases.listen(fail)
        error = None
        try:
            backend.save(state, root)
            backend.finalize()
        except Exception as e:
            error = type(e).__name__
        finally:
            remove()
        out[phase] = {"a": a, "b": b, "error": error, "load": _load_one(ctx, combo, spec, topo, root, strict=True)}
    return out


def _resaved(cached, combo):
    return cached("resave", combo, lambda folder: (folder, _run(_resave, TOPO, combo, SPEC, TOPO, folder)))


@pytest.mark.parametrize("combo", ALL)
def test_resave_of_an_existing_iteration_replaces_it_whole(combo, cached):
    folder, results = _resaved(cached, combo)
    got = results[0][None]
    assert got["error"] is None and got["a"] != got["b"]
    out = _agreed([r[None]["load"] for r in results])
    assert out["iteration"] == 2 and out["fp"] == got["b"] and out["warnings"] == []
    root = os.path.join(folder, "None")
    leftovers = [d for dirpath, dirs, _ in os.walk(root) for d in dirs if d.startswith(".staging-")]
    assert leftovers == []
    for f in _folders(root, combo, 2):
        names = sorted(d for d in os.listdir(os.path.dirname(f)) if d.startswith("iter_"))
        if _is_local(combo):  # no collective: another rank may hold only the replaced copy, so it is kept
            assert names[0] == "iter_0000002" and len(names) == 2
            assert names[1].startswith("iter_0000002.replaced-"), names
        else:
            assert names == ["iter_0000002"]


@pytest.mark.parametrize("phase", [p for p in RESAVE_FAILURES if p])
@pytest.mark.parametrize("combo", ALL)
def test_failed_resave_never_tears_the_existing_checkpoint(combo, phase, cached):
    _, results = _resaved(cached, combo)
    got = results[0][phase]
    assert got["error"] is not None
    out = _agreed([r[phase]["load"] for r in results])
    assert "error" not in out, out
    assert out["iteration"] == 2
    assert out["fp"] == got[RESAVE_FAILURES[phase]]  # before the swap the old one whole; after it the new one


def _retention(ctx, combo, spec, topo, root):
    saved = _save(ctx, combo, spec, topo, root, [1, 2, 3, 4], keep_last=2)
    return saved["fps"], _load_one(ctx, combo, spec, topo, root, strict=True)


@pytest.mark.parametrize("combo", ALL)
def test_retention_keeps_the_last_k_and_cleans_stale_staging(combo, tmp_path):
    root = str(tmp_path)
    roots = [os.path.join(root, "local", f"rank_{r:05d}") for r in range(TOPO.world)] if _is_local(combo) else [root]
    for r in roots:  # what a crashed save leaves behind
        os.makedirs(os.path.join(r, ".staging-iter_0000009-deadbeef", "mp_rank_00"))
    results = _run(_retention, TOPO, combo, SPEC, TOPO, root)
    fps, _ = results[0]
    # LOCAL keeps one more: the newest checkpoint every rank has may be the one before this rank's newest
    kept = ["iter_0000002"] * _is_local(combo) + ["iter_0000003", "iter_0000004"]
    for r in roots:
        assert sorted(n for n in os.listdir(r) if not n.endswith(".txt")) == kept
    out = _agreed([r[1] for r in results])
    assert out["iteration"] == 4 and out["fp"] == fps[4]


def _resume_and_save(ctx, combo, spec, topo, root, keep_last):
    """Resume (falling back past a corrupt newest checkpoint), train one step, save with retention, load."""
    state = TrainingState(spec, topo, ctx.rank)
    loaded = ReferenceBackend(combo).load(state, root).iteration
    saved = _save(ctx, combo, spec, topo, root, [state.iteration + 1], keep_last=keep_last, state=state)
    return {"loaded": loaded, "saved": saved["fps"], "load": _load_one(ctx, combo, spec, topo, root)}


@pytest.mark.parametrize("combo", ALL)
def test_retention_never_deletes_the_newest_valid_checkpoint(combo, copy_of):
    root, fps = copy_of(combo)
    _bit_flip(_folders(root, combo, 4)[-1])
    results = _run(_resume_and_save, TOPO, combo, SPEC, TOPO, root, 1)
    got = results[0]
    assert got["loaded"] == 2 and list(got["saved"]) == [3]
    assert _folders(root, combo, 3)
    out = _agreed([r["load"] for r in results])
    assert out["iteration"] == 3 and out["fp"] == got["saved"][3]


class _DiskFull:
    """The storage seam of a rank whose disk is full: every file open for writing fails."""

    def __init__(self, inner):
        self.inner = inner

    def open_write(self, path, *, sync=True):
        raise OSError(errno.ENOSPC, "injected: no space left on device", path)

    def __getattr__(self, name):
        return getattr(self.inner, name)


FAIL_HOW = ("phase", "disk-full")


def _save_fails_on_last_rank(ctx, combo, spec, topo, folder, keep_last):
    """Per way of failing, in its own root: save 2, then save 4 failing on the last rank only, then load."""
    out = {}
    for how in FAIL_HOW:
        root = os.path.join(folder, how)
        state = TrainingState(spec, topo, ctx.rank)
        backend = ReferenceBackend(combo, keep_last=keep_last)
        state.train(2)
        backend.save(state, root)
        backend.finalize()
        fp2 = fingerprint(state.sharded_state_dict())
        state.train(2)
        last = ctx.rank == ctx.world - 1

        def fail(phase, info):
            if phase == "write" and last:  # noqa: B023 (called within this iteration)
                raise OSError("injected: failure on the last rank as it starts writing")

        remove = phases.listen(fail) if how == "phase" else lambda: None
        fs = _DiskFull(storage.current()) if how == "disk-full" and last else storage.current()
        error = None
        try:
            with storage.use(fs):
                backend.save(state, root)
                backend.finalize()
        except (RankFailure, AsyncSaveFailed) as e:
            error = str(e)
        finally:
            remove()
        out[how] = {"fp2": fp2, "error": error, "load": _load_one(ctx, combo, spec, topo, root)}
    return out


@pytest.mark.parametrize("how", FAIL_HOW)
@pytest.mark.parametrize("combo", ALL)
def test_a_save_failing_on_one_rank_keeps_the_previous_checkpoint_loadable(combo, how, cached):
    # keep_last=1: the rank(s) that did commit must not delete the only checkpoint every rank has
    results = cached(
        "fail-one-rank", combo, lambda folder: _run(_save_fails_on_last_rank, TOPO, combo, SPEC, TOPO, folder, 1)
    )
    assert results[-1][how]["error"] is not None
    out = _agreed([r[how]["load"] for r in results])
    assert "error" not in out, out
    assert out["iteration"] == 2 and out["fp"] == results[0][how]["fp2"]


# ---- resilience inspect --------------------------------------------------------------------------
def _inspect(capsys, *args):
    code = main(["inspect", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("combo", ALL)
def test_inspect_good_folder(combo, copy_of, capsys):
    root, _ = copy_of(combo)
    code, out, err = _inspect(capsys, root)
    assert code == 0 and err == ""
    assert str(combo) in out and str(TOPO) in out and "OK: the newest" in out

    code, out, _ = _inspect(capsys, root, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["ok"] is True
    assert [c["iteration"] for c in doc["checkpoints"]] == [4, 2]
    for c in doc["checkpoints"]:
        assert c["combination"] == str(combo) and c["topology"] == TOPO.to_dict()
        assert c["complete"] and c["verified"] and c["loadable"] and c["problems"] == []
        assert c["layout"] == ("local" if _is_local(combo) else "global")
    assert all(t["problem"] is None for t in doc["trackers"]) and doc["staging"] == []


@pytest.mark.parametrize("case", ["bit-flip", "truncated", "missing-file", "manifest-deleted", "escape-relative"])
@pytest.mark.parametrize("combo", ALL)
def test_inspect_names_the_file_and_check_and_fails_when_the_newest_is_broken(combo, case, copy_of, capsys):
    root, _ = copy_of(combo)
    path, check = FILE_CORRUPTIONS[case](_folders(root, combo, 4)[-1])
    code, out, _ = _inspect(capsys, root)
    assert code == 1
    assert os.path.relpath(path, root) in out and f"{check} failed" in out
    assert "NOT LOADABLE" in out and "falls back to iteration 2" in out

    code, out, _ = _inspect(capsys, root, "--json")
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False
    newest, older = doc["checkpoints"]
    assert newest["iteration"] == 4 and not newest["loadable"] and older["loadable"]
    assert {"path": path, "check": check} in [{"path": p["path"], "check": p["check"]} for p in newest["problems"]]
    assert newest["complete"] is (check != "manifest present")


@pytest.mark.parametrize("combo", ALL)
def test_inspect_older_broken_newest_fine_exits_zero(combo, copy_of, capsys):
    root, _ = copy_of(combo)
    path, _ = _bit_flip(_folders(root, combo, 2)[0])
    code, out, _ = _inspect(capsys, root)
    assert code == 0 and os.path.relpath(path, root) in out and "checksum failed" in out


@pytest.mark.parametrize("combo", ALL)
def test_inspect_reports_tracker_and_staging_leftovers(combo, copy_of, capsys):
    root, _ = copy_of(combo)
    tracker, _ = _corrupt_tracker(root, combo, "stale")
    leftover = os.path.join(os.path.dirname(tracker), ".staging-iter_0000006-0badc0de")
    os.makedirs(leftover)
    code, out, _ = _inspect(capsys, root)
    assert code == 0
    assert "stale" in out and os.path.relpath(leftover, root) in out
    doc = json.loads(_inspect(capsys, root, "--json")[1])
    assert doc["staging"] == [leftover]
    bad = [t for t in doc["trackers"] if t["problem"]]
    assert [t["path"] for t in bad] == [tracker] and bad[0]["iteration"] == 2


@pytest.mark.parametrize("combo", LOCAL)
def test_inspect_local_missing_on_one_rank(combo, copy_of, capsys):
    root, _ = copy_of(combo)
    shutil.rmtree(_folders(root, combo, 4)[-1])
    code, out, _ = _inspect(capsys, root)
    assert code == 1 and "present on every rank failed" in out and "falls back to iteration 2" in out


@pytest.mark.parametrize("make", ["missing", "empty", "file", "staging-only", "a-checkpoint-itself"])
def test_inspect_without_a_checkpoint_is_one_clear_error(make, tmp_path, capsys):
    target = tmp_path / "ckpt"
    if make == "empty":
        target.mkdir()
    elif make == "file":
        target.write_text("not a folder")
    elif make == "staging-only":
        (target / ".staging-iter_0000002-12345678").mkdir(parents=True)
    elif make == "a-checkpoint-itself":
        target.mkdir()
        (target / "manifest.json").write_text("{}")
    code, out, err = _inspect(capsys, str(target))
    assert code == 2 and out == ""
    assert err.startswith("resilience inspect: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert str(target) in err


@pytest.mark.parametrize("combo", _combos(CheckpointType.LEGACY))
def test_inspect_command_exit_status(combo, copy_of):
    root, _ = copy_of(combo)
    _bit_flip(_folders(root, combo, 4)[-1])
    done = subprocess.run(
        [sys.executable, "-m", "resilience.cli", "inspect", root, "--json"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1 and json.loads(done.stdout)["ok"] is False and "Traceback" not in done.stderr
