"""Every command line of cli-inputs.txt (careless or hostile input, one a line, arguments after
`resilience`) gives one clear error with exit status 2 and no traceback, or, for the few lines that are
valid, a correct run; within a bound, and leaving nothing behind.

`OUT/` in a line is a scratch folder of the test holding `afile` (a regular file), `nonempty` (a folder
with no checkpoint) and `corpus_garbage` (a folder whose corpus.json is not JSON); `scenarios/tNN.yaml`
are the bad scenario files beside this module. Each line runs in its own process, forked by one driver
process that imported the command line once (tests/redteam/cli_driver.py): 97 lines, one torch import."""

from __future__ import annotations

import glob
import json
import os
import shlex
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LINES = [line.rstrip("\n") for line in open(os.path.join(HERE, "cli-inputs.txt"), encoding="utf-8") if line.strip()]
# valid lines: (number in the file, 1-based) -> the exit statuses of a correct run
VALID = {25: (0,)}  # fuzz with a huge example count and a 1 s time budget: stops at the budget, passes
SLOW = set(VALID)  # lines that run ranks: their own test, so the two halves run in parallel
TIMEOUT = 120.0


def _argv(line: str, out: str) -> list[str]:
    if line == "(none)":
        return []
    argv = []
    for token in shlex.split(line):
        if token.startswith("OUT/"):
            token = os.path.join(out, token[4:])
        elif token.startswith("scenarios/"):
            token = os.path.join(HERE, token)
        argv.append(token)
    return argv


def _scratch(base: str) -> tuple[str, str]:
    """A working folder and its OUT/, laid out as the lines expect."""
    out = os.path.join(base, "OUT")
    os.makedirs(os.path.join(out, "nonempty"))
    os.makedirs(os.path.join(out, "corpus_garbage"))
    with open(os.path.join(out, "afile"), "w") as f:
        f.write("not a folder\n")
    with open(os.path.join(out, "nonempty", "notes.txt"), "w") as f:
        f.write("no checkpoint here\n")
    with open(os.path.join(out, "corpus_garbage", "corpus.json"), "w") as f:
        f.write("{not json")
    return base, out


def _tree(path: str) -> set[str]:
    return {os.path.relpath(os.path.join(d, n), path) for d, dirs, files in os.walk(path) for n in dirs + files}


def _run(numbers: list[int], tmp_path) -> list[tuple[int, str, dict, set, set]]:
    jobs, scratch = [], []
    for n in numbers:
        cwd, out = _scratch(str(tmp_path / f"line{n:02d}"))
        scratch.append((cwd, _tree(cwd)))
        jobs.append({"argv": _argv(LINES[n - 1], out), "cwd": cwd, "timeout": TIMEOUT})
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "cli_driver.py")],
        input=json.dumps(jobs),
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT * len(jobs) + 120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout)
    return [(n, LINES[n - 1], r, before, _tree(cwd)) for n, r, (cwd, before) in zip(numbers, results, scratch)]


def _problems(n: int, line: str, r: dict, before: set, after: set) -> list[str]:
    said = r["stdout"] + r["stderr"]
    bad = []
    if r["timed_out"]:
        bad.append(f"still running after {TIMEOUT:g} s")
    if "Traceback" in said:
        bad.append("printed a traceback")
    if n in VALID:
        if r["rc"] not in VALID[n]:
            bad.append(f"exit status {r['rc']}, expected {VALID[n]}")
    else:
        if r["rc"] != 2:
            bad.append(f"exit status {r['rc']}, expected 2")
        lines = [x for x in r["stderr"].splitlines() if x.strip()]
        if not lines or "error" not in lines[-1]:
            bad.append("no error as the last line of stderr")
        elif sum("error" in x for x in lines) != 1:
            bad.append("more than one error line")
        if after != before:
            bad.append(f"left behind {sorted(after - before)[:5]}")
    return [f"line {n} `resilience {line}`: {', '.join(bad)}\n  stderr: {r['stderr'][-600:]!r}"] if bad else []


@pytest.fixture
def redteam_leftovers():
    before = set(glob.glob("/tmp/resilience-redteam-*"))
    yield
    new = set(glob.glob("/tmp/resilience-redteam-*")) - before
    assert not new, f"a command line wrote outside its run: {sorted(new)}"


def test_bad_command_lines_are_one_clear_error(tmp_path, redteam_leftovers):
    numbers = [n for n in range(1, len(LINES) + 1) if n not in SLOW]
    results = _run(numbers, tmp_path)
    problems = [p for res in results for p in _problems(*res)]
    assert not problems, f"{len(problems)} of {len(numbers)} lines:\n" + "\n".join(problems)


def test_valid_command_lines_run_correctly(tmp_path, redteam_leftovers):
    results = _run(sorted(SLOW), tmp_path)
    problems = [p for res in results for p in _problems(*res)]
    assert not problems, "\n".join(problems)
    timings = {n: r["seconds"] for n, _, r, _, _ in results}
    assert all(r["rc"] in VALID[n] for n, _, r, _, _ in results), timings


def test_the_installed_entry_point_gives_the_same_clear_error(tmp_path):
    """The driver runs main() as the `resilience` script does: check it on one line through python -m."""
    cwd, out = _scratch(str(tmp_path / "entry"))
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, "-m", "resilience.cli", "matrix", "--backend", "os:system"],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "not a backend factory" in proc.stderr.splitlines()[-1]
