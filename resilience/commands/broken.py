"""`resilience broken`: the deliberately broken implementations through the matrix; which checker caught which."""
from __future__ import annotations

import json
import os


def register(sub) -> None:
    p = sub.add_parser("broken", help="run the broken implementations and report which checker caught each")
    p.add_argument("--names", nargs="+", help="implementations (default: all of resilience.broken.CATALOGUE)")
    p.add_argument("--full", action="store_true",
                   help="every combination the catalogue lists (default: each one's witness combination)")
    p.add_argument("--out", default="runs", help="where the run folder goes (default: runs/)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run)


def run(args) -> int:
    from ..broken.suite import combos_of, run_suite, render
    from ..broken import CATALOGUE
    from ..report import make_run_dir, write_run_files
    from .progress import Progress

    names = args.names or list(CATALOGUE)
    total = sum(len(combos_of(CATALOGUE[n], args.full)) for n in names if n in CATALOGUE)
    run_dir = make_run_dir(args.out, "broken")
    print(f"broken: {len(names)} implementations, {total} cases; run folder {run_dir}")
    with Progress(total, "cases") as bar:
        results = run_suite(run_dir, names, full=args.full, seed=args.seed, progress=bar.update)
    text = render(results, args.full)
    with open(os.path.join(run_dir, "broken.md"), "w") as f:
        f.write(text)
    rows = [row for r in results for row in r.rows]
    write_run_files(run_dir, rows, {"title": "resilience broken", "seed": args.seed, "full": args.full})
    with open(os.path.join(run_dir, "caught.json"), "w") as f:
        json.dump({r.impl.name: {"caught": r.caught, "caught_by": r.caught_by, "expected": r.impl.caught_by}
                   for r in results}, f, indent=1)
    for r in results:
        print(f"{r.impl.name:26s} {'caught by ' + ', '.join(r.caught_by) if r.caught else 'NOT CAUGHT'}")
    print(f"report: {os.path.join(run_dir, 'broken.md')}")
    return 0 if all(r.caught for r in results) else 1
