"""`resilience inspect DIR --backend B`: any backend's checkpoints through its adapter's list_checkpoints.
The example project's library writes the folder here, in this process (one rank, no process group)."""

import importlib
import json
import os

import pytest
import torch

from resilience.cli import main

EXAMPLE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "examples", "inhouse"))
BACKEND = "ckptlib_resilience:factory"


@pytest.fixture
def ckpt(monkeypatch, tmp_path):
    """Two ckptlib checkpoints, iterations 2 and 3."""
    monkeypatch.syspath_prepend(EXAMPLE)
    ckptlib = importlib.import_module("ckptlib")
    root = tmp_path / "ckpt"
    for it in (2, 3):
        ckptlib.save({"w": torch.ones(4) * it}, str(root), it, metadata={"topology": "tp1pp1dp1"})
    return root


def _inspect(capsys, *argv):
    code = main(["inspect", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_reference_format_reader_points_to_backend(ckpt, capsys):
    code, out, err = _inspect(capsys, ckpt)
    assert code == 2 and out == ""
    assert "no checkpoint found" in err and "name it with --backend" in err and err.count("\n") == 1


def test_good_checkpoints_through_the_adapter(ckpt, capsys):
    code, out, _ = _inspect(capsys, ckpt, "--backend", BACKEND)
    assert code == 0, out
    lines = [" ".join(line.split()) for line in out.splitlines()]
    assert (
        f"checkpoints in {ckpt}, as {BACKEND} (LOCAL/torch/sync) lists them (its list_checkpoints; newest "
        "first)" in lines
    )
    assert lines[3:5] == ["3 iter_3 yes", "2 iter_2 yes"]
    assert "OK: the newest checkpoint, iteration 3, is complete" in lines


def test_an_incomplete_newest_is_not_loadable(ckpt, capsys):
    os.unlink(ckpt / "iter_3" / "index.json")
    code, out, _ = _inspect(capsys, ckpt, "--backend", BACKEND)
    assert code == 1, out
    assert "3 iter_3 NO no index.json" in " ".join(out.split())
    assert (
        "NOT LOADABLE: the newest checkpoint, iteration 3, is not complete (no index.json); the newest "
        "complete one is iteration 2" in out
    )
    code, out, _ = _inspect(capsys, ckpt, "--backend", BACKEND, "--json")
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False and doc["newest"] == {"iteration": 3, "loadable": False}
    assert [(c["iteration"], c["complete"], c["problem"]) for c in doc["checkpoints"]] == [
        (3, False, "no index.json"),
        (2, True, ""),
    ]


@pytest.mark.parametrize(
    "make, says",
    [
        ("empty", "lists no checkpoint here"),
        ("missing", "no such folder"),
    ],
)
def test_nothing_to_list_is_one_clear_error(monkeypatch, tmp_path, capsys, make, says):
    monkeypatch.syspath_prepend(EXAMPLE)
    root = tmp_path / "ckpt"
    if make == "empty":
        root.mkdir()
    code, out, err = _inspect(capsys, root, "--backend", BACKEND)
    assert code == 2 and out == "" and says in err and err.count("\n") == 1


def test_an_adapter_answering_outside_the_protocol_is_one_clear_error(ckpt, capsys):
    code, out, err = _inspect(
        capsys, ckpt, "--backend", "tests.runner.bad_adapters:sloppy", "--combo", "LOCAL/torch/sync"
    )
    assert code == 2 and out == ""
    assert "returned int items without a proper iteration" in err and "resilience adapter check" in err
    assert err.count("\n") == 1 and "Traceback" not in err
