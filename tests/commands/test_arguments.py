"""Bad arguments to each command, in-process through resilience.cli.main: exit status 2, one line that
says `error:` (the last line of stderr, after argparse's usage when argparse found it) naming the
option and the value, no traceback, nothing written. None of these lines starts a rank."""

from __future__ import annotations

import argparse
import os
import re

import pytest

from resilience.cli import main
from resilience.commands.common import (
    MAX_SECONDS,
    MAX_SEED,
    combination_arg,
    nonnegative_int,
    positive_float,
    positive_int,
    seed_arg,
    topology_arg,
    transition_arg,
)

ENDPOINT = ["--nproc-per-node", "2", "--rdzv-endpoint", "127.0.0.1:29500"]

# (arguments, what the one error line says); OUT/ is a scratch folder holding `afile`, a regular file
CASES = [
    (["nosuchcmd"], "resilience: error: argument COMMAND: invalid choice: 'nosuchcmd'"),
    ([], "resilience: error: the following arguments are required: COMMAND"),
    (["matrix", "--combos", "FOO"], "resilience matrix: error: argument --combos: combination: cannot read 'FOO'"),
    (
        ["matrix", "--combos", "LOCAL/torch_dist/async"],
        "argument --combos: format: LOCAL/torch_dist/async is not a valid combination: LOCAL means",
    ),
    (
        ["matrix", "--faults", "meteor", "--out", "OUT/m"],
        "resilience matrix: error: --faults: unknown fault column 'meteor'",
    ),
    (
        ["matrix", "--transitions", "garbage", "--out", "OUT/m"],
        "resilience matrix: error: transition: cannot read 'garbage'",
    ),
    (["matrix", "--seed", "abc"], f"argument --seed: must be an integer from 0 to {MAX_SEED}, got 'abc'"),
    (
        ["matrix", "--backend", "os:system", "--out", "OUT/m"],
        "error: backend: 'os:system' is a builtin_function_or_method, not a backend factory",
    ),
    (["run"], "resilience run: error: the following arguments are required: scenarios"),
    (["run", "OUT/nope.yaml"], "resilience run: error: scenario: OUT/nope.yaml does not exist"),
    (["run", "--seed", "-1", "x.yaml"], "resilience run: error: argument --seed: must be an integer from 0"),
    (["run", "--repeat", "0", "x.yaml"], "resilience run: error: argument --repeat: must be a whole number of runs"),
    (["run", "--repeat", "x", "x.yaml"], "argument --repeat: must be a whole number of runs from 1 to 100, got 'x'"),
    (["matrix", "--repeat", "0"], "resilience matrix: error: argument --repeat: must be a whole number of runs"),
    (["matrix", "--repeat", "101"], "argument --repeat: must be a whole number of runs from 1 to 100, got '101'"),
    (["fuzz", "--examples", "0"], "resilience fuzz: error: argument --examples: must be a positive integer, got '0'"),
    (["fuzz", "--max-world", "65"], "argument --max-world: must be a whole number of ranks from 1 to 64, got '65'"),
    (["fuzz", "--time-budget", "nan"], "argument --time-budget: must be a positive number of seconds, at most 604800"),
    (["fuzz", "--faults", "meteor"], "resilience fuzz: error: faults: unknown value 'meteor'"),
    (["fuzz", "--mode", "banana"], "resilience fuzz: error: argument --mode: invalid choice: 'banana'"),
    (["fuzz", "--faults", "rank_kill", "--out", "OUT/f"], "resilience fuzz: error: faults: "),
    (["inspect", "OUT/nonexistent"], "resilience inspect: error: OUT/nonexistent: no such folder"),
    (["inspect", "OUT/afile"], "resilience inspect: error: OUT/afile: not a folder"),
    (["combos", "extra"], "error: unrecognized arguments: extra"),
    (["broken", "--names", "nosuch", "--out", "OUT/b"], "no broken implementation 'nosuch' (choose from "),
    (["validate"], "resilience validate: error: validate: to print the command lines it needs --shared"),
    (
        ["validate", "--local", "--shared", "OUT/v", "--out", "OUT"],
        "resilience validate: error: --out: given with --shared (give --shared (that folder) or --out",
    ),
    (["validate", "--out", "OUT/afile", "--nnodes", "2", *ENDPOINT], "resilience validate: error: --out: "),
    (
        ["validate", "--shared", "OUT/v", "--nnodes", "0", *ENDPOINT],
        "argument --nnodes: must be a positive integer, got '0'",
    ),
    (
        ["validate", "--shared", "OUT/v", "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-endpoint", "nohostport"],
        "resilience validate: error: rdzv_endpoint: cannot read 'nohostport'",
    ),
    (["corpus"], "resilience corpus: error: the following arguments are required: VERB"),
    (["corpus", "verify", "OUT/nonexistent"], "resilience corpus: error: OUT/nonexistent: no corpus.json"),
    (["corpus", "write", "OUT/afile"], "resilience corpus: error: corpus: OUT/afile is a file, not a folder"),
    (["demo", "--steps", "0"], "resilience demo: error: argument --steps: must be a positive integer, got '0'"),
    (["demo", "--topology", "tp0pp1dp1"], "resilience demo: error: argument --topology:"),
    (["report", "OUT"], "resilience report: error: report: OUT is not a run folder: it has no run.json"),
    # where checkpoints go: each bad --storage / --endpoint-url is refused before a server or a folder starts
    (["matrix", "--storage", "s3://Bad_Bucket/x"], "argument --storage: --storage: bucket name 'Bad_Bucket'"),
    (["matrix", "--storage", "gs://b/p"], "argument --storage: --storage: unknown storage 'gs://b/p'"),
    (["matrix", "--storage", "s3://b/../up"], "argument --storage: --storage:"),
    (
        [
            "matrix",
            "--faults",
            "kill",
            "--combos",
            "GLOBAL/torch_dist/sync",
            "--endpoint-url",
            "http://127.0.0.1:9",
            "--out",
            "OUT/m",
        ],
        "--endpoint-url: an endpoint was given, but no case keeps its checkpoints on S3",
    ),
    (
        ["matrix", "--faults", "kill", "--storage", "s3://bucket/run", "--endpoint-url", "ftp://x", "--out", "OUT/m"],
        "--endpoint-url: 'ftp://x' is not an endpoint URL",
    ),
    (
        [
            "matrix",
            "--faults",
            "kill",
            "--storage",
            "s3://bucket/run",
            "--endpoint-url",
            "http://127.0.0.1:9",
            "--out",
            "OUT/m",
        ],
        "credentials: no credentials for http://127.0.0.1:9 (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)",
    ),
    (
        ["matrix", "--faults", "io_error", "--storage", "s3", "--io", "fuse", "--out", "OUT/m"],
        "--io: the fault-injecting file system mounts over a folder, not an object store",
    ),
    (
        ["matrix", "--faults", "kill", "--storage", "s3", "--backend", "nvrx", "--out", "OUT/m"],
        "writes its own files, outside resilience.storage, so they would never reach the object store",
    ),
]


@pytest.fixture(autouse=True)
def _no_aws_credentials(monkeypatch):
    """The endpoint cases expect no credentials in the environment, whatever the machine has."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)


def _main(argv: list[str]) -> int:
    """main() as the console script sees it: argparse's own errors leave by SystemExit."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


@pytest.mark.parametrize("argv, says", CASES, ids=[" ".join(a) or "(none)" for a, _ in CASES])
def test_a_bad_argument_is_one_clear_error(tmp_path, capsys, argv, says):
    out = tmp_path / "OUT"
    out.mkdir()
    (out / "afile").write_text("not a folder\n")
    argv = [str(out) + a[3:] if a.startswith("OUT") else a for a in argv]
    assert _main(argv) == 2
    stdout, err = capsys.readouterr()
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and err.rstrip("\n").splitlines()[-1] == errors[0], err
    assert says.replace("OUT", str(out)) in errors[0], errors[0]
    assert "Traceback" not in err + stdout
    assert sorted(os.listdir(out)) == ["afile"]  # no run folder, corpus or validate folder was started


@pytest.mark.parametrize(
    "parse, good, bad",
    [
        (positive_int, {"1": 1, "64": 64}, ["0", "-1", "1.5", "abc", ""]),
        (nonnegative_int, {"0": 0, "7": 7}, ["-1", "x"]),
        (
            positive_float,
            {"0.5": 0.5, str(MAX_SECONDS): MAX_SECONDS},
            ["0", "-1", "nan", "inf", str(MAX_SECONDS * 2), "1e400", "abc"],
        ),
        (seed_arg, {"0": 0, str(MAX_SEED): MAX_SEED}, ["-1", str(MAX_SEED + 1), "1e3", "0x10", "9" * 40]),
    ],
)
def test_number_arguments_take_their_range_and_refuse_the_rest(parse, good, bad):
    assert {text: parse(text) for text in good} == good
    for text in bad:
        with pytest.raises(argparse.ArgumentTypeError, match="^must be .*" + re.escape(f", got {text!r}") + "$"):
            parse(text)


def test_topology_combination_and_transition_arguments_say_what_to_write():
    assert str(topology_arg("tp2pp1dp4")) == "tp2pp1dp4"
    assert str(combination_arg("GLOBAL/torch_dist/async")) == "GLOBAL/torch_dist/async"
    assert str(transition_arg("tp2pp1dp1->tp1pp1dp2")) == "tp2pp1dp1->tp1pp1dp2"
    for parse, text, says in [
        (topology_arg, "tp0pp1dp1", "topology"),
        (combination_arg, "FOO", "TYPE/format/io"),
        (transition_arg, "garbage", "tp2pp1dp1->tp1pp1dp2"),
    ]:
        with pytest.raises(argparse.ArgumentTypeError, match=says):
            parse(text)
