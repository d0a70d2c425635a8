"""`resilience adapter check module:factory`: the first command to run on a new adapter. It makes the backend,
saves and loads with real ranks on three topologies (a change of tp and dp, and of dp alone), lists the
checkpoints, learns the layout, and prints what it found, with one line per problem.

Exit status: 0 when no problem was found (notes are not problems), 1 when one was, 2 when the backend
cannot be made at all (a bad name, an import error, a factory that refuses)."""

from __future__ import annotations

import json
import os
import sys

from .common import combination_arg, seconds


def register(sub) -> None:
    p = sub.add_parser("adapter", help="check an adapter of your own checkpoint code against the backend protocol")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    c = verbs.add_parser(
        "check",
        help="make the backend, save and load on three topologies with real ranks (dp alone among the changes), list "
        "checkpoints, learn the layout; print what was found and each problem",
    )
    c.add_argument(
        "backend",
        metavar="module:factory",
        help="the factory, as --backend takes it (package.module:factory, an alias, reference, broken:NAME)",
    )
    c.add_argument(
        "--combos",
        nargs="+",
        type=combination_arg,
        metavar="TYPE/format/io",
        help="combinations to check (default: the ones the factory declares)",
    )
    c.add_argument("--timeout", type=seconds, default=120.0, help="seconds per job of ranks (default: 120)")
    c.add_argument(
        "--out",
        help="keep the checkpoints, rank logs and learned layouts in a new folder under OUT, "
        "with adapter-check.json (default: nothing is kept)",
    )
    c.set_defaults(func=run_check)


def run_check(args) -> int:
    from ..runner.adapter_check import check_adapter
    from ..runner.adapter_jobs import TOPOLOGIES

    def keep() -> str:
        from ..report import make_run_dir

        return make_run_dir(args.out, "adapter-check")

    def progress(text: str) -> None:
        print(f"  {text}", file=sys.stderr, flush=True)

    report = check_adapter(
        args.backend, args.combos, timeout=args.timeout, keep=keep if args.out else None, progress=progress
    )
    work = report.work
    lines = [
        f"adapter check: {args.backend}",
        f"  backend {report.name!r}; declared combinations: "
        + (", ".join(report.declared) if report.declared is not None else "none (all six)"),
        f"  topologies: saved on {TOPOLOGIES[0]}, loaded there and on {TOPOLOGIES[1]}; saved on "
        f"{TOPOLOGIES[1]}, loaded there and on {TOPOLOGIES[2]} (dp alone)",
    ]
    for c in report.combos:
        lines += ["", c.combo]
        width = max((len(label) for label, _ in c.found), default=0)
        lines += [f"  {label:<{width}}  {text}" for label, text in c.found]
        if c.notes:
            lines.append("  notes:")
            lines += [f"    - {n}" for n in c.notes]
    problems = report.all_problems()
    lines.append("")
    if problems:
        lines.append(f"{len(problems)} problem{'s' if len(problems) != 1 else ''}:")
        lines += [f"  - {p}" for p in problems]
    else:
        checked = len(report.combos)
        lines.append(
            f"no problem found ({checked} combination{'s' if checked != 1 else ''} checked); next: "
            f"resilience matrix --backend {args.backend}"
        )
    print("\n".join(lines))
    if work:
        with open(os.path.join(work, "adapter-check.json"), "w", encoding="utf-8") as f:
            json.dump(
                {
                    "backend": report.backend,
                    "name": report.name,
                    "declared": report.declared,
                    "ok": report.ok,
                    "problems": problems,
                    "combos": [c.to_dict() for c in report.combos],
                },
                f,
                indent=1,
            )
        print(f"kept in {work}")
    return 0 if report.ok else 1
