"""`resilience demo`: train on several topologies with real ranks and compare fingerprints."""

from __future__ import annotations

import time

from .common import number_arg, positive_int, seconds, seed_arg, topology_arg


def register(sub) -> None:
    p = sub.add_parser("demo", help="train on several topologies with real ranks and compare fingerprints")
    p.add_argument(
        "--topology",
        type=topology_arg,
        nargs="+",
        default=[topology_arg(t) for t in ("tp1pp1dp1", "tp2pp2dp2", "tp4pp1dp1", "tp1pp2dp2")],
    )
    p.add_argument("--steps", type=positive_int, default=5, help="training steps per topology (default: 5)")
    p.add_argument(
        "--experts",
        type=number_arg(int, lambda v: 0 <= v <= 1024, "an integer from 0 to 1024"),
        default=0,
        metavar="N",
        help="a mixture-of-experts model with N experts per layer (default: 0, dense); ep and etp split them",
    )
    p.add_argument("--shared-experts", action="store_true", help="with --experts: a shared expert beside them")
    p.add_argument("--seed", type=seed_arg, default=1234, help="seed of the model and the data (default: 1234)")
    p.add_argument("--timeout", type=seconds, default=120.0, help="seconds per topology (default: 120)")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..launch import run_ranks
    from ..state import ModelSpec
    from ..state.demo import train_and_fingerprint

    spec = ModelSpec(seed=args.seed, num_experts=args.experts, shared_experts=args.shared_experts)
    experts = ""
    if spec.num_experts:
        experts = f", {spec.num_experts} experts" + (" and a shared one" if spec.shared_experts else "")
    print(
        f"seed {args.seed}; model {spec.num_layers} layers, hidden {spec.hidden}, vocab {spec.vocab}{experts}; "
        f"{args.steps} steps per topology"
    )
    rows, width = [], max(len(str(t)) for t in args.topology)
    for topo in args.topology:
        spec.check_topology(topo)
        start = time.monotonic()
        out = run_ranks(train_and_fingerprint, topo.world, args=(spec, topo, args.steps), timeout=args.timeout)[0]
        rows.append((topo, out["fingerprint"]))
        print(
            f"  {str(topo):<{width}} {topo.world:>3} ranks  iteration {out['iteration']}  "
            f"fingerprint {out['fingerprint']}  ({time.monotonic() - start:.2f} s)"
        )
    same = len({fp for _, fp in rows}) == 1
    print("global state is bit-identical on every topology" if same else "FAIL: fingerprints differ")
    return 0 if same else 1
