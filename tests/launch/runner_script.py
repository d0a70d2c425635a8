"""A runner as a test kills it: a Job of ranks stuck in a long "save", each with children of its own.

    python runner_script.py OUT START_METHOD [handle]

Every rank makes temporary files, writes OUT/pids/<name> for itself, a forked child (as megatron-core
forks its writers) and a subprocess, then sleeps. With `handle`, SIGTERM and SIGINT end the runner as
`resilience` does; it then writes OUT/after.json: the exception it caught and the recorded processes
still alive at that point."""

import json
import multiprocessing.util
import os
import signal
import subprocess
import sys
import tempfile
import time

import psutil

from resilience.launch import Job


def record(out: str, name: str, pid: int) -> None:
    folder = os.path.join(out, "pids")
    tmp = os.path.join(folder, f".{name}")
    with open(tmp, "w") as f:
        f.write(str(pid))
    os.replace(tmp, os.path.join(folder, name))


def long_save(ctx, out: str):
    tempfile.mkstemp()  # temp files of the rank's own and of multiprocessing's, for the job's folder to hold
    multiprocessing.util.get_temp_dir()
    child = os.fork()
    if child == 0:  # a forked writer: sleeps as long as its rank
        time.sleep(3600)
        os._exit(0)
    sleeper = subprocess.Popen(["sleep", "3600"])
    record(out, f"rank{ctx.rank}-fork", child)
    record(out, f"rank{ctx.rank}-sleep", sleeper.pid)
    record(out, f"rank{ctx.rank}", os.getpid())
    time.sleep(3600)


def alive(out: str) -> list[int]:
    pids = []
    for name in os.listdir(os.path.join(out, "pids")):
        if not name.startswith("."):
            with open(os.path.join(out, "pids", name)) as f:
                pids.append(int(f.read()))
    running = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                running.append(pid)
        except psutil.NoSuchProcess:
            pass
    return running


def main() -> int:
    out, start_method = sys.argv[1], sys.argv[2]
    handle = sys.argv[3:] == ["handle"]
    os.makedirs(os.path.join(out, "pids"), exist_ok=True)
    job = Job(long_save, 2, args=(out,), timeout=600, start_method=start_method)
    if not handle:
        job.start().wait()
        return 0
    from resilience.cli import stop_on_signals
    from resilience.errors import Interrupted

    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with SIGINT ignored
    try:
        with stop_on_signals():
            job.start().wait()
    except (KeyboardInterrupt, Interrupted) as e:
        with open(os.path.join(out, "after.json"), "w") as f:
            json.dump({"caught": type(e).__name__, "alive": alive(out)}, f)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
