"""report.html, from templates/report.html.j2 (jinja2, autoescaped: every name, detail and piece of
evidence comes from a scenario or a checkpoint and is untrusted text)."""

from __future__ import annotations

import os
from functools import lru_cache

import jinja2

from .result_row import ResultRow
from .tally import WARNED_BLURB, count_label
from .view import build

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The one template environment: autoescaping on for every template, undefined names an error."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render(template: str, **context) -> str:
    return environment().get_template(template).render(count_label=count_label, **context)


def render_html(rows: list[ResultRow], meta: dict, columns: list[str] | None = None, run_dir: str | None = None) -> str:
    """The page of a run: counts, the matrix, each case that did not pass with its evidence, every case's files."""
    return render("report.html.j2", v=build(rows, meta, columns, run_dir), warned_blurb=WARNED_BLURB)
