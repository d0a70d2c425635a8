"""The report of a corpus verification (or of the baseline a corpus write measures): report.html from
templates/corpus.html.j2, report.md and verification.json in a run folder of its own."""

from __future__ import annotations

import json
import os

from .cluster_view import corpus_of


def render_corpus_html(doc: dict) -> str:
    from .html import render

    return render("corpus.html.j2", v=corpus_of(doc))


def render_corpus_markdown(doc: dict) -> str:
    v = corpus_of(doc)
    out = [
        f"# {v.title}",
        "",
        " · ".join(f"{k} `{val}`" for k, val in v.facts),
        "",
        f"**{v.headline}**",
        "",
        "Outcomes: " + ", ".join(f"{label} {n}" for label, n, _ in v.counts),
        "",
        "| checkpoint | saved on | load on | expected | outcome | verdict and cause |",
        "|---|---|---|---|---|---|",
    ]
    for line in v.loads:
        cause = f"**{line.cause}**: " if line.cause else ""
        why = line.why.replace("|", "\\|")[:300]
        out.append(
            f"| {line.name} | {line.cells[0]} | {line.where} | {line.cells[1]} | {line.cells[2]} | "
            f"{line.verdict} {cause}{why} |"
        )
    return "\n".join(out) + "\n"


def write_corpus_report(run_dir: str, doc: dict) -> dict[str, str]:
    """report.html, report.md and verification.json into `run_dir` (report.make_run_dir); their paths."""
    paths = {n: os.path.join(run_dir, n) for n in ("verification.json", "report.md", "report.html")}
    texts = {
        "verification.json": json.dumps(doc, indent=1, default=str),
        "report.md": render_corpus_markdown(doc),
        "report.html": render_corpus_html(doc),
    }
    for n, text in texts.items():
        with open(paths[n], "w", encoding="utf-8") as f:
            f.write(text)
    return paths
