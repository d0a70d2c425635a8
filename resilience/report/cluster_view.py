"""What the validate and corpus reports say beyond a run's rows: for a cluster validation its nodes,
torchrun attempts, restarts and kills (which rank, on which node and host, when, where in the save); for
a corpus verification every load. Every load that went wrong carries its cause (checksum, shape, value,
...) beside its verdict, so a FAIL and its reason are read on one line."""

from __future__ import annotations

import os
import shlex
import time
from dataclasses import dataclass, field

from ..verdicts import FAIL, NA, PASS, REFUSED, UNKNOWN, UNPROBED, WARN, Status
from .causes import cause_of

CSS = {PASS: "pass", WARN: "warn", REFUSED: "refused", FAIL: "fail", UNKNOWN: "unknown", UNPROBED: "unprobed", NA: "na"}


@dataclass(frozen=True)
class LoadLine:
    """One load: what was loaded where, its verdict, and (when it went wrong) why, in a word and a sentence."""

    name: str
    where: str
    verdict: str
    css: str
    cause: str
    why: str
    cells: tuple[str, ...] = ()  # further columns of its table


@dataclass(frozen=True)
class ClusterView:
    facts: list[tuple[str, str]]
    nodes: list[dict]
    attempts: list[dict]
    kills: list[dict]
    loads: list[LoadLine]
    files: list[tuple[str, str]] = field(default_factory=list)  # (label, href from the report) of the evidence


# the evidence a validation keeps in its shared folder, beside report/ (cluster.base.SharedFolder)
SHARED_FILES = (
    ("histories", "history"),
    ("kills fired", "faults"),
    ("attempts", "attempts.json"),
    ("node logs", "logs"),
    ("checkpoints", "ckpt"),
)


def shared_files(report_dir: str | None) -> list[tuple[str, str]]:
    """Links from a validation's report (shared/report/) to the evidence beside it in the shared folder."""
    if not report_dir:
        return []
    shared = os.path.dirname(os.path.abspath(report_dir))
    out = []
    for label, name in SHARED_FILES:
        path = os.path.join(shared, name)
        if os.path.exists(path):
            out.append((label, "../" + name + ("/" if os.path.isdir(path) else "")))
    return out


def cluster_of(facts: dict | None, report_dir: str | None = None) -> ClusterView | None:
    """The view of a validation's facts (cluster.facts.cluster_facts), None for other runs; `report_dir`, the
    folder its report is written into, for links to the evidence."""
    if not facts:
        return None
    attempts = facts.get("attempts") or []
    run = [
        ("run id", str(facts.get("run_id") or "?")),
        ("world", str(facts.get("world") or "?")),
        ("topology", _topology(facts.get("topology"))),
        ("nodes", str(len(facts.get("nodes") or []))),
        ("torchrun attempts", str(len(attempts))),
        ("restarts", str(facts.get("restarts", 0))),
        ("kills", str(len(facts.get("kills") or []))),
    ]
    loads = []
    for c in facts.get("combos") or []:
        verdict = str(c.get("verdict", "?"))
        loads.append(
            LoadLine(
                str(c.get("combo")),
                _attempt(c.get("resumed_on")),
                verdict,
                _css(verdict),
                str(c.get("cause") or ""),
                str(c.get("why") or ""),
                (_attempt(c.get("saved_on")), str(c.get("kill", ""))),
            )
        )
    return ClusterView(
        run,
        list(facts.get("nodes") or []),
        list(attempts),
        list(facts.get("kills") or []),
        loads,
        shared_files(report_dir),
    )


@dataclass(frozen=True)
class CorpusView:
    title: str
    ok: bool
    headline: str
    facts: list[tuple[str, str]]
    counts: list[tuple[str, int, str]]
    loads: list[LoadLine]


# a corpus load's outcome -> the verdict a person reads, and its css
_OUTCOME = {
    "bit-exact": ("PASS", "pass"),
    "refused clearly": ("REFUSED", "refused"),
    "wrong": ("FAIL", "fail"),
    "failed": ("FAIL", "fail"),
    "newly refused": ("FAIL", "fail"),
}


def corpus_of(doc: dict) -> CorpusView:
    """The view of a corpus verification (cluster.corpus.VerifyReport.to_dict())."""
    loads = []
    for c in doc.get("checks") or []:
        outcome = "newly refused" if c["outcome"] == "refused clearly" and not c["ok"] else c["outcome"]
        verdict, css = _OUTCOME.get(outcome, ("UNKNOWN", "unknown"))
        cause = "" if c["ok"] else (c.get("cause") or cause_of(c.get("detail", "")))
        why = c.get("detail", "") if not c["ok"] or outcome != "bit-exact" else ""
        if c.get("note"):
            why = f"{why} [{c['note']}]" if why else f"[{c['note']}]"
        promised = c.get("promised", c.get("expected"))  # "expected" in files written before the rename
        loads.append(
            LoadLine(
                str(c["entry"]),
                str(c["load_on"]),
                verdict,
                css,
                cause,
                why,
                (str(c["saved_on"]), str(promised), outcome),
            )
        )
    counts = [(k, n, _OUTCOME.get(k, ("", "na"))[1]) for k, n in (doc.get("counts") or {}).items() if n]
    bad = sum(not line.verdict.startswith(("PASS", "REFUSED")) for line in loads)
    headline = f"{len(loads)} loads: {len(loads) - bad} as expected, {bad} not" + (
        f" ({doc.get('versions')})" if doc.get("versions") else ""
    )
    written, read = doc.get("written_by") or {}, doc.get("read_by") or {}
    facts = [
        ("folder", str(doc.get("folder", ""))),
        ("written by", _versions(written)),
        ("read by", _versions(read)),
        ("versions", str(doc.get("versions", ""))),
        ("time", f"{float(doc.get('seconds') or 0):.1f} s"),
        ("verified", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())),
        ("replay", "resilience corpus verify " + shlex.quote(str(doc.get("folder", "")))),
    ]
    return CorpusView(
        f"resilience corpus: {doc.get('folder', '')}", bool(doc.get("ok")), headline, facts, counts, loads
    )


def _versions(v: dict) -> str:
    return ", ".join(f"{k} {v[k]}" for k in ("python", "torch", "resilience", "backend", "backend_version") if k in v)


def _css(verdict: str) -> str:
    try:
        return CSS.get(Status(verdict), "na")
    except ValueError:
        return "na"


def _attempt(n) -> str:
    return f"attempt {n}" if n is not None else "-"


def _topology(t) -> str:
    if isinstance(t, dict):
        return f"tp{t.get('tp')}pp{t.get('pp')}dp{t.get('dp')}"
    return str(t or "?")
