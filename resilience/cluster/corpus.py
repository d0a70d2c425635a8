"""A golden corpus for upgrades: checkpoints of every valid combination on a set of topologies, with the
expected fingerprints and the versions that wrote them; verified later under other versions.

DIR/corpus.json (versioned JSON) lists every checkpoint; DIR/<topology>/<TYPE-format-io>/ holds it.
`write_corpus` trains on each topology (real ranks, the local fork launcher), saves with every combination,
then loads every checkpoint on every topology of the set and keeps what happened as the baseline.
`verify_corpus` loads each checkpoint again, on its own topology and on the others, and classifies each
load: bit-exact, refused clearly, wrong (values, iteration or RNG differ), or failed (no refusal, no load).
A load fails the verification when it is wrong or failed, or when it is refused although the seed's table
says it loads and the baseline loaded it (newly refused)."""

from __future__ import annotations

import importlib.metadata
import os
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from ..checkers import promised as promise_of
from ..errors import CheckpointNotFound, ConfigError, IntegrityError, RankFailure, TopologyChangeRefused
from ..report.causes import cause_of
from ..state import (
    TOPOLOGY_BOUND_KEYS,
    ModelSpec,
    ParallelGroups,
    Topology,
    TrainingState,
    Transition,
    combine,
    differences,
    fingerprint,
)
from ..vocab.combos import Combination, valid_combinations
from ..vocab.contract import REFUSE
from ..vocab.versions import versions
from .spec import DEFAULT_STEPS, DEFAULT_TOPOLOGIES, read_json, slug, write_json

if TYPE_CHECKING:
    from ..runner.adapters import BackendName

CORPUS_FILE = "corpus.json"
CORPUS_KIND = "resilience-corpus"
CORPUS_VERSION = 1

BIT_EXACT, REFUSED_CLEARLY, WRONG, FAILED = "bit-exact", "refused clearly", "wrong", "failed"


# ---- the corpus file ------------------------------------------------------------------------------------
@dataclass
class Entry:
    """One checkpoint of the corpus and what loading it must give."""

    id: str
    combo: str
    topology: str
    path: str  # relative to the corpus folder
    iteration: int
    fingerprint: str  # topology-invariant state
    rng: str | None
    keys: dict[str, str] = field(default_factory=dict)  # digest per key, to name what differs


@dataclass
class Corpus:
    written_by: dict
    model: dict
    steps: int
    topologies: list[str]
    backend: str
    entries: list[Entry]
    baseline: dict = field(default_factory=dict)  # entry id -> target topology -> {"outcome", "rng_restored"}
    created: float = field(default_factory=time.time)

    def to_dict(self) -> dict:
        return {
            "kind": CORPUS_KIND,
            "format_version": CORPUS_VERSION,
            "written_by": self.written_by,
            "created": self.created,
            "model": self.model,
            "steps": self.steps,
            "topologies": self.topologies,
            "backend": self.backend,
            "entries": [asdict(e) for e in self.entries],
            "baseline": self.baseline,
        }

    def write(self, folder: str) -> None:
        write_json(os.path.join(folder, CORPUS_FILE), self.to_dict())

    @classmethod
    def read(cls, folder: str) -> Corpus:
        path = os.path.join(folder, CORPUS_FILE)
        try:
            doc = read_json(path)
        except ValueError as e:
            raise IntegrityError(path, "corpus parse", str(e)) from None
        if doc is None:
            raise CheckpointNotFound(f"{folder}: no {CORPUS_FILE}; write one with `resilience corpus write`")
        if not isinstance(doc, dict) or doc.get("kind") != CORPUS_KIND:
            raise IntegrityError(path, "corpus kind", f"not a {CORPUS_KIND} file")
        if not isinstance(doc.get("format_version"), int) or doc["format_version"] > CORPUS_VERSION:
            raise IntegrityError(
                path,
                "corpus version",
                f"format_version {doc.get('format_version')!r} is newer "
                f"than {CORPUS_VERSION}; read it with a newer checkpoint-resilience",
            )
        try:
            entries = [Entry(**e) for e in doc["entries"]]
            return cls(
                dict(doc["written_by"]),
                dict(doc["model"]),
                int(doc["steps"]),
                list(doc["topologies"]),
                str(doc["backend"]),
                entries,
                dict(doc.get("baseline", {})),
                float(doc.get("created", 0.0)),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise IntegrityError(path, "corpus fields", f"{type(e).__name__}: {e}") from None


def backend_versions(backend: BackendName) -> dict:
    """The backend's name and version: an adapter's `version`, else its distribution's, else ours."""
    from ..runner.adapters import resolve_backend

    ref = resolve_backend(backend)
    module = ref.module
    version = None
    if module is not None and not module.startswith("resilience."):
        try:
            mod = importlib.import_module(module)
            version = getattr(mod, "__version__", None)
            if version is None:
                version = importlib.metadata.version(module.split(".")[0])
        except (ImportError, importlib.metadata.PackageNotFoundError):
            version = None
    if version is None:
        from .. import __version__

        version = __version__
    return {"backend": ref.full, "backend_version": str(version)}


def current_versions(backend: BackendName) -> dict:
    return dict(versions(), **backend_versions(backend))


def describe_versions(v: dict) -> str:
    return (
        f"python {v.get('python', '?')}, torch {v.get('torch', '?')}, resilience {v.get('resilience', '?')}, "
        f"backend {v.get('backend', '?')} {v.get('backend_version', '?')}"
    )


def version_pair(a: dict, b: dict) -> str:
    """What changed between writer and reader: 'torch 2.13.0 -> 2.14.0', or 'same versions'."""
    keys = ("python", "torch", "resilience", "backend", "backend_version")
    changed = [f"{k} {a.get(k)} -> {b.get(k)}" for k in keys if a.get(k) != b.get(k)]
    return "; ".join(changed) if changed else "same versions"


# ---- rank functions (run_ranks) ---------------------------------------------------------------------------
def _write_ranks(
    ctx, spec: ModelSpec, topo: Topology, combos: list[Combination], steps: int, folder: str, backend: str
) -> list[dict] | None:
    from ..runner.adapters import resolve_backend

    ref = resolve_backend(backend)  # the spec, resolved once in this rank process
    groups = ParallelGroups(topo, ctx.rank, experts=spec.num_experts > 0)
    state = TrainingState(spec, topo, ctx.rank, groups)
    state.train(steps)
    digests = fingerprint(state.sharded_state_dict())
    out = []
    for combo in combos:
        b = ref.make(combo)
        rel = os.path.join(str(topo), slug(combo))
        b.save(state, os.path.join(folder, rel))
        b.finalize()
        out.append(
            asdict(
                Entry(
                    f"{topo}/{slug(combo)}",
                    str(combo),
                    str(topo),
                    rel,
                    state.iteration,
                    combine(digests, TOPOLOGY_BOUND_KEYS),
                    digests.get("rng"),
                    digests,
                )
            )
        )
    return out if ctx.rank == 0 else None


def _load_ranks(
    ctx, spec: ModelSpec, topo: Topology, entries: list[tuple[dict, Combination]], folder: str, backend: str
) -> list[dict] | None:
    """Load each (entry, its combination) into a fresh state on `topo`; what happened, per entry (rank 0)."""
    from ..runner.adapters import resolve_backend

    ref = resolve_backend(backend)  # the spec, resolved once in this rank process
    groups = ParallelGroups(topo, ctx.rank, experts=spec.num_experts > 0)
    out: list[dict] = []
    for e, combo in entries:
        b = ref.make(combo)
        state = TrainingState(spec, topo, ctx.rank, groups)  # fresh: a load that does nothing cannot pass
        try:
            result = b.load(state, os.path.join(folder, e["path"]))
        except TopologyChangeRefused as x:
            out.append({"status": "refused", "error": f"{type(x).__name__}: {x}"})
            continue
        except (CheckpointNotFound, IntegrityError) as x:
            out.append({"status": "error", "error": f"{type(x).__name__}: {x}"})
            continue
        digests = fingerprint(state.sharded_state_dict())
        out.append(
            {
                "status": "loaded",
                "iteration": result.iteration,
                "rng_restored": result.rng_restored,
                "fingerprint": combine(digests, TOPOLOGY_BOUND_KEYS),
                "rng": digests.get("rng"),
                "keys": digests,
                "warnings": list(result.warnings),
            }
        )
    return out if ctx.rank == 0 else None


# ---- writing ------------------------------------------------------------------------------------------------
def write_corpus(
    folder: str,
    *,
    combos: list[Combination] | list[str] | None = None,
    topologies: list[str] | None = None,
    steps: int = DEFAULT_STEPS,
    spec: ModelSpec | None = None,
    backend: BackendName = "reference",
    timeout: float = 300.0,
    progress=None,
) -> VerifyReport:
    """Write the corpus into `folder` (empty or new); returns the baseline loads as a report."""
    from ..launch import run_ranks
    from ..report.folder import make_folder
    from ..runner.adapters import resolve_backend

    folder = os.path.abspath(folder)
    if os.path.lexists(folder) and not os.path.isdir(folder):
        raise ConfigError("corpus", f"{folder} is a file, not a folder", "write a corpus into a new or empty folder")
    if os.path.isdir(folder) and os.listdir(folder):
        raise ConfigError("corpus", f"{folder} is not empty", "write a corpus into a new or empty folder")
    # read once, here, where the text comes in
    combinations = [c if isinstance(c, Combination) else Combination.parse(c) for c in combos or valid_combinations()]
    topos = _topologies(topologies or list(DEFAULT_TOPOLOGIES))
    spec = spec or ModelSpec(optimizer="distributed")
    for t in topos:
        spec.check_topology(t)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ConfigError("steps", f"must be a positive integer, got {steps!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < float("inf"):
        raise ConfigError("timeout", f"must be a positive number of seconds, got {timeout!r}")
    ref = resolve_backend(backend)  # once; the ranks get its spec
    for c in combinations:  # a backend that cannot be made, or lacks a combination: one clear error, before any rank
        ref.make(c)
    make_folder(folder, "corpus", empty=True)
    entries = []
    for t in topos:
        rows = run_ranks(_write_ranks, t.world, args=(spec, t, combinations, steps, folder, ref.spec), timeout=timeout)[
            0
        ]
        entries += [Entry(**r) for r in rows]
        if progress:
            progress(f"wrote {len(rows)} checkpoints on {t}")
    corpus = Corpus(current_versions(ref), spec.to_dict(), steps, [str(t) for t in topos], ref.spec, entries)
    report = _verify(corpus, folder, topos, ref, timeout, progress)
    corpus.baseline = {c.entry: {} for c in report.checks}
    for check in report.checks:
        corpus.baseline[check.entry][check.load_on] = {"outcome": check.outcome, "rng_restored": check.rng_restored}
    corpus.write(folder)
    return report


def _topologies(texts) -> list[Topology]:
    out = []
    for t in texts:
        topo = t if isinstance(t, Topology) else Topology.parse(t)
        if topo not in out:
            out.append(topo)
    return out


# ---- verifying --------------------------------------------------------------------------------------------
@dataclass
class Check:
    """One load: a corpus checkpoint on one topology."""

    entry: str
    combo: str
    saved_on: str
    load_on: str
    promised: str  # "load" or "refuse": what the topology contract promises (checkers.promised)
    outcome: str  # bit-exact / refused clearly / wrong / failed
    ok: bool
    detail: str = ""
    rng_restored: bool = False
    note: str = ""  # a deviation that does not fail the verification
    cause: str = ""  # why a load that fails the verification went wrong, in a word (report.causes)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class VerifyReport:
    folder: str
    written_by: dict
    read_by: dict
    checks: list[Check]
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def counts(self) -> dict[str, int]:
        out = {BIT_EXACT: 0, REFUSED_CLEARLY: 0, WRONG: 0, FAILED: 0, "newly refused": 0}
        for c in self.checks:
            key = "newly refused" if c.outcome == REFUSED_CLEARLY and not c.ok else c.outcome
            out[key] = out.get(key, 0) + 1
        return out

    def to_dict(self) -> dict:
        return {
            "kind": "resilience-corpus-verification",
            "format_version": 1,
            "folder": self.folder,
            "written_by": self.written_by,
            "read_by": self.read_by,
            "versions": version_pair(self.written_by, self.read_by),
            "ok": self.ok,
            "counts": self.counts(),
            "seconds": round(self.seconds, 3),
            "checks": [c.to_dict() for c in self.checks],
        }


def verify_corpus(
    folder: str,
    *,
    topologies: list[str] | None = None,
    backend: BackendName = None,
    timeout: float = 300.0,
    progress=None,
) -> VerifyReport:
    """Load every checkpoint of the corpus on its own and on every other topology (the corpus's, plus
    `topologies`), under the versions installed now."""
    folder = os.path.abspath(folder)
    corpus = Corpus.read(folder)
    spec = ModelSpec.from_dict(corpus.model)
    topos = _topologies(list(corpus.topologies) + list(topologies or []))
    for t in topos:
        spec.check_topology(t)
    return _verify(corpus, folder, topos, backend or corpus.backend, timeout, progress)


def _verify(
    corpus: Corpus, folder: str, topos: list[Topology], backend: BackendName, timeout: float, progress
) -> VerifyReport:
    from ..launch import run_ranks
    from ..runner.adapters import resolve_backend

    start = time.monotonic()
    spec = ModelSpec.from_dict(corpus.model)
    ref = resolve_backend(backend)  # once; the ranks get its spec
    # each entry's combination read once, here, where the corpus file's text comes in
    entries = [(asdict(e), Combination.parse(e.combo)) for e in corpus.entries]
    checks = []
    for target in topos:
        try:
            results = run_ranks(
                _load_ranks, target.world, args=(spec, target, entries, folder, ref.spec), timeout=timeout
            )[0]
        except RankFailure:  # a crash on one checkpoint: load each on its own so the others still count
            results = []
            for e in entries:
                try:
                    results += run_ranks(
                        _load_ranks, target.world, args=(spec, target, [e], folder, ref.spec), timeout=timeout
                    )[0]
                except RankFailure as x:
                    first = next(iter(x.failures.values()), str(x)).strip().splitlines()
                    results.append({"status": "crash", "error": f"a rank failed: {first[0] if first else x}"})
        checks += [_classify(corpus, Entry(**e), combo, target, r) for (e, combo), r in zip(entries, results)]
        if progress:
            progress(f"loaded {len(entries)} checkpoints on {target}")
    return VerifyReport(folder, corpus.written_by, current_versions(ref), checks, time.monotonic() - start)


def _classify(corpus: Corpus, e: Entry, combo: Combination, target: Topology, r: dict) -> Check:
    saved = Topology.parse(e.topology)
    promised = promise_of(combo, Transition(saved, target)) != REFUSE
    base = corpus.baseline.get(e.id, {}).get(str(target))
    check = Check(
        e.id,
        e.combo,
        e.topology,
        str(target),
        "load" if promised else "refuse",
        FAILED,
        False,
        rng_restored=bool(r.get("rng_restored")),
    )
    if r["status"] == "refused":
        check.outcome, check.detail = REFUSED_CLEARLY, r["error"]
        if not promised:
            check.ok = True
        elif base is not None and base["outcome"] != BIT_EXACT:
            check.ok, check.note = True, f"refused when written too ({base['outcome']}); the seed's table says it loads"
        else:
            check.ok, check.cause = False, "refused"  # newly refused
        return check
    if r["status"] != "loaded":
        check.detail, check.cause = r["error"], cause_of(r["error"])
        return check
    problems, causes = [], []
    if r["iteration"] != e.iteration:
        problems.append(f"loaded iteration {r['iteration']}, the corpus holds {e.iteration}")
        causes.append("iteration")
    if r["fingerprint"] != e.fingerprint:
        causes.append("value")
        keys = differences(e.keys, r["keys"], TOPOLOGY_BOUND_KEYS) if e.keys else []
        problems.append(
            f"values differ from the corpus in {len(keys) or 'some'} keys"
            + (f": {', '.join(keys[:4])}{' ...' if len(keys) > 4 else ''}" if keys else "")
        )
    same_rng_layout = (saved.tp, saved.pp) == (target.tp, target.pp)
    if r["rng_restored"] and not same_rng_layout:
        problems.append(f"RNG reported restored across {saved}->{target}, where it cannot be exact")
    elif r["rng_restored"] and r["rng"] != e.rng:
        problems.append("RNG state differs from the corpus")
    elif not r["rng_restored"] and base is not None and base.get("rng_restored"):
        problems.append("RNG not restored, as it was when the corpus was written")
    if problems:
        check.outcome, check.detail, check.cause = WRONG, "; ".join(problems), (causes or ["rng"])[0]
        return check
    check.outcome, check.ok = BIT_EXACT, True
    check.detail = f"iteration {e.iteration}" + (", RNG restored" if r["rng_restored"] else "")
    if not promised:
        check.note = "loaded although the seed's table says this change is refused"
    if r.get("warnings"):
        check.note = (check.note + "; " if check.note else "") + f"warnings: {r['warnings'][0][:200]}"
    return check


def render(report: VerifyReport, *, title: str = "corpus") -> str:
    """The table a person reads."""
    lines = [
        f"{title} {report.folder}",
        f"  written by {describe_versions(report.written_by)}",
        f"  read by    {describe_versions(report.read_by)}",
        f"  ({version_pair(report.written_by, report.read_by)})",
        "",
    ]
    w_id = max([len(c.entry) for c in report.checks] + [10])
    lines.append(f"  {'checkpoint':<{w_id}}  {'load on':<10}  {'promised':<8}  result")
    for c in report.checks:
        mark = "" if c.ok else "  <-- FAIL"
        what = c.outcome if c.ok or c.outcome != REFUSED_CLEARLY else "newly refused"
        cause = f": {c.cause}" if c.cause else ""
        detail = f": {c.detail[:160]}" if c.detail and (not c.ok or c.outcome != BIT_EXACT) else ""
        note = f" [{c.note[:160]}]" if c.note else ""
        lines.append(f"  {c.entry:<{w_id}}  {c.load_on:<10}  {c.promised:<8}  {what}{cause}{detail}{note}{mark}")
    counts = report.counts()
    lines += [
        "",
        f"{len(report.checks)} loads: "
        + ", ".join(f"{v} {k}" for k, v in counts.items())
        + f" ({report.seconds:.1f} s)",
    ]
    if not report.ok:
        bad = [c for c in report.checks if not c.ok]
        lines.append(
            f"FAIL: {len(bad)} loads wrong, failed or newly refused under "
            f"{version_pair(report.written_by, report.read_by)}"
        )
    return "\n".join(lines)
