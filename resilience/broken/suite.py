"""Run the broken implementations through the matrix and say which checker caught each.

For every implementation of the catalogue: `resilience matrix --backend broken:NAME` restricted to its
column and combinations (only its witness combination unless `full`), the same cases and runner as the
matrix command. An implementation is caught when at least one case FAILs; the checkers that gave FAIL
are what caught it."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field, replace

from ..errors import ConfigError
from ..report.result_row import ResultRow
from ..verdicts import FAIL
from ..vocab.combos import Combination, valid_combinations
from .catalogue import CATALOGUE, BrokenImpl


@dataclass
class SuiteResult:
    impl: BrokenImpl
    rows: list[ResultRow] = field(default_factory=list)

    @property
    def caught(self) -> bool:
        return any(r.verdict == FAIL for r in self.rows)

    @property
    def caught_by(self) -> list[str]:
        """Checkers that gave FAIL in any case, in checker order."""
        seen: list[str] = []
        for r in self.rows:
            for c in r.checkers:
                if c.status == FAIL and c.checker not in seen:
                    seen.append(c.checker)
        return seen

    @property
    def expected_caught(self) -> bool:
        return self.impl.caught_by in self.caught_by

    def matrix_command(self, full: bool) -> str:
        impl = self.impl
        combos = combos_of(impl, full)
        from ..runner.corners import CORNERS, EACH_FILE, is_file_column
        from ..runner.matrix import FAULTS, STORE_FAULTS

        col = ["--faults", "none", "--transitions", "none", "--corners", "none"]
        corner = impl.column in CORNERS or is_file_column(impl.column)
        flag = (
            "--faults"
            if impl.column in FAULTS or impl.column in STORE_FAULTS
            else "--corners"
            if corner
            else "--transitions"
        )
        col[col.index(flag) + 1] = EACH_FILE if is_file_column(impl.column) else impl.column
        col += ["--storage", "s3"] if impl.column in STORE_FAULTS else []
        return " ".join(
            shlex.quote(a)
            for a in ["resilience", "matrix", "--backend", f"broken:{impl.name}", "--combos", *map(str, combos), *col]
        )


def combos_of(impl: BrokenImpl, full: bool) -> list[Combination]:
    if not full and impl.witness:
        return [Combination.parse(impl.witness)]
    return [Combination.parse(c) for c in impl.combos] if impl.combos else valid_combinations()


def check_names(names: list[str] | None) -> list[str]:
    """The implementations asked for (default: all); an unknown name is one ConfigError."""
    names = list(CATALOGUE) if names is None else names
    if not names:
        raise ConfigError("--names", "no implementation named", f"choose from {', '.join(CATALOGUE)}")
    for n in names:
        if n not in CATALOGUE:
            raise ConfigError("--names", f"no broken implementation {n!r}", f"choose from {', '.join(CATALOGUE)}")
    return names


def run_suite(
    out_dir: str,
    names: list[str] | None = None,
    *,
    full: bool = False,
    seed: int = 0,
    progress=None,
    folder=None,
    workers: int = 1,
) -> list[SuiteResult]:
    """Run each named implementation (default: all) in its own folder under `out_dir`. Each case's row is
    appended to `folder` (a report.RunFolder; default: results.jsonl in `out_dir`) as the case ends, and
    `progress(row)` called; a framework error is that case's UNKNOWN."""
    from ..report import RunFolder
    from ..runner.adapters import resolve_backend
    from ..runner.case_loop import CaseSpec, judge_cases
    from ..runner.corners import CORNERS, EACH_FILE, is_file_column
    from ..runner.matrix import FAULTS, STORE_FAULTS, TRANSITIONS, cases, data_files_written

    names = check_names(names)
    folder = folder if folder is not None else RunFolder(out_dir, {})
    specs = []
    for name in names:
        impl = CATALOGUE[name]
        backend = resolve_backend(f"broken:{name}")  # once for all its cases

        def written(combo, backend=backend, name=name):  # the damage-each-file corner's files
            return data_files_written(
                combo, backend, os.path.join(out_dir, name, "layout", str(combo).replace("/", "-"))
            )

        faults = [impl.column] if impl.column in FAULTS or impl.column in STORE_FAULTS else []
        transitions = {impl.column: TRANSITIONS[impl.column]} if impl.column in TRANSITIONS else {}
        each_file = is_file_column(impl.column)
        corners = [EACH_FILE] if each_file else [impl.column] if impl.column in CORNERS else []
        planned = cases(combos_of(impl, full), faults, transitions, seed, corners=corners, data_files=written)
        for i, case in enumerate(c for c in planned if not each_file or c.column == impl.column):
            specs.append(
                CaseSpec(
                    replace(case.scenario, storage="s3") if impl.column in STORE_FAULTS else case.scenario,
                    case.combo,
                    os.path.join(out_dir, name, f"{i:02d}-{str(case.combo).replace('/', '-')}"),
                    backend,
                    case.fault,
                    case.transition,
                    {"column": case.column, "broken": name},
                )
            )
    rows = judge_cases(folder, specs, after=progress, workers=workers)
    return [SuiteResult(CATALOGUE[name], [r for r in rows if r.broken == name]) for name in names]


def render(results: list[SuiteResult], full: bool) -> str:
    """The report: which checker caught which implementation, with the command that shows it."""
    lines = [
        "# Broken implementations: which checker caught which",
        "",
        f"{sum(r.caught for r in results)} of {len(results)} caught "
        f"({'every catalogued combination' if full else 'witness combination only'}).",
        "",
        "| implementation | bug | column | combinations | FAIL | caught by | expected |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        fails = sum(row.verdict == FAIL for row in r.rows)
        lines.append(
            f"| `{r.impl.name}` | {r.impl.bug} | {r.impl.column} | "
            f"{', '.join(row.combo for row in r.rows)} | {fails}/{len(r.rows)} | "
            f"{', '.join(r.caught_by) or '**not caught**'} | {r.impl.caught_by}"
            f"{'' if r.expected_caught else ' (missed)'} |"
        )
    lines += ["", "Replay one implementation: `" + (results[0].matrix_command(full) if results else "") + "`", ""]
    for r in results:
        lines.append(f"- `{r.impl.name}`: `{r.matrix_command(full)}`")
        for row in r.rows:
            lines.append(f"  - {row.combo} {row.column}: {row.verdict}: {row.detail[:200]}")
            lines.append(f"    replay: `{row.replay}`")
    return "\n".join(lines) + "\n"
