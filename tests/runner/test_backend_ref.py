"""A backend name resolved once per run (runner.adapters.BackendRef): the command resolves it, every case
is handed the same value, and nothing below re-reads the name; the value itself."""

from __future__ import annotations

import json
import pickle

import pytest

from resilience.checkpoint import ReferenceBackend
from resilience.cli import main
from resilience.errors import ConfigError
from resilience.runner import adapters, run
from resilience.runner.adapters import BackendRef, make_backend, resolve_backend
from resilience.vocab.combos import Combination
from resilience.vocab.contract import TopologyContract

LEGACY = Combination.parse("LEGACY/torch/sync")
LOCAL = Combination.parse("LOCAL/torch/sync")


def wrapped_reference(combo):
    """The reference, through a factory of its own: the runner cannot tell it from any adapter."""
    return ReferenceBackend(combo)


wrapped_reference.combinations = ("LEGACY/torch/sync",)  # type: ignore[attr-defined]
wrapped_reference.io_through_seam = True  # type: ignore[attr-defined]
wrapped_reference.contract = {"tp": "refuse", "pp": "refuse", "dp": "load"}  # type: ignore[attr-defined]

NAME = f"{__name__}:wrapped_reference"


def _counted(monkeypatch, caller) -> tuple[list[str], list]:
    """The factories imported, and the backend each run_case of `caller` (a module calling it) was given."""
    imported: list[str] = []
    received: list = []
    real_import, real_run = adapters._import_factory, caller.run_case

    def counting_import(name):
        imported.append(name)
        return real_import(name)

    def recording_run(*args, **kwargs):
        received.append(kwargs["backend"])
        return real_run(*args, **kwargs)

    monkeypatch.setattr(adapters, "_import_factory", counting_import)
    monkeypatch.setattr(caller, "run_case", recording_run)
    return imported, received


@pytest.mark.multiprocess
def test_a_matrix_resolves_its_backend_once_and_hands_every_case_the_same_value(tmp_path, monkeypatch, capsys):
    imported, received = _counted(monkeypatch, run)
    out = tmp_path / "m.json"
    argv = ["matrix", "--backend", NAME, "--faults", "truncate", "save/load", "--transitions", "dp", "--workers", "1"]
    assert main([*argv, "--json", str(out), "--out", str(tmp_path / "runs")]) == 0, capsys.readouterr()
    # three cases (each learning a layout, making the backend, judging its contract): one import, by the command
    assert imported == [NAME]
    assert len(received) == 3 and all(r is received[0] for r in received)
    assert isinstance(received[0], BackendRef) and received[0].spec == NAME
    rows = json.loads(out.read_text())
    assert [(r["column"], r["verdict"]) for r in rows] == [("truncate", "PASS"), ("save/load", "PASS"), ("dp", "PASS")]
    assert all(f"--backend {NAME}" in r["replay"] for r in rows)  # the replay names the spec, as written


def test_the_value_answers_what_the_factory_says():
    ref = resolve_backend(NAME)
    assert (ref.kind, ref.spec, ref.full, ref.label, ref.factory) == ("factory", NAME, NAME, NAME, wrapped_reference)
    assert ref.combinations() == [LEGACY] and ref.through_seam and ref.keep_last is None
    assert ref.contract(LEGACY).promise(["tp"]) == "refuse" and ref.contract(LEGACY).source == f"stated by {NAME}"
    assert isinstance(ref.make(LEGACY), ReferenceBackend)
    assert resolve_backend(ref) is ref  # a value resolved is taken as it is
    assert make_backend(ref, LEGACY).combo == LEGACY  # the name-taking functions take the value too


def test_an_alias_keeps_its_name_and_spells_out_its_factory_and_options():
    ref = resolve_backend(" dcp-threads ")
    assert ref.spec == "dcp-threads" and ref.label == "dcp-threads"
    assert ref.full == "resilience.backends.stock_dcp:make[thread_count=4]"
    assert ref.module == "resilience.backends.stock_dcp" and dict(ref.options) == {"thread_count": 4}
    assert not ref.through_seam and [str(c) for c in ref.combinations() or []][0] == "TORCH_DCP/torch_dcp/sync"
    assert ref.with_options({"sync_files": False}).spec == "dcp-threads:sync_files=false"


@pytest.mark.parametrize("name", ["", None, "reference", "broken:ignores_topology"])
def test_the_reference_and_the_broken_ones_resolve_without_a_factory(name):
    ref = resolve_backend(name)
    assert ref.factory is None and ref.through_seam and ref.declared_options == () and ref.module is None
    assert ref.contract(LOCAL) == TopologyContract.preset(LOCAL)
    if ref.kind == "broken":
        assert ref.combinations() == [LEGACY] and ref.spec == "broken:ignores_topology"
    else:
        assert ref.combinations() is None and ref.spec == "reference"


def test_a_value_is_equal_by_its_spelled_out_name_and_pickles_as_its_spec():
    assert resolve_backend("dcp") == resolve_backend("resilience.backends.stock_dcp:make")
    assert resolve_backend("dcp") != resolve_backend("dcp-threads")
    assert len({resolve_backend("dcp"), resolve_backend("dcp")}) == 1
    back = pickle.loads(pickle.dumps(resolve_backend("dcp:thread_count=2")))
    assert back.spec == "dcp:thread_count=2" and dict(back.options) == {"thread_count": 2}


@pytest.mark.parametrize(
    "name, says",
    [
        ("reference[x=1]", "reference takes no options"),
        ("broken:nothing", "no broken implementation 'nothing'"),
        ("dcp:threads=4", "has no option 'threads'"),
        ("tests.runner.test_backend_ref:nothing", "cannot import"),
        ("tests.runner.test_backend_ref:LEGACY", "is a Combination, not a backend factory"),
    ],
)
def test_a_name_that_does_not_resolve_is_one_clear_error(name, says):
    with pytest.raises(ConfigError, match=says):
        resolve_backend(name)


@pytest.mark.multiprocess
def test_a_fuzz_run_resolves_its_backend_once_for_every_example(tmp_path, monkeypatch, capsys):
    from resilience.fuzz import speculation

    imported, received = _counted(monkeypatch, speculation)
    argv = ["fuzz", "--backend", NAME, "--examples", "3", "--seed", "1", "--mode", "scenarios", "--workers", "1"]
    assert main([*argv, "--out", str(tmp_path / "runs")]) == 0, capsys.readouterr()
    # the command resolves it once; every example takes that value, never the name again
    assert len(received) >= 3 and all(r is received[0] for r in received)
    assert isinstance(received[0], BackendRef) and received[0].spec == NAME
    assert imported == [NAME]
