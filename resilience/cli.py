"""The `resilience` command."""
from __future__ import annotations

import argparse
import json
import sys
import time

from .errors import ConfigError, ResilienceError


def _topology(text: str):
    from .state import Topology
    try:
        return Topology.parse(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def cmd_demo(args) -> int:
    from .launch import run_ranks
    from .state import ModelSpec
    from .state.demo import train_and_fingerprint

    spec = ModelSpec(seed=args.seed)
    print(f"seed {args.seed}; model {spec.num_layers} layers, hidden {spec.hidden}, vocab {spec.vocab}; "
          f"{args.steps} steps per topology")
    rows = []
    for topo in args.topology:
        spec.check_topology(topo)
        start = time.monotonic()
        out = run_ranks(train_and_fingerprint, topo.world, args=(spec, topo, args.steps), timeout=args.timeout)[0]
        rows.append((topo, out["fingerprint"]))
        print(f"  {str(topo):<12} {topo.world} ranks  iteration {out['iteration']}  fingerprint {out['fingerprint']}"
              f"  ({time.monotonic() - start:.2f} s)")
    same = len({fp for _, fp in rows}) == 1
    print("global state is bit-identical on every topology" if same else "FAIL: fingerprints differ")
    return 0 if same else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="resilience", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="train on several topologies with real ranks and compare fingerprints")
    demo.add_argument("--topology", type=_topology, nargs="+",
                      default=[_topology(t) for t in ("tp1pp1dp1", "tp2pp2dp2", "tp4pp1dp1", "tp1pp2dp2")])
    demo.add_argument("--steps", type=int, default=5)
    demo.add_argument("--seed", type=int, default=1234)
    demo.add_argument("--timeout", type=float, default=120.0)
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ResilienceError as e:
        print(f"resilience {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
