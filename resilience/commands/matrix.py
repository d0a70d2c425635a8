"""`resilience matrix`: combinations x faults x transitions, measured, as a table and a run folder."""
from __future__ import annotations

import json
import os
import shlex
import sys
import time

from .common import combination_arg


def register(sub) -> None:
    from ..runner.matrix import FAULTS, TRANSITIONS
    p = sub.add_parser("matrix", help="measure every combination under every fault and topology change")
    p.add_argument("--combos", nargs="+", type=combination_arg, help="combinations (default: all six valid)")
    p.add_argument("--faults", nargs="+", help=f"fault columns (default: all; none: no fault column): {', '.join(FAULTS)}")
    p.add_argument("--transitions", nargs="+",
                   help=f"names ({', '.join(TRANSITIONS)}) or explicit tp2pp1dp1->tp1pp1dp2 (default: all named; none: no "
                        "transition column)")
    p.add_argument("--backend", default="reference",
                   help="'reference', 'broken:NAME', 'dcp', 'dcp-threads', 'megatron' or package.module:factory")
    p.add_argument("--json", metavar="FILE", help="also write the rows (results.json schema) to FILE")
    p.add_argument("--out", default="runs", help="where the run folder goes (default: runs/)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run)


def run(args) -> int:
    from ..checkpoint.combos import valid_combinations
    from ..report import make_run_dir, write_run_files
    from ..report.table import text_table
    from ..runner.backends import supported_combinations
    from ..runner.matrix import FAULTS, cases, parse_transitions
    from ..runner.run import run_case
    from .progress import Progress
    from .run import summarize

    faults = [f for f in args.faults or list(FAULTS) if f != "none"]
    transitions = parse_transitions(args.transitions)
    combos = args.combos or supported_combinations(args.backend) or valid_combinations()
    work = cases(combos, faults, transitions, args.seed)
    run_dir = make_run_dir(args.out, "matrix")
    command = "resilience " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else "resilience matrix"
    print(f"matrix: {len(combos)} combinations x ({len(faults)} faults + {len(transitions)} transitions) = "
          f"{len(work)} cases; seed {args.seed}; backend {args.backend}; run folder {run_dir}")
    rows = []
    start = time.monotonic()
    with Progress(len(work), "cases") as bar:
        for i, case in enumerate(work):
            label = f"{case.combo}-{case.column}".replace("/", "-")
            case_dir = os.path.join(run_dir, "cases", f"{i:03d}-{label}")
            result = run_case(case.scenario, case.combo, case_dir, backend=args.backend, fault=case.fault,
                              transition=case.transition)
            rows.append(dict(result.to_row(), column=case.column))
            bar.update()
    columns = faults + list(transitions)
    print(text_table(rows, columns))
    print(f"({time.monotonic() - start:.1f} s)")
    paths = write_run_files(run_dir, rows, {"title": "resilience matrix", "seed": args.seed, "backend": args.backend,
                                           "command": command}, columns)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return summarize(rows, paths)
