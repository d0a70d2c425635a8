"""GLOBAL/torch_dist checks that sit inside DCP's own steps: a failure on any rank reaches every rank."""

import json
import os

import pytest

import resilience.checkpoint.formats.torch_dist  # noqa: F401  imported before forking: ranks skip the imports
from resilience.checkpoint import ReferenceBackend
from resilience.checkpoint.formats.base import RankInfo
from resilience.checkpoint.formats.torch_dist import METADATA_JSON, TorchDistFormat
from resilience.checkpoint.manifest import Manifest, file_digest
from resilience.errors import CheckpointNotFound
from resilience.launch import run_ranks
from resilience.state import ModelSpec, Topology, TrainingState
from resilience.state.sharding import ShardedTensor
from resilience.vocab.combos import Combination

pytestmark = pytest.mark.multiprocess

COMBO = Combination.parse("GLOBAL/torch_dist/sync")
SPEC = ModelSpec(num_layers=2, hidden=16, ffn_hidden=32, heads=2, vocab=37)
TOPO = Topology(2, 1, 1)


def _save(ctx, root):
    state = TrainingState(SPEC, TOPO, ctx.rank)
    state.train(1)
    ReferenceBackend(COMBO).save(state, root)


def _load(ctx, root):
    try:
        ReferenceBackend(COMBO).load(TrainingState(SPEC, TOPO, ctx.rank), root)
    except CheckpointNotFound as e:
        return str(e)
    return None


def test_metadata_json_naming_another_backend_is_refused_on_every_rank(tmp_path):
    root = str(tmp_path)
    run_ranks(_save, TOPO.world, args=(root,), timeout=90)
    folder = os.path.join(root, "iter_0000001")
    with open(os.path.join(folder, METADATA_JSON), "w") as f:
        json.dump({"sharded_backend": "zarr", "sharded_backend_version": 1}, f)
    # the manifest vouches for the changed file, so only the format's own check stands in the way
    manifest = Manifest.read(folder)
    size, digest = file_digest(os.path.join(folder, METADATA_JSON))
    manifest.files[METADATA_JSON] = {"size": size, "xxh3_128": digest}
    manifest.write(folder)
    errors = run_ranks(_load, TOPO.world, args=(root,), timeout=90)
    assert all(e is not None and "sharded_backend" in e and "expected torch_dist" in e for e in errors), errors


def _write_overlapping(ctx, folder):
    """Rank 1 claims rank 0's half of a tp-split tensor: two pieces write the same elements."""
    state = TrainingState(SPEC, TOPO, ctx.rank)
    records = state.sharded_state_dict()
    if ctx.rank == 1:
        r = next(r for r in records if isinstance(r, ShardedTensor) and r.global_offset[0] > 0)
        r.global_offset = (0,) + tuple(r.global_offset[1:])
    info = RankInfo(ctx.rank, ctx.world, TOPO, state.coords, SPEC, COMBO)
    try:
        TorchDistFormat().write(info, records, folder)
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return None


def test_pieces_writing_the_same_elements_fail_the_write_on_every_rank_before_any_data(tmp_path):
    errors = run_ranks(_write_overlapping, TOPO.world, args=(str(tmp_path),), timeout=90)
    assert all(e is not None and "ShardingIntegrityError" in e and "same elements" in e for e in errors), errors
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".distcp")]
