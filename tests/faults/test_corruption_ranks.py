"""Corruption at rest against every combination: the reference resumes from the newest valid checkpoint
(bit-exact), or refuses clearly when none is left."""

import os
import shutil

import pytest

from resilience.faults import corrupt, corrupt_all, fault_from_dict, faults_from

from .ranks import ALL, combos, is_local, load_all, newest_durable, run_job, save_under_faults

pytestmark = pytest.mark.multiprocess


def _cases(combo):
    """(id, faults, iteration the loader must pick, or None: it must refuse)."""
    dcp = not combo.startswith(("LEGACY/", "LOCAL/"))
    r1 = {"rank": 1}
    cases = [
        ("truncate-zero", [{"kind": "truncate", "length": 0, **r1}], 1),
        ("truncate-k", [{"kind": "truncate", "length": 100, **r1}], 1),
        ("bit-flip", [{"kind": "bit_flip", "seed": 3, **r1}], 1),
        ("bit-flip-at", [{"kind": "bit_flip", "bits": [7], "target": {"offset": 2000, **r1}}], 1),
        ("delete-shard", [{"kind": "delete_file", **r1}], 1),
        ("escaping-path", [{"kind": "escaping_path", **r1}], 1),
        ("extra-file", [{"kind": "extra_file", **r1}], 2),
        ("leftover-staging", [{"kind": "leftover_staging", **r1}], 2),
        (
            "both-shards-gone",
            [{"kind": "delete_file", **r1}, {"kind": "delete_file", "target": {"iteration": 1, **r1}}],
            None,
        ),
    ]
    for how in ("garble", "truncate", "empty", "delete"):
        cases.append((f"manifest-{how}", [{"kind": "metadata_damage", "how": how, **r1}], 1))
    for how in ("stale", "empty", "non_numeric", "future", "delete"):
        cases.append((f"tracker-{how}", [{"kind": "tracker_damage", "how": how, **r1}], 2))
    if dcp:
        for how in ("garble", "truncate", "delete"):
            cases.append((f"dcp-metadata-{how}", [{"kind": "metadata_damage", "name": ".metadata", "how": how}], 1))
    if combo.startswith("GLOBAL/"):
        cases.append(
            (
                "megatron-metadata-json-delete",
                [{"kind": "metadata_damage", "name": "metadata.json", "how": "delete"}],
                1,
            )
        )
    return cases


@pytest.mark.parametrize("combo", combos(*ALL))
def test_every_corruption_resumes_or_refuses(tmp_path, combo):
    base = tmp_path / "base"
    outcome = run_job(save_under_faults, combo, str(base), [])
    assert outcome.ok and newest_durable(combo, base) == 2
    cases = _cases(combo)
    roots = []
    for name, faults, _ in cases:
        root = tmp_path / name
        shutil.copytree(base, root)
        damage = corrupt_all(faults_from(faults), root)
        assert len(damage) == len(faults), name
        for d in damage:
            assert d.rel and not d.rel.startswith(".."), (name, d)
            if is_local(combo) and d.kind not in ("extra_file",):
                assert "rank_00001" in d.rel, (name, d)  # the rank asked for
        roots.append(root)
    for (name, _, want), got in zip(cases, load_all(combo, roots)):
        if want is None:
            assert "refused" in got and "CheckpointNotFound" in got["refused"], (name, got)
            continue
        assert "refused" not in got, (name, got)
        assert got["iteration"] == want and got["fingerprint_ok"], (name, got)
        if want == 1:  # the loader says which file and which check sent it back
            assert got["warnings"], (name, got)


@pytest.mark.parametrize("combo", combos("LEGACY/torch/sync", "GLOBAL/torch_dist/sync"))
def test_shard_damage_picks_the_rank_asked(tmp_path, combo):
    base = tmp_path / "base"
    assert run_job(save_under_faults, combo, str(base), []).ok
    for rank in (0, 1):
        root = tmp_path / f"r{rank}"
        shutil.copytree(base, root)
        d = corrupt(fault_from_dict({"kind": "truncate", "length": 7, "rank": rank}), root)
        name = f"mp_rank_{rank:02d}" if combo.startswith("LEGACY/") else f"__{rank}_0.distcp"
        assert name in d.rel and d.rel.startswith("iter_0000002") and os.path.getsize(d.file) == 7, d
