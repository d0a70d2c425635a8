"""How long a gloo group takes to come up and go away: the fork launcher against torch.multiprocessing.spawn.

Every rank joins the group, runs one all_reduce of one float and returns. Both launchers run in the same
process, interleaved, and each run is timed from the launch call until every rank has been reaped:

- fork: `resilience.launch.run_ranks`, forking from this parent, which has already imported torch;
- spawn: `torch.multiprocessing.spawn` (start method spawn); every rank imports torch itself and does an
  env:// rendezvous on a free port on 127.0.0.1, then destroys its group.

    python -m benchmarks launcher [--worlds 4 8] [--fork-repeats 5] [--spawn-repeats 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing.resource_tracker
import os
import platform
import shutil
import socket
import statistics
import sys
import tempfile
import time
from datetime import timedelta

import psutil
import torch
import torch.distributed as dist
import torch.multiprocessing as torch_mp

from resilience.commands.common import positive_int
from resilience.launch import run_ranks

TARGET_WORLD = 4
TARGET_FORK_SECONDS = 0.5  # fork launcher: group up and torn down, median
TARGET_SPEEDUP = 10.0  # spawn median / fork median, measured beside it
INIT_TIMEOUT = 60.0  # seconds for a rendezvous; a run that hangs fails instead of stalling the benchmark
RUN_TIMEOUT = 300.0  # seconds for one whole run (8 spawned ranks take up to ~20 s on 2 cores)
PORT_ATTEMPTS = 3  # a free port picked by the parent can be taken before rank 0 binds it


def fork_rank(ctx) -> float:
    """Rank body under the fork launcher (the launcher already did init_process_group)."""
    t = torch.tensor([float(ctx.rank)])
    dist.all_reduce(t)
    return t.item()


def spawn_rank(rank: int, world: int, port: int) -> None:
    """Rank body under torch.multiprocessing.spawn: its own rendezvous, one all_reduce, destroy."""
    torch.set_num_threads(1)  # as the fork launcher's ranks do
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(
        "gloo", init_method="env://", rank=rank, world_size=world, timeout=timedelta(seconds=INIT_TIMEOUT)
    )
    try:
        t = torch.tensor([float(rank)])
        dist.all_reduce(t)
        if t.item() != _expected_sum(world):
            raise RuntimeError(f"all_reduce gave {t.item()}, expected {_expected_sum(world)}")
    finally:
        dist.destroy_process_group()


def _expected_sum(world: int) -> float:
    return float(world * (world - 1) // 2)


def time_fork(world: int) -> float:
    start = time.perf_counter()
    results = run_ranks(fork_rank, world, timeout=RUN_TIMEOUT, init_timeout=INIT_TIMEOUT)
    seconds = time.perf_counter() - start
    if results != [_expected_sum(world)] * world:
        raise RuntimeError(f"fork all_reduce on {world} ranks gave {results}")
    return seconds


def time_spawn(world: int) -> tuple[float, int]:
    """Seconds for one spawned group, and how many times a taken port made it start again."""
    for attempt in range(PORT_ATTEMPTS):
        start = time.perf_counter()
        try:
            _spawn_group(world, _free_port())
        except torch_mp.ProcessRaisedException as e:
            text = str(e).lower()
            if attempt + 1 < PORT_ATTEMPTS and ("address already in use" in text or "eaddrinuse" in text):
                continue
            raise
        return time.perf_counter() - start, attempt
    raise AssertionError("unreachable")


def _spawn_group(world: int, port: int) -> None:
    context = torch_mp.spawn(spawn_rank, args=(world, port), nprocs=world, join=False, start_method="spawn")
    deadline = time.monotonic() + RUN_TIMEOUT
    try:
        while not context.join(timeout=max(0.0, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{world} spawned ranks did not finish within {RUN_TIMEOUT:g} s")
    finally:
        for p in context.processes:  # only left alive by the timeout above
            if p.is_alive():
                p.kill()
            p.join()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks launcher", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--worlds", type=positive_int, nargs="+", default=[4, 8], metavar="N", help="group sizes (default: 4 8)"
    )
    parser.add_argument(
        "--fork-repeats",
        type=positive_int,
        default=5,
        metavar="N",
        help="runs per group size with the fork launcher (default: 5)",
    )
    parser.add_argument(
        "--spawn-repeats",
        type=positive_int,
        default=3,
        metavar="N",
        help="runs per group size with spawn, seconds each: every rank imports torch (default: 3)",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the figures to FILE")
    return parser.parse_args(argv)


def _config(args: argparse.Namespace) -> dict:
    return {
        "worlds": args.worlds,
        "fork_repeats": args.fork_repeats,
        "spawn_repeats": args.spawn_repeats,
        "backend": "gloo",
        "host": "127.0.0.1",
        "rank_body": "init_process_group, one all_reduce of one float, return",
        "fork": "resilience.launch.run_ranks (fork from this parent, torch already imported)",
        "spawn": "torch.multiprocessing.spawn start_method=spawn, env:// rendezvous on a free port, "
        "destroy_process_group",
        "timed": "launch call until every rank is reaped; runs interleaved",
        "init_timeout_s": INIT_TIMEOUT,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "cpus": os.cpu_count(),
        "targets": f"{TARGET_WORLD} ranks with fork under {TARGET_FORK_SECONDS:g} s median; "
        f"spawn/fork at least {TARGET_SPEEDUP:g}x",
    }


def _leftovers(children_before: set[int], tmp: str) -> list[str]:
    """Processes, listening sockets and temp files this run left behind."""
    tracker = multiprocessing.resource_tracker._resource_tracker
    if hasattr(tracker, "_stop"):  # spawn starts it; it would only exit with this process
        tracker._stop()
    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.pid not in children_before and p.status() != psutil.STATUS_ZOMBIE:
                found.append(f"process {p.pid} ({p.name()})")
        except psutil.NoSuchProcess:
            pass
    for c in psutil.Process().net_connections(kind="tcp"):
        if c.status == psutil.CONN_LISTEN:
            found.append(f"listening socket {c.laddr.ip}:{c.laddr.port}")
    for root, dirs, files in os.walk(tmp):
        found += [f"temp file {os.path.join(root, f)}" for f in files]
        found += [f"temp dir {os.path.join(root, d)}" for d in dirs]
    return found


def _summary(seconds: list[float]) -> dict:
    return {
        "runs": len(seconds),
        "median_s": statistics.median(seconds),
        "min_s": min(seconds),
        "max_s": max(seconds),
        "seconds": seconds,
    }


def measure(args: argparse.Namespace) -> dict:
    """Run both launchers and return the figures (every run's seconds, summaries, ratios, targets)."""
    times = {(launcher, w): [] for launcher in ("fork", "spawn") for w in args.worlds}
    port_retries = 0
    for i in range(max(args.fork_repeats, args.spawn_repeats)):
        for world in args.worlds:
            if i < args.fork_repeats:
                times["fork", world].append(time_fork(world))
                print(
                    f"  run {i + 1}: fork  {world} ranks {times['fork', world][-1]:7.3f} s", file=sys.stderr, flush=True
                )
            if i < args.spawn_repeats:
                seconds, retries = time_spawn(world)
                times["spawn", world].append(seconds)
                port_retries += retries
                print(f"  run {i + 1}: spawn {world} ranks {seconds:7.3f} s", file=sys.stderr, flush=True)
    rows = [{"launcher": launcher, "world": w, **_summary(s)} for (launcher, w), s in times.items()]
    median = {(r["launcher"], r["world"]): r["median_s"] for r in rows}
    ratios = {str(w): median["spawn", w] / median["fork", w] for w in args.worlds}
    targets = {}
    if TARGET_WORLD in args.worlds:
        fork_s, ratio = median["fork", TARGET_WORLD], ratios[str(TARGET_WORLD)]
        targets = {
            "fork_median_s": {
                "world": TARGET_WORLD,
                "value": fork_s,
                "limit": TARGET_FORK_SECONDS,
                "met": fork_s < TARGET_FORK_SECONDS,
            },
            "spawn_over_fork": {
                "world": TARGET_WORLD,
                "value": ratio,
                "limit": TARGET_SPEEDUP,
                "met": ratio >= TARGET_SPEEDUP,
            },
        }
    return {"rows": rows, "spawn_over_fork": ratios, "targets": targets, "port_retries": port_retries}


def report(figures: dict) -> None:
    print(f"{'launcher':<9}{'world':>6}{'runs':>6}{'median s':>10}{'min s':>9}{'max s':>9}")
    for r in sorted(figures["rows"], key=lambda r: (r["world"], r["launcher"])):
        print(
            f"{r['launcher']:<9}{r['world']:>6}{r['runs']:>6}{r['median_s']:>10.3f}{r['min_s']:>9.3f}{r['max_s']:>9.3f}"
        )
    print("spawn/fork (medians): " + ", ".join(f"{w} ranks {x:.1f}x" for w, x in figures["spawn_over_fork"].items()))
    t = figures["targets"]
    if not t:
        print(f"targets: not measured ({TARGET_WORLD} ranks not among --worlds)")
    else:
        f, s = t["fork_median_s"], t["spawn_over_fork"]
        print(
            f"target {TARGET_WORLD} ranks with fork under {f['limit']:g} s median: {f['value']:.3f} s, "
            f"{'met' if f['met'] else 'MISSED'}"
        )
        print(
            f"target {TARGET_WORLD} ranks spawn/fork at least {s['limit']:g}x: {s['value']:.1f}x, "
            f"{'met' if s['met'] else 'MISSED'}"
        )
    if figures["port_retries"]:
        print(f"spawn restarted {figures['port_retries']} time(s) on a port taken before rank 0 bound it")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = _config(args)
    print("launcher benchmark (nothing random, no seed; ports picked by the OS)")
    for key, value in config.items():
        print(f"  {key:<15} {value}")
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    # a private temp dir, inherited by spawned ranks, shows any temp file a launcher leaves
    tmp = tempfile.mkdtemp(prefix="bench-launcher-")
    saved_tempdir, saved_env = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir, os.environ["TMPDIR"] = tmp, tmp
    try:
        figures = measure(args)
    finally:
        tempfile.tempdir = saved_tempdir
        if saved_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved_env
        leftovers = _leftovers(children_before, tmp)
        shutil.rmtree(tmp, ignore_errors=True)
    report(figures)
    if leftovers:
        print("left behind: " + "; ".join(leftovers))
    else:
        print("left behind: nothing (no processes, listening sockets or temp files)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {"benchmark": "launcher", "version": 1, "config": config, **figures, "leftovers": leftovers},
                fh,
                indent=2,
            )
            fh.write("\n")
        print(f"figures written to {args.json}")
    return 1 if leftovers else 0
