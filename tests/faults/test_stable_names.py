"""What a learned file name keeps across runs: pids, thread ids, uuids, random suffixes, timestamps and the
host name become '*'; the iteration and the short numbers the aiming relies on (rank, tp, pp) stay."""

import fnmatch

import pytest

from resilience.faults.stable_names import stable_name

PIDS = frozenset({26863, 26870, 812345})
HOST = "gpu-node-17.cluster.local"

TABLE = {
    # name written in the probe save -> the part a later run writes too
    "iter_0000003/rank_00001.pt.tmp-26863-k3j9x2q": "iter_0000003/rank_00001.pt.tmp-*-*",
    "iter_0000003/rank_00001.pt.tmp-26863-0a1b2c": "iter_0000003/rank_00001.pt.tmp-*-*",
    ".staging-iter_0000003-1f2e3d4c/__1_0.distcp": ".staging-iter_0000003-*/__1_0.distcp",
    ".staging-iter_0000003-12345678/__1_0.distcp": ".staging-iter_0000003-*/__1_0.distcp",  # a hex tag of digits
    "step-3/__0_0.distcp.tid812345": "step-3/__0_0.distcp.tid*",  # a thread id, glued to a word
    "step-3/.tmp.3f2a9c1e-8b4d-4e2f-9a1b-0c2d3e4f5a6b.pt": "step-3/.tmp.*.pt",  # uuid4
    "step-3/3f2a9c1e8b4d4e2f9a1b0c2d3e4f5a6b": "step-3/*",  # uuid4().hex
    "ckpt-3/shard_0.1717171717.tmp": "ckpt-3/shard_0.*.tmp",  # a timestamp in seconds
    "ckpt-3/shard_0.1717171717123.tmp": "ckpt-3/shard_0.*.tmp",  # in milliseconds
    "ckpt-3/gpu-node-17.cluster.local.rank1.pt": "ckpt-3/*.rank1.pt",
    "ckpt-3/gpu-node-17-rank1.pt": "ckpt-3/*-rank1.pt",
    "ckpt-3/model.26863": "ckpt-3/model.*",
    # stable: the iteration, rank / tp / pp indices, words followed by numbers, short mixed names
    "iter_0000003/mp_rank_01_002/model_optim_rng.pt": "iter_0000003/mp_rank_01_002/model_optim_rng.pt",
    "iter_0000003/rank00001.pt": "iter_0000003/rank00001.pt",
    "step-3/__1_0.distcp": "step-3/__1_0.distcp",
    "step-3/weights.bf16.fp8e4.v2": "step-3/weights.bf16.fp8e4.v2",
    "step-3/float16_shard7.pt": "step-3/float16_shard7.pt",
    "local/rank_00001/iter_0000003.pt": "local/rank_00001/iter_0000003.pt",
    "iter_26863/x.pt": "iter_26863/x.pt",  # the iteration, even when a pid shares its number (below)
}


@pytest.mark.parametrize("written, stable", TABLE.items(), ids=list(TABLE))
def test_a_name_keeps_only_what_every_run_writes(written, stable):
    iteration = 26863 if written.startswith("iter_26863") else 3
    assert stable_name(written, iteration, PIDS, HOST) == stable


def test_the_stable_name_matches_what_a_later_run_writes():
    probe = stable_name("iter_0000003/rank_00001.pt.tmp-26863-k3j9x2q", 3, PIDS, HOST)
    assert fnmatch.fnmatchcase("iter_0000003/rank_00001.pt.tmp-41002-z8y7w6v", probe)
    assert not fnmatch.fnmatchcase("iter_0000003/rank_00000.pt.tmp-41002-z8y7w6v", probe)  # another rank
    assert not fnmatch.fnmatchcase("iter_0000004/rank_00001.pt.tmp-41002-z8y7w6v", probe)  # another save


def test_a_number_is_a_pid_only_when_the_probe_ran_as_it():
    assert stable_name("rank_1.pt.tmp-26863", 3) == "rank_1.pt.tmp-26863"
    assert stable_name("rank_1.pt.tmp-26863", 3, {26863}) == "rank_1.pt.tmp-*"
    assert stable_name("rank_1.pt", 3, {1}) == "rank_1.pt"  # no pid is 1: never a rank index's wildcard
    assert stable_name("ab-rank_1.pt", 3, (), "ab") == "ab-rank_1.pt"  # a short host name is left
