"""`python -m benchmarks checkpoint --storage s3`: the reference's save and verified load of one state on an
S3 server, through the fault-injecting proxy (its request log on), against the same directly to the server
and against the local file system, in one run, interleaved; medians and ratios.

The server is moto on loopback (objectstore.server.EmbeddedS3, in memory), so the figures measure the path
a rank takes to an object store (its client, the proxy, HTTP on loopback), not a disk. Target: through the
proxy within 1.3x of direct, for the save and the load."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch.distributed as dist

from resilience.launch import run_ranks
from resilience.state import Topology
from resilience.vocab.combos import Combination

from .checkpoint import held_bytes, spec_for

TARGET = 1.3  # the proxy's time over direct, at most
ROUTES = ("local", "direct", "proxy")


def _rank(ctx, spec, topo, combo: str, root: str, place: dict | None, endpoint: str | None) -> dict:
    """One save and one verified load on this rank, timed to the slowest rank (barriers around each)."""
    from resilience import storage
    from resilience.checkpoint.reference import ReferenceBackend
    from resilience.objectstore.requests import rank_access_key
    from resilience.objectstore.store import CaseStore
    from resilience.state import TrainingState

    state = TrainingState(spec, topo, ctx.rank)
    fs = None
    if place is not None:
        key = rank_access_key(ctx.rank) if endpoint else None
        fs = CaseStore.from_dict(place).filesystem(root, endpoint=endpoint, access_key=key)
    with storage.use(fs) if fs is not None else _nothing():
        backend = ReferenceBackend(Combination.parse(combo))
        dist.barrier()
        start = time.perf_counter()
        backend.save(state, root)
        backend.finalize()
        dist.barrier()
        save = time.perf_counter() - start
        fresh = TrainingState(spec, topo, ctx.rank, groups=state.groups)
        dist.barrier()
        start = time.perf_counter()
        ReferenceBackend(Combination.parse(combo)).load(fresh, root)
        dist.barrier()
        load = time.perf_counter() - start
    return {"save": save, "load": load}


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _once(route: str, rep: int, args, spec, topo, work: str, server, proxy_endpoint: str | None) -> dict:
    root = os.path.join(work, f"{route}-{rep}", "ckpt")
    place, endpoint = None, None
    if route != "local":
        from resilience.objectstore.server import ACCESS_KEY, REGION, SECRET_KEY
        from resilience.objectstore.store import CaseStore

        bucket = server.bucket(f"bench-{route}-{rep}").bucket
        staging = os.path.join(work, f"{route}-{rep}", "staging")
        place = CaseStore(server.endpoint, bucket, "", ACCESS_KEY, SECRET_KEY, REGION, staging).to_dict()
        endpoint = proxy_endpoint if route == "proxy" else None
    out = run_ranks(_rank, topo.world, args=(spec, topo, args.combo, root, place, endpoint), timeout=args.timeout)
    if place is not None:
        from resilience.objectstore.mirror import remove
        from resilience.objectstore.store import CaseStore

        remove(CaseStore.from_dict(place))  # the server holds its objects in memory: free them
    shutil.rmtree(os.path.join(work, f"{route}-{rep}"), ignore_errors=True)
    return out[0]


def measure(args) -> dict[str, dict[str, list[float]]]:
    """route -> {"save": [s, ...], "load": [...]}, the routes interleaved in every repeat."""
    from resilience.objectstore.proxy import FaultProxy
    from resilience.objectstore.server import EmbeddedS3

    topo = args.topology
    spec = spec_for(args.size_gib, topo)
    times: dict[str, dict[str, list[float]]] = {r: {"save": [], "load": []} for r in ROUTES}
    work = tempfile.mkdtemp(prefix="resilience-bench-s3-", dir=args.dir)
    try:
        with EmbeddedS3() as server, FaultProxy(server.endpoint, log=os.path.join(work, "requests.jsonl")) as proxy:
            print(
                f"state {held_bytes(spec, topo) / (1 << 30):.2f} GiB over {topo.world} ranks ({topo}), "
                f"{args.combo}; server {server.endpoint}, proxy {proxy.endpoint}",
                flush=True,
            )
            for rep in range(-args.warmup, args.repeats):
                for route in ROUTES:
                    got = _once(route, rep, args, spec, topo, work, server, proxy.endpoint)
                    print(
                        f"  {'warm-up' if rep < 0 else f'repeat {rep + 1}'} {route}: "
                        f"save {got['save']:.2f} s, load {got['load']:.2f} s",
                        flush=True,
                    )
                    if rep >= 0:
                        times[route]["save"].append(got["save"])
                        times[route]["load"].append(got["load"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return times


def report(times: dict, nbytes: int) -> int:
    gib = nbytes / (1 << 30)
    print(
        f"\n{'route':<8} {'save s':>8} {'GiB/s':>7} {'load s':>8} {'GiB/s':>7} {'save/direct':>12} {'load/direct':>12}"
    )
    med = {r: {k: statistics.median(v) for k, v in t.items()} for r, t in times.items()}
    for r in ROUTES:
        m = med[r]
        print(
            f"{r:<8} {m['save']:>8.2f} {gib / m['save']:>7.2f} {m['load']:>8.2f} {gib / m['load']:>7.2f} "
            f"{m['save'] / med['direct']['save']:>11.2f}x {m['load'] / med['direct']['load']:>11.2f}x"
        )
    ok = True
    for op in ("save", "load"):
        ratio = med["proxy"][op] / med["direct"][op]
        met = ratio <= TARGET
        ok &= met
        print(f"target {op} through the proxy <= {TARGET}x direct: {ratio:.2f}x, {'met' if met else 'NOT met'}")
    return 0 if ok else 1


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from resilience.commands.common import nonnegative_int, positive_float, positive_int

    p = argparse.ArgumentParser(prog="python -m benchmarks checkpoint --storage s3", description=__doc__.split("\n")[0])
    p.add_argument("--storage", choices=("s3",), required=True, help="s3: the embedded server (moto on loopback)")
    p.add_argument("--size-gib", type=positive_float, default=1.0, metavar="GIB", help="state size (default: 1.0)")
    p.add_argument(
        "--topology",
        type=Topology.parse,
        default=Topology(2, 2, 1),
        metavar="TOPO",
        help="default: tp2pp2dp1 (4 ranks)",
    )
    p.add_argument("--combo", default="GLOBAL/torch_dist/sync", help="the combination saved (default: GLOBAL sync)")
    p.add_argument("--repeats", type=positive_int, default=3, metavar="N", help="interleaved repeats (default: 3)")
    p.add_argument("--warmup", type=nonnegative_int, default=1, metavar="N", help="rounds not counted (default: 1)")
    p.add_argument("--dir", metavar="DIR", help="the temp folder's parent (default: the system temp dir)")
    p.add_argument("--timeout", type=positive_float, default=1800.0, metavar="S", help="per job (default: 1800)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        Combination.parse(args.combo)
        spec_for(args.size_gib, args.topology).check_topology(args.topology)
    except Exception as e:  # a bad combination or topology: one line, exit 2
        print(f"python -m benchmarks checkpoint --storage s3: {e}", file=sys.stderr)
        return 2
    times = measure(args)
    return report(times, held_bytes(spec_for(args.size_gib, args.topology), args.topology))


if __name__ == "__main__":
    sys.exit(main())
