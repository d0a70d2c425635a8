"""`resilience run`: run scenario files (or folders of them) and write a run folder with the verdicts."""

from __future__ import annotations

import os
import shlex
import sys
from typing import TYPE_CHECKING

from .common import (
    add_io_argument,
    add_repeat_argument,
    add_storage_arguments,
    add_workers_argument,
    combination_arg,
    on_storage,
    print_coverage,
    run_stores,
    seed_arg,
    workers_of,
)

if TYPE_CHECKING:
    from ..report.result_row import ResultRow


def register(sub) -> None:
    p = sub.add_parser("run", help="run scenario files and judge them")
    p.add_argument("scenarios", nargs="+", help="scenario .yaml files or folders of them")
    p.add_argument("--combos", nargs="+", type=combination_arg, help="only these combinations (TYPE/format/io)")
    p.add_argument("--backend", default=None, help="'reference' (default) or package.module:factory")
    p.add_argument("--out", default="runs", help="where run folders go (default: runs/)")
    p.add_argument("--seed", type=seed_arg, default=None, help="override every scenario's seed")
    p.add_argument("--tag", action="append", help="only scenarios carrying this tag")
    add_io_argument(p)
    add_storage_arguments(p)
    add_workers_argument(p)
    add_repeat_argument(p)
    p.set_defaults(func=run)


def scenario_files(paths: list[str]) -> list[str]:
    from ..errors import ConfigError

    out = []
    for p in paths:
        if os.path.isdir(p):
            out += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith((".yaml", ".yml")))
        elif os.path.isfile(p):
            out.append(p)
        else:
            raise ConfigError("scenario", f"{p} does not exist", "give .yaml files or folders holding them")
    return out


def _refuse_uncarried(scenario, backend, io: str | None) -> None:
    """ConfigError naming the scenario when a fault of it has no carrier on the way its cases take."""
    from ..errors import ConfigError
    from ..runner.on_store import check_reaches
    from ..runner.run import case_way

    try:
        check_reaches(scenario, backend, case_way(scenario, backend, io or scenario.io))
    except ConfigError as e:
        raise ConfigError(f"{scenario.name}: {e.field}", e.problem, e.fix) from None


def _work(args, scenarios, refs) -> tuple[list, list[str]]:
    """The (scenario, combination) cases to run, and those left out as the backend does not declare them."""
    work, undeclared = [], []
    for s in scenarios:
        if args.seed is not None:
            s.seed = args.seed
        declared = refs[args.backend or s.backend].combinations()
        for combo in s.combinations:
            if args.combos and combo not in args.combos:
                continue
            if declared is not None and combo not in declared:  # the backend does not implement it: not a case
                undeclared.append(f"{s.name} {combo}")
                continue
            work.append((s, combo))
    return work, undeclared


def run(args) -> int:
    from ..runner.scenario import load_file

    scenarios = [load_file(f) for f in scenario_files(args.scenarios)]  # all validated before anything runs
    scenarios = on_storage(scenarios, args.storage)
    # imported once the scenarios read: a refused file is refused without importing torch
    from ..launch import heap

    with heap.loading():
        from ..runner.adapters import resolve_backend

    if args.tag:
        scenarios = [s for s in scenarios if set(args.tag) & set(s.tags)]
    refs = {}  # each backend named, resolved once for the run
    for s in scenarios:
        name = args.backend or s.backend
        if name not in refs:
            refs[name] = resolve_backend(name)
    work, undeclared = _work(args, scenarios, refs)
    if undeclared:
        print(
            f"resilience run: left out {len(undeclared)} scenario x combination(s) the backend does not declare "
            f"(e.g. {undeclared[0]})",
            file=sys.stderr,
        )
    if not work:
        print(
            "resilience run: nothing to run (no scenario has the combinations or tags asked for, among the ones "
            "the backend declares): name them with --combos or the scenario's `combinations:`",
            file=sys.stderr,
        )
        return 2
    for s, combo in work:  # every backend made once: a bad one is one clear error before any case runs
        refs[args.backend or s.backend].make(combo)
    for s in {id(s): s for s, _ in work}.values():  # a fault no carrier of its way carries: refused, never unfired
        _refuse_uncarried(s, refs[args.backend or s.backend], args.io)
    with run_stores([s for s, _ in work], args.endpoint_url):  # checked and started before any folder is made
        return _run_work(args, scenarios, work, refs)


def _run_work(args, scenarios, work, refs) -> int:
    from ..runner.case_loop import CaseSpec, create_run_folder, judge_cases
    from ..runner.coverage import Coverage
    from .progress import Progress

    name = scenarios[0].name if len(scenarios) == 1 else "scenarios"
    command = "resilience " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else "resilience run"
    seeds = sorted({s.seed for s, _ in work})
    folder = create_run_folder(
        args.out,
        name,
        {
            "title": f"resilience run: {name}",
            "seed": seeds,
            "backend": args.backend or "reference",
            "command": command,
            "cases": len(work),
            "repeat": args.repeat,
        },
    )
    runs = f" x {args.repeat} runs each" if args.repeat > 1 else ""
    print(f"run folder {folder.path}; {len(work)} cases{runs}; seeds {seeds}", flush=True)
    specs = _case_specs(CaseSpec, args, work, refs, os.path.join(folder.path, "cases"))
    with Progress(len(work), "cases") as bar:

        def after(row: ResultRow) -> None:
            bar.note(f"{row.scenario:<32} {row.combo:<26} {row.verdict}")
            bar.row(row)

        rows = judge_cases(
            folder,
            specs,
            before=lambda c: bar.start(str(c)),
            after=after,
            workers=workers_of(args),
            repeat=args.repeat,
        )
    code = summarize(rows, folder.finish(rows))
    print_coverage(Coverage().add_all(s.scenario for s in specs), folder.path)
    return code


def _case_specs(CaseSpec, args, work, refs, cases_dir: str) -> list:
    """One CaseSpec per (scenario, combination), each with its own folder under the run folder's cases/."""
    return [
        CaseSpec(
            s,
            combo,
            os.path.join(cases_dir, f"{i:03d}-{_safe(s.name)}-{str(combo).replace('/', '-')}"),
            refs[args.backend or s.backend],
            extra={"column": s.name},
            io=args.io,
        )
        for i, (s, combo) in enumerate(work)
    ]


def _safe(name: str) -> str:
    """A scenario name as one folder-name component: nothing that climbs out of the run folder."""
    import re

    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.")[:80] or "scenario"


def summarize(rows: list[ResultRow], paths: dict) -> int:
    from ..report.matrix_table import is_framework_error
    from ..report.result_row import runs_text
    from ..verdicts import FLAKY, is_failing, summary_line

    bad = [r for r in rows if is_failing(r.verdict)]
    broke = sum(is_framework_error(r) for r in bad)
    for r in bad:
        what = f"{r.verdict} (framework error)" if is_framework_error(r) else r.verdict
        print(f"{what}: {r.scenario} {r.combo}: {r.detail[:300]}")
        for line in runs_text(r) if r.verdict == FLAKY else ():  # every run's outcome, and its evidence
            print(f"  {line}")
        print(f"  replay: {r.replay}")
    # a framework error says nothing of the implementation: counted apart, as the report does
    note = f"; {broke} of the UNKNOWN are framework errors (the framework broke, not the implementation)"
    print(summary_line(r.verdict for r in rows) + (note if broke else ""))
    print(f"report: {paths['report.md']}  ({paths['report.html']}, {paths['results.json']}, {paths['junit.xml']})")
    return 1 if bad else 0
