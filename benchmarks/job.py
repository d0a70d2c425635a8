"""What `resilience job` costs on a 2-rank example job: its wall time through the fault-injecting mount
against the bare job (the same command on a plain folder), and the whole matrix (the golden run and every
column) against the 5-minute target of the 2-core machine.

The bare and mounted runs are interleaved within each repeat so a change of machine load hits them alike;
medians and their ratio are printed (target: within 1.5x), then the matrix's wall time and verdicts.
Nothing is asserted.

    python -m benchmarks job [--repeats 3] [--no-matrix] [--json FILE] [-- COMMAND with {ckpt}]

The default command: torchrun --nproc-per-node 2 examples/jobs/ddp_torchsave.py --ckpt-dir {ckpt}."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from resilience.commands.common import positive_int

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = [
    sys.executable,
    "-m",
    "torch.distributed.run",
    "--nproc-per-node",
    "2",
    os.path.join(ROOT, "examples", "jobs", "ddp_torchsave.py"),
    "--ckpt-dir",
    "{ckpt}",
]
MOUNT_TARGET, MATRIX_TARGET = 1.5, 300.0


def bare_run(argv: list[str], folder: str) -> float:
    """Seconds for one run of the command on a plain folder (no mount), which must exit 0."""
    ckpt = os.path.join(folder, "ckpt")
    os.makedirs(ckpt)
    env = {**os.environ, "RESILIENCE_CKPT_DIR": ckpt, "TMPDIR": folder}
    t0 = time.perf_counter()
    done = subprocess.run([a.replace("{ckpt}", ckpt) for a in argv], env=env, capture_output=True, timeout=900)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"the bare job failed (exit {done.returncode}): {done.stdout.decode()[-2000:]}")
    return seconds


def mounted_run(argv: list[str], folder: str) -> float:
    """Seconds for one run through the mount, as every case's run is made (resilience.job.process)."""
    from resilience.job.command import JobCommand
    from resilience.job.patterns import Patterns
    from resilience.job.process import run_once

    run = run_once(
        JobCommand.parse(argv, out=folder),
        index=0,
        folder=os.path.join(folder, "run"),
        backing=os.path.join(folder, "disk"),
        mountpoint=os.path.join(folder, "ckpt"),
        patterns=Patterns.from_options(),
        timeout=900,
    )
    if not run.ok:
        raise SystemExit(f"the mounted job failed ({run.ended()}): {run.observed.tail[-10:]}")
    return run.seconds


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks job", description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=positive_int, default=3, help="bare and mounted runs each (default 3)")
    p.add_argument("--no-matrix", action="store_true", help="leave out the whole matrix")
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the job's command, with {ckpt}")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    command = command or DEFAULT
    from resilience.fusefs import fuse_available

    ok, why = fuse_available()
    if not ok:
        print(f"job: skipped: {why}")
        return 0
    work = tempfile.mkdtemp(prefix="bench-job-")
    try:
        bare, mount = [], []
        for i in range(args.repeats):
            bare.append(bare_run(command, os.path.join(work, f"bare-{i}")))
            mount.append(mounted_run(command, os.path.join(work, f"mount-{i}")))
        b, m = statistics.median(bare), statistics.median(mount)
        ratio = m / b
        print(f"job: {' '.join(command)}")
        print(f"  bare run    median {b:6.2f} s  ({', '.join(f'{s:.2f}' for s in bare)})")
        print(f"  mounted run median {m:6.2f} s  ({', '.join(f'{s:.2f}' for s in mount)})")
        print(f"  mounted / bare: {ratio:.2f}x (target <= {MOUNT_TARGET}x: {_met(ratio <= MOUNT_TARGET)})")
        figures = {
            "command": command,
            "bare": bare,
            "mounted": mount,
            "ratio": ratio,
            "ratio_met": ratio <= MOUNT_TARGET,
        }
        if not args.no_matrix:
            figures.update(_matrix(command, os.path.join(work, "matrix")))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)
    return 0


def _matrix(command: list[str], out: str) -> dict:
    from collections import Counter

    from resilience.job.command import JobCommand
    from resilience.job.matrix import run_job
    from resilience.job.options import JobOptions

    t0 = time.perf_counter()
    done = run_job(JobOptions(JobCommand.parse(command, out=out), out=out, matrix=True))
    seconds = time.perf_counter() - t0
    verdicts = Counter(str(r.verdict) for r in done.rows)
    met = seconds < MATRIX_TARGET
    print(
        f"  matrix: {len(done.rows)} columns in {seconds:.1f} s (golden {done.golden_seconds:.1f} s); "
        f"{', '.join(f'{n} {v}' for v, n in verdicts.items())} (target < {MATRIX_TARGET:g} s: {_met(met)})"
    )
    slowest = sorted(done.rows, key=lambda r: -r.seconds)[:3]
    print("  slowest columns: " + ", ".join(f"{r.column} {r.seconds:.1f} s" for r in slowest))
    return {
        "matrix_seconds": seconds,
        "golden_seconds": done.golden_seconds,
        "matrix_met": met,
        "columns": {r.column: {"verdict": str(r.verdict), "seconds": r.seconds} for r in done.rows},
    }


def _met(ok: bool) -> str:
    return "met" if ok else "not met"
