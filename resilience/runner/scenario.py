"""Declarative scenarios: YAML in, a validated Scenario out, or one error listing every problem of the
file, each with its line and field.

Scenario files are untrusted input. They are read with resilience.safe_yaml (size, aliases, tags,
nesting and duplicate keys bounded), every mapping refuses keys it does not know, and every value is
checked for type and range against the limits below, before any rank starts."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeGuard

import yaml

from .. import safe_yaml
from ..errors import ConfigError
from ..faults import KINDS, Fault
from ..launch.base import MAX_JOB_TIMEOUT
from ..state import ModelSpec, Topology
from ..state.limits import check_fits
from ..state.precision import Precision
from ..vocab.combos import Combination, valid_combinations
from .fault_steps import CORRUPT_KINDS, KILL_KINDS, fault_keys, fault_of

STEP_KINDS = {
    "train": "train N steps (1 <= N <= 10000)",
    "save": "save a checkpoint with the combination's IO mode",
    "finalize": "commit an async save in flight",
    "recover": "right after a save (or finalize) a fault makes raise: the same ranks go on, load, train a step, "
    "save, finalize and load that save back (a fault that poisons later saves is a recovery FAIL)",
    "crash": "a rank kills itself during the next save: {rank, phase} or {rank, after_bytes, file}",
    "fault": "an in-process fault record: {kind, ...} (see resilience.faults)",
    "kill": "the runner SIGKILLs ranks during the next save: {rank, file, size} or {rank, after: seconds} "
    "(also written {rank, when: {file, size}} or {rank, when: {after: seconds}})",
    "corrupt": "damage the newest checkpoint at rest: {kind, file, ...}",
    "lose_unsynced": "record file operations from here on; at the power loss (a phase, at_byte, or the job's "
    "end) check every on-disk state it could leave: {phase, max_states}",
    "resume": "start a new job on a topology and load the newest valid checkpoint: {topology, continue, precision}",
    "verify": "a marker: checkers always run at the end",
}
TOP_FIELDS = {
    "name",
    "description",
    "seed",
    "model",
    "topology",
    "combinations",
    "steps",
    "expect",
    "timeout",
    "backend",
    "tags",
    "io",
}
EXPECT_FIELDS = {"loaded_iteration", "outcome"}
OUTCOMES = ("loaded", "refused", "failed")
RESUME_FIELDS = {"topology", "continue", "precision"}

# Limits (documented in README.md, "Scenarios"); the YAML itself is bounded by resilience.safe_yaml.
MAX_TIMEOUT = MAX_JOB_TIMEOUT  # seconds a job may take (the launcher's ceiling); also of every delay a fault waits
MAX_TRAIN_STEPS = 10_000  # steps of one `train` or of one resume's `continue`
MAX_STEPS = 500  # steps listed in one scenario
MAX_SEED = 2**63  # seeds are in [0, 2**63)
MAX_NAME = 80  # characters of a name; names are folder names: [A-Za-z0-9_.-], no '..'
MAX_DESCRIPTION = 10_000
MAX_TAGS, MAX_TAG = 32, 40
MAX_POWER_LOSS_STATES = 1024  # crash states one lose_unsynced may build
MAX_FILE_BYTES = 64 << 20  # bytes a fault may write (extra_file length)
MAX_COUNT = 1 << 40  # any other count or byte position in a fault record
NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
TAG_RE = re.compile(r"[A-Za-z0-9_.:-]+")
_OPTIONS = r"[A-Za-z_]\w*=[\w.+-]+(?:,[A-Za-z_]\w*=[\w.+-]+)*"  # backend options: name=value,...
BACKEND_RE = re.compile(
    rf"reference|broken:[A-Za-z0-9_.-]+|[A-Za-z0-9_-]+(?::{_OPTIONS})?|"
    rf"[A-Za-z_][\w.]*:[A-Za-z_]\w*(?:\[{_OPTIONS}\])?|[A-Za-z0-9_-]+\[{_OPTIONS}\]"
)
UNNAMED = "unnamed"


@dataclass(frozen=True)
class ScenarioProblem:
    """One problem of a scenario file: its line (None: the whole file), the field and what is allowed."""

    line: int | None
    field: str
    problem: str
    allowed: str = ""

    def text(self, source: str) -> str:
        where = f"{source}:{self.line}" if self.line else source
        return f"{where}: {self.field}: {self.problem}" + (f" ({self.allowed})" if self.allowed else "")


class ScenarioError(ConfigError):
    """A scenario file that cannot run. Lists every problem found, sorted by line, each naming the file,
    line and field, and what is allowed; `problems` holds them, `line` is the first one's."""

    def __init__(
        self,
        source: str,
        line: int | None = None,
        field: str = "",
        problem: str = "",
        allowed: str = "",
        problems: list[ScenarioProblem] | None = None,
    ):
        items = list(problems) if problems else [ScenarioProblem(line, field, problem, allowed)]
        items.sort(key=lambda p: p.line or 0)
        first = items[0]
        if len(items) == 1:
            where = f"{source}:{first.line}" if first.line else source
            super().__init__(f"{where}: {first.field}", first.problem, first.allowed)
        else:
            super().__init__(source, f"{len(items)} problems:\n" + "\n".join("  " + p.text(source) for p in items))
        self.source, self.line, self.problems = source, first.line, items

    def __reduce__(self):
        return type(self), (self.source, None, "", "", "", self.problems)


@dataclass
class Step:
    """One step as the file wrote it (`args`, written back by to_dict) and, for a fault step, the fault
    record it stands for, read and checked once as the file was loaded."""

    kind: str
    args: dict
    line: int | None = None
    fault: Fault | None = None

    def to_dict(self) -> dict:
        if self.kind == "train":
            return {"train": self.args["steps"]}
        return {self.kind: self.args or None}


@dataclass
class Scenario:
    name: str
    steps: list[Step]
    model: ModelSpec = field(default_factory=ModelSpec)
    topology: Topology = field(default_factory=Topology)
    combinations: list[Combination] = field(default_factory=valid_combinations)
    seed: int = 0
    description: str = ""
    expect: dict = field(default_factory=dict)
    timeout: float = 120.0
    backend: str = "reference"
    tags: list[str] = field(default_factory=list)
    source: str = "<scenario>"
    io: str = "auto"  # how in-process faults reach the backend: seam, fuse or auto (runner.ways)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "seed": self.seed,
            "model": self.model.to_dict(),
            "topology": str(self.topology),
            "combinations": [str(c) for c in self.combinations],
            "steps": [s.to_dict() for s in self.steps],
            "expect": self.expect,
            "timeout": self.timeout,
            "backend": self.backend,
            "tags": self.tags,
            **({"io": self.io} if self.io != "auto" else {}),
        }

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def as_run(self, combo: Combination, backend: str | None = None) -> Scenario:
        """This scenario as one case ran it: that combination only, and the backend that was tested (what a
        case folder's scenario.yaml records, so it replays alone)."""
        return replace(self, combinations=[combo], backend=backend or self.backend)


# ---- reading ------------------------------------------------------------------------------------------
def load_text(text: str | bytes, source: str = "<scenario>") -> Scenario:
    try:
        doc = safe_yaml.load(text)
    except safe_yaml.Refused as e:
        raise ScenarioError(
            source,
            problems=[ScenarioProblem(p.line, "yaml" if p.line else "file", p.problem, p.fix) for p in e.problems],
        ) from None
    if doc.data is None:
        raise ScenarioError(source, None, "file", "is empty", "a scenario needs at least `steps:`")
    return from_dict(doc.data, source, doc.lines)


def load_file(path: str | Path) -> Scenario:
    p = Path(path)
    if not p.is_file():  # also refuses FIFOs and devices, which could block the read
        what = "is not a regular file" if p.exists() else "does not exist"
        raise ScenarioError(str(p), None, "file", what, "give the path of a .yaml scenario")
    try:
        with open(p, "rb") as f:
            data = f.read(safe_yaml.MAX_BYTES + 1)
    except OSError as e:
        raise ScenarioError(str(p), None, "file", f"cannot be read: {e.strerror or e}") from None
    if len(data) > safe_yaml.MAX_BYTES:
        raise ScenarioError(
            str(p),
            None,
            "file",
            f"is larger than the limit of {safe_yaml.MAX_BYTES} bytes",
            "a scenario is a short text file",
        )
    scenario = load_text(data, str(p))
    if scenario.name == UNNAMED:
        scenario.name = safe_name(p.stem)
    return scenario


def safe_name(text: str) -> str:
    """A name usable as a folder name, made from any text (a file's stem): runs of characters outside
    [A-Za-z0-9_.-] become '-', '..' becomes '.', leading dots and dashes go, at most MAX_NAME characters."""
    out = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)
    out = re.sub(r"\.{2,}", ".", out).lstrip(".-")[:MAX_NAME].rstrip("-")
    return out or "scenario"


def name_problem(name) -> str | None:
    """Why `name` cannot name a scenario (it becomes part of folder names), or None."""
    if not isinstance(name, str):
        return f"must be a string, got {name!r}"
    if not NAME_RE.fullmatch(name) or ".." in name or len(name) > MAX_NAME:
        return (
            f"{name[:100]!r} is not a safe folder name: use 1-{MAX_NAME} characters of A-Z a-z 0-9 _ . -, "
            "not starting with '.' or '-', without '..'"
        )
    return None


# ---- checking -----------------------------------------------------------------------------------------
class _Problems:
    def __init__(self, source: str, lines: dict):
        self.source, self.lines = source, lines
        self.items: list[ScenarioProblem] = []

    def add(self, path: tuple, problem: str, allowed: str = "") -> None:
        self.items.append(
            ScenarioProblem(
                safe_yaml.line_of(self.lines, path), ".".join(map(str, path)) or "scenario", problem, allowed
            )
        )

    def config(self, base: tuple, e: ConfigError, strip: str = "") -> None:
        """A ConfigError of a lower layer, its dotted field placed under `base`."""
        rest = e.field[len(strip) :] if strip and e.field.startswith(strip) else e.field
        self.add(base + tuple(x for x in rest.split(".") if x), e.problem, e.fix)

    def raise_any(self) -> None:
        if self.items:
            raise ScenarioError(self.source, problems=self.items)


def from_dict(data: Any, source: str = "<scenario>", lines: dict | None = None) -> Scenario:
    """A Scenario from plain data, or ScenarioError listing every problem (lines from safe_yaml.load)."""
    bad = _Problems(source, lines or {})
    if not isinstance(data, dict):
        bad.add((), "must be a mapping with `steps:`", "see scenarios/*.yaml for examples")
        bad.raise_any()
    for key in data:
        if key not in TOP_FIELDS:
            bad.add((key,), "unknown field", f"allowed: {', '.join(sorted(TOP_FIELDS))}")
    name = data.get("name", UNNAMED)
    problem = name_problem(name) if "name" in data else None
    if problem:
        bad.add(("name",), problem)
    description = data.get("description") or ""
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
        bad.add(("description",), f"must be a string of at most {MAX_DESCRIPTION} characters")
    seed = _seed(data.get("seed", 0), bad)
    timeout = _timeout(data.get("timeout", 120.0), bad)
    backend = _backend(data.get("backend", "reference"), bad)
    tags = _tags(data.get("tags"), bad)
    io = data.get("io", "auto")
    if io not in ("seam", "fuse", "auto"):
        bad.add(
            ("io",),
            f"cannot read {_show(io)}",
            "use seam (the in-process storage seam), fuse (the fault-injecting file system) or auto",
        )
    model = _model(data.get("model"), bad)
    topology = _topology(data.get("topology", "tp1pp1dp1"), ("topology",), model, bad)
    combos = _combinations(data.get("combinations", "all"), bad)
    steps = _steps(data.get("steps"), model, topology, bad)
    expect = _expect(data.get("expect"), bad)
    bad.raise_any()
    return Scenario(
        name,
        steps,
        model,  # type: ignore[arg-type]
        topology,  # type: ignore[arg-type]
        combos,
        seed,
        description,
        expect,
        float(timeout),
        backend,
        tags,
        source,
        io,
    )  # raise_any() raised if the model or topology was missing


def _is_int(v) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _seed(seed, bad: _Problems) -> int:
    if not _is_int(seed) or not 0 <= seed < MAX_SEED:
        bad.add(("seed",), f"must be an integer in [0, 2**63), got {_show(seed)}")
        return 0
    return seed


def _timeout(timeout, bad: _Problems) -> float:
    if not _is_number(timeout) or not math.isfinite(timeout) or not 0 < timeout <= MAX_TIMEOUT:
        bad.add(
            ("timeout",),
            f"must be a number of seconds in (0, {MAX_TIMEOUT:g}], got {_show(timeout)}",
            "it bounds each job of the scenario",
        )
        return 120.0
    return float(timeout)


def _backend(backend, bad: _Problems) -> str:
    if not isinstance(backend, str) or len(backend) > 200 or not BACKEND_RE.fullmatch(backend):
        bad.add(
            ("backend",),
            f"cannot read {_show(backend)}",
            "use 'reference', 'broken:NAME', a short alias such as 'dcp', or 'package.module:factory', "
            "with options as dcp:thread_count=4 or package.module:factory[thread_count=4]",
        )
        return "reference"
    return backend


def _tags(tags, bad: _Problems) -> list[str]:
    if tags is None:
        return []
    if not isinstance(tags, (list, tuple)) or len(tags) > MAX_TAGS:
        bad.add(
            ("tags",),
            f"must be a list of at most {MAX_TAGS} short names, got {_show(tags)}",
            "write it as [fast, crash]",
        )
        return []
    for i, tag in enumerate(tags):
        if not isinstance(tag, str) or not TAG_RE.fullmatch(tag) or len(tag) > MAX_TAG:
            bad.add(("tags", i), f"must be a name of 1-{MAX_TAG} characters of A-Z a-z 0-9 _ . : -, got {_show(tag)}")
    return list(tags)


def _model(raw, bad: _Problems) -> ModelSpec | None:
    """The model, or None when it has problems (they are added)."""
    raw = {} if raw is None else raw
    problems = ModelSpec.problems_of(raw)
    for e in problems:
        bad.config(("model",), e, strip="model")
    return None if problems else ModelSpec.from_dict(raw)


def _topology(raw, path: tuple, model: ModelSpec | None, bad: _Problems) -> Topology | None:
    if not isinstance(raw, str) or len(raw) > 100:
        bad.add(path, f"must be a string like tp2pp1dp4, got {_show(raw)}")
        return None
    try:
        topo = Topology.parse(raw)
        if model is not None:
            model.check_topology(topo)
    except ConfigError as e:
        bad.add(path, e.problem, e.fix)
        return None
    if model is not None:
        try:
            check_fits(model, topo)
        except ConfigError as e:
            bad.add(("model",), e.problem, e.fix)
            return None
    return topo


def _combinations(raw, bad: _Problems) -> list[Combination]:
    if raw in ("all", None):
        return valid_combinations()
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, (list, tuple)) or not items:
        bad.add(("combinations",), "must be `all` or a list like [GLOBAL/torch_dist/sync]")
        return []
    out = []
    for i, text in enumerate(items):
        if not isinstance(text, str) or len(text) > 100:
            bad.add(("combinations", i), f"must be a string like GLOBAL/torch_dist/sync, got {_show(text)}")
            continue
        try:
            out.append(Combination.parse(text))
        except ConfigError as e:
            bad.add(("combinations", i), e.problem, e.fix)
    return out


def _expect(raw, bad: _Problems) -> dict:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        bad.add(("expect",), f"must be a mapping, got {_show(raw)}", f"allowed: {', '.join(sorted(EXPECT_FIELDS))}")
        return {}
    for key, value in raw.items():
        if key not in EXPECT_FIELDS:
            bad.add(("expect", key), "unknown expectation", f"allowed: {', '.join(sorted(EXPECT_FIELDS))}")
        elif key == "loaded_iteration" and value is not None and (not _is_int(value) or not 0 <= value < MAX_COUNT):
            bad.add(("expect", key), f"must be an iteration number >= 0, got {_show(value)}")
        elif key == "outcome" and value is not None and value not in OUTCOMES:
            bad.add(("expect", key), f"unknown outcome {_show(value)}", f"use one of {', '.join(OUTCOMES)}")
    return dict(raw)


# ---- steps --------------------------------------------------------------------------------------------
def _steps(raw, model: ModelSpec | None, topology: Topology | None, bad: _Problems) -> list[Step]:
    if raw is None or raw == []:
        bad.add(("steps",), "no steps", "list steps such as `- train: 2` and `- save`")
        return []
    if not isinstance(raw, (list, tuple)):
        bad.add(
            ("steps",), f"must be a list of steps, got {_show(raw)}", "list steps such as `- train: 2` and `- save`"
        )
        return []
    if len(raw) > MAX_STEPS:
        bad.add(("steps",), f"lists {len(raw)} steps, more than {MAX_STEPS}", "train more per step")
        return []
    out, world = [], topology.world if topology else None
    written = world  # damage at rest targets the ranks that wrote files: of any job so far, the most
    for i, item in enumerate(raw):
        step = _step(item, ("steps", i), model, topology, (world, written), bad)
        if step is None:
            continue
        out.append(step)
        _after_precision_change(out, model, ("steps", i), bad)
        if step.kind == "resume":  # later faults target the resumed job's ranks
            raw_topo = step.args.get("topology", "same")
            world = (topology.world if topology else None) if raw_topo == "same" else Topology.parse(raw_topo).world
            written = max(written, world) if written is not None and world is not None else None
    return out


def _step(
    raw,
    path: tuple,
    model: ModelSpec | None,
    topology: Topology | None,
    worlds: tuple[int | None, int | None],
    bad: _Problems,
) -> Step | None:
    if isinstance(raw, str):
        kind, args = raw, None
    elif isinstance(raw, dict) and len(raw) == 1:
        kind, args = next(iter(raw.items()))
    else:
        got = f"{len(raw)} kinds: {', '.join(map(str, raw))}" if isinstance(raw, dict) else _show(raw)
        bad.add(
            path, f"a step is one kind, like `- train: 2` or `- save`; got {got}", f"allowed: {', '.join(STEP_KINDS)}"
        )
        return None
    if kind not in STEP_KINDS:
        bad.add(path, f"unknown step {_show(kind)}", f"allowed: {', '.join(STEP_KINDS)}")
        return None
    line = safe_yaml.line_of(bad.lines, path)
    here = path + (kind,)
    if kind == "train":
        if not _is_int(args) or not 1 <= args <= MAX_TRAIN_STEPS:
            bad.add(here, f"train needs a number of steps in 1..{MAX_TRAIN_STEPS}, got {_show(args)}")
            return None
        return Step(kind, {"steps": args}, line)
    args = {} if args is None else args
    if not isinstance(args, dict):
        bad.add(here, f"takes a mapping of options, got {_show(args)}", STEP_KINDS[kind])
        return None
    if kind in ("save", "finalize", "recover", "verify"):
        for key in args:
            bad.add(here + (key,), "unknown option", f"`{kind}` takes no options")
        return Step(kind, {}, line)
    if kind == "resume":
        return _resume(args, here, line, model, topology, bad)
    fault = _fault_step(kind, args, here, worlds[1] if kind == "corrupt" else worlds[0], bad)
    return Step(kind, dict(args), line, fault) if fault is not None else None


def _resume(args: dict, here: tuple, line, model, topology, bad: _Problems) -> Step | None:
    ok = True
    for key in args:
        if key not in RESUME_FIELDS:
            bad.add(here + (key,), "unknown option", f"allowed: {', '.join(sorted(RESUME_FIELDS))}")
            ok = False
    raw = args.get("topology", "same")
    topo = topology if raw == "same" else _topology(raw, here + ("topology",), model, bad)
    if raw != "same" and topo is None:
        ok = False
    cont = args.get("continue", 2)
    if not _is_int(cont) or not 0 <= cont <= MAX_TRAIN_STEPS:
        bad.add(here + ("continue",), f"must be a number of steps in 0..{MAX_TRAIN_STEPS}, got {_show(cont)}")
        ok = False
    precision = args.get("precision")
    if precision is not None:
        try:
            Precision.parse(precision)
        except ConfigError as e:
            bad.add(here + ("precision",), e.problem, e.fix)
            ok = False
    return Step("resume", dict(args), line) if ok else None


def _after_precision_change(steps: list[Step], model: ModelSpec | None, here: tuple, bad: _Problems) -> None:
    """A save after a resume that changed precision is refused: what a load must give is known from
    training in the scenario's dtype only."""
    if steps[-1].kind != "save" or model is None:
        return
    changed = [
        s
        for s in steps
        if s.kind == "resume" and Precision.parse(s.args.get("precision", model.precision)) != model.precision
    ]
    if changed:
        where = f" on line {changed[0].line}" if changed[0].line else ""
        bad.add(
            here,
            f"a save after the resume{where} that changes precision to {changed[0].args['precision']} "
            "(what a later load must give is known only for saves in the model's precision)",
            "put resumes that change precision after the last save",
        )


def _fault_step(kind: str, args: dict, here: tuple, world: int | None, bad: _Problems) -> Fault | None:
    """The fault a step stands for, or None when it has problems (they are added)."""
    known = fault_keys(kind, args)
    if known is None:
        what = args.get("kind")
        allowed = {
            "fault": ", ".join(KINDS),
            "corrupt": ", ".join(sorted(CORRUPT_KINDS)),
            "kill": ", ".join(KILL_KINDS),
        }[kind]
        bad.add(
            here + ("kind",),
            f"unknown {'corruption' if kind == 'corrupt' else 'fault kind'} {_show(what)}",
            f"use one of {allowed}",
        )
        return None
    record_kind, keys = known
    ok = True
    for key in args:
        if key not in keys:
            bad.add(here + (key,), f"unknown option of {kind} ({record_kind})", f"allowed: {', '.join(sorted(keys))}")
            ok = False
    when = args.get("when")
    if kind == "kill" and "when" in args:
        if not isinstance(when, dict):
            bad.add(here + ("when",), f"must be a mapping, got {_show(when)}", "{file, size} or {after: seconds}")
            return None
        for key in when:
            if key not in ("file", "path", "size", "after") or key in args:
                bad.add(here + ("when", key), "unknown or repeated option", "when: {file, size} or {after: seconds}")
                ok = False
    for key in ("file", "path"):
        pattern = args.get(key, when.get(key) if isinstance(when, dict) else None)
        if isinstance(pattern, str) and (pattern.startswith("/") or ".." in pattern.split("/")):
            bad.add(
                here + (key,),
                f"{pattern!r} leaves the checkpoint folder",
                "give a glob of files inside it, such as '*.pt' or '*iter_0000002*'",
            )
            ok = False
    if not ok:
        return None
    try:
        fault = fault_of(kind, args, world=world if world is not None else 1 << 16)
    except ConfigError as e:
        bad.add(here + _user_field(e.field, args), e.problem, e.fix)
        return None
    return fault if _fault_bounds(fault, here, bad) else None


_SHORTHANDS = {"at_byte": "after_bytes", "path": "file"}


def _user_field(field: str, args: dict) -> tuple:
    """A fault record's field ('fault[0].target.rank') as the step wrote it ('rank', or 'target.rank')."""
    parts = tuple(p for p in re.sub(r"^fault(\[\d+\])?", "", field).split(".") if p)
    if len(parts) == 2 and parts[0] in ("target", "trigger") and parts[0] not in args:
        return (_SHORTHANDS[parts[1]],) if _SHORTHANDS.get(parts[1]) in args else parts[1:]
    return parts


def _fault_bounds(fault, here: tuple, bad: _Problems) -> bool:
    """Ceilings the fault records leave open: a delay past the job timeout ceiling, a power loss that
    would build more crash states than can be checked, a file too large to write."""
    ok = True
    seconds = {
        "after": fault.trigger.after,
        "delay": getattr(fault, "delay", None),
        "resume_after": getattr(fault, "resume_after", None),
    }
    for name, value in seconds.items():
        if value is not None and value > MAX_TIMEOUT:
            bad.add(here + (name,), f"{value:g} seconds is more than the ceiling of {MAX_TIMEOUT:g}")
            ok = False
    counts = {
        "max_states": (getattr(fault, "max_states", None), MAX_POWER_LOSS_STATES),
        "length": (getattr(fault, "length", None) if fault.kind == "extra_file" else None, MAX_FILE_BYTES),
    }
    for name in ("nth", "at_byte", "size"):
        counts[name] = (getattr(fault.trigger, name), MAX_COUNT)
    for name in ("keep", "times"):
        counts[name] = (getattr(fault, name, None), MAX_COUNT)
    counts["offset"] = (fault.target.offset, MAX_COUNT)
    counts["iteration"] = (fault.target.iteration, MAX_COUNT)
    for name, (value, ceiling) in counts.items():
        if _is_int(value) and value > ceiling:
            bad.add(here + (name,), f"{value} is more than the ceiling of {ceiling}")
            ok = False
    return ok


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
