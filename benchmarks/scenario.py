"""Scenario throughput: a 4-rank save, a rank killed mid-write, a resume on another topology; where a
case's time goes; cases per minute of the matrix and the fuzzer (against a baseline tree); cost by world size.

Median wall time of one whole scenario (`run_case`: jobs, fault, history, checkers, verdict) with the warm
launcher (ranks forked from this process, which already imported torch and the checkpoint code) against
spawning fresh rank processes for every job, measured in the same run, interleaved. One warm-up run with
the fork launcher comes first and is not counted: it imports what the runner imports on first use.
Every run must end with verdict PASS (the crash fired, the resume loaded the last committed checkpoint;
REFUSED-AS-EXPECTED for LEGACY and LOCAL, which cannot change tp), or the timing is of a broken scenario
and the benchmark fails.

Where a case's time goes (`--breakdown`, on by default): the matrix's cases of a few columns judged into a
run folder with the runner's steps timed (benchmarks/casecost.py): learning the layout, forking the ranks, the
rest of a job's start (gloo, state, teardown), train, save, load, crash states, checkers, report, other.

Cases per minute (`--matrix-runs N`, `--fuzz-examples N`): `resilience matrix` over a few columns and
`resilience fuzz` with a fixed seed, each run as the user runs it (a fresh process, imports included, its
default options: this tree runs as many cases at a time as there are usable CPUs), for this tree and,
with `--baseline PATH`, for the tree at PATH (its own PYTHONPATH), interleaved; the verdicts of both must
agree when both ran the same scenarios (a seed draws other examples once the strategies change: then the
work drawn, ranks x steps, is printed for each instead). Target: this tree's cases per minute at least
TARGET_CASES_SPEEDUP x the baseline's.

Cost growth (`--worlds 2 4 8 16`): the kill-and-resume scenario on tp1pp1dp{W} (rank 0, which writes the
replica-0 pieces, killed mid-save; resume on the same world), wall and CPU seconds (this process and every
rank) per case and per rank, and the peak of the machine's memory in use while the case runs; target: time
per rank from world 4 to the largest within TARGET_RANK_GROWTH x. The worlds run in rounds (each world once
a round), so a shared machine's drift lands on all of them; the ratio is also printed round by round.
The same with experts (`--moe-worlds 16 64 128 256`): a model of 4 experts per layer on tp2pp2dp{W/4}ep4
(experts over 4 ranks, their optimizer rows over the expert-data-parallel group), rank 0 killed mid-save and
a resume; target: time per rank at every world up to MOE_TARGET_UP_TO within TARGET_RANK_GROWTH x of world
16. A world whose memory estimate passes the ceiling (a quarter of the machine) is printed as refused, with
the reason, and not run.
Every target line ends in `met` or `NOT met`; the machine's load average is printed at the start and the end.

    python -m benchmarks scenario [--combo GLOBAL/torch_dist/sync] [--repeats 7] [--spawn-repeats 2]
        [--baseline PATH] [--matrix-runs 1] [--fuzz-examples 6] [--worlds 2 4 8 16]
        [--moe-worlds 16 64 128 256] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace

import torch

from resilience.checkers.base import PASS, REFUSED
from resilience.commands.common import combination_arg, nonnegative_int, number_arg, positive_int
from resilience.errors import ResilienceError
from resilience.runner.run import run_case
from resilience.runner.scenario import load_file, load_text
from resilience.vocab import Combination

TARGET_FORK_SECONDS = 1.0  # warm launcher: median wall time of one scenario, under
TARGET_SPEEDUP = 10.0  # spawn median / fork median, at least
TARGET_CASES_SPEEDUP = 2.0  # cases per minute of this tree / the baseline's, at least
TARGET_RANK_GROWTH = 1.5  # time per rank at the largest world / at world 4, at most
MOE_TARGET_UP_TO = 128  # the MoE case's target holds up to this world (past it, figures only)
MATRIX_COMBOS = ["GLOBAL/torch_dist/sync", "LEGACY/torch/sync", "TORCH_DCP/torch_dcp/sync"]
MATRIX_FAULTS = ["kill", "bitflip", "io_error", "truncate", "lost_unsynced"]
MATRIX_TRANSITIONS = ["tp"]
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


def met(ok: bool) -> str:
    """How every target line ends."""
    return "met" if ok else "NOT met"


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
    return {
        "runs": len(seconds),
        "median_s": statistics.median(seconds),
        "min_s": min(seconds),
        "max_s": max(seconds),
        "seconds": seconds,
    }


def measure(combo: Combination, repeats: int, spawn_repeats: int, warmup: int) -> dict:
    times: dict[str, list[float]] = {"fork": [], "spawn": []}
    verdicts: list[dict] = []

    def one(method: str, counted: bool) -> None:
        seconds, verdict, detail = run_once(method, combo)
        verdicts.append(
            {"start_method": method, "counted": counted, "seconds": seconds, "verdict": verdict, "detail": detail}
        )
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


# ---- where a case's time goes ------------------------------------------------------------------------
def measure_breakdown(combos: list[Combination]) -> dict:
    from benchmarks.casecost import breakdown, matrix_cases

    cases = matrix_cases(combos, MATRIX_FAULTS, MATRIX_TRANSITIONS)
    print(
        f"  breakdown: {len(cases)} matrix cases ({', '.join(map(str, combos))} x "
        f"{', '.join(MATRIX_FAULTS + MATRIX_TRANSITIONS)})",
        file=sys.stderr,
        flush=True,
    )
    out = breakdown(cases)
    out["cases_per_minute"] = 60.0 * out["cases"] / out["wall_s"]
    return out


def report_breakdown(b: dict) -> None:
    n = b["cases"]
    print(
        f"where a case's time goes: {n} matrix cases in {b['wall_s']:.1f} s, "
        f"{b['cases_per_minute']:.1f} cases per minute (judged in this process)"
    )
    for bucket, seconds in b["seconds"].items():
        print(f"  {bucket:<14} {seconds / n:7.3f} s per case  {seconds / b['wall_s']:6.1%}")


# ---- cases per minute, against a baseline tree ---------------------------------------------------------
def _cli(tree: str, argv: list[str], out: str) -> tuple[float, float, list]:
    """Wall and CPU seconds (the command and every process it reaped) of `resilience ARGV --out OUT` run
    from `tree`, and its rows (results.json)."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "resilience.cli", *argv, "--out", out],
        env=env,
        cwd=tree,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=3600,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    runs = [os.path.join(out, d) for d in os.listdir(out)] if os.path.isdir(out) else []
    found = [os.path.join(r, "results.json") for r in runs if os.path.exists(os.path.join(r, "results.json"))]
    if not found:
        raise RuntimeError(
            f"{' '.join(argv)} in {tree} wrote no results.json (exit {proc.returncode}):\n{proc.stdout[-3000:]}"
        )
    with open(found[0]) as f:
        rows = json.load(f)
    for row in rows:  # what was run, read while the run folder exists
        row["drawn"] = _drawn(row.get("scenario_file"))
    return wall, cpu, rows


def _verdicts(rows: list) -> list:
    return sorted((r["combo"], r.get("column") or r.get("scenario"), r["verdict"]) for r in rows)


def _drawn(path: str | None) -> dict:
    """A case's scenario as run (its name left out) and its work: rank-steps, ranks times steps."""
    try:
        drawn = load_file(path or "")
    except ResilienceError:
        return {"scenario": None, "rank_steps": 0}
    return {
        "scenario": replace(drawn, name="").to_yaml(),
        "rank_steps": drawn.topology.world * len(drawn.steps),
    }


def _examples(rows: list) -> list:
    """The cases as drawn: equal lists mean both trees judged the same scenarios."""
    return sorted((r["combo"], r["drawn"]["scenario"] or "") for r in rows)


def measure_throughput(trees: dict[str, str], runs: int, fuzz_examples: int, combos: list[Combination]) -> dict:
    """{tree name: {"matrix": {...}, "fuzz": {...}}}: wall, CPU, cases and verdicts of each run, interleaved."""
    matrix = [
        "matrix",
        "--combos",
        *map(str, combos),
        "--faults",
        *MATRIX_FAULTS,
        "--transitions",
        *MATRIX_TRANSITIONS,
        "--seed",
        "0",
    ]
    fuzz = [
        "fuzz",
        "--examples",
        str(fuzz_examples),
        "--seed",
        "1",
        "--mode",
        "scenarios",
        "--combos",
        *map(str, combos),
    ]
    out: dict = {name: {"matrix": [], "fuzz": []} for name in trees}
    tmp = tempfile.mkdtemp(prefix="bench-throughput-")
    try:
        for i in range(runs):
            for kind, argv in (("matrix", matrix), ("fuzz", fuzz)):
                if kind == "fuzz" and not fuzz_examples:
                    continue
                order = list(trees) if i % 2 == 0 else list(trees)[::-1]
                for name in order:
                    wall, cpu, rows = _cli(trees[name], argv, os.path.join(tmp, f"{name}-{kind}-{i}"))
                    out[name][kind].append(
                        {
                            "wall_s": wall,
                            "cpu_s": cpu,
                            "cases": len(rows),
                            "verdicts": _verdicts(rows),
                            "examples": _examples(rows),
                            "rank_steps": sum(r["drawn"]["rank_steps"] for r in rows),
                        }
                    )
                    print(
                        f"  {kind:<6} {name:<9} {len(rows)} cases in {wall:6.1f} s (cpu {cpu:6.1f} s)",
                        file=sys.stderr,
                        flush=True,
                    )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def summarize_throughput(raw: dict) -> dict:
    fig: dict = {}
    for name, kinds in raw.items():
        for kind, runs in kinds.items():
            if not runs:
                continue
            wall = statistics.median(r["wall_s"] for r in runs)
            cases = runs[0]["cases"]
            fig.setdefault(kind, {})[name] = {
                "cases": cases,
                "median_wall_s": wall,
                "cases_per_minute": 60.0 * cases / wall,
                "cpu_s_per_case": statistics.median(r["cpu_s"] / max(1, r["cases"]) for r in runs),
                "runs": [r["wall_s"] for r in runs],
                "verdicts": runs[0]["verdicts"],
                "examples": runs[0]["examples"],
                "rank_steps": runs[0]["rank_steps"],
            }
    return fig


def report_throughput(fig: dict, targets: dict) -> None:
    for kind, trees in fig.items():
        for name, f in trees.items():
            print(
                f"  {kind:<6} {name:<9} {f['cases']} cases, median {f['median_wall_s']:6.1f} s: "
                f"{f['cases_per_minute']:6.2f} cases per minute, cpu {f['cpu_s_per_case']:.2f} s per case"
            )
        if "baseline" in trees and "this" in trees:
            t = targets[f"{kind}_cases_per_minute_vs_baseline"]
            if not t["same_examples"]:  # a seed draws other examples once the strategies change
                this, base = trees["this"]["rank_steps"], trees["baseline"]["rank_steps"]
                print(
                    f"  the trees drew different {kind} examples (the strategies changed since the baseline): "
                    f"verdicts not compared; work drawn, ranks x steps summed over the cases: this {this}, "
                    f"baseline {base}"
                )
            if not t["same_examples"]:
                same = "other examples"
            else:
                same = "same verdicts" if t["same_verdicts"] else "VERDICTS DIFFER"
            print(
                f"  target {kind} cases per minute at least {TARGET_CASES_SPEEDUP:g}x the baseline's: "
                f"{t['value']:.2f}x (cpu per case {t['cpu_ratio']:.2f}x less), {same}: {met(t['met'])}"
            )


# ---- cost growth with the world size ------------------------------------------------------------------
def _kill_and_resume(name: str, topology: str, model: str = "{}") -> str:
    """Train, save, rank 0 (which writes the replica-0 pieces) killed mid-save, a resume on the same world."""
    return f"""
name: {name}
topology: {topology}
model: {model}
steps:
  - train: 2
  - save
  - train: 1
  - crash: {{rank: 0, after_bytes: 256}}
  - save
  - resume: {{continue: 1}}
"""


def world_scenario(world: int) -> str:
    return _kill_and_resume(f"bench-world-{world}", f"tp1pp1dp{world}")


def moe_world_scenario(world: int) -> str:
    model = "{num_experts: 4, num_layers: 2, optimizer: distributed}"
    return _kill_and_resume(f"bench-moe-world-{world}", f"tp2pp2dp{world // 4}ep4", model)


def _cpu_seconds() -> float:
    """CPU seconds of this process and of every process it reaped (the ranks)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class _PeakMemory:
    """The machine's memory in use, sampled every 20 ms while the block runs: the peak above what was in use
    when it began (every rank and this process together; others' use on a shared machine is noise in it)."""

    def __enter__(self):
        import threading

        import psutil

        self._used, self._stop = psutil.virtual_memory().used, threading.Event()
        self.peak = 0

        def sample() -> None:
            while not self._stop.wait(0.02):
                self.peak = max(self.peak, psutil.virtual_memory().used - self._used)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _world_run(scenario, combo: Combination, world: int, i: int) -> tuple[float, float, int, str]:
    with tempfile.TemporaryDirectory(prefix="bench-world-") as d, _PeakMemory() as memory:
        c0, t0 = _cpu_seconds(), time.perf_counter()
        result = run_case(scenario, combo, d)
        took, used = time.perf_counter() - t0, _cpu_seconds() - c0
    print(
        f"  world {world:>3} run {i} {took:7.3f} s (cpu {used:6.2f} s) verdict {result.verdict}"
        f"{' (learns the layout, not counted)' if not i else ''}",
        file=sys.stderr,
        flush=True,
    )
    return took, used, memory.peak, str(result.verdict)


def measure_worlds(combo: Combination, worlds: list[int], repeats: int, scenario_of=world_scenario) -> dict:
    """Each world's case `repeats` times, in rounds that run every world once (interleaved): a shared
    machine's drift over minutes lands on every world alike, and each round gives a ratio of its own."""
    out: dict = {}
    scenarios = {}
    for world in worlds:
        try:
            scenarios[world] = load_text(scenario_of(world), f"bench-world-{world}.yaml")
        except ResilienceError as e:  # too large for this machine: said, not run
            out[str(world)] = {"refused": str(e)}
            print(f"  world {world:>3} refused: {e}", file=sys.stderr, flush=True)
    runs: dict[int, list] = {w: [] for w in scenarios}
    for i in range(repeats + 1):  # round 0 learns each layout: not counted
        for world, scenario in scenarios.items():
            runs[world].append(_world_run(scenario, combo, world, i))
    for world, rows in runs.items():
        seconds, cpu = [r[0] for r in rows[1:]], [r[1] for r in rows[1:]]
        median = statistics.median(seconds)
        out[str(world)] = {
            "median_s": median,
            "per_rank_s": median / world,
            "cpu_s": statistics.median(cpu),
            "cpu_per_rank_s": statistics.median(cpu) / world,
            "peak_mib": max(r[2] for r in rows[1:]) / 2**20,
            "runs": seconds,
            "verdicts": [r[3] for r in rows],
        }
    return dict(sorted(out.items(), key=lambda kv: int(kv[0])))


def world_growth(fig: dict, base: int = 4, up_to: int | None = None) -> dict | None:
    """Time per rank at the largest world run (up to `up_to`) over world `base`'s (and the same of CPU
    time); None without both. `paired`: the median of the same ratio taken round by round."""
    ran = [int(w) for w, f in fig.items() if "refused" not in f and (up_to is None or int(w) <= up_to)]
    largest = str(max(ran, default=base))
    if str(base) not in fig or "refused" in fig[str(base)] or largest == str(base):
        return None
    big, small = fig[largest], fig[str(base)]
    growth = big["per_rank_s"] / small["per_rank_s"]
    rounds = zip(big.get("runs", []), small.get("runs", []))
    paired = [(b / int(largest)) / (s / base) for b, s in rounds]
    return {
        "value": growth,
        "paired": statistics.median(paired) if paired else growth,
        "cpu_value": big["cpu_per_rank_s"] / small["cpu_per_rank_s"],
        "limit": TARGET_RANK_GROWTH,
        "base": str(base),
        "largest": largest,
        "met": growth <= TARGET_RANK_GROWTH,
    }


def report_worlds(fig: dict, target: dict | None, what: str = "tp1pp1dp{W}") -> None:
    print(f"cost by world size (kill mid-save and resume, {what}; median, layout learned beforehand)")
    head = f"{'s per case':>10}  {'s per rank':>10}  {'cpu s per case':>14}  {'cpu s per rank':>14}  {'peak MiB':>8}"
    print(f"  {'world':>5}  {head}")
    for world, f in fig.items():
        if "refused" in f:
            print(f"  {world:>5}  refused: {f['refused']}")
            continue
        wall, cpu = (
            f"{f['median_s']:10.3f}  {f['per_rank_s']:10.3f}",
            f"{f['cpu_s']:14.2f}  {f['cpu_per_rank_s']:14.3f}",
        )
        print(f"  {world:>5}  {wall}  {cpu}  {f.get('peak_mib', 0):8.0f}")
    if target is not None:
        print(
            f"  target time per rank at world {target['largest']} within {TARGET_RANK_GROWTH:g}x of world "
            f"{target['base']}: {target['value']:.2f}x (round by round {target['paired']:.2f}x; "
            f"cpu per rank {target['cpu_value']:.2f}x): {met(target['met'])}"
        )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks scenario", description=__doc__.split("\n")[0])
    p.add_argument(
        "--combo",
        type=combination_arg,
        default=Combination.parse("GLOBAL/torch_dist/sync"),
        metavar="TYPE/format/io",
        help="combination (default: GLOBAL/torch_dist/sync)",
    )
    p.add_argument(
        "--repeats", type=positive_int, default=7, metavar="N", help="warm-launcher (fork) runs (default: 7)"
    )
    p.add_argument(
        "--spawn-repeats",
        type=nonnegative_int,
        default=2,
        metavar="N",
        help="spawn runs, several seconds each; 0 skips spawn and the ratio (default: 2)",
    )
    p.add_argument(
        "--warmup", type=nonnegative_int, default=1, metavar="N", help="fork runs first, not counted (default: 1)"
    )
    p.add_argument(
        "--breakdown",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="where a case's time goes, over a few matrix columns (default: on)",
    )
    p.add_argument(
        "--baseline", metavar="PATH", help="a tree (git worktree) of the framework to measure cases per minute against"
    )
    p.add_argument(
        "--matrix-runs",
        type=nonnegative_int,
        default=1,
        metavar="N",
        help="runs of `resilience matrix` (and of the fuzzer) per tree, interleaved; 0 skips (default: 1)",
    )
    p.add_argument(
        "--fuzz-examples",
        type=nonnegative_int,
        default=6,
        metavar="N",
        help="examples of `resilience fuzz` per run; 0 skips the fuzzer (default: 6)",
    )
    p.add_argument(
        "--matrix-combos",
        type=combination_arg,
        nargs="+",
        default=None,
        metavar="TYPE/format/io",
        help=f"combinations of the breakdown, the matrix and the fuzzer (default: {' '.join(MATRIX_COMBOS)})",
    )
    p.add_argument(
        "--matrix-faults",
        nargs="+",
        default=MATRIX_FAULTS,
        metavar="COLUMN",
        help=f"fault columns of the breakdown and the matrix (default: {' '.join(MATRIX_FAULTS)})",
    )
    p.add_argument(
        "--worlds",
        type=positive_int,
        nargs="*",
        default=[2, 4, 8, 16],
        metavar="W",
        help="world sizes of the cost-growth scenario; none skips it (default: 2 4 8 16)",
    )
    p.add_argument(
        "--moe-worlds",
        type=number_arg(int, lambda v: v >= 8 and v % 8 == 0, "a multiple of 8 (tp 2 x pp 2 x dp W/4, ep 4)"),
        nargs="*",
        default=[16, 64, 128, 256],
        metavar="W",
        help="world sizes (multiples of 8) of the MoE kill-and-resume case; none skips it (default: 16 64 128 256)",
    )
    p.add_argument(
        "--world-repeats", type=positive_int, default=2, metavar="N", help="counted runs per world size (default: 2)"
    )
    p.add_argument("--json", metavar="FILE", help="also write the figures to FILE")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    combo = args.combo
    load_before = os.getloadavg()
    config = {
        "combo": str(combo),
        "scenario": f"{TOPOLOGY}: train 2, save, train 1, rank 1 crashes after 256 "
        f"bytes of the next save, resume on {RESUME_ON} and train 1",
        "repeats": args.repeats,
        "spawn_repeats": args.spawn_repeats,
        "warmup": args.warmup,
        "fork": "resilience.launch.Job start_method=fork from this process (torch already imported)",
        "spawn": "resilience.launch.Job start_method=spawn: every rank of every job imports torch",
        "timed": "run_case: every job, fault, history, checkers and verdict; fresh temp folder per run",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    print(f"scenario throughput: {combo}, {TOPOLOGY} save + crash mid-write + resume on {RESUME_ON}")
    print(
        f"  load average {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f} (1, 5, 15 min) at start, "
        f"{os.cpu_count()} cpus"
    )
    fig = measure(combo, args.repeats, args.spawn_repeats, args.warmup)
    fork, spawn = fig["fork"], fig["spawn"]
    failed = [v for v in fig["verdicts"] if v["verdict"] not in GOOD]
    print(
        f"  warm launcher (fork)  median {fork['median_s']:.3f} s  min {fork['min_s']:.3f}  max {fork['max_s']:.3f}  "
        f"n={fork['runs']}"
    )
    targets = {
        "fork_median_s": {
            "value": fork["median_s"],
            "limit": TARGET_FORK_SECONDS,
            "met": fork["median_s"] < TARGET_FORK_SECONDS,
        }
    }
    print(
        f"  target median under {TARGET_FORK_SECONDS:g} s: {fork['median_s']:.3f} s: "
        f"{met(targets['fork_median_s']['met'])}"
    )
    if spawn["runs"]:
        ratio = spawn["median_s"] / fork["median_s"]
        targets["spawn_over_fork"] = {"value": ratio, "limit": TARGET_SPEEDUP, "met": ratio >= TARGET_SPEEDUP}
        print(
            f"  fresh spawn           median {spawn['median_s']:.3f} s  min {spawn['min_s']:.3f}  "
            f"max {spawn['max_s']:.3f}  n={spawn['runs']}"
        )
        print(
            f"  target spawn/fork at least {TARGET_SPEEDUP:g}x: {ratio:.1f}x: {met(targets['spawn_over_fork']['met'])}"
        )
    breakdown = throughput = worlds = moe_worlds = None
    combos = args.matrix_combos or [Combination.parse(c) for c in MATRIX_COMBOS]
    MATRIX_FAULTS[:] = args.matrix_faults
    if args.breakdown:
        breakdown = measure_breakdown(combos)
        report_breakdown(breakdown)
    if args.matrix_runs:
        trees = {"this": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
        if args.baseline:
            trees["baseline"] = args.baseline
        print(
            f"cases per minute: `resilience matrix` ({len(combos)} combinations x "
            f"{len(MATRIX_FAULTS) + len(MATRIX_TRANSITIONS)} columns) and `resilience fuzz` "
            f"({args.fuzz_examples} examples, seed 1), each a fresh process with its default options "
            f"({os.cpu_count()} cpus), {args.matrix_runs} run(s) per tree"
            + (f"; baseline {args.baseline}" if args.baseline else "")
        )
        throughput = summarize_throughput(measure_throughput(trees, args.matrix_runs, args.fuzz_examples, combos))
        for kind, f in throughput.items():
            if "baseline" in f:
                speed = f["this"]["cases_per_minute"] / f["baseline"]["cases_per_minute"]
                targets[f"{kind}_cases_per_minute_vs_baseline"] = {
                    "value": speed,
                    "limit": TARGET_CASES_SPEEDUP,
                    "met": speed >= TARGET_CASES_SPEEDUP,
                    "cpu_ratio": f["baseline"]["cpu_s_per_case"] / f["this"]["cpu_s_per_case"],
                    "same_verdicts": f["this"]["verdicts"] == f["baseline"]["verdicts"],
                    "same_examples": f["this"]["examples"] == f["baseline"]["examples"],
                }
        report_throughput(throughput, targets)
    if args.worlds:
        worlds = measure_worlds(combo, sorted(args.worlds), args.world_repeats)
        target = world_growth(worlds)
        if target is not None:
            targets["per_rank_growth"] = target
        report_worlds(worlds, target)
    if args.moe_worlds:
        moe_worlds = measure_worlds(combo, sorted(args.moe_worlds), args.world_repeats, moe_world_scenario)
        target = world_growth(moe_worlds, base=min(args.moe_worlds), up_to=MOE_TARGET_UP_TO)
        if target is not None:
            targets["moe_per_rank_growth"] = target
        report_worlds(moe_worlds, target, "tp2pp2dp{W/4}ep4, 4 experts a layer")
    load_after = os.getloadavg()
    print(f"  load average {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} at the end")
    for v in failed:
        print(f"  run with {v['start_method']} ended {v['verdict']}: {v['detail']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "benchmark": "scenario",
                    "version": 2,
                    "config": config,
                    **fig,
                    "targets": targets,
                    "breakdown": breakdown,
                    "throughput": throughput,
                    "worlds": worlds,
                    "moe_worlds": moe_worlds,
                    "load_average": {"start": load_before, "end": load_after},
                },
                f,
                indent=2,
            )
            f.write("\n")
        print(f"figures written to {args.json}")
    return 1 if failed else 0
