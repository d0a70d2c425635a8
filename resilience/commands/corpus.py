"""`resilience corpus write DIR` / `resilience corpus verify DIR`: a golden corpus of checkpoints written
under today's versions (python, torch, this project, the backend) and verified under tomorrow's.

Exit status of verify: 0 when every load is bit-exact or refused as expected, 1 on any wrong, failed or
newly refused load, 2 when DIR holds no readable corpus."""

from __future__ import annotations

import json
import sys

from .common import combination_arg, positive_int, seconds, topology_arg


def register(sub) -> None:
    from ..cluster.spec import DEFAULT_STEPS, DEFAULT_TOPOLOGIES

    p = sub.add_parser(
        "corpus",
        help="write a golden corpus of checkpoints, or verify one under the versions "
        "installed now (before a torch / Megatron upgrade)",
    )
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")

    w = verbs.add_parser(
        "write",
        help="checkpoints of every valid combination on a set of topologies, with "
        "their expected fingerprints and the versions that wrote them",
    )
    w.add_argument("dir", metavar="DIR", help="a new or empty folder")
    w.add_argument("--combos", nargs="+", type=combination_arg, help="combinations (default: all six valid)")
    w.add_argument(
        "--topologies",
        nargs="+",
        type=topology_arg,
        help=f"topologies to save on (default: {' '.join(DEFAULT_TOPOLOGIES)})",
    )
    w.add_argument(
        "--steps",
        type=positive_int,
        default=DEFAULT_STEPS,
        help=f"training steps before the save (default: {DEFAULT_STEPS})",
    )
    w.add_argument("--backend", default="reference", help="'reference' or package.module:factory")
    w.add_argument("--timeout", type=seconds, default=300.0, help="seconds per group of ranks (default: 300)")
    w.add_argument(
        "--out", default="runs", help="where the report of the baseline loads goes, a new run folder (default: runs/)"
    )
    w.set_defaults(func=run_write)

    v = verbs.add_parser(
        "verify",
        help="load every checkpoint on its own and on the other topologies; report "
        "bit-exact / refused clearly / wrong with the version pair",
    )
    v.add_argument("dir", metavar="DIR", help="a folder written by `resilience corpus write`")
    v.add_argument(
        "--topologies", nargs="+", type=topology_arg, help="more topologies to load on, besides the corpus's own"
    )
    v.add_argument("--backend", help="the backend to load with (default: the one that wrote the corpus)")
    v.add_argument("--json", metavar="FILE", help="also write the verification as JSON to FILE")
    v.add_argument("--timeout", type=seconds, default=300.0, help="seconds per group of ranks (default: 300)")
    v.add_argument("--out", default="runs", help="where the report goes, a new run folder (default: runs/)")
    v.set_defaults(func=run_verify)


def _progress(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


def run_write(args) -> int:
    from ..cluster.corpus import describe_versions, render, write_corpus

    report = write_corpus(
        args.dir,
        combos=args.combos,  # read as combinations by the command line (combination_arg)
        topologies=[str(t) for t in args.topologies] if args.topologies else None,
        steps=args.steps,
        backend=args.backend,
        timeout=args.timeout,
        progress=_progress,
    )
    print(render(report, title="corpus written to"))
    _report(args.out, "corpus-write", report.to_dict())
    print(
        f"\nwritten by {describe_versions(report.written_by)}; the loads above are its baseline. "
        f"After an upgrade: resilience corpus verify {args.dir}"
    )
    return 0


def run_verify(args) -> int:
    from ..cluster.corpus import render, verify_corpus

    report = verify_corpus(
        args.dir,
        topologies=[str(t) for t in args.topologies] if args.topologies else None,
        backend=args.backend,
        timeout=args.timeout,
        progress=_progress,
    )
    print(render(report, title="corpus"))
    _report(args.out, "corpus-verify", report.to_dict())
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report.to_dict(), f, indent=1)
    return 0 if report.ok else 1


def _report(out: str, name: str, doc: dict) -> None:
    """The report, in a run folder made once the loads are done (bad input made none)."""
    from ..report import make_run_dir
    from ..report.corpus import write_corpus_report

    paths = write_corpus_report(make_run_dir(out, name), doc)
    print(f"report: {paths['report.md']}  ({paths['report.html']}, {paths['verification.json']})")
