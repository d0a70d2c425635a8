"""report.md: the matrix, then each non-passing case with its evidence and replay command."""
from __future__ import annotations

import json

from ..status import NA, PASS, REFUSED
from .table import column_of, matrix, short


def render_markdown(rows: list[dict], meta: dict, columns: list[str] | None = None) -> str:
    combos, cols, cells = matrix(rows, columns)
    out = [f"# {meta.get('title', 'Resilience run')}", "",
           f"seed `{meta.get('seed')}` · backend `{meta.get('backend', 'reference')}` · "
           f"{len(rows)} cases · command `{meta.get('command', '')}`", ""]
    if meta.get("note"):
        out += [f"**{meta['note']}**: the rows below are the cases that finished.", ""]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    out.append("Verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    out += ["", "| combination | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for combo in combos:
        out.append(f"| {combo} | " + " | ".join(short(cells.get((combo, c), NA.value)) for c in cols) + " |")
    bad = [r for r in rows if r["verdict"] not in (PASS, REFUSED, NA)]
    if bad:
        out += ["", "## Cases that did not pass", ""]
        for r in bad:
            out += [f"### {r['combo']} · {column_of(r)} · {r['verdict']}", "", r.get("detail", ""), "",
                    f"replay: `{r.get('replay', '')}`", ""]
            for v in r.get("checkers", []):
                if v["status"] not in (PASS, NA, REFUSED):
                    out += [f"- **{v['checker']}** {v['status']}: {v['detail']}"]
                    for e in v.get("evidence", [])[:3]:
                        out.append(f"  - `{json.dumps(e)[:400]}`")
            out.append("")
    refused = [r for r in rows if r["verdict"] == REFUSED]
    if refused:
        out += ["", "## Refused as expected", ""]
        for r in refused:
            out.append(f"- {r['combo']} · {column_of(r)}: {r.get('detail', '')[:300]}")
    return "\n".join(out) + "\n"
