"""Runs many `resilience` command lines, each in its own process, paying for the imports once.

Reads a JSON list of {"argv", "cwd", "timeout", "out"} on stdin; imports the command line and every
command's dependencies once; then for each line forks a child that starts a new session, runs
`resilience.cli.main(argv)` as the installed `resilience` script does (an uncaught exception prints its
traceback and exits 1), with its output in files. A child still running at its timeout is killed with
its whole session. Prints a JSON list of {"rc", "stdout", "stderr", "timed_out"}."""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
import traceback


def _preload() -> None:
    import importlib

    import resilience.cli as cli
    from resilience.commands import COMMANDS

    cli.build_parser()
    for name in COMMANDS:
        importlib.import_module(f"resilience.commands.{name}")
    for module in (
        "resilience.runner.run",
        "resilience.runner.matrix",
        "resilience.fuzz.engine",
        "resilience.cluster.corpus",
        "resilience.cluster.worker",
        "resilience.broken.suite",
        "resilience.state.demo",
        "resilience.checkpoint.inspect",
        "resilience.runner.case_loop",
    ):
        importlib.import_module(module)


def _child(argv: list[str], cwd: str, out: str, err: str) -> None:
    os.setsid()
    os.chdir(cwd)
    for fd, path in ((1, out), (2, err)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    sys.argv = ["resilience", *argv]
    signal.signal(signal.SIGINT, signal.default_int_handler)
    code = 1
    try:
        from resilience.cli import main

        code = main(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, int) and e.code is not None:
            print(e.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 1)


def run_line(argv: list[str], cwd: str, timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="cli-driver-") as tmp:
        out, err = os.path.join(tmp, "out"), os.path.join(tmp, "err")
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            try:
                _child(argv, cwd, out, err)
            finally:
                os._exit(1)
        timed_out = False
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() - start > timeout:
                timed_out = True
                _kill_session(pid)
                _, status = os.waitpid(pid, 0)
                break
            time.sleep(0.01)
        _kill_session(pid)  # whatever the command left running
        rc = os.waitstatus_to_exitcode(status)
        return {
            "rc": rc,
            "stdout": _read(out),
            "stderr": _read(err),
            "timed_out": timed_out,
            "seconds": round(time.monotonic() - start, 2),
        }


def _read(path: str) -> str:
    if not os.path.exists(path):
        return ""
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def _kill_session(sid: int) -> None:
    """SIGKILL every process of the session `sid` (the child made one of its own)."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid:  # field 6 of stat: the session id
                os.kill(int(name), signal.SIGKILL)
        except (OSError, IndexError, ValueError):
            pass


def main() -> None:
    lines = json.load(sys.stdin)
    _preload()
    results = [run_line(line["argv"], line["cwd"], line["timeout"]) for line in lines]
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
