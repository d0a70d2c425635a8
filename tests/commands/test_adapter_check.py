"""`resilience adapter check`: a good adapter (the example project's, the reference) passes and says what it
found; adapters with a first draft's mistakes get one message per mistake; a backend that cannot be made
is one clear error before any rank starts."""

import json
import os

import pytest

from resilience.cli import main

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "inhouse")


def _said(out: str) -> str:
    return " ".join(out.split())  # the report pads its columns


@pytest.fixture
def example_on_path(monkeypatch):
    monkeypatch.syspath_prepend(os.path.abspath(EXAMPLE))  # as PYTHONPATH=. from the example's folder


@pytest.mark.multiprocess
def test_the_example_adapter_has_no_problem(example_on_path, capsys):
    code = main(["adapter", "check", "ckptlib_resilience:factory"])
    out = capsys.readouterr().out
    assert code == 0, out
    said = _said(out)
    for line in [
        "backend 'ckptlib'; declared combinations: LOCAL/torch/sync",
        "load of an empty folder CheckpointNotFound, as the protocol asks",
        "save on tp2pp1dp1 iterations 2 and 3 saved",
        "list_checkpoints iteration 3 (complete), iteration 2 (complete)",
        "load on tp2pp1dp1 iteration 3 bit-exact, RNG restored",
        "load on tp1pp1dp2 refused clearly (TopologyChangeRefused:",
        "round trip on tp1pp1dp2 iteration 3 saved and loaded bit-exact",
        "load on tp1pp1dp1 (dp alone) refused clearly (TopologyChangeRefused: iteration 3 was saved on tp1pp1dp2",
        "files per save 3: iter_{iteration}/index.json (metadata), iter_{iteration}/rank_0.pt (data), "
        "iter_{iteration}/rank_1.pt (data)",
        "metadata files iter_{iteration}/index.json",
        "tracker latest.txt",
        "I/O outside the storage seam (plain open()/torch.save)",
        "go through the fault-injecting file system (--io auto, the default; docs/io.md)",
        "no problem found (1 combination checked); next: resilience matrix --backend ckptlib_resilience:factory",
    ]:
        assert line in said, line


@pytest.mark.multiprocess
def test_the_reference_has_no_problem_and_the_evidence_is_kept(tmp_path, capsys):
    code = main(["adapter", "check", "reference", "--combos", "GLOBAL/torch_dist/sync", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    said = _said(out)
    assert "load on tp1pp1dp2 iteration 3 bit-exact after tp2pp1dp1->tp1pp1dp2" in said
    assert "load on tp1pp1dp1 (dp alone) iteration 3 bit-exact after tp1pp1dp2->tp1pp1dp1" in said
    assert "I/O through the storage seam (resilience.storage)" in said and "notes:" not in said
    assert "tracker latest_checkpointed_iteration.txt" in said
    (kept,) = tmp_path.iterdir()
    report = json.loads((kept / "adapter-check.json").read_text())
    assert report["ok"] and report["combos"][0]["layout"]["seam"] is True


@pytest.mark.multiprocess
@pytest.mark.parametrize(
    "factory, problems",
    [
        (
            "sloppy",
            [
                "the factory declares no `combinations`, so the matrix and the pytest plugin run all six (it refuses "
                "LEGACY/torch/sync, GLOBAL/torch_dist/sync",
                "LOCAL/torch/sync: load of an empty folder raised FileNotFoundError:",
                "raise CheckpointNotFound (any other error counts as a crash of the rank, verdict UNKNOWN)",
                "LOCAL/torch/sync: list_checkpoints returned int items without a proper iteration, path, complete, "
                "problem: return resilience.backends.CheckpointInfo(",
                "LOCAL/torch/sync: load returned a dict without iteration, path, rng_restored, warnings: return "
                "resilience.backends.LoadResult(",
                "LOCAL/torch/sync: load on tp1pp1dp2 (tp2pp1dp1->tp1pp1dp2) raised RuntimeError:",
                "raise TopologyChangeRefused for a topology you do not load on",
            ],
        ),
        (
            "forgetful",
            [
                "GLOBAL/torch_dist/sync: load on tp2pp1dp1: the loaded state differs from what was saved: fill "
                "every ShardedTensor's data in place and pass the other records' values to state.load_objects",
                "GLOBAL/torch_dist/sync: load on tp1pp1dp2: refused, but its contract (tp, pp, dp, ep, etp, cp, "
                "vpp load (preset of GLOBAL/torch_dist/sync)) promises tp2pp1dp1->tp1pp1dp2 loads: the topology "
                "checker will FAIL every such change; if refusing is intended, state what it does: factory.contract",
                "factory.io_through_seam is True, but iter_{iteration}/index.json, iter_{iteration}/rank_0.pt, "
                "iter_{iteration}/rank_1.pt are written around resilience.storage: under --io auto its in-process "
                "faults (a crash at a byte, io_error, torn and short writes, power loss) aimed at them are "
                "UNPROBED; drop io_through_seam",
                "GLOBAL/torch_dist/sync: load on tp1pp1dp1 (dp alone): refused, but its contract (tp, pp, dp, "
                "ep, etp, cp, vpp load (preset of GLOBAL/torch_dist/sync)) promises tp1pp1dp2->tp1pp1dp1 loads",
            ],
        ),
        (
            "promises_dp",
            [
                "LOCAL/torch/sync: load on tp1pp1dp1 (dp alone): refused, but its contract (tp, pp refuse; dp "
                "load (stated by tests.runner.bad_adapters:promises_dp)) promises tp1pp1dp2->tp1pp1dp1 loads: "
                "the topology checker will FAIL every such change",
            ],
        ),
    ],
)
def test_each_mistake_of_a_draft_adapter_is_one_message(capsys, factory, problems):
    code = main(["adapter", "check", f"tests.runner.bad_adapters:{factory}"])
    out = capsys.readouterr().out
    assert code == 1, out
    said = _said(out)
    for p in problems:
        assert p in said, p
    count = {"sloppy": 5, "forgetful": 4, "promises_dp": 1}[factory]  # the same mistake twice is said once
    assert f"{count} problem{'s' if count > 1 else ''}:" in out, out


@pytest.mark.parametrize(
    "backend, says",
    [
        (
            "no_such_module:factory",
            "make 'no_such_module' importable: run from the folder that holds it with PYTHONPATH=.",
        ),
        ("os:system", "'os:system' is a builtin_function_or_method, not a backend factory"),
        ("tests.runner.bad_adapters:refuses_everything", "refuses every combination asked for (LEGACY/torch/sync, "),
        ("tests.backends.test_protocol:no_load", "NoLoad has no load, list_checkpoints"),
        ("tests.runner.bad_adapters:vague", "contract.tp: unknown promise 'maybe' (use 'load' (must load exactly) or "),
    ],
)
def test_a_backend_that_cannot_be_made_is_one_clear_error(capsys, tmp_path, backend, says):
    assert main(["adapter", "check", backend, "--out", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert err.startswith("resilience adapter: error: backend") and err.count("\n") == 1 and says in err, err
    assert "Traceback" not in out + err
    assert not os.listdir(tmp_path)  # nothing was started, nothing kept
