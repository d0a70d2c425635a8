"""Corruption at rest: each damage is exactly the one asked for, recorded, and replayable from its seed."""

import json
import os
import shutil

import pytest

from resilience.checkpoint import ReferenceBackend
from resilience.checkpoint.commit import read_tracker, stale_staging
from resilience.checkpoint.manifest import Manifest
from resilience.errors import ConfigError, IntegrityError
from resilience.faults import (
    NothingToDamage,
    checkpoint_folders,
    corrupt,
    corrupt_all,
    fault_from_dict,
    faults_from,
    files_of_rank,
)
from resilience.state import ModelSpec, Topology, TrainingState
from resilience.vocab import combination
from resilience.vocab.folders import TRACKER

SPEC = ModelSpec(num_layers=2, hidden=16, ffn_hidden=32, heads=2, vocab=64)
SHARD = "iter_0000002/mp_rank_00/model_optim_rng.pt"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("base") / "ckpt"
    state = TrainingState(SPEC, Topology(), 0)
    backend = ReferenceBackend(combination("LEGACY", "torch", "sync"))
    for _ in range(2):
        state.train(1)
        backend.save(state, str(root))
    return root


@pytest.fixture
def root(saved, tmp_path):
    shutil.copytree(saved, tmp_path / "ckpt")
    return tmp_path / "ckpt"


@pytest.mark.parametrize("length", [0, 1, 1000])
def test_truncate_to_k_bytes(root, length):
    old = (root / SHARD).stat().st_size
    d = corrupt(fault_from_dict({"kind": "truncate", "length": length, "rank": 0}), root)
    assert (root / SHARD).stat().st_size == length
    assert (d.rel, d.old_size, d.new_size, d.action) == (SHARD, old, length, "truncate")


def test_bit_flip_flips_exactly_the_bits_asked(root):
    before = (root / SHARD).read_bytes()
    d = corrupt(fault_from_dict({"kind": "bit_flip", "bits": [3, 6], "target": {"offset": 100, "path": "*.pt"}}), root)
    after = (root / SHARD).read_bytes()
    assert len(after) == len(before)
    assert [i for i in range(len(before)) if before[i] != after[i]] == [100]
    assert after[100] == before[100] ^ 0b0100_1000
    assert (d.offset, d.bits, d.old, d.new) == (100, (3, 6), f"{before[100]:02x}", f"{after[100]:02x}")
    with pytest.raises(IntegrityError, match="checksum"):
        from resilience.checkpoint.manifest import verify_file

        verify_file(
            str(root / "iter_0000002"),
            "mp_rank_00/model_optim_rng.pt",
            Manifest.read(str(root / "iter_0000002")).files["mp_rank_00/model_optim_rng.pt"],
        )


def test_seeded_choice_is_replayable(saved, tmp_path):
    records = []
    for n in range(2):
        copy = tmp_path / f"c{n}"
        shutil.copytree(saved, copy)
        records.append(corrupt(fault_from_dict({"kind": "bit_flip", "seed": 42}), copy))
    a, b = records
    assert a.to_dict() == {**b.to_dict(), "file": a.file}
    other = tmp_path / "c2"
    shutil.copytree(saved, other)
    assert corrupt(fault_from_dict({"kind": "bit_flip", "seed": 43}), other).offset != a.offset  # almost surely
    assert len(a.bits) == 1 and 0 <= a.offset < a.old_size


def test_delete_a_shard_of_an_older_iteration(root):
    d = corrupt(fault_from_dict({"kind": "delete_file", "target": {"iteration": 1}}), root)
    assert d.rel == "iter_0000001/mp_rank_00/model_optim_rng.pt" and not os.path.exists(d.file)


@pytest.mark.parametrize("how", ["garble", "truncate", "empty", "delete"])
def test_manifest_damage_is_detected(root, how):
    d = corrupt(fault_from_dict({"kind": "metadata_damage", "how": how}), root)
    assert d.rel == "iter_0000002/manifest.json" and d.action == how
    with pytest.raises(IntegrityError):
        Manifest.read(str(root / "iter_0000002"))
    Manifest.read(str(root / "iter_0000001"))  # the older one is untouched


def test_escaping_path_keeps_the_digest_consistent(root):
    d = corrupt(fault_from_dict({"kind": "escaping_path", "escape": "../../outside.pt"}), root)
    doc = json.loads((root / "iter_0000002" / "manifest.json").read_text())
    assert "../../outside.pt" in doc["body"]["files"]
    with pytest.raises(IntegrityError) as e:
        Manifest.read(str(root / "iter_0000002"))
    assert e.value.check == "path safety"  # not "manifest checksum": the forgery is consistent
    assert "digest recomputed" in d.detail


@pytest.mark.parametrize(
    "how, text, problem",
    [
        ("stale", "1", None),
        ("empty", "", "empty"),
        ("non_numeric", "not-a-number", "not a number"),
        ("future", "1002", None),
        ("delete", None, "missing"),
    ],
)
def test_tracker_damage(root, how, text, problem):
    d = corrupt(fault_from_dict({"kind": "tracker_damage", "how": how}), root)
    assert d.old == "2" and d.new == text and d.rel == TRACKER
    it, why = read_tracker(str(root))
    assert (why is None and it == int(text)) if problem is None else problem in why


def test_leftover_staging_and_extra_file(root):
    d = corrupt(fault_from_dict({"kind": "leftover_staging", "seed": 1}), root)
    assert stale_staging(str(root)) == [d.file] and os.path.basename(d.file).startswith(".staging-iter_0000003-")
    assert not os.path.exists(os.path.join(d.file, "manifest.json"))
    e = corrupt(fault_from_dict({"kind": "extra_file", "name": "stray.bin", "length": 5}), root)
    assert e.rel == "iter_0000002/stray.bin" and os.path.getsize(e.file) == 5


def test_the_same_staging_seed_twice_leaves_two_folders(root):
    a = corrupt(fault_from_dict({"kind": "leftover_staging", "seed": 1}), root)
    b = corrupt(fault_from_dict({"kind": "leftover_staging", "seed": 1}), root)
    assert a.file != b.file and sorted(stale_staging(str(root))) == sorted([a.file, b.file])


@pytest.mark.parametrize("spec", [{"kind": "tracker_damage", "how": "delete"}, {"kind": "truncate"}])
def test_nothing_to_damage_is_its_own_error(tmp_path, spec):
    (tmp_path / "ckpt").mkdir()
    with pytest.raises(NothingToDamage) as e:
        corrupt(fault_from_dict(spec), tmp_path / "ckpt")
    assert isinstance(e.value, ConfigError) and "ckpt" in str(e.value)


def test_corrupt_all_in_order(root):
    done = corrupt_all(
        faults_from(
            [
                {"kind": "truncate", "length": 0},
                {"kind": "rank_kill", "after": 1},
                {"kind": "tracker_damage", "how": "empty"},
            ]
        ),
        root,
    )
    assert [d.kind for d in done] == ["truncate", "tracker_damage"]


def test_ranks_and_folders(root):
    assert [(it, os.path.basename(p), r) for it, p, r in checkpoint_folders(str(root))] == [
        (1, "iter_0000001", None),
        (2, "iter_0000002", None),
    ]
    assert [os.path.relpath(p, root) for p in files_of_rank(str(root / "iter_0000002"), 0)] == [SHARD]


@pytest.mark.parametrize(
    "spec, field",
    [
        ({"kind": "bit_flip", "target": {"offset": 10**9}}, "target.offset"),
        ({"kind": "truncate", "target": {"iteration": 7}}, "target.iteration"),
        ({"kind": "truncate", "target": {"path": "*.nothing"}}, "target"),
        ({"kind": "metadata_damage", "name": ".metadata"}, "name"),
        ({"kind": "truncate", "length": 10**9}, "length"),
        ({"kind": "rank_crash", "phase": "write"}, "fault.kind"),
    ],
)
def test_impossible_damage_is_a_clear_error(root, spec, field):
    with pytest.raises(ConfigError) as e:
        corrupt(fault_from_dict(spec), root)
    assert e.value.field == field


def test_a_mapping_is_read_before_it_is_carried_out(root):
    """Faults are parsed once (faults_from); what carries them out refuses a raw mapping, naming the way in."""
    with pytest.raises(ConfigError, match="faults_from") as e:
        corrupt({"kind": "truncate"}, root)  # type: ignore[arg-type]
    assert e.value.field == "fault[0]"
