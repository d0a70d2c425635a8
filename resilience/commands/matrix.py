"""`resilience matrix`: combinations x faults x transitions, measured, as a table and a run folder."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import tempfile
import time

from ..errors import ConfigError
from .common import (
    add_io_argument,
    add_repeat_argument,
    add_storage_arguments,
    add_workers_argument,
    combination_arg,
    print_coverage,
    run_stores,
    seed_arg,
    workers_of,
)


def register(sub) -> None:
    from ..runner.corners import CORNERS, EACH_FILE
    from ..runner.matrix import FAULTS, STORE_FAULTS, TRANSITIONS

    p = sub.add_parser("matrix", help="measure every combination under every fault and topology change")
    p.add_argument("--combos", nargs="+", type=combination_arg, help="combinations (default: all six valid)")
    p.add_argument(
        "--faults",
        nargs="+",
        help=f"fault columns (default: all, unless only --corners names columns; none: no fault column): "
        f"{', '.join(FAULTS)}; with --storage s3 also (and by default) {', '.join(STORE_FAULTS)}",
    )
    p.add_argument(
        "--transitions",
        nargs="+",
        help=f"names ({', '.join(TRANSITIONS)}) or explicit tp2pp1dp1->tp1pp1dp2 (a precision change: "
        "tp1pp1dp1:fp32->tp1pp1dp1:bf16, of the optimizer moments tp1pp1dp1:fp32->tp1pp1dp1:fp32+optim_bf16) "
        "(default: all named, unless only --corners names columns; none: no transition column)",
    )
    p.add_argument(
        "--corners",
        nargs="+",
        help="the corners table's columns (default: all, unless --faults or --transitions is given; none: no "
        "corner; named alone, they run alone): " + ", ".join([*CORNERS, EACH_FILE]),
    )
    p.add_argument(
        "--backend",
        default="reference",
        help="'reference', 'broken:NAME', 'dcp', 'dcp-threads', 'megatron', 'nvrx' or package.module:factory, "
        "with options: dcp:thread_count=4,async=process or package.module:factory[name=value]",
    )
    p.add_argument(
        "--backend-options",
        nargs="+",
        metavar="OPTION",
        help="sweep the backend's declared options ('all', or option names): the defaults, then each "
        "non-default value of each option one at a time against the defaults, each option set its "
        "own rows; `resilience options BACKEND` lists them",
    )
    p.add_argument("--json", metavar="FILE", help="also write the rows (results.json schema) to FILE")
    p.add_argument("--out", default="runs", help="where the run folder goes (default: runs/)")
    p.add_argument("--seed", type=seed_arg, default=0, help="seed of every case (default: 0)")
    add_io_argument(p)
    add_storage_arguments(p)
    add_workers_argument(p)
    add_repeat_argument(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from ..launch import heap

    with heap.loading():  # torch and the runner
        from ..runner.corners import corner_names
        from ..runner.matrix import FAULTS, cases, fault_scenario, parse_transitions
        from ..runner.option_sweep import plan_sweep
        from ..vocab.combos import valid_combinations

    # all columns by default; corners named with --corners run alone, and a run given --faults or
    # --transitions (each of those two all by default, as before the corners) runs no corner unless named
    matrix_given = args.faults is not None or args.transitions is not None
    corners_named = any(c != "none" for c in args.corners or [])
    alone = ["none"] if corners_named and not matrix_given else None
    every = list(FAULTS) + (_store_columns(args.backend) if args.storage not in (None, "local") else [])
    faults = [f for f in args.faults or alone or every if f != "none"]
    transitions = parse_transitions(args.transitions or alone)
    corners = corner_names(args.corners or (["none"] if matrix_given else None))
    # the backend resolved once for the run, and once per option set swept: a bad spec is one clear error here
    sweep = plan_sweep(args.backend, args.backend_options)
    backend = sweep[0].backend  # the spec as given (a sweep's first set is its defaults)
    combos = args.combos or backend.combinations() or valid_combinations()
    _refuse_bad_arguments(args, faults, transitions, corners, combos, sweep, fault_scenario)
    work = _on_storage(args, _plan_work(args, faults, transitions, corners, combos, sweep, cases))
    with run_stores([c.scenario for _, _, c in work], args.endpoint_url):  # checked and started before any folder
        return _run_work(args, work, faults, transitions, corners, combos, sweep)


def _run_work(args, work, faults, transitions, corners, combos, sweep) -> int:
    from ..report.matrix_table import column_of, text_table, transposed_table
    from ..report.result_row import rows_to_json
    from ..runner.case_loop import CaseSpec, create_run_folder, judge_cases
    from ..runner.corners import EACH_FILE, corner_probes, is_file_column
    from ..runner.coverage import Coverage
    from ..runner.option_sweep import refused_values
    from .progress import Progress
    from .run import summarize

    seen = list(dict.fromkeys(c.column for _, _, c in work))
    table = [c for f in faults for c in seen if c == f or (f == "metadata" and c.startswith("metadata:"))] + list(
        transitions
    )
    corner_columns = [c for name in corners for c in seen if c == name or (name == EACH_FILE and is_file_column(c))]
    columns = table + corner_columns
    folder = _start_folder(create_run_folder, args, columns, work, sweep, combos, faults, transitions, corners)
    probes = corner_probes(corner_columns)  # each corner's one line: in the terminal and in the reports
    folder.meta["corners"] = {c: probes.get(c, "") for c in corner_columns}
    if args.backend_options:
        _announce_sweep(sweep, refused_values)
    specs = _case_specs(CaseSpec, folder, work, args.io)
    start = time.monotonic()
    with Progress(len(work), "cases") as bar:
        rows = judge_cases(
            folder,
            specs,
            columns=columns,
            before=lambda c: bar.start(str(c)),
            after=bar.row,
            workers=workers_of(args),
            repeat=args.repeat,
        )
    if table:
        print(text_table([r for r in rows if column_of(r) in table], table))
    if corner_columns:
        mine = [r for r in rows if column_of(r) in corner_columns]
        print(f"\ncorners:\n{transposed_table(mine, corner_columns, probes)}")
    print(f"({time.monotonic() - start:.1f} s)")
    paths = folder.finish(rows, columns=columns)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows_to_json(rows), f, indent=1)
    code = summarize(rows, paths)
    print_coverage(Coverage().add_all(c.scenario for _, _, c in work), folder.path)
    return code


def _store_columns(backend) -> list[str]:
    """The object store's columns a run gives by default: those aimed at the reference's commit by copies
    only for a backend that writes through the seam (runner.matrix.REFERENCE_STORE_COLUMNS)."""
    from ..runner.adapters import resolve_backend
    from ..runner.matrix import REFERENCE_STORE_COLUMNS, STORE_FAULTS

    mine = resolve_backend(backend).through_seam
    return [c for c in STORE_FAULTS if mine or c not in REFERENCE_STORE_COLUMNS]


def _on_storage(args, work: list) -> list:
    """The cases with --storage in place of their scenario's; ConfigError when the backend cannot reach it."""
    if args.storage is None:
        return work
    from dataclasses import replace

    from ..runner.on_store import check_reaches
    from ..runner.run import case_way

    work = [(b, label, replace(c, scenario=replace(c.scenario, storage=args.storage))) for b, label, c in work]
    for backend, _, c in work:
        check_reaches(c.scenario, backend, case_way(c.scenario, backend, args.io))
    return work


def _refuse_bad_arguments(args, faults, transitions, corners, combos, sweep, fault_scenario) -> None:
    """An unknown column, nothing to run, an unwritable --json or a backend that cannot be made: one clear
    error before any case runs."""
    for f in faults:
        fault_scenario(f, args.seed)  # an unknown column: one clear error before anything runs
    if not faults and not transitions and not corners:
        raise ConfigError(
            "matrix",
            "nothing to run: no fault column, no transition and no corner",
            "give --faults, --transitions or --corners other than none",
        )
    if args.json and (os.path.isdir(args.json) or not os.path.isdir(os.path.dirname(os.path.abspath(args.json)))):
        raise ConfigError("--json", f"cannot write {args.json!r}", "give a file name in an existing folder")
    for column in sweep:  # a backend that cannot be made: one clear error before any case
        column.backend.make(next((c for c in combos if column.applies_to(c)), combos[0]))


def _plan_work(args, faults, transitions, corners, combos, sweep, cases) -> list:
    """(backend, option set label, case) for every case of every option set; learning which metadata
    files a load reads and which data files a save writes on the way, in a folder removed after."""
    from ..runner.corners import EACH_FILE
    from ..runner.matrix import data_files_written, metadata_files_read

    learned = tempfile.mkdtemp(prefix="resilience-layout-")
    work = []  # (backend, option set label, case)
    try:
        for n, column in enumerate(sweep):
            if "metadata" in faults or EACH_FILE in corners:
                print(f"matrix: learning which files a save and a load of {column.spec} use ...", flush=True)
            mine = [c for c in combos if column.applies_to(c)]

            def read(combo, backend=column.backend, n: int = n):
                return metadata_files_read(combo, backend, os.path.join(learned, f"{n}-{_label(combo)}"))

            def written(combo, backend=column.backend, n: int = n):
                return data_files_written(combo, backend, os.path.join(learned, f"{n}-{_label(combo)}"))

            work += [
                (column.backend, column.label if args.backend_options else None, case)
                for case in cases(mine, faults, transitions, args.seed, read, corners, written)
            ]
    finally:
        shutil.rmtree(learned, ignore_errors=True)
    return work


def _start_folder(create_run_folder, args, columns, work, sweep, combos, faults, transitions, corners):
    """The run folder, created with what the run is, and a line saying so."""
    command = "resilience " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else "resilience matrix"
    folder = create_run_folder(
        args.out,
        "matrix",
        {
            "title": "resilience matrix",
            "seed": args.seed,
            "backend": args.backend,
            "command": command,
            "columns": columns,
            "cases": len(work),
            "io": args.io,
            "storage": args.storage or "local",
            "repeat": args.repeat,
            "option_sets": [c.spec for c in sweep] if args.backend_options else None,
        },
    )
    runs = f" x {args.repeat} runs each" if args.repeat > 1 else ""
    print(
        f"matrix: {len(combos)} combinations x ({len(faults)} faults + {len(transitions)} transitions + "
        f"{len(corners)} corners) = "
        f"{len(work)} cases{runs}; seed {args.seed}; backend {args.backend}; "
        f"faults through {_io(args, sweep[0].backend)}; "
        f"checkpoints {'on ' + args.storage if args.storage else 'in local folders'}; "
        f"{workers_of(args)} at a time; "
        f"run folder {folder.path}",
        flush=True,
    )
    return folder


def _announce_sweep(sweep, refused_values) -> None:
    """The option sets swept, and the values that cannot run here."""
    print(
        f"matrix: {len(sweep)} option sets (the defaults, then one option changed at a time): "
        f"{', '.join(c.label for c in sweep)}",
        flush=True,
    )
    for line in refused_values(sweep[0].backend.declared_options):
        print(f"matrix: not swept, cannot run here: {line}", flush=True)


def _case_specs(CaseSpec, folder, work, io: str) -> list:
    """One CaseSpec per case, each with its own folder under the run folder's cases/."""
    cases_dir = os.path.join(folder.path, "cases")
    specs = [
        CaseSpec(
            c.scenario,
            c.combo,
            os.path.join(cases_dir, f"{i:03d}-{_label(c.combo, c.column)}"),
            backend,
            c.fault,
            c.transition,
            {"column": c.column, **({"options": label} if label else {})},
            io,
        )
        for i, (backend, label, c) in enumerate(work)
    ]
    return specs


def _io(args, backend) -> str:
    from ..runner.io_route import FUSE, resolve

    way = resolve(args.io, backend)
    return "the fault-injecting file system" if way == FUSE else "the storage seam"


def _label(combo, column: str = "") -> str:
    """A folder name for a combination (and column): no path separators, no leading dot."""
    text = f"{combo}-{column}" if column else str(combo)
    return text.replace("/", "-").replace(":", "-").replace("-.", "-")
