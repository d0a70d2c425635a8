"""Scenario throughput: a 4-rank save, a rank killed mid-write, a resume on another topology.

Median wall time per scenario with the warm launcher (ranks forked from this process, which already
imported torch) against spawning fresh rank processes for every job, measured in the same run."""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

from resilience.checkpoint.combos import Combination
from resilience.runner.run import run_case
from resilience.runner.scenario import load_text

SCENARIO = """
name: bench-kill-resume
topology: tp2pp1dp2
steps:
  - train: 2
  - save
  - train: 1
  - crash: {rank: 1, after_bytes: 256}
  - save
  - resume: {topology: tp1pp1dp4, continue: 1}
"""


def measure(start_method: str, combo: Combination, repeats: int) -> tuple[list[float], str]:
    scenario = load_text(SCENARIO, "bench.yaml")
    times, verdict = [], ""
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            result = run_case(scenario, combo, d, start_method=start_method)
            times.append(time.perf_counter() - t0)
            verdict = result.verdict
    return times, verdict


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks scenario", description=__doc__)
    p.add_argument("--combo", default="GLOBAL/torch_dist/sync")
    p.add_argument("--repeats", type=int, default=7, help="warm-launcher runs (default 7)")
    p.add_argument("--spawn-repeats", type=int, default=2, help="spawn runs (default 2: ~10 s each here)")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    combo = Combination.parse(args.combo)
    print(f"scenario throughput: {combo}, tp2pp1dp2 save + crash mid-write + resume on tp1pp1dp4")
    fork, v1 = measure("fork", combo, args.repeats)
    spawn, v2 = measure("spawn", combo, args.spawn_repeats)
    mf, ms = statistics.median(fork), statistics.median(spawn)
    print(f"  warm launcher (fork)  median {mf:.3f} s  min {min(fork):.3f}  max {max(fork):.3f}  n={len(fork)}  "
          f"verdict {v1}")
    print(f"  fresh spawn           median {ms:.3f} s  min {min(spawn):.3f}  max {max(spawn):.3f}  n={len(spawn)}  "
          f"verdict {v2}")
    print(f"  ratio spawn/fork {ms / mf:.1f}x   target: < 1 s median ({'met' if mf < 1 else 'NOT met'}), "
          f">= 10x ({'met' if ms / mf >= 10 else 'NOT met'})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"fork": fork, "spawn": spawn, "median_fork": mf, "median_spawn": ms, "ratio": ms / mf}, f)
    return 0
