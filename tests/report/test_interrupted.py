"""A run stopped early keeps what finished: Ctrl-C and SIGTERM write results.json, the reports and
junit.xml for the cases done, marked interrupted, and exit 130 / 143; a SIGKILLed run leaves its rows in
results.jsonl, which `resilience report DIR` turns into the reports, marked incomplete."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# six cheap cases (room for a slow test machine): the signal comes once the first row is in results.jsonl
CASES = 6
MATRIX = ["matrix", "--combos", "GLOBAL/torch_dist/sync", "--faults", *["save/load"] * CASES, "--transitions", "none"]
# the fuzzer's generated scenarios: many more examples than finish before the signal
FUZZ = ["fuzz", "--seed", "1", "--examples", "40", "--mode", "scenarios"]
LIMIT = 300.0


def _env():
    return dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _start(out: str, argv: list[str] = MATRIX) -> subprocess.Popen:
    # a temp folder of its own: killing the whole session also kills what would clean the shared one
    temp = os.path.join(out, "tmp")
    os.makedirs(temp, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-m", "resilience.cli", *argv, "--out", out],
        cwd=out,
        env=dict(_env(), TMPDIR=temp),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _wait_first_row(proc: subprocess.Popen, out: str) -> str:
    deadline = time.monotonic() + LIMIT
    while time.monotonic() < deadline:
        found = glob.glob(os.path.join(out, "*", "results.jsonl"))
        if found and os.path.getsize(found[0]) > 0:
            return os.path.dirname(found[0])
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    _kill_session(proc)
    pytest.fail(f"no row appeared: {proc.communicate()}")


def _kill_session(proc: subprocess.Popen) -> None:
    """SIGKILL the command and everything of its session (ranks included), then reap it."""
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[3]) == proc.pid:
                        os.kill(int(name), signal.SIGKILL)
            except (OSError, IndexError, ValueError):
                pass
    proc.wait(LIMIT)


def _interrupt(tmp_path, argv: list[str], sig: int, status: int) -> str:
    """Start the command, send `sig` once its first row is in, and check it stopped as asked: its run folder."""
    proc = _start(str(tmp_path), argv)
    try:
        run_dir = _wait_first_row(proc, str(tmp_path))
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=LIMIT)
    finally:
        if proc.poll() is None:
            _kill_session(proc)
    assert proc.returncode == status, err
    assert f"interrupted by {signal.Signals(sig).name}" in err and "Traceback" not in err
    return run_dir


def _read(run_dir: str, name: str) -> str:
    with open(os.path.join(run_dir, name), encoding="utf-8") as f:
        return f.read()


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_matrix_keeps_the_finished_cases(tmp_path, sig, status):
    run_dir = _interrupt(tmp_path, MATRIX, sig, status)
    rows = json.loads(_read(run_dir, "results.json"))
    assert 1 <= len(rows) < CASES and all(r["verdict"] == "PASS" for r in rows)
    meta = json.loads(_read(run_dir, "run.json"))
    assert meta["status"] == "interrupted" and meta["stopped_by"] == signal.Signals(sig).name
    assert "INTERRUPTED" in _read(run_dir, "report.md") and "INTERRUPTED" in _read(run_dir, "report.html")
    junit = _read(run_dir, "junit.xml")
    assert 'value="interrupted"' in junit and f'tests="{len(rows)}"' in junit


def test_a_killed_matrix_leaves_rows_that_report_turns_into_the_reports(tmp_path):
    proc = _start(str(tmp_path))
    try:
        run_dir = _wait_first_row(proc, str(tmp_path))
    finally:
        _kill_session(proc)
    assert not os.path.exists(os.path.join(run_dir, "results.json"))
    report = subprocess.run(
        [sys.executable, "-m", "resilience.cli", "report", run_dir],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=LIMIT,
    )
    assert report.returncode == 1 and "INCOMPLETE" in report.stdout, report.stderr  # an incomplete run never exits 0
    rows = json.loads(_read(run_dir, "results.json"))
    assert len(rows) >= 1 and rows[0]["verdict"] == "PASS"
    assert json.loads(_read(run_dir, "run.json"))["status"] == "incomplete"
    assert "INCOMPLETE" in _read(run_dir, "report.md") and 'value="incomplete"' in _read(run_dir, "junit.xml")


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_fuzz_keeps_a_row_per_finished_case_with_its_replay(tmp_path, sig, status):
    run_dir = _interrupt(tmp_path, FUZZ, sig, status)
    rows = json.loads(_read(run_dir, "results.json"))
    assert 1 <= len(rows) < 40 and all(r["replay"].startswith("resilience run ") for r in rows), rows
    assert json.loads(_read(run_dir, "run.json"))["status"] == "interrupted"
    assert "INTERRUPTED" in _read(run_dir, "report.md") and 'value="interrupted"' in _read(run_dir, "junit.xml")


def test_a_killed_fuzz_leaves_rows_that_report_turns_into_the_reports(tmp_path):
    proc = _start(str(tmp_path), FUZZ)
    try:
        run_dir = _wait_first_row(proc, str(tmp_path))
    finally:
        _kill_session(proc)
    report = subprocess.run(
        [sys.executable, "-m", "resilience.cli", "report", run_dir],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=LIMIT,
    )
    assert report.returncode == 1 and "INCOMPLETE" in report.stdout, report.stderr
    rows = json.loads(_read(run_dir, "results.json"))
    assert len(rows) >= 1 and all(r["replay"].startswith("resilience run ") for r in rows), rows
    assert "INCOMPLETE" in _read(run_dir, "report.md")
