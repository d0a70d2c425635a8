"""A learned layout's final file names keep only what every save writes: a library that names each save's
files with a tag of its own (`rank_00001-3f9a2c1b7d.pt`) is still found, damaged and described in a later
run, whose saves draw other tags. Pure file work: no processes."""

import json
import os
import secrets

import pytest
import torch

from resilience.faults import corrupt, fault_from_dict
from resilience.faults.layout import Layout, learn, scan
from resilience.faults.layout_damage import iteration_of


def _tagged_save(root, iteration, world=2):
    """Files named as rankckpt names them: each save's own random tag in every rank file's name."""
    folder = os.path.join(root, f"iter_{iteration:07d}")
    os.makedirs(folder, exist_ok=True)
    tag = secrets.token_hex(5)
    for r in range(world):
        torch.save(
            {"w": torch.arange(64, dtype=torch.float32) + r + iteration}, os.path.join(folder, f"rank_{r:05d}-{tag}.pt")
        )
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump({"format": "rankckpt", "version": 1, "save": tag}, f)
    with open(os.path.join(root, "latest"), "w") as f:
        f.write(f"{iteration}\n")
    return tag


@pytest.fixture
def learned(tmp_path):
    probe = str(tmp_path / "probe")
    before = scan(probe)
    tag = _tagged_save(probe, 13)
    layout = learn(probe, 13, before)
    root = str(tmp_path / "ckpt")
    _tagged_save(root, 2)
    _tagged_save(root, 3)
    return layout, root, tag


def test_a_saves_random_tag_is_a_wildcard_in_the_template(learned):
    layout, _, tag = learned
    assert sorted(f.template for f in layout.of("data")) == [
        "iter_{iteration:07d}/rank_00000-*.pt",
        "iter_{iteration:07d}/rank_00001-*.pt",
    ]
    assert "rank_00000-*.pt" in layout.describe() and tag not in layout.describe()
    assert Layout.from_dict(json.loads(json.dumps(layout.to_dict()))) == layout


def test_files_of_later_saves_with_other_tags_are_found_with_their_iteration(learned):
    layout, root, _ = learned
    assert layout.iterations(root) == [2, 3]
    newest = [os.path.basename(p) for it, p, _ in layout.found(root, "data") if it == 3]
    assert len(newest) == 2 and all(n.startswith(("rank_00000-", "rank_00001-")) for n in newest)
    assert [os.path.basename(p) for _, p, _ in layout.found(root, "data", rank=None)].count(newest[0]) == 1
    assert layout.folder(3) == "iter_0000003"
    assert iteration_of(layout, root, os.path.join(root, "iter_0000002", newest[0])) == 2


def test_a_wildcard_matches_within_one_name_only(learned):
    layout, root, _ = learned
    deeper = os.path.join(root, "iter_0000003", "rank_00000-x", "y.pt")
    os.makedirs(os.path.dirname(deeper))
    open(deeper, "wb").close()
    assert deeper not in [p for _, p, _ in layout.found(root)]


def test_damage_at_rest_reaches_the_later_saves_files(learned):
    layout, root, _ = learned
    done = corrupt(fault_from_dict({"kind": "truncate", "seed": 1}), root, layout)
    assert os.path.dirname(done.rel) == "iter_0000003" and done.rel.endswith(".pt")
    corrupt(fault_from_dict({"kind": "leftover_staging"}), root, layout)
    left = sorted(os.listdir(os.path.join(root, "iter_0000004")))
    assert len(left) == 2 and all("*" not in n for n in left), left  # the wildcard drawn, not written
    done = corrupt(fault_from_dict({"kind": "tracker_damage", "how": "stale"}), root, layout)
    assert done.rel == "latest"


def test_a_write_glob_of_a_pointer_at_the_root_aims_at_every_saves_rewrite(learned):
    layout, _, _ = learned
    assert layout.write_glob("pointer", 3) == "*/latest"  # rewritten by every save, not one iteration's
    assert layout.write_glob("data", 3) == "*/iter_0000003/rank_*-*.pt"  # a scan knows no ranks
