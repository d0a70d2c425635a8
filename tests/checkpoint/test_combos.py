"""The seed's three layers: six valid combinations, eighteen rejected before a byte is written."""

import itertools
import json
import os
import subprocess
import sys

import pytest

from resilience.checkpoint import ReferenceBackend
from resilience.cli import main
from resilience.errors import ConfigError, InvalidCombination
from resilience.state import ModelSpec, Topology, TrainingState
from resilience.vocab import combination, table, valid_combinations
from resilience.vocab.combos import VALID, CheckpointType, CkptFormat, Combination, IOMode

ALL = list(itertools.product(CheckpointType, CkptFormat, IOMode))
INVALID = [k for k in ALL if k not in VALID]
# The format each type is stored as; any other format is the format layer's fault, async on torch the io layer's.
NATIVE = {
    CheckpointType.LEGACY: CkptFormat.TORCH,
    CheckpointType.LOCAL: CkptFormat.TORCH,
    CheckpointType.GLOBAL: CkptFormat.TORCH_DIST,
    CheckpointType.TORCH_DCP: CkptFormat.TORCH_DCP,
}
SEED_TABLE = {
    "LEGACY/torch/sync": "mainstream default",
    "LOCAL/torch/sync": "debugging",
    "GLOBAL/torch_dist/sync": "new mainline",
    "GLOBAL/torch_dist/async": "experimental",
    "TORCH_DCP/torch_dcp/sync": "early support",
    "TORCH_DCP/torch_dcp/async": "future direction",
}


def _id(key) -> str:
    return "-".join(k.value for k in key)


def _layer(key) -> str:
    t, f, _ = key
    return "io" if NATIVE[t] is f else "format"


def test_the_six_valid_combinations_of_the_seed():
    assert len(ALL) == 24 and len(INVALID) == 18
    assert {str(c): VALID[(c.type, c.format, c.io)] for c in valid_combinations()} == SEED_TABLE
    for c in valid_combinations():
        assert combination(c.type.value, c.format.value, c.io.value) == c
        assert Combination.parse(str(c)) == c
        assert Combination.from_dict(c.to_dict()) == c


@pytest.mark.parametrize("key", INVALID, ids=_id)
def test_invalid_combination_names_the_layer_and_the_reason(key):
    with pytest.raises(InvalidCombination) as e:
        combination(*(k.value for k in key))
    assert e.value.field == _layer(key)
    text = str(e.value)
    assert text.startswith(f"{_layer(key)}: {_id(key).replace('-', '/')} is not a valid combination: ")
    assert "valid: LEGACY/torch/sync" in text  # says what would work
    assert isinstance(e.value, ValueError)


@pytest.mark.parametrize("key", INVALID, ids=_id)
def test_invalid_combination_is_rejected_before_a_byte_is_written(key, tmp_path):
    # Combination(...) is a plain record; the backend must refuse it before touching the disk.
    state = TrainingState(ModelSpec(), Topology(), 0)
    root = tmp_path / "ckpt"
    with pytest.raises(InvalidCombination) as e:
        ReferenceBackend(Combination(*key)).save(state, str(root))
    assert e.value.field == _layer(key)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "text, field",
    [
        ("GLOBAL/torch_dist", "combination"),
        ("SHARDED/torch/sync", "type"),
        ("LEGACY/pickle/sync", "format"),
        ("LEGACY/torch/eventually", "io"),
    ],
)
def test_unreadable_combination_is_a_clear_error(text, field):
    with pytest.raises(ConfigError) as e:
        Combination.parse(text)
    assert e.value.field == field


def test_type_is_case_insensitive():
    assert Combination.parse("global/torch_dist/async") == combination("GLOBAL", "torch_dist", "async")


def test_table_has_every_combination_once():
    rows = table()
    assert [(r["type"], r["format"], r["io"]) for r in rows] == [tuple(k.value for k in key) for key in ALL]
    for r in rows:
        key = (CheckpointType(r["type"]), CkptFormat(r["format"]), IOMode(r["io"]))
        assert r["valid"] is (key in VALID)
        if r["valid"]:
            assert r["status"] == VALID[key] and "reason" not in r
        else:
            assert r["layer"] == _layer(key) and r["reason"] and "status" not in r


def _check_json_schema(rows) -> None:
    assert isinstance(rows, list) and len(rows) == 24
    assert len({(r["type"], r["format"], r["io"]) for r in rows}) == 24
    for r in rows:
        assert {"type", "format", "io", "valid"} <= set(r)
        assert isinstance(r["valid"], bool)
        assert r["type"] in {t.value for t in CheckpointType}
        assert r["format"] in {f.value for f in CkptFormat}
        assert r["io"] in {i.value for i in IOMode}
        if r["valid"]:
            assert isinstance(r["status"], str) and r["status"] and "reason" not in r
        else:
            assert isinstance(r["reason"], str) and r["reason"] and "status" not in r
            assert r["layer"] in ("format", "io")
    assert {f"{r['type']}/{r['format']}/{r['io']}": r["status"] for r in rows if r["valid"]} == SEED_TABLE


def test_combos_json_schema(capsys):
    assert main(["combos", "--json"]) == 0
    out = capsys.readouterr().out
    _check_json_schema(json.loads(out))


def test_combos_table_for_people(capsys):
    assert main(["combos"]) == 0
    out = capsys.readouterr().out
    for text in SEED_TABLE.values():
        assert text in out
    assert "torch cannot carry GLOBAL semantics" in out
    assert out.count("format layer:") == 16 and out.count("io layer:") == 2
    assert (
        sum(1 for line in out.splitlines() if line.split()[:1] and line.split()[0] in {t.value for t in CheckpointType})
        == 24
    )


def test_combos_json_from_the_installed_command():
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    out = subprocess.run(
        [sys.executable, "-m", "resilience.cli", "combos", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=True,
    ).stdout
    _check_json_schema(json.loads(out))
