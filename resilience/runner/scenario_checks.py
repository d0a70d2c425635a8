"""Checking a scenario's plain data, field by field and step by step: a Scenario, or one ScenarioError
listing every problem found, each with its line (from safe_yaml.load) and field. Every mapping refuses
keys it does not know; every value is checked for type and range against the limits of scenario_schema."""

from __future__ import annotations

import math
import re
from typing import Any, TypeGuard

from .. import safe_yaml
from ..errors import ConfigError
from ..faults import KINDS, Fault
from ..objectstore.store import LOCAL, check_storage
from ..state import ModelSpec, Topology
from ..state.limits import check_fits
from ..state.precision import Precision
from ..vocab.combos import Combination, valid_combinations
from .fault_steps import CORRUPT_KINDS, KILL_KINDS, fault_keys, fault_of
from .scenario_model import Scenario, Step
from .scenario_schema import (
    BACKEND_RE,
    EXPECT_FIELDS,
    MAX_COUNT,
    MAX_DAMAGES,
    MAX_DESCRIPTION,
    MAX_FILE_BYTES,
    MAX_POWER_LOSS_STATES,
    MAX_SEED,
    MAX_STAGGER,
    MAX_STEPS,
    MAX_TAG,
    MAX_TAGS,
    MAX_TIMEOUT,
    MAX_TRAIN_STEPS,
    OUTCOMES,
    RESUME_FIELDS,
    STEP_KINDS,
    TAG_RE,
    TOP_FIELDS,
    UNNAMED,
    ScenarioError,
    ScenarioProblem,
    name_problem,
)


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
    storage = data.get("storage", LOCAL)
    try:
        storage = check_storage(storage)
    except ConfigError as e:
        bad.add(("storage",), e.problem, e.fix)
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
        storage,
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
    for i, (item, path) in enumerate(_one_damage_each(raw, bad)):
        step = _step(item, path, model, topology, (world, written), bad)
        if step is None:
            continue
        out.append(step)
        _after_precision_change(out, model, ("steps", i), bad)
        if step.kind == "resume":  # later faults target the resumed job's ranks
            raw_topo = step.args.get("topology", "same")
            world = (topology.world if topology else None) if raw_topo == "same" else Topology.parse(raw_topo).world
            written = max(written, world) if written is not None and world is not None else None
    return out


def _one_damage_each(raw: list | tuple, bad: _Problems) -> list[tuple[object, tuple]]:
    """(step, its path) with each `corrupt` of a list of damages ("several corruptions in one step") made one
    `corrupt` per damage: all land at rest before the next job, as consecutive steps do."""
    out: list[tuple[object, tuple]] = []
    for i, item in enumerate(raw):
        damages = item.get("corrupt") if isinstance(item, dict) and len(item) == 1 else None
        if not isinstance(damages, list):
            out.append((item, ("steps", i)))
        elif not 1 <= len(damages) <= MAX_DAMAGES:
            bad.add(("steps", i, "corrupt"), f"lists {len(damages)} damages", f"list 1 to {MAX_DAMAGES} of them")
        else:
            out += [({"corrupt": d}, ("steps", i, "corrupt", j)) for j, d in enumerate(damages)]
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
    here = path if path[-2:-1] == ("corrupt",) else path + (kind,)  # one damage of a list: steps.3.corrupt.1
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
    if (
        model is not None
        and model.padding_values
        and topo is not None
        and topology is not None
        and topo.tp != topology.tp
    ):
        bad.add(
            here + ("topology",),
            f"model.padding_values pads the vocabulary for tp {topology.tp}: on tp {topo.tp} it is another model",
            "resume on the same tp, or leave padding_values out",
        )
        ok = False
    cont = args.get("continue", 2)
    if not _is_int(cont) or not 0 <= cont <= MAX_TRAIN_STEPS:
        bad.add(here + ("continue",), f"must be a number of steps in 0..{MAX_TRAIN_STEPS}, got {_show(cont)}")
        ok = False
    stagger = args.get("stagger", 0)
    if not _is_number(stagger) or not math.isfinite(stagger) or not 0 <= stagger <= MAX_STAGGER:
        bad.add(here + ("stagger",), f"must be seconds in 0..{MAX_STAGGER:g}, got {_show(stagger)}")
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
