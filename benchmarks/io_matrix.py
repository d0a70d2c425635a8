"""What a matrix costs through the fault-injecting file system: the same matrix columns run three ways in
one run, each as `resilience matrix` in a subprocess, interleaved over the repeats so load hits them alike:

- reference/seam: the reference, faults in process (the baseline);
- reference/fuse: the reference, faults through the mounted file system: the file system's own cost;
- BACKEND/fuse: the foreign backend (megatron by default) through the file system, as users run it.

Printed: wall time of each matrix and the median seconds of a case, medians over the repeats, and the
ratios to the baseline. Nothing is asserted.

    python -m benchmarks io-matrix [--backend megatron] [--faults kill io_error lost_unsynced]
                                   [--combos GLOBAL/torch_dist/sync ...] [--repeats 1] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

from resilience.commands.common import positive_int
from resilience.fusefs import fuse_available

TIMEOUT = 3600.0  # seconds one matrix may take before it is given up


def run_matrix(backend: str, io: str, faults: list[str], combos: list[str], out: str) -> dict:
    """One `resilience matrix` run: its wall time, the seconds of each case, the verdicts."""
    cmd = [
        sys.executable,
        "-m",
        "resilience.cli",
        "matrix",
        "--backend",
        backend,
        "--io",
        io,
        "--faults",
        *faults,
        "--transitions",
        "none",
        "--out",
        out,
        "--combos",
        *combos,
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
    wall = time.perf_counter() - t0
    found = [os.path.join(out, d, "results.json") for d in sorted(os.listdir(out))]
    if not found or not os.path.exists(found[-1]):
        raise RuntimeError(f"{' '.join(cmd)} wrote no results (exit {proc.returncode}): {proc.stderr[-2000:]}")
    with open(found[-1]) as f:
        data = json.load(f)
    rows = data["rows"] if isinstance(data, dict) else data
    return {
        "wall_s": wall,
        "case_s": [r["seconds"] for r in rows],
        "verdicts": {f"{r['combo']} {r.get('column')}": r["verdict"] for r in rows},
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks io-matrix", description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="megatron", help="the foreign backend (default: megatron)")
    p.add_argument(
        "--faults",
        nargs="+",
        default=["kill", "io_error", "lost_unsynced"],
        help="matrix fault columns (default: the ones the way in decides)",
    )
    p.add_argument(
        "--combos",
        nargs="+",
        default=["GLOBAL/torch_dist/sync", "GLOBAL/torch_dist/async"],
        help="combinations every way runs (default: megatron's two)",
    )
    p.add_argument("--repeats", type=positive_int, default=1, metavar="N", help="runs of each way")
    p.add_argument("--json", metavar="FILE", help="also write the figures to FILE")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ok, why = fuse_available()
    if not ok:
        print(f"io-matrix: not measured, {why}")
        return 0
    ways = [("reference", "seam"), ("reference", "fuse"), (args.backend, "fuse")]
    print(
        f"io-matrix: columns {' '.join(args.faults)} x {len(args.combos)} combinations, {args.repeats} repeats, "
        f"ways {', '.join(f'{b}/{io}' for b, io in ways)}",
        flush=True,
    )
    runs: dict[str, list[dict]] = {f"{b}/{io}": [] for b, io in ways}
    with tempfile.TemporaryDirectory(prefix="bench-io-matrix-") as tmp:
        for r in range(args.repeats):
            for backend, io in ways:
                name = f"{backend}/{io}"
                out = os.path.join(tmp, f"{r}-{name.replace('/', '-')}")
                os.makedirs(out)
                runs[name].append(run_matrix(backend, io, args.faults, args.combos, out))
                got = runs[name][-1]
                print(
                    f"  {name:<18} run {r + 1}: {got['wall_s']:.1f} s, cases median "
                    f"{statistics.median(got['case_s']):.2f} s",
                    flush=True,
                )
    fig = {}
    for name, got in runs.items():
        fig[name] = {
            "wall_median_s": statistics.median(g["wall_s"] for g in got),
            "case_median_s": statistics.median(s for g in got for s in g["case_s"]),
            "verdicts": got[-1]["verdicts"],
        }
    base = fig["reference/seam"]
    for name, f in fig.items():
        f["wall_ratio"] = f["wall_median_s"] / base["wall_median_s"]
        f["case_ratio"] = f["case_median_s"] / base["case_median_s"]
        print(
            f"  {name:<18} matrix median {f['wall_median_s']:.1f} s ({f['wall_ratio']:.2f}x), case median "
            f"{f['case_median_s']:.2f} s ({f['case_ratio']:.2f}x); verdicts "
            f"{', '.join(sorted(set(f['verdicts'].values())))}"
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {
                    "benchmark": "io-matrix",
                    "version": 1,
                    "faults": args.faults,
                    "combos": args.combos,
                    "repeats": args.repeats,
                    "ways": fig,
                    "python": platform.python_version(),
                    "cpus": os.cpu_count(),
                    "load_average": os.getloadavg(),
                },
                fh,
                indent=2,
            )
            fh.write("\n")
        print(f"figures written to {args.json}")
    return 0
