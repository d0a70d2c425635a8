"""report.md: the counts, the matrix, then each case that did not pass, grouped as report.html groups them,
with its evidence, its files and its replay command."""

from __future__ import annotations

from .case_view import CaseView
from .fuzz_view import NO_FAULT
from .result_row import ResultRow
from .tally import WARNED_BLURB
from .view import RunView, build


def render_markdown(
    rows: list[ResultRow], meta: dict, columns: list[str] | None = None, run_dir: str | None = None
) -> str:
    v = build(rows, meta, columns, run_dir)
    facts = " · ".join(f"{k} `{val}`" for k, val in v.facts)
    out = [f"# {v.title}", "", facts, ""]
    if v.note:
        out += [f"**{v.note}**: the rows below are the cases that finished.", ""]
    counts = ", ".join(f"{label} {n}" for label, n, _ in v.counts)
    out += [f"**{v.headline}**", "", f"Verdicts: {v.total} cases: {counts}", ""]
    if v.fuzz:
        out += _fuzz_table(v) + [""]
    if v.cluster:
        out += _cluster(v) + [""]
    cols = [name for name, _ in v.columns]
    if cols or not v.corners:
        out += ["| combination | " + " | ".join(_cell(c) for c in cols) + " |", "|---" * (len(cols) + 1) + "|"]
        out += [f"| {_cell(combo)} | " + " | ".join(_text(c) for c in cells) + " |" for combo, cells in v.grid]
    if v.corners:
        combos = [combo for combo, _ in v.grid]
        out += ["", "## Corners", "", "| corner | " + " | ".join(_cell(c) for c in combos) + " | what it probes |"]
        out += ["|---" * (len(combos) + 2) + "|"]
        out += [
            f"| {_cell(name)} | " + " | ".join(_text(c) for c in cells) + f" | {_cell(says)} |"
            for name, says, cells in v.corners
        ]
    for cat, cases in v.sections:
        if cases:
            out += ["", f"## {cat.title} ({len(cases)})", "", cat.blurb, ""]
            if cat.key == "failed" and v.on_the_way:
                out += [
                    f"Each minimal failure stands for the {v.on_the_way} failing cases met while searching and "
                    "shrinking: they are in results.json.",
                    "",
                ]
            for c in cases:
                out += _case(c)
    if v.warned:
        out += ["", f"## Passed with a warning ({len(v.warned)})", "", WARNED_BLURB, ""]
        out += [f"- {c.combo} · {c.column}: {c.detail[:300]}" for c in v.warned]
    if v.refused:
        out += ["", f"## Refused as expected ({len(v.refused)})", ""]
        out += [f"- {c.combo} · {c.column}: {c.detail[:300]}" for c in v.refused]
    return "\n".join(out) + "\n"


def _fuzz_table(v: RunView) -> list[str]:
    out = [" ".join(m.accounting for m in v.fuzz) + " Every case run is a row of results.json.", ""]
    out += [
        "| mode | cases run | searching | shrinking | verdicts | seconds | running cases | generating "
        "| of it shrinking | stopped |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in v.fuzz:
        verdicts = ", ".join(f"{label} {n}" for label, n, _ in m.counts)
        stopped = f"when its {m.stopped} was spent" if m.stopped else ""
        out.append(
            f"| {m.mode} | {m.cases} | {m.searching_cases} | {m.shrinking_cases} | {verdicts} | {m.seconds:.1f} "
            f"| {m.running:.1f} | {m.generating:.1f} | {m.shrinking:.1f} | {stopped} |"
        )
    out += [
        "",
        "Faults drawn (the Hypothesis events each example gave):",
        "",
        "| mode | fault kind | cases | fired in | verdicts | rejected |",
        "|---|---|---|---|---|---|",
    ]
    for m in v.fuzz:
        for f in m.faults:
            verdicts = ", ".join(f"{label} {n}" for label, n, _ in f.verdicts)
            fired = "" if f.kind == NO_FAULT else str(f.fired)
            out.append(f"| {m.mode} | {f.kind} | {f.cases} | {fired} | {verdicts} | {f.rejected or ''} |")
    out += [f"\nHypothesis' own count for {m.mode}: {m.hypothesis}." for m in v.fuzz if m.hypothesis]
    return out


def _cluster(v: RunView) -> list[str]:
    k = v.cluster
    assert k is not None
    out = [
        "## Cluster",
        "",
        " · ".join(f"{key} `{val}`" for key, val in k.facts),
        "",
        *(
            ["evidence in the shared folder: " + " · ".join(f"[{label}]({href})" for label, href in k.files), ""]
            if k.files
            else []
        ),
        "| combination | saved on | kill | resumed on | verdict and cause |",
        "|---|---|---|---|---|",
    ]
    for line in k.loads:
        cause = f"**{line.cause}**: " if line.cause else ""
        out.append(
            f"| {_cell(line.name)} | {line.cells[0]} | {line.cells[1]} | {line.where} | "
            f"{line.verdict} {cause}{_cell(line.why[:300])} |"
        )
    out += [""] + [
        f"- killed: rank {x['rank']} (node {x.get('node')}, {x.get('host')}, pid {x.get('pid')}) at "
        f"{x['where']} of {x['combo']} on attempt {x['attempt']}"
        + (f", {x['at']:.1f} s into the run" if x.get("at") is not None else "")
        for x in k.kills
    ]
    for a in k.attempts:
        out.append(
            f"- attempt {a['attempt']} at {a['at']:.1f} s: "
            + "; ".join(
                f"node {n['node']} on {n['host']}: ranks {', '.join(map(str, n['ranks']))} "
                f"(pids {', '.join(map(str, n['pids']))}, restart count {n['restart_count']})"
                for n in a["nodes"]
            )
        )
    return out


def _case(c: CaseView) -> list[str]:
    out = [f"### {c.combo} · {c.column} · {c.label}", ""]
    if c.expected_failure:
        out += [f"*Expected to fail: its test is marked xfail ({c.expected_failure}).*", ""]
    if c.test:
        out += [f"test: `{c.test}`", ""]
    out += [] if c.detail_repeats else [c.detail, ""]
    for f in c.findings:
        out.append(f"- **{f.checker}** {f.status}: {f.detail}")
        for n, item in enumerate(f.evidence, 1):
            out.append(f"  - evidence {n}:")
            for k, t in item:
                out += _value(k, t)
        if f.more:
            out.append(f"  - and {f.more} more in results.json")
    if c.runs:  # a case run several times with the same seed: every run's outcome and its evidence
        out += ["", f"runs with the same seed: {c.outcomes}", ""]
        out += [
            f"- run {r.run}: **{r.verdict}** in [{r.href or '?'}]({r.href or ''}): {r.detail[:300]}" for r in c.runs
        ]
    unfired = [x for x in c.faults if x.status != "fired"]
    if unfired:
        out.append("- faults that never fired: " + "; ".join(f"`{x.fault or '?'}`" for x in unfired))
    if c.links:
        out += ["", "files: " + " · ".join(f"[{link.label}]({link.href})" for link in c.links)]
    if c.scenario_text:
        out += ["", "minimal scenario:", "", "```yaml", *c.scenario_text.splitlines(), "```"]
    out += ["", "replay:", "", "```", c.replay, "```", ""]
    return out


def _value(key: str, text: str) -> list[str]:
    """One evidence value: inline code when it is one short line, else a fenced block (tracebacks, errors)."""
    label = f"{key}: " if key else ""
    if "\n" not in text and len(text) <= 160:
        return [f"    - {label}`{text.replace('`', chr(39))}`"]
    fence = "~~~~" if "```" in text else "```"
    block = [f"      {fence}", *(f"      {line}" for line in text.splitlines()), f"      {fence}"]
    return [f"    - {label}", "", *block, ""]


def _text(c) -> str:
    return _cell(c.text + (f" ({c.cases} cases)" if c.cases > 1 else ""))


def _cell(text: str) -> str:
    return text.replace("|", "\\|")
