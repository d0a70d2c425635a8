"""Layouts learned from a clean save, and damage aimed through them."""

import json
import os

import pytest
import torch

from resilience.faults import corrupt, fault_from_dict
from resilience.faults.damage_records import NotApplicable
from resilience.faults.layout import Layout, LayoutFile, learn, scan
from resilience.faults.layout_damage import iteration_of, payload_ranges


def _inhouse_save(root, iteration, world=2, pointer=True):
    folder = os.path.join(root, f"iter_{iteration}")
    os.makedirs(folder, exist_ok=True)
    for r in range(world):
        torch.save(
            {"w": torch.arange(64, dtype=torch.float32) + r + iteration, "step": iteration},
            os.path.join(folder, f"rank_{r}.pt"),
        )
    with open(os.path.join(folder, "index.json"), "w") as f:
        json.dump({"iteration": iteration, "world": world}, f)
    if pointer:
        with open(os.path.join(root, "latest.txt"), "w") as f:
            f.write(str(iteration))


@pytest.fixture
def learned(tmp_path):
    """A layout learned by scanning a save of iteration 13, and a root with saves 2 and 3."""
    probe = str(tmp_path / "probe")
    before = scan(probe)
    _inhouse_save(probe, 13)
    layout = learn(probe, 13, before)
    root = str(tmp_path / "ckpt")
    _inhouse_save(root, 2)
    _inhouse_save(root, 3)
    return layout, root


def test_a_scan_learns_roles_and_iteration_templates(learned):
    layout, root = learned
    assert not layout.seam and layout.source == "scan"
    roles = {f.template: f.role for f in layout.files}
    assert roles == {
        "iter_{iteration}/index.json": "metadata",
        "iter_{iteration}/rank_0.pt": "data",
        "iter_{iteration}/rank_1.pt": "data",
        "latest.txt": "pointer",
    }
    assert layout.iterations(root) == [2, 3]
    assert layout.folder(3) == "iter_3"
    assert [os.path.relpath(p, root) for it, p, _ in layout.found(root, "data") if it == 3] == [
        "iter_3/rank_0.pt",
        "iter_3/rank_1.pt",
    ]
    assert layout.write_glob("data", 3) == "*/iter_3/rank_*.pt"  # any rank's
    assert Layout.from_dict(json.loads(json.dumps(layout.to_dict()))) == layout


def test_templates_keep_zero_padding_and_leave_other_numbers():
    f = LayoutFile("iter_{iteration:07d}/mp_rank_01/model.pt", "data")
    assert f.path(3) == "iter_0000003/mp_rank_01/model.pt"
    assert f.pattern().fullmatch("iter_0000042/mp_rank_01/model.pt").group(1) == "0000042"
    assert not f.pattern().fullmatch("iter_0000042/mp_rank_00/model.pt")


def test_payload_ranges_are_the_tensor_storage(tmp_path):
    path = str(tmp_path / "t.pt")
    t = torch.arange(100, dtype=torch.float32)
    torch.save({"t": t}, path)
    [(a, b)] = payload_ranges(path)
    with open(path, "rb") as f:
        f.seek(a)
        assert f.read(b - a) == t.numpy().tobytes()


def test_bit_flips_change_a_loaded_value(learned):
    layout, root = learned
    for seed in range(5):
        damage = corrupt(fault_from_dict({"kind": "bit_flip", "seed": seed}), root, layout)
        assert damage.rel.startswith("iter_3/rank_") and "a stored tensor value changed" in damage.detail
        assert iteration_of(layout, root, damage.file) == 3
        corrupt(fault_from_dict({"kind": "bit_flip", "seed": seed}), root, layout)  # the same flip again undoes it


def test_a_flip_that_changes_no_loaded_value_is_not_applicable(tmp_path):
    """torch.save of a 1-element view keeps the whole storage: flips outside the view change nothing."""
    root = str(tmp_path / "ckpt")
    os.makedirs(os.path.join(root, "iter_2"))
    big = torch.zeros(4096)
    torch.save({"w": big[:1]}, os.path.join(root, "iter_2", "rank_0.pt"))
    layout = Layout(2, (LayoutFile("iter_{iteration}/rank_0.pt", "data"),), False, "scan")
    with open(os.path.join(root, "iter_2", "rank_0.pt"), "rb") as f:
        raw = f.read()
    with pytest.raises(NotApplicable, match="changes a value torch.load returns"):
        corrupt(fault_from_dict({"kind": "bit_flip", "seed": 1}), root, layout)
    with open(os.path.join(root, "iter_2", "rank_0.pt"), "rb") as f:
        assert f.read() == raw  # every draw undone


def test_bit_flips_never_land_in_zero_padding_rows(tmp_path):
    """Megatron's padded vocabulary: rows past the real vocabulary hold zeros in every saved tensor and no
    load compares them, so a flip there would probe nothing. Here half the rows are padding."""
    root = str(tmp_path / "ckpt")
    os.makedirs(os.path.join(root, "iter_2"))
    path = os.path.join(root, "iter_2", "rank_0.pt")
    real, padded = 8, 16
    w = torch.zeros(padded, 32)
    w[:real] = torch.arange(real * 32, dtype=torch.float32).view(real, 32) + 1.0
    torch.save({"w": w}, path)
    layout = Layout(2, (LayoutFile("iter_{iteration}/rank_0.pt", "data"),), False, "scan")
    [(start, _)] = payload_ranges(path)
    for seed in range(20):
        damage = corrupt(fault_from_dict({"kind": "bit_flip", "seed": seed}), root, layout)
        row = (damage.offset - start) // (32 * 4)
        assert row < real and "non-zero word" in damage.detail, (seed, row)
        corrupt(fault_from_dict({"kind": "bit_flip", "seed": seed}), root, layout)  # undo
    assert torch.equal(torch.load(path, weights_only=True)["w"], w)


def test_a_flip_in_any_archive_of_a_dcp_file_is_seen_as_a_changed_value(tmp_path):
    """A DCP .distcp holds one torch.save archive per tensor, one after the other; torch.load of the whole
    file reads only one of them, so each archive is loaded on its own to tell a flip changed a value."""
    import io

    root = str(tmp_path / "ckpt")
    os.makedirs(os.path.join(root, "step-2"))
    path = os.path.join(root, "step-2", "__0_0.distcp")
    tensors = [torch.arange(256, dtype=torch.float32) + 1.0 + 1000 * k for k in range(4)]
    with open(path, "wb") as f:
        for t in tensors:
            buf = io.BytesIO()
            torch.save(t, buf)
            f.write(buf.getvalue())
    assert len(payload_ranges(path)) == 4
    layout = Layout(2, (LayoutFile("step-{iteration}/__0_0.distcp", "data"),), False, "scan")
    hit = set()
    for seed in range(12):
        damage = corrupt(fault_from_dict({"kind": "bit_flip", "seed": seed}), root, layout)
        assert "a stored tensor value changed" in damage.detail, damage.detail
        hit.add(next(i for i, (a, b) in enumerate(payload_ranges(path)) if a <= damage.offset < b))
        corrupt(fault_from_dict({"kind": "bit_flip", "seed": seed}), root, layout)  # undo
    assert len(hit) > 1  # not only the archive torch.load of the whole file reads


def test_flips_and_cuts_skip_the_empty_file_of_a_rank_that_holds_only_replicas(tmp_path):
    """DCP's dedup leaves a dp replica's __1_0.distcp empty: a flip or a cut aims at a file with bytes."""
    root = str(tmp_path / "ckpt")
    os.makedirs(os.path.join(root, "iter_2"))
    torch.save({"w": torch.arange(64, dtype=torch.float32) + 1.0}, os.path.join(root, "iter_2", "__0_0.distcp"))
    open(os.path.join(root, "iter_2", "__1_0.distcp"), "wb").close()
    files = tuple(LayoutFile(f"iter_{{iteration}}/__{r}_0.distcp", "data", rank=r) for r in (0, 1))
    layout = Layout(2, files, False, "scan")
    for seed in range(8):
        damage = corrupt(fault_from_dict({"kind": "bit_flip", "seed": seed}), root, layout)
        assert damage.rel == "iter_2/__0_0.distcp", damage
        corrupt(fault_from_dict({"kind": "bit_flip", "seed": seed}), root, layout)  # undo
    assert corrupt(fault_from_dict({"kind": "truncate", "seed": 0}), root, layout).rel == "iter_2/__0_0.distcp"


def test_truncation_cuts_into_payload(learned):
    layout, root = learned
    damage = corrupt(fault_from_dict({"kind": "truncate", "seed": 3}), root, layout)
    path = damage.file
    assert damage.new_size < damage.old_size
    with pytest.raises(Exception):  # noqa: B017 (torch's error type depends on where the file was cut)
        torch.load(path, weights_only=True)


def test_metadata_and_tracker_aim_at_this_backends_files(learned):
    layout, root = learned
    damage = corrupt(fault_from_dict({"kind": "metadata_damage", "how": "empty"}), root, layout)
    assert damage.rel == os.path.join("iter_3", "index.json") and os.path.getsize(damage.file) == 0
    stale = corrupt(fault_from_dict({"kind": "tracker_damage", "how": "stale"}), root, layout)
    assert stale.rel == "latest.txt" and (stale.old, stale.new) == ("3", "2")
    with pytest.raises(NotApplicable, match="no manifest.json"):
        corrupt(fault_from_dict({"kind": "metadata_damage", "name": "manifest.json"}), root, layout)
    with pytest.raises(NotApplicable, match="names no file list"):
        corrupt(fault_from_dict({"kind": "escaping_path"}), root, layout)


def test_a_backend_without_a_tracker_gets_not_applicable(tmp_path):
    probe = str(tmp_path / "probe")
    _inhouse_save(probe, 13, pointer=False)
    layout = learn(probe, 13)
    root = str(tmp_path / "ckpt")
    _inhouse_save(root, 2, pointer=False)
    with pytest.raises(NotApplicable, match="no pointer to its newest checkpoint"):
        corrupt(fault_from_dict({"kind": "tracker_damage", "how": "delete"}), root, layout)


def test_leftover_staging_of_an_in_place_writer_is_a_partial_next_iteration(learned):
    layout, root = learned
    damage = corrupt(fault_from_dict({"kind": "leftover_staging"}), root, layout)
    assert damage.rel == "iter_4"
    assert sorted(os.listdir(os.path.join(root, "iter_4"))) == ["rank_0.pt", "rank_1.pt"]  # no index.json


def test_hostile_pickle_rewrites_a_torch_file_of_the_newest_save(learned):
    """No .metadata: the pickle column lands in a torch.save file of the aimed rank, and a file that holds
    no pickle is N/A with why."""
    from resilience.faults.hostile_pickle import MARKER

    layout, root = learned
    d = corrupt(fault_from_dict({"kind": "hostile_pickle", "rank": 1}), root, layout)
    assert (d.rel, d.action, d.marker) == ("iter_3/rank_1.pt", "rewrite", os.path.join(root, MARKER))
    assert torch.load(d.file, weights_only=False)["step"] == 3
    assert os.path.exists(d.marker)
    with pytest.raises(NotApplicable, match=r"iteration 3 holds no pickle: no \.metadata and no torch.save archive"):
        corrupt(fault_from_dict({"kind": "hostile_pickle", "target": {"path": "*/index.json"}}), root, layout)
