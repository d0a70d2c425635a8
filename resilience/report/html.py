"""report.html: a coloured matrix a person would rather read than the JSON."""
from __future__ import annotations

import html

from ..status import FAIL, NA, PASS, REFUSED, UNKNOWN, UNPROBED
from .table import column_of, matrix, short, status_of

COLOURS = {PASS: "#2e7d32", REFUSED: "#1565c0", FAIL: "#c62828", UNKNOWN: "#6a1b9a", UNPROBED: "#ef6c00",
           NA: "#9e9e9e"}


def render_html(rows: list[dict], meta: dict, columns: list[str] | None = None) -> str:
    combos, cols, cells = matrix(rows, columns)
    by_cell: dict[tuple, list[dict]] = {}
    for r in rows:
        by_cell.setdefault((r["combo"], column_of(r)), []).append(r)
    e = html.escape
    subtitle = {column_of(r): r["transition"] for r in rows if r.get("transition")}
    small = {c: f"<br><small>{e(t).replace('-&gt;', '→')}</small>" for c, t in subtitle.items()}
    head = "".join(f"<th>{e(c)}{small.get(c, '')}</th>" for c in cols)
    body = []
    for combo in combos:
        tds = []
        for c in cols:
            verdict = cells.get((combo, c), NA.value)
            tip = " | ".join(r.get("detail", "") for r in by_cell.get((combo, c), []))[:600]
            tds.append(f'<td style="background:{COLOURS.get(status_of(verdict), "#777")}" title="{e(tip)}">'
                       f"{e(short(verdict))}</td>")
        body.append(f"<tr><th>{e(combo)}</th>{''.join(tds)}</tr>")
    details = []
    for r in rows:
        if r["verdict"] in (PASS, REFUSED):
            continue
        items = "".join(f"<li><b>{e(v['checker'])}</b> {e(v['status'])}: {e(v['detail'])}</li>"
                        for v in r.get("checkers", []) if v["status"] not in (PASS, NA))
        details.append(f"<h3>{e(r['combo'])} · {e(column_of(r))} · {e(r['verdict'])}</h3><ul>{items}</ul>"
                       f"<pre>{e(r.get('replay', ''))}</pre>")
    legend = " ".join(f'<span class="chip" style="background:{c}">{e(short(k))}</span>'
                      for k, c in COLOURS.items())
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{e(meta.get('title', 'Resilience run'))}</title>
<style>
body{{font-family:system-ui,sans-serif;margin:2em;color:#222}}
table{{border-collapse:collapse}} th,td{{padding:.4em .8em;border:1px solid #fff}}
td{{color:#fff;text-align:center;font-weight:600}} th{{background:#eee;text-align:left}}
.chip{{color:#fff;padding:.1em .5em;border-radius:.3em;margin-right:.3em}}
pre{{background:#f4f4f4;padding:.5em}}
</style></head><body>
<h1>{e(meta.get('title', 'Resilience run'))}</h1>
<p>seed <code>{e(str(meta.get('seed')))}</code> · backend <code>{e(str(meta.get('backend', 'reference')))}</code> ·
{len(rows)} cases · <code>{e(meta.get('command', ''))}</code></p>
{f'<p><b>{e(meta["note"])}</b>: the rows below are the cases that finished.</p>' if meta.get("note") else ""}
<p>{legend}<br><small>REFUSED: the load was refused with a clear error, as the combination's semantics
require; -: nothing to judge. Hover a cell for the evidence.</small></p>
<table><tr><th>combination</th>{head}</tr>{''.join(body)}</table>
{''.join(details)}
</body></html>
"""
