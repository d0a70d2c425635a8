"""`resilience broken`: the deliberately broken implementations through the matrix; which checker caught which."""

from __future__ import annotations

import json
import os

from .common import add_workers_argument, seed_arg, workers_of


def register(sub) -> None:
    p = sub.add_parser("broken", help="run the broken implementations and report which checker caught each")
    p.add_argument("--names", nargs="+", help="implementations (default: all of resilience.broken.CATALOGUE)")
    p.add_argument(
        "--full",
        action="store_true",
        help="every combination the catalogue lists (default: each one's witness combination)",
    )
    p.add_argument("--out", default="runs", help="where the run folder goes (default: runs/)")
    p.add_argument("--seed", type=seed_arg, default=0, help="seed of every case (default: 0)")
    add_workers_argument(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from ..broken import CATALOGUE
    from ..broken.suite import check_names, combos_of, render, run_suite
    from ..runner.case_loop import create_run_folder
    from .progress import Progress

    names = check_names(args.names)
    total = sum(len(combos_of(CATALOGUE[n], args.full)) for n in names)
    folder = create_run_folder(
        args.out, "broken", {"title": "resilience broken", "seed": args.seed, "full": args.full, "cases": total}
    )
    run_dir = folder.path
    print(f"broken: {len(names)} implementations, {total} cases; run folder {run_dir}", flush=True)
    with Progress(total, "cases") as bar:  # an interruption keeps the folder (judge_cases)
        results = run_suite(
            run_dir, names, full=args.full, seed=args.seed, progress=bar.row, folder=folder, workers=workers_of(args)
        )
    text = render(results, args.full)
    with open(os.path.join(run_dir, "broken.md"), "w") as f:
        f.write(text)
    folder.finish([row for r in results for row in r.rows])
    with open(os.path.join(run_dir, "caught.json"), "w") as f:
        json.dump(
            {
                r.impl.name: {"caught": r.caught, "caught_by": r.caught_by, "expected": r.impl.caught_by}
                for r in results
            },
            f,
            indent=1,
        )
    for r in results:
        print(f"{r.impl.name:26s} {'caught by ' + ', '.join(r.caught_by) if r.caught else 'NOT CAUGHT'}")
    print(f"report: {os.path.join(run_dir, 'broken.md')}")
    return 0 if all(r.caught for r in results) else 1
