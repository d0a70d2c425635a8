"""Why a load was wrong, in one word a reader can scan (checksum, shape, value, ...), from the text of an
error or of a checker's verdict. The reports put it on the same line as the FAIL it explains."""

from __future__ import annotations

import re

from .result_row import ResultRow

# (cause, pattern), first match wins: what an error or a verdict says, most specific first
_CAUSES = (
    ("checksum", re.compile(r"checksum|xxh3|digest mismatch|crc", re.I)),
    ("shape", re.compile(r"size mismatch|shape|Size\(\[|mismatch sizes|global shape", re.I)),
    ("dtype", re.compile(r"stored (as )?torch\.\w+, expected|dtype", re.I)),
    ("missing", re.compile(r"missing key|no such file|not in state dict|has no '|does not exist|not found", re.I)),
    ("truncated", re.compile(r"central directory|unexpected end|truncat|short read|EOF", re.I)),
    ("rng", re.compile(r"\bRNG\b", re.I)),
    ("iteration", re.compile(r"loaded iteration \d+|iteration \d+ .*newest|newest valid", re.I)),
    (
        "value",
        re.compile(
            r"values? differ|differs from|wrong values|no save wrote|neither the exact|diverged"
            r"|torn or mixed|CAST-SILENTLY",
            re.I,
        ),
    ),
    ("lost", re.compile(r"acknowledged save|lost", re.I)),
    ("refused", re.compile(r"refused|TopologyChangeRefused", re.I)),
)
CAUSES = tuple(name for name, _ in _CAUSES) + ("error",)


def cause_of(text: str) -> str:
    """One word for why a load went wrong: checksum, shape, dtype, missing, truncated, rng, iteration,
    value, lost, refused; "error" for anything else."""
    for name, pattern in _CAUSES:
        if pattern.search(text or ""):
            return name
    return "error"


def row_cause(row: ResultRow | None) -> tuple[str, str]:
    """(cause, the sentence it comes from) of a results row that did not pass: its first failing checker's
    verdict ("", "") when nothing failed (or there is no row)."""
    if row is None:
        return "", ""
    for v in row.checkers:
        if v.status in ("FAIL", "UNKNOWN"):
            detail = str(v.detail)
            # the verdict's sentence, else what its evidence says ("problem", "error")
            said = [str(e.get(k, "")) for e in v.evidence or [] if isinstance(e, dict) for k in ("problem", "error")]
            cause = next((c for c in map(cause_of, [detail, *said]) if c != "error"), "error")
            why = detail if not said or cause_of(detail) != "error" else f"{detail} ({said[0][:200]})"
            return cause, f"{v.checker}: {why}"
    if row.verdict in ("FAIL", "UNKNOWN"):
        return cause_of(row.detail), row.detail
    return "", ""
