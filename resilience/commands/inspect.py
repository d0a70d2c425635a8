"""`resilience inspect DIR`: every checkpoint in a folder, complete or not, verified or which check failed.

The reference's format is read in full (manifests, checksums, trackers, staging leftovers); any other
backend (`--backend`) through its adapter: what its `list_checkpoints` reports, complete or not and why.

Exit status: 0 when the newest checkpoint (of each layout present) is loadable, 1 when it is not,
2 when DIR is missing or holds no checkpoint."""

from __future__ import annotations

import json
import os
import sys

from ..errors import CheckpointNotFound, ResilienceError
from .common import combination_arg


def register(sub) -> None:
    p = sub.add_parser(
        "inspect",
        help="list every checkpoint in a folder with its combination, topology, "
        "completeness and integrity; exit 1 if the newest is not loadable",
    )
    p.add_argument("dir", metavar="DIR", help="a checkpoint folder (the one given to save)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument(
        "--backend",
        default="reference",
        help="the implementation that wrote DIR: 'reference' (default: its format read in full), "
        "'broken:NAME', 'dcp', 'megatron' or package.module:factory (through its list_checkpoints)",
    )
    p.add_argument(
        "--combo",
        type=combination_arg,
        metavar="TYPE/format/io",
        help="the combination to make the backend for (default: the first its factory declares)",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    if args.backend != "reference":
        return run_adapter(args)
    from ..checkpoint.inspect import inspect

    try:
        result = inspect(args.dir)  # CheckpointNotFound: one clear error, exit 2 (cli.main)
    except CheckpointNotFound as e:
        if not os.path.isdir(args.dir):
            raise
        raise CheckpointNotFound(f"{e} (another implementation's checkpoints? name it with --backend)") from None
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
        rows.append(
            (
                str(c.iteration),
                c.layout,
                c.combination or "?",
                _topology(c.topology),
                "yes" if c.complete else "NO",
                integrity,
            )
        )
        for p in c.problems:
            details.append(
                f"  iteration {c.iteration} ({c.layout}): {rel(p.path)}: {p.check} failed"
                + (f": {p.detail}" if p.detail else "")
            )
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
        lines.append(
            f"leftover staging folders of interrupted saves ({len(result.staging)}; "
            f"removed by retention, never loaded):"
        )
        lines += [f"  {rel(s)}" for s in result.staging]
    else:
        lines.append("leftover staging folders: none")

    lines.append("")
    for c in result.newest():
        if c.loadable:
            lines.append(f"OK: the newest {c.layout} checkpoint, iteration {c.iteration}, is loadable")
        else:
            fallback = result.fallback(c.layout)
            then = (
                f"a loader falls back to iteration {fallback.iteration}"
                if fallback
                else "no older loadable checkpoint to fall back to"
            )
            lines.append(f"NOT LOADABLE: the newest {c.layout} checkpoint, iteration {c.iteration}; {then}")
    return "\n".join(lines)


# ---- any backend, through its adapter -----------------------------------------------------------------
def run_adapter(args) -> int:
    from ..runner.listing import listed_checkpoints

    combo, listed = listed_checkpoints(args.backend, args.dir, args.combo)
    root = os.path.abspath(args.dir)
    if not listed:
        raise CheckpointNotFound(
            f"{root}: {args.backend} ({combo}) lists no checkpoint here (its list_checkpoints returned none)"
        )
    newest = listed[0]
    fallback = next((c for c in listed if c.complete), None)
    if args.json:
        print(
            json.dumps(
                {
                    "root": root,
                    "backend": args.backend,
                    "combination": str(combo),
                    "ok": newest.complete,
                    "newest": {"iteration": newest.iteration, "loadable": newest.complete},
                    "checkpoints": [
                        {"iteration": c.iteration, "path": c.path, "complete": c.complete, "problem": c.problem}
                        for c in listed
                    ],
                },
                indent=1,
            )
        )
        return 0 if newest.complete else 1

    def rel(path: str) -> str:
        r = os.path.relpath(os.path.abspath(path), root)
        return path if r.startswith("..") else r

    rows = [("iteration", "path", "complete", "problem")]
    rows += [(str(c.iteration), rel(c.path), "yes" if c.complete else "NO", c.problem) for c in listed]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [f"checkpoints in {root}, as {args.backend} ({combo}) lists them (its list_checkpoints; newest first)", ""]
    lines += [("  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths)) + "  " + r[3]).rstrip() for r in rows]
    lines.append("")
    if newest.complete:
        lines.append(f"OK: the newest checkpoint, iteration {newest.iteration}, is complete")
    else:
        then = f"the newest complete one is iteration {fallback.iteration}" if fallback else "no checkpoint is complete"
        lines.append(
            f"NOT LOADABLE: the newest checkpoint, iteration {newest.iteration}, is not complete "
            f"({newest.problem or 'no reason given'}); {then}"
        )
    print("\n".join(lines))
    return 0 if newest.complete else 1
