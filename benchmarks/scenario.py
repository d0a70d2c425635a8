"""Scenario throughput: a 4-rank save, a rank killed mid-write, a resume on another topology.

Median wall time of one whole scenario (`run_case`: jobs, fault, history, checkers, verdict) with the warm
launcher (ranks forked from this process, which already imported torch and the checkpoint code) against
spawning fresh rank processes for every job, measured in the same run, interleaved. One warm-up run with
the fork launcher comes first and is not counted: it imports what the runner imports on first use.
Every run must end with verdict PASS (the crash fired, the resume loaded the last committed checkpoint;
REFUSED-AS-EXPECTED for LEGACY and LOCAL, which cannot change tp), or the timing is of a broken scenario
and the benchmark fails.

    python -m benchmarks scenario [--combo GLOBAL/torch_dist/sync] [--repeats 7] [--spawn-repeats 2] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

import torch

from resilience.checkers.base import PASS, REFUSED
from resilience.commands.common import combination_arg, nonnegative_int, positive_int
from resilience.runner.run import run_case
from resilience.runner.scenario import load_text
from resilience.vocab import Combination

TARGET_FORK_SECONDS = 1.0  # warm launcher: median wall time of one scenario, under
TARGET_SPEEDUP = 10.0  # spawn median / fork median, at least
TOPOLOGY, RESUME_ON = "tp2pp1dp2", "tp1pp1dp4"
GOOD = (PASS, REFUSED)  # LEGACY and LOCAL refuse the tp change, clearly: that is their correct outcome

SCENARIO = f"""
name: bench-kill-resume
topology: {TOPOLOGY}
steps:
  - train: 2
  - save
  - train: 1
  - crash: {{rank: 1, after_bytes: 256}}
  - save
  - resume: {{topology: {RESUME_ON}, continue: 1}}
"""


def run_once(start_method: str, combo: Combination) -> tuple[float, str, str]:
    """Seconds, verdict and detail of one scenario run in a fresh temp folder (removed after)."""
    scenario = load_text(SCENARIO, "bench.yaml")
    with tempfile.TemporaryDirectory(prefix="bench-scenario-") as d:
        t0 = time.perf_counter()
        result = run_case(scenario, combo, d, start_method=start_method)
        return time.perf_counter() - t0, result.verdict, result.detail


def _summary(seconds: list[float]) -> dict:
    if not seconds:
        return {"runs": 0}
    return {"runs": len(seconds), "median_s": statistics.median(seconds), "min_s": min(seconds),
            "max_s": max(seconds), "seconds": seconds}


def measure(combo: Combination, repeats: int, spawn_repeats: int, warmup: int) -> dict:
    times: dict[str, list[float]] = {"fork": [], "spawn": []}
    verdicts: list[dict] = []

    def one(method: str, counted: bool) -> None:
        seconds, verdict, detail = run_once(method, combo)
        verdicts.append({"start_method": method, "counted": counted, "seconds": seconds, "verdict": verdict,
                         "detail": detail})
        if counted:
            times[method].append(seconds)
        label = f"{method:<5} run {len(times[method])}" if counted else f"{method:<5} warm-up"
        print(f"  {label:<14} {seconds:7.3f} s  verdict {verdict}", file=sys.stderr, flush=True)

    for _ in range(warmup):
        one("fork", False)
    for i in range(max(repeats, spawn_repeats)):
        if i < repeats:
            one("fork", True)
        if i < spawn_repeats:
            one("spawn", True)
    return {"fork": _summary(times["fork"]), "spawn": _summary(times["spawn"]), "verdicts": verdicts}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks scenario", description=__doc__.split("\n")[0])
    p.add_argument("--combo", type=combination_arg, default=Combination.parse("GLOBAL/torch_dist/sync"),
                   metavar="TYPE/format/io", help="combination (default: GLOBAL/torch_dist/sync)")
    p.add_argument("--repeats", type=positive_int, default=7, metavar="N",
                   help="warm-launcher (fork) runs (default: 7)")
    p.add_argument("--spawn-repeats", type=nonnegative_int, default=2, metavar="N",
                   help="spawn runs, several seconds each; 0 skips spawn and the ratio (default: 2)")
    p.add_argument("--warmup", type=nonnegative_int, default=1, metavar="N",
                   help="fork runs first, not counted (default: 1)")
    p.add_argument("--json", metavar="FILE", help="also write the figures to FILE")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    combo = args.combo
    load_before = os.getloadavg()
    config = {"combo": str(combo), "scenario": f"{TOPOLOGY}: train 2, save, train 1, rank 1 crashes after 256 "
                                               f"bytes of the next save, resume on {RESUME_ON} and train 1",
              "repeats": args.repeats, "spawn_repeats": args.spawn_repeats, "warmup": args.warmup,
              "fork": "resilience.launch.Job start_method=fork from this process (torch already imported)",
              "spawn": "resilience.launch.Job start_method=spawn: every rank of every job imports torch",
              "timed": "run_case: every job, fault, history, checkers and verdict; fresh temp folder per run",
              "torch": torch.__version__, "python": platform.python_version(), "cpus": os.cpu_count()}
    print(f"scenario throughput: {combo}, {TOPOLOGY} save + crash mid-write + resume on {RESUME_ON}")
    print(f"  load average {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f} (1, 5, 15 min) at start, "
          f"{os.cpu_count()} cpus")
    fig = measure(combo, args.repeats, args.spawn_repeats, args.warmup)
    load_after = os.getloadavg()
    fork, spawn = fig["fork"], fig["spawn"]
    failed = [v for v in fig["verdicts"] if v["verdict"] not in GOOD]
    print(f"  warm launcher (fork)  median {fork['median_s']:.3f} s  min {fork['min_s']:.3f}  max {fork['max_s']:.3f}  "
          f"n={fork['runs']}")
    targets = {"fork_median_s": {"value": fork["median_s"], "limit": TARGET_FORK_SECONDS,
                                 "met": fork["median_s"] < TARGET_FORK_SECONDS}}
    print(f"  target median under {TARGET_FORK_SECONDS:g} s: {fork['median_s']:.3f} s, "
          f"{'met' if targets['fork_median_s']['met'] else 'MISSED'}")
    if spawn["runs"]:
        ratio = spawn["median_s"] / fork["median_s"]
        targets["spawn_over_fork"] = {"value": ratio, "limit": TARGET_SPEEDUP, "met": ratio >= TARGET_SPEEDUP}
        print(f"  fresh spawn           median {spawn['median_s']:.3f} s  min {spawn['min_s']:.3f}  "
              f"max {spawn['max_s']:.3f}  n={spawn['runs']}")
        print(f"  target spawn/fork at least {TARGET_SPEEDUP:g}x: {ratio:.1f}x, "
              f"{'met' if targets['spawn_over_fork']['met'] else 'MISSED'}")
    print(f"  load average {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} at the end")
    for v in failed:
        print(f"  run with {v['start_method']} ended {v['verdict']}: {v['detail']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "scenario", "version": 1, "config": config, **fig, "targets": targets,
                       "load_average": {"start": load_before, "end": load_after}}, f, indent=2)
            f.write("\n")
        print(f"figures written to {args.json}")
    return 1 if failed else 0
