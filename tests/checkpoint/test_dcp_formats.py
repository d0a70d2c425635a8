"""GLOBAL/torch_dist and TORCH_DCP/torch_dcp on real ranks: round trips, tp / pp / dp and combined
changes (padded vocabulary, bf16, distributed optimizer), RNG restored only on the same (pp, tp) grid,
async write failures raised at finalize, what lands on disk, and Hypothesis-drawn topology pairs."""

import errno
import os
from math import prod

import pytest
import torch
import torch.distributed.checkpoint as dcp
from hypothesis import given, settings, strategies as st

import resilience.checkpoint.formats.torch_dcp  # noqa: F401  imported before forking: ranks skip the imports
import resilience.checkpoint.formats.torch_dist  # noqa: F401
from resilience import storage
from resilience.broken import make_broken
from resilience.checkpoint import ReferenceBackend
from resilience.checkpoint.formats.torch_dist import BACKEND, METADATA_JSON
from resilience.checkpoint.manifest import Manifest
from resilience.errors import AsyncSaveFailed
from resilience.launch import run_ranks
from resilience.state import TOPOLOGY_BOUND_KEYS, ModelSpec, Topology, TrainingState, combine, fingerprint
from resilience.storage.dcp import SeamFileSystem, SeamReader, SeamWriter
from resilience.vocab.combos import Combination

pytestmark = pytest.mark.multiprocess

TIMEOUT = 90
DIST, DIST_ASYNC = "GLOBAL/torch_dist/sync", "GLOBAL/torch_dist/async"
DCP, DCP_ASYNC = "TORCH_DCP/torch_dcp/sync", "TORCH_DCP/torch_dcp/async"
# vocab 37 pads to 40 on tp1, 48 on tp2, 64 on tp4: every tp change changes the padded shape
SPEC = ModelSpec(num_layers=4, hidden=16, ffn_hidden=32, heads=4, vocab=37)
DISTOPT_BF16 = ModelSpec(
    num_layers=4, hidden=16, ffn_hidden=32, heads=4, vocab=37, dtype="bf16", optimizer="distributed"
)
SAVED_AT, MORE = 3, 2


def _ids(combo: str) -> str:
    return combo.replace("/", "-")


# ---- rank functions ----------------------------------------------------------------------------------
def _fps(state: TrainingState) -> tuple[str, str]:
    digests = fingerprint(state.sharded_state_dict())
    return combine(digests, TOPOLOGY_BOUND_KEYS), combine(digests)


def _save(ctx, combo, spec, topo, root):
    """Save at SAVED_AT - 1 and SAVED_AT (an async save in flight is finalized by the next one), then
    keep training: the state a resumed run must reach."""
    state = TrainingState(spec, topo, ctx.rank)
    backend = ReferenceBackend(Combination.parse(combo))
    state.train(SAVED_AT - 1)
    backend.save(state, root)
    state.train(1)
    backend.save(state, root)
    backend.finalize()
    saved = _fps(state)
    state.train(MORE)
    return {"saved": saved, "continued": _fps(state)[0]}


def _padding(state: TrainingState) -> list[torch.Tensor]:
    """Views of the padding rows of every vocab-parallel piece (not in any fingerprint)."""
    out = []
    for r in state.sharded_state_dict():
        if getattr(r, "logical_shape", None):
            out.append(r.data[max(0, r.logical_shape[0] - r.global_offset[0]) :])
    return out


def _load(ctx, combo, spec, topo, root):
    state = TrainingState(spec, topo, ctx.rank)
    for rows in _padding(state):
        rows.fill_(7.0)  # a loader must zero the padding, not trust the buffer
    result = ReferenceBackend(Combination.parse(combo)).load(state, root)
    loaded = _fps(state)
    padding_zero = all(bool((rows == 0).all()) for rows in _padding(state))
    state.train(MORE)
    return {
        "loaded": loaded,
        "iteration": result.iteration,
        "rng_restored": result.rng_restored,
        "warnings": result.warnings,
        "continued": _fps(state)[0],
        "padding_zero": padding_zero,
    }


def _transition(combo, spec, save_topo, load_topo, root, load_combo=None):
    saved = run_ranks(_save, save_topo.world, args=(combo, spec, save_topo, root), timeout=TIMEOUT)[0]
    loaded = run_ranks(_load, load_topo.world, args=(load_combo or combo, spec, load_topo, root), timeout=TIMEOUT)[0]
    assert loaded["iteration"] == SAVED_AT
    assert loaded["warnings"] == []
    assert loaded["padding_zero"], "padding rows of the vocabulary are not zero"
    assert loaded["loaded"][0] == saved["saved"][0], "model, optimizer, scheduler, data or iteration differ"
    assert loaded["continued"] == saved["continued"], "training after the resume diverged"
    same_grid = (save_topo.tp, save_topo.pp) == (load_topo.tp, load_topo.pp)
    assert loaded["rng_restored"] == same_grid
    if same_grid:
        assert loaded["loaded"][1] == saved["saved"][1], "RNG state differs"


# ---- round trips and topology changes -------------------------------------------------------------------
@pytest.mark.parametrize("combo", [DIST, DIST_ASYNC, DCP, DCP_ASYNC], ids=_ids)
@pytest.mark.parametrize("topo", ["tp1pp1dp1", "tp2pp1dp2", "tp1pp2dp2", "tp2pp2dp1"])
def test_round_trip_bit_exact(combo, topo, tmp_path):
    topo = Topology.parse(topo)
    _transition(combo, SPEC, topo, topo, str(tmp_path))


CHANGES = [
    # (save, load, spec): what changes
    ("tp2pp1dp1", "tp1pp1dp1", SPEC),  # tp shrinks, padded vocab 48 -> 40
    ("tp1pp1dp2", "tp4pp1dp1", DISTOPT_BF16),  # tp grows, padded vocab 40 -> 64, dist-opt dp 2 -> 1
    ("tp1pp1dp1", "tp1pp2dp1", SPEC),  # pp grows
    ("tp1pp4dp1", "tp2pp1dp1", DISTOPT_BF16),  # pp and tp
    ("tp2pp1dp1", "tp2pp1dp2", DISTOPT_BF16),  # dp only: RNG is restored
    ("tp1pp1dp3", "tp1pp1dp2", DISTOPT_BF16),  # dp 3 -> 2: optimizer rows re-split unevenly
    ("tp2pp2dp1", "tp1pp1dp3", SPEC),  # everything
    ("tp1pp2dp2", "tp2pp1dp2", DISTOPT_BF16),  # everything, with the distributed optimizer on both sides
]


@pytest.mark.parametrize("combo", [DIST, DCP], ids=_ids)
@pytest.mark.parametrize("save,load,spec", CHANGES, ids=[f"{a}->{b}-{s.dtype}-{s.optimizer}" for a, b, s in CHANGES])
def test_topology_change_loads_bit_exact(combo, save, load, spec, tmp_path):
    _transition(combo, spec, Topology.parse(save), Topology.parse(load), str(tmp_path))


@pytest.mark.parametrize(
    "saved_with,loaded_with",
    [(DIST_ASYNC, DIST), (DCP, DCP_ASYNC)],
    ids=["torch_dist-async-to-sync", "torch_dcp-sync-to-async"],
)
def test_sync_and_async_read_each_other(saved_with, loaded_with, tmp_path):
    _transition(saved_with, DISTOPT_BF16, Topology(2, 1, 2), Topology(1, 2, 1), str(tmp_path), loaded_with)


TOPOLOGIES = [Topology(tp, pp, dp) for tp in (1, 2, 4) for pp in (1, 2, 4) for dp in (1, 2, 3, 4) if tp * pp * dp <= 4]


@settings(max_examples=8, deadline=None)
@given(
    combo=st.sampled_from([DIST, DCP, DIST_ASYNC, DCP_ASYNC]),
    save=st.sampled_from(TOPOLOGIES),
    load=st.sampled_from(TOPOLOGIES),
    spec=st.sampled_from([SPEC, DISTOPT_BF16]),
)
def test_any_transition_loads_bit_exact(combo, save, load, spec, tmp_path_factory):
    _transition(combo, spec, save, load, str(tmp_path_factory.mktemp("ckpt")))


# ---- training while an async save is in flight -----------------------------------------------------------
def _train_while_writing(ctx, combo, broken, root):
    """Save, train at once (the writer has copied little or nothing yet), then finalize."""
    state = TrainingState(DISTOPT_BF16, Topology(2, 1, 2), ctx.rank)
    backend = make_broken(broken, Combination.parse(combo)) if broken else ReferenceBackend(Combination.parse(combo))
    state.train(SAVED_AT)
    saved = _fps(state)[0]
    backend.save(state, root)
    state.train(MORE)
    backend.finalize()
    return saved


@pytest.mark.parametrize("combo", [DIST_ASYNC, DCP_ASYNC], ids=_ids)
@pytest.mark.parametrize("broken", [None, "async_no_snapshot"], ids=["reference", "broken-no-snapshot"])
def test_training_during_an_async_save_does_not_reach_it(combo, broken, tmp_path):
    saved = run_ranks(_train_while_writing, 4, args=(combo, broken, str(tmp_path)), timeout=TIMEOUT)[0]
    loaded = run_ranks(_load, 4, args=(combo, DISTOPT_BF16, Topology(2, 1, 2), str(tmp_path)), timeout=TIMEOUT)[0]
    assert loaded["iteration"] == SAVED_AT
    if broken:  # the check can fail: without a snapshot the checkpoint holds later values
        assert loaded["loaded"][0] != saved
    else:
        assert loaded["loaded"][0] == saved


# ---- async failure -------------------------------------------------------------------------------------
class _NoSpaceForShards:
    """Storage whose writes of DCP data files fail on one rank, as a full disk would."""

    def __init__(self, inner, rank: int, failing_rank: int):
        self.inner, self.fail = inner, rank == failing_rank

    def open_write(self, path, *, sync=True):
        if self.fail and path.endswith(".distcp"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return self.inner.open_write(path, sync=sync)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _save_then_fail(ctx, combo, root):
    state = TrainingState(SPEC, Topology(2, 1, 1), ctx.rank)
    backend = ReferenceBackend(Combination.parse(combo))
    state.train(SAVED_AT)
    backend.save(state, root)
    backend.finalize()
    good = _fps(state)[0]
    state.train(1)
    with storage.use(_NoSpaceForShards(storage.current(), ctx.rank, failing_rank=1)):
        backend.save(state, root)  # returns once staged; the write fails in the background
        try:
            backend.finalize()
            raised = None
        except AsyncSaveFailed as e:
            raised = str(e)
    return {"good": good, "raised": raised, "in_flight": backend.in_flight}


@pytest.mark.parametrize("combo", [DIST_ASYNC, DCP_ASYNC], ids=_ids)
def test_async_write_failure_is_raised_at_finalize(combo, tmp_path):
    results = run_ranks(_save_then_fail, 2, args=(combo, str(tmp_path)), timeout=TIMEOUT)
    for r in results:  # every rank hears of it, and it names the failed rank and the cause
        assert r["raised"] is not None and "No space left on device" in r["raised"]
        assert not r["in_flight"]
    assert not (tmp_path / f"iter_{SAVED_AT + 1:07d}").exists()
    loaded = run_ranks(_load, 2, args=(combo, SPEC, Topology(2, 1, 1), str(tmp_path)), timeout=TIMEOUT)[0]
    assert loaded["iteration"] == SAVED_AT and loaded["loaded"][0] == results[0]["good"]


# ---- what lands on disk -----------------------------------------------------------------------------------
def _only_save(ctx, combo, spec, topo, root):
    state = TrainingState(spec, topo, ctx.rank)
    state.train(1)
    backend = ReferenceBackend(Combination.parse(combo))
    backend.save(state, root)
    backend.finalize()


def _saved(combo, spec, topo, root):
    run_ranks(_only_save, topo.world, args=(combo, spec, topo, root), timeout=TIMEOUT)
    folder = os.path.join(root, "iter_0000001")
    return folder, SeamReader(folder).read_metadata().state_dict_metadata


def test_torch_dist_writes_each_element_once_at_logical_shape(tmp_path):
    folder, metadata = _saved(DIST, DISTOPT_BF16, Topology(2, 1, 2), str(tmp_path))
    with open(os.path.join(folder, METADATA_JSON)) as f:
        assert f.read() == '{"sharded_backend": "torch_dist", "sharded_backend_version": 1}'
    assert BACKEND["sharded_backend"] == "torch_dist"
    embedding = metadata["model.embedding.word_embeddings.weight"]
    assert tuple(embedding.size) == (37, 16)  # no padding rows: the same shape on every tp
    assert embedding.properties.dtype == torch.bfloat16
    for key, md in metadata.items():
        if hasattr(md, "chunks"):  # chunks tile the tensor: each element written exactly once
            assert sum(prod(c.sizes) for c in md.chunks) == prod(md.size), key
    assert "rng/shard_0.1_1.2" in metadata and "iteration/shard_0_1" in metadata
    manifest = Manifest.read(folder)
    assert {".metadata", METADATA_JSON} <= set(manifest.files) and ".metadata.tmp" not in manifest.files
    assert {f for f in os.listdir(folder) if f.endswith(".distcp")} == {f"__{r}_0.distcp" for r in range(4)}


def test_torch_dcp_is_a_nested_state_with_padded_shapes(tmp_path):
    folder, metadata = _saved(DCP, DISTOPT_BF16, Topology(2, 1, 2), str(tmp_path))
    assert tuple(metadata["model.embedding.word_embeddings.weight"].size) == (48, 16)  # padded for tp2
    assert tuple(metadata["optimizer.exp_avg.output_layer.weight"].size) == (48, 16)  # gathered over dp
    assert {
        "iteration",
        "optimizer.step",
        "scheduler.num_steps",
        "data.consumed_samples",
        "rng.pp0_tp0",
        "rng.pp0_tp1",
    } <= set(metadata)
    assert not os.path.exists(os.path.join(folder, METADATA_JSON))  # Megatron reads .metadata alone as torch_dcp
    assert ".metadata" in Manifest.read(folder).files


def _read_with_one_rank_asking_more(ctx, spec, topo, folder):
    """TorchDcpFormat.read on every rank; rank 1 also asks for a tensor the checkpoint does not hold."""
    from resilience.checkpoint.formats.base import RankInfo
    from resilience.checkpoint.formats.torch_dcp import TorchDcpFormat
    from resilience.errors import RankFailure
    from resilience.state.sharding import ShardedTensor

    state = TrainingState(spec, topo, ctx.rank)
    records = state.sharded_state_dict()
    if ctx.rank == 1:
        records.append(ShardedTensor("model.not_saved", torch.zeros(2), (2,), (0,)))
    info = RankInfo(ctx.rank, topo.world, topo, state.coords, spec, Combination.parse(DCP), None, state.groups.dp_group)
    try:
        TorchDcpFormat().read(info, records, folder, Manifest.read(folder))
    except RankFailure as e:
        return {"failures": sorted(e.failures), "message": str(e)}
    return None


def test_torch_dcp_a_target_one_rank_cannot_make_fails_every_rank(tmp_path):
    # targets are made inside DCP's planning step: its error reaches every rank, none waits for the others
    topo = Topology(2, 1, 1)
    folder, _ = _saved(DCP, SPEC, topo, str(tmp_path))
    outs = run_ranks(_read_with_one_rank_asking_more, topo.world, args=(SPEC, topo, folder), timeout=TIMEOUT)
    for out in outs:
        assert out is not None and out["failures"] == [1]
        assert "the checkpoint has no 'model.not_saved'" in out["message"]


# ---- the storage seam -------------------------------------------------------------------------------------
class _Recorder:
    def __init__(self, inner):
        self.inner, self.ops, self.streams = inner, [], []

    def open_write(self, path, *, sync=True):
        self.ops.append(("write", os.path.basename(path), sync))
        stream = self.inner.open_write(path, sync=sync)
        self.streams.append(stream)
        return stream

    def open_read(self, path):
        self.ops.append(("read", os.path.basename(path)))
        return self.inner.open_read(path)

    def rename(self, src, dst):
        self.ops.append(("rename", os.path.basename(src), os.path.basename(dst)))
        self.inner.rename(src, dst)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_seam_carries_every_dcp_file_operation(tmp_path):
    rec = _Recorder(storage.current())
    with storage.use(rec):
        dcp.save({"w": torch.arange(6.0)}, storage_writer=SeamWriter(str(tmp_path)), no_dist=True)
        out = {"w": torch.zeros(6)}
        dcp.load(out, storage_reader=SeamReader(str(tmp_path)), no_dist=True)
    assert torch.equal(out["w"], torch.arange(6.0))
    assert ("write", "__0_0.distcp", True) in rec.ops and ("write", ".metadata.tmp", True) in rec.ops
    assert ("rename", ".metadata.tmp", ".metadata") in rec.ops
    assert ("read", ".metadata") in rec.ops and ("read", "__0_0.distcp") in rec.ops
    # the streams' records follow the rename and match what is on disk
    from resilience.checkpoint.manifest import file_digest

    for s in rec.streams:
        assert os.path.exists(s.path) and file_digest(s.path) == (s.size, s.digest)


class _Unpicklable(Exception):
    def __init__(self, path, why):
        super().__init__(f"{path}: {why}")


def test_seam_errors_survive_the_trip_to_the_coordinator(tmp_path):
    class Broken:
        def mkdir(self, path):
            raise _Unpicklable(path, "injected")

    with storage.use(Broken()):
        with pytest.raises(OSError, match="injected"):
            SeamFileSystem().mkdir(str(tmp_path / "x"))
