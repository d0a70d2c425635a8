"""The reference on a real S3 server (moto on loopback), real ranks: saves and loads in every combination, and
a re-save of a committed iteration cut short at each of its copies still leaves that iteration whole: the
old save or the new one, never a mix and never nothing (the manifest is the commit marker, copied last)."""

import pytest

from resilience.launch import run_ranks
from resilience.vocab.combos import valid_combinations

pytest.importorskip("moto", reason="moto is not installed (pip install '.[s3]')")
pytest.importorskip("boto3", reason="boto3 is not installed (pip install '.[s3]')")

from resilience.objectstore.server import ACCESS_KEY, REGION, SECRET_KEY, EmbeddedS3  # noqa: E402

pytestmark = pytest.mark.multiprocess
ROOT = "/ckpt"


class _DiesAtCopy:
    """The store as seen by a coordinator that dies at its `at`-th object copy (what it copied stays)."""

    def __init__(self, inner, at: int):
        self.inner, self.at, self.copies = inner, at, 0

    def copy(self, src, dst):
        self.copies += 1
        if self.copies == self.at:
            raise OSError(5, "the coordinator died here", src)
        self.inner.copy(src, dst)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _save_resave_load(ctx, endpoint, bucket, combo, die_at):
    from resilience import storage
    from resilience.checkpoint.reference import ReferenceBackend
    from resilience.objectstore import S3Location
    from resilience.objectstore.client import s3_client
    from resilience.objectstore.storage import S3FileSystem
    from resilience.state import ModelSpec, Topology, TrainingState
    from resilience.state.fingerprints import combine, fingerprint
    from resilience.vocab.combos import Combination

    client = s3_client(endpoint, ACCESS_KEY, SECRET_KEY, REGION)
    fs = S3FileSystem(client, S3Location(bucket, "run"), ROOT)
    spec, topo, combo = ModelSpec(optimizer="distributed"), Topology(1, 1, 2), Combination.parse(combo)
    state = TrainingState(spec, topo, ctx.rank)
    state.train(2)
    saved = []
    with storage.use(fs):
        for generation in (1, 2):
            state.stamp(generation)
            saved.append(combine(fingerprint(state.sharded_state_dict()), ()))
            dying = _DiesAtCopy(fs, die_at if generation == 2 and ctx.rank == 0 else 0)
            try:
                with storage.use(dying):
                    backend = ReferenceBackend(combo)
                    backend.save(state, ROOT)
                    backend.finalize()  # an async save commits here
            except Exception:
                if generation == 1:
                    raise
        fresh = TrainingState(spec, topo, ctx.rank, groups=state.groups)
        result = ReferenceBackend(combo).load(fresh, ROOT)
        got = combine(fingerprint(fresh.sharded_state_dict()), ())
    return {"iteration": result.iteration, "which": saved.index(got) + 1 if got in saved else None}


@pytest.fixture(scope="module")
def s3():
    with EmbeddedS3() as server:
        yield server


@pytest.mark.parametrize("combo", [str(c) for c in valid_combinations()])
def test_every_combination_saves_and_loads_on_s3(s3, combo):
    bucket = s3.bucket(f"whole-{combo.lower().replace('/', '-').replace('_', '-')}")
    out = run_ranks(_save_resave_load, 2, args=(s3.endpoint, bucket.bucket, combo, 0), timeout=120)
    assert out[0] == {"iteration": 2, "which": 2}, out


@pytest.mark.parametrize("die_at", [1, 5, 6, 8, 10, 11])
def test_a_resave_cut_short_at_any_copy_leaves_the_iteration_whole(s3, die_at):
    """GLOBAL/torch_dist/sync has 5 objects a save: copies 1-5 set the committed copy aside, 6-10 copy the
    new one in (its manifest the 10th, the commit marker), 11 on are past it. A death before the marker
    loads save 1 (the copy set aside, whole), after it save 2; a protocol that overwrote the committed
    copy in place would leave no whole iteration 2."""
    bucket = s3.bucket(f"resave-{die_at}")
    out = run_ranks(
        _save_resave_load, 2, args=(s3.endpoint, bucket.bucket, "GLOBAL/torch_dist/sync", die_at), timeout=120
    )
    assert out[0] == {"iteration": 2, "which": 2 if die_at > 10 else 1}, out
