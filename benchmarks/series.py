"""`python -m benchmarks checkpoint --sizes 0.25 1 4`: how the cost grows with the state.

One job per size (fresh rank processes, the state built for that size), each measuring what the size
targets need and nothing else: the raw baseline (benchmarks.raw_io), every combination's save and cold
load (async: save() blocking, a step, finalize()), and each rank's peak memory (benchmarks.memory). The
stock DCP, torch.save and checksum comparisons stay in the run at one size.

Every size is a state of one model family: the width of the smallest size, with layers added, so the
sizes differ in the number of tensors and not in their shapes. An async save's cost is the whole save:
save() with every tensor copied at once, then finalize().

Targets: the cost per GiB of every save and load within 1.2x across the sizes (largest / smallest), and
at every size the async save() blocking <= 3% of the sync save, the raw fractions and the memory bounds."""

from __future__ import annotations

import os
import shutil
import tempfile
import time

from resilience.errors import RankFailure
from resilience.launch import run_ranks
from resilience.vocab import valid_combinations

from . import checkpoint as ck, memory

TARGET_GROWTH = 1.2  # the largest cost per GiB over the smallest, across sizes, at most


def run_size(args, size: float) -> dict:
    # one model family for every size: the smallest size's width, layers added (the series measures the
    # size, not a change of tensor shapes; spec_for alone narrows the model below 0.7 GiB)
    spec = ck.spec_for(size, args.topology, hidden=ck.spec_for(min(args.sizes), args.topology).hidden)
    tmp = tempfile.mkdtemp(prefix="bench-checkpoint-series-", dir=args.dir)
    started = time.monotonic()
    try:
        raw = run_ranks(
            ck.bench_rank,
            args.topology.world,
            args=(spec, args.topology, tmp, args.repeats, args.warmup, 0),
            kwargs={"lean": True},
            timeout=args.timeout,
            init_timeout=120.0,
        )[0]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    model = {"layers": spec.num_layers, "hidden": spec.hidden, "vocab": spec.vocab}
    return {"size_gib": size, "model": model, "seconds": time.monotonic() - started, "raw": raw, **summarize_size(raw)}


def summarize_size(raw: dict) -> dict:
    f = ck.Figures(raw["runs"])
    for name in ck.ASYNC_OF:
        # the whole async save, copy and write: save() with every tensor copied at once (no step to hide
        # behind), then finalize() (save() alone is a fixed cost by design, judged by the blocking target)
        f.add(f"{name} save", f"{name} worst", f"{name} worst finalize")
    gib = raw["written_bytes"] / (1 << 30)
    methods = [(str(c), f"{c} save", f"{c} load") for c in valid_combinations()]
    cost = {m: {"save": f.wall(s) / gib, "load": f.wall(lo) / gib} for m, s, lo in methods}
    asyncs = {}
    for name, sync_name in ck.ASYNC_OF.items():
        blocking = f.blocking(f"{name} blocking", f"{name} step waits")
        sync = f.wall(f"{sync_name} save")
        asyncs[name] = {
            "value": ck._median(blocking) / sync,
            "paired": ck._paired(blocking, f.walls(f"{sync_name} save")),
            "limit": ck.TARGET_ASYNC_BLOCKING,
        }
        asyncs[name]["met"] = asyncs[name]["value"] <= ck.TARGET_ASYNC_BLOCKING
    fig_raw = ck.raw_figures(f, methods, raw)
    return {"written_gib": gib, "cost_s_per_gib": cost, "async": asyncs, "raw_fig": fig_raw}


def growth(sizes: list[dict]) -> dict:
    """Per method and direction: the cost per GiB at each size, and the largest over the smallest."""
    out = {}
    for method in sizes[0]["cost_s_per_gib"]:
        for what in ("save", "load"):
            costs = [s["cost_s_per_gib"][method][what] for s in sizes]
            ratio = max(costs) / min(costs)
            out[f"{method} {what}"] = {"costs": costs, "value": ratio, "limit": TARGET_GROWTH, "met": ratio <= 1.2}
    return out


def report(sizes: list[dict], grown: dict) -> None:
    labels = [f"{s['size_gib']:g} GiB" for s in sizes]
    print(f"{'s per GiB written':<34}" + "".join(f"{lab:>10}" for lab in labels) + f"{'max/min':>10}")
    for name, g in grown.items():
        print(f"{name:<34}" + "".join(f"{c:>10.3f}" for c in g["costs"]) + f"{g['value']:>9.2f}x")
    for label, key in (("raw write", "write_s"), ("raw read (cold)", "read_s")):
        # the machine's own cost per GiB moves with the size too: what the methods' rows are up against
        raw = [s["raw_fig"][key] / s["written_gib"] for s in sizes]
        print(f"{label:<34}" + "".join(f"{c:>10.3f}" for c in raw) + f"{max(raw) / min(raw):>9.2f}x")
    print()
    for s in sizes:
        m = s["model"]
        print(
            f"---- {s['size_gib']:g} GiB ({s['written_gib']:.3f} GiB written; {m['layers']} layers, hidden "
            f"{m['hidden']}; {s['seconds']:.0f} s) ----"
        )
        ck.report_raw(s["raw_fig"])
        for name, a in s["async"].items():
            print(f"async {name} save() blocks {a['value']:.1%} of the sync save (run by run {a['paired']:.1%})")
        print()


def report_targets(sizes: list[dict], grown: dict) -> None:
    for s in sizes:
        worst_name, worst = max(s["async"].items(), key=lambda item: item[1]["value"])
        print(
            f"target async save() blocks <= {ck.TARGET_ASYNC_BLOCKING:.0%} of the sync save at {s['size_gib']:g} GiB: "
            f"worst {worst['value']:.1%} ({worst_name}), {ck._met({'met': all(a['met'] for a in s['async'].values())})}"
        )
    for s in sizes:
        t = ck.raw_targets(s["raw_fig"])
        bad = [n for n, c in t.items() if not c["met"]]
        low = min(t.items(), key=lambda item: item[1]["value"])
        print(
            f"target saves and loads >= {ck.TARGET_RAW_FRACTION:.0%} of the raw bandwidth at {s['size_gib']:g} GiB: "
            f"lowest {low[1]['value']:.0%} ({low[0]}), {ck._met({'met': not bad})}"
        )
        mem = s["raw_fig"]["memory"]
        if mem:
            worst_mem = max(mem.items(), key=lambda item: max(item[1][w]["judged"] for w in ("save", "load")))
            print(
                f"target peak memory at {s['size_gib']:g} GiB (sync <= {memory.TARGET_SYNC}x, async <= "
                f"{memory.TARGET_ASYNC}x the state + {memory.FIXED_BYTES >> 20} MiB): worst "
                f"{max(worst_mem[1][w]['judged'] for w in ('save', 'load')):.2f}x ({worst_mem[0]}), "
                f"{ck._met({'met': all(r['met'] for r in mem.values())})}"
            )
    if len(sizes) > 1:
        name, g = max(grown.items(), key=lambda item: item[1]["value"])
        across = ", ".join(f"{s['size_gib']:g}" for s in sizes)
        print(
            f"target cost per GiB within {TARGET_GROWTH}x across {across} "
            f"GiB: worst {g['value']:.2f}x ({name}), {ck._met({'met': all(x['met'] for x in grown.values())})}"
        )


def main(args) -> dict:
    sizes, failed = [], {}
    for size in args.sizes:
        print(f"size {size:g} GiB: {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}", flush=True)
        try:
            sizes.append(run_size(args, size))
        except RankFailure as e:  # a size too large for the machine (out of memory): the others still count
            failed[f"{size:g}"] = str(e)
            print(f"size {size:g} GiB failed, left out: {e}", flush=True)
    if not sizes:
        raise RankFailure(failed, "every size failed")
    grown = growth(sizes)
    print()
    report(sizes, grown)
    report_targets(sizes, grown)
    for s in sizes:
        s.pop("raw")
    for size, why in failed.items():
        print(f"size {size} GiB: NOT measured ({why.splitlines()[0]})")
    return {"benchmark": "checkpoint-series", "version": 1, "sizes": sizes, "growth": grown, "failed": failed}
