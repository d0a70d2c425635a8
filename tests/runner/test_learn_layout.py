"""The reference's layout does not depend on the shapes, types or values of the model it saves (so the
runner learns it once for every such model), checked by learning it twice on real ranks; any other backend
learns each model's."""

import json
from dataclasses import replace

import pytest

from resilience.runner import learn
from resilience.runner.learn import SHAPES_AND_VALUES, _model_key
from resilience.state import ModelSpec, Topology
from resilience.vocab.combos import Combination, valid_combinations

SMALL = ModelSpec(num_layers=2, hidden=4, ffn_hidden=4, heads=2, vocab=7, make_vocab_size_divisible_by=1)
LARGE = ModelSpec(
    num_layers=4,
    hidden=48,
    ffn_hidden=160,
    heads=4,
    vocab=300,
    make_vocab_size_divisible_by=16,
    global_batch_size=16,
    lr=0.1,
    seed=99,
    rampup_samples=0,
    skip_every=0,
    value_range="unit",
    dtype="bf16",
    optim_dtype="bf16",
)


def _without_sizes(layout):
    """The layout with its files' sizes left out, and of each phase the operation that starts it (which rank
    gets there first is a race, and a staging name has a random part), and of the operation kinds not which
    ranks did them (which rank makes a shared folder is a race too)."""
    files = tuple(sorted((replace(f, size=0) for f in layout.files), key=lambda f: f.template))
    phases = {k: v["op"] for k, v in layout.phases.items()}
    return replace(layout, files=files, phases=phases, op_ranks=sorted(layout.op_ranks))


def test_every_field_left_out_of_the_key_differs_between_the_two_models():
    assert {f for f in SHAPES_AND_VALUES if getattr(SMALL, f) == getattr(LARGE, f)} == set()
    assert _model_key("reference", SMALL) == _model_key("reference", LARGE)
    assert _model_key("reference", SMALL) != _model_key("reference", replace(SMALL, optimizer="distributed"))
    assert _model_key("resilience.backends.stock_dcp:make", SMALL) != _model_key(
        "resilience.backends.stock_dcp:make", LARGE
    )


@pytest.mark.parametrize("combo", valid_combinations(), ids=str)
@pytest.mark.parametrize("optimizer", ["adam", "distributed"])
def test_the_reference_writes_the_same_files_whatever_the_shapes(tmp_path, combo: Combination, optimizer: str):
    topo = Topology.parse("tp1pp1dp2" if optimizer == "distributed" else "tp1pp2dp1")
    small, large = (
        learn._learn(replace(m, optimizer=optimizer), topo, combo, "reference", str(tmp_path / n), 120, "fork", "seam")
        for n, m in (("small", SMALL), ("large", LARGE))
    )
    assert small.files and _without_sizes(small) == _without_sizes(large)


def test_the_optimizer_stays_in_the_key_since_it_changes_the_files(tmp_path):
    combo, topo = Combination.parse("LEGACY/torch/sync"), Topology.parse("tp1pp1dp2")
    adam, distributed = (
        learn._learn(replace(SMALL, optimizer=o), topo, combo, "reference", str(tmp_path / o), 120, "fork", "seam")
        for o in ("adam", "distributed")
    )
    assert _without_sizes(adam) != _without_sizes(distributed)  # the distributed optimizer's own files
    assert any("distrib_optim" in f.template for f in distributed.files)


def test_a_probe_not_asked_for_reads_skips_the_load_and_a_layout_with_reads_serves_it(tmp_path, monkeypatch):
    monkeypatch.setattr(learn, "_CACHE", {})
    combo, topo = Combination.parse("LOCAL/torch/sync"), Topology.parse("tp1pp1dp2")
    without = learn.learn_layout(SMALL, topo, combo, "reference", str(tmp_path / "a"), reads=False)
    assert without.files and all(f.read is None for f in without.files)
    assert json.loads((tmp_path / "a" / "reads.0").read_text()) == {"ok": False, "why": "not asked"}
    with_reads = learn.learn_layout(SMALL, topo, combo, "reference", str(tmp_path / "b"), reads=True)
    assert all(f.read is not None for f in with_reads.files)  # learned anew: the first one cannot serve
    again = learn.learn_layout(SMALL, topo, combo, "reference", str(tmp_path / "c"), reads=False)
    assert again == with_reads and not (tmp_path / "c" / "reads.0").exists()  # served, nothing probed
