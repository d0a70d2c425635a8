"""`resilience inspect DIR`: every checkpoint in a folder, complete or not, verified or which check failed.

Exit status: 0 when the newest checkpoint (of each layout present) is loadable, 1 when it is not,
2 when DIR is missing or holds no checkpoint."""
from __future__ import annotations

import json
import os
import sys

from ..errors import ResilienceError


def register(sub) -> None:
    p = sub.add_parser("inspect", help="list every checkpoint in a folder with its combination, topology, "
                                       "completeness and integrity; exit 1 if the newest is not loadable")
    p.add_argument("dir", metavar="DIR", help="a checkpoint folder (the one given to save)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..checkpoint.inspect import inspect

    try:
        result = inspect(args.dir)  # CheckpointNotFound: one clear error, exit 2 (cli.main)
    except OSError as e:
        if isinstance(e, ResilienceError):
            raise
        print(f"resilience inspect: error: {args.dir}: {e.strerror or e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
    else:
        print(render(result))
    return 0 if result.ok else 1


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _topology(t: dict | None) -> str:
    if not t:
        return "?"
    try:
        return f"tp{t['tp']}pp{t['pp']}dp{t['dp']}"
    except (KeyError, TypeError):
        return "?"


def render(result) -> str:
    """The table a person reads."""
    root = result.root

    def rel(path: str) -> str:
        r = os.path.relpath(path, root)
        return path if r.startswith("..") else r

    lines = [f"checkpoints in {root} (newest first)", ""]
    rows = [("iteration", "layout", "combination", "topology", "complete", "integrity")]
    details: list[str] = []
    for c in result.checkpoints:
        files = sum(f.files for f in c.folders)
        size = sum(f.bytes for f in c.folders)
        where = f"{len(c.folders)} rank folder{'s' if len(c.folders) != 1 else ''}, " if c.layout == "local" else ""
        if c.verified:
            integrity = f"verified ({where}{files} file{'s' if files != 1 else ''}, {_size(size)})"
        else:
            integrity = f"FAILED ({len(c.problems)} problem{'s' if len(c.problems) != 1 else ''})"
        rows.append((str(c.iteration), c.layout, c.combination or "?", _topology(c.topology),
                     "yes" if c.complete else "NO", integrity))
        for p in c.problems:
            details.append(f"  iteration {c.iteration} ({c.layout}): {rel(p.path)}: {p.check} failed"
                           + (f": {p.detail}" if p.detail else ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        lines.append("  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths)) + "  " + r[-1])
    if details:
        lines += ["", "problems (file: check):"] + details

    lines.append("")
    for t in result.trackers:
        state = f"iteration {t.iteration}" if t.iteration is not None else "no usable iteration"
        note = ""
        if t.problem:
            note = f"  WARNING: {t.problem.check} failed: {t.problem.detail} (loaders scan the folders)"
        lines.append(f"tracker {rel(t.path)}: {state}{note}")
    if result.staging:
        lines.append(f"leftover staging folders of interrupted saves ({len(result.staging)}; "
                     f"removed by retention, never loaded):")
        lines += [f"  {rel(s)}" for s in result.staging]
    else:
        lines.append("leftover staging folders: none")

    lines.append("")
    for c in result.newest():
        if c.loadable:
            lines.append(f"OK: the newest {c.layout} checkpoint, iteration {c.iteration}, is loadable")
        else:
            fallback = result.fallback(c.layout)
            then = (f"a loader falls back to iteration {fallback.iteration}" if fallback
                    else "no older loadable checkpoint to fall back to")
            lines.append(f"NOT LOADABLE: the newest {c.layout} checkpoint, iteration {c.iteration}; {then}")
    return "\n".join(lines)
