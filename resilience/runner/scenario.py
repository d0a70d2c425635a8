"""Declarative scenarios: YAML in, a validated Scenario out, or one error with file, line and field."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..checkpoint.combos import Combination, valid_combinations
from ..errors import ConfigError
from ..state import ModelSpec, Topology

STEP_KINDS = {
    "train": "train N steps (N >= 1)",
    "save": "save a checkpoint with the combination's IO mode",
    "finalize": "commit an async save in flight",
    "crash": "a rank kills itself during the next save: {rank, phase} or {rank, after_bytes, file}",
    "fault": "an in-process fault record: {kind, ...} (see resilience.faults)",
    "kill": "the runner SIGKILLs ranks during the next save: {rank, when: {file, size} | {after: seconds}}",
    "corrupt": "damage the newest checkpoint at rest: {kind, file, ...}",
    "lose_unsynced": "record file operations from here on; at the power loss (a phase, at_byte, or the job's "
                     "end) check every on-disk state it could leave: {phase, max_states}",
    "resume": "start a new job on a topology and load the newest valid checkpoint: {topology, continue}",
    "verify": "a marker: checkers always run at the end",
}
FAULT_STEPS = ("crash", "fault", "kill", "corrupt", "lose_unsynced")
TOP_FIELDS = {"name", "description", "seed", "model", "topology", "combinations", "steps", "expect", "timeout",
              "backend", "tags"}
EXPECT_FIELDS = {"loaded_iteration", "outcome"}


class ScenarioError(ConfigError):
    """A scenario file that cannot run: names the file, line and field, and what is allowed."""

    def __init__(self, source: str, line: int | None, field: str, problem: str, allowed: str = ""):
        where = f"{source}:{line}" if line else source
        super().__init__(f"{where}: {field}", problem, allowed)
        self.source, self.line = source, line


@dataclass
class Step:
    kind: str
    args: dict
    line: int | None = None

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

    def to_dict(self) -> dict:
        return {"name": self.name, "description": self.description, "seed": self.seed,
                "model": self.model.to_dict(), "topology": str(self.topology),
                "combinations": [str(c) for c in self.combinations], "steps": [s.to_dict() for s in self.steps],
                "expect": self.expect, "timeout": self.timeout, "backend": self.backend, "tags": self.tags}

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


# ---- YAML with line numbers -----------------------------------------------------------------------
def _plain(node, lines: dict, path: tuple):
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out = {}
        for k, v in node.value:
            key = yaml.safe_load(yaml.serialize(k)) if not isinstance(k, yaml.ScalarNode) else k.value
            out[key] = _plain(v, lines, path + (key,))
            lines[path + (key,)] = k.start_mark.line + 1  # errors point at the key's line
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_plain(v, lines, path + (i,)) for i, v in enumerate(node.value)]
    return yaml.safe_load(yaml.serialize(node))


def load_text(text: str, source: str = "<scenario>") -> Scenario:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise ScenarioError(source, mark.line + 1 if mark else None, "yaml",
                            f"not valid YAML: {getattr(e, 'problem', e)}") from None
    if node is None:
        raise ScenarioError(source, None, "file", "is empty", "a scenario needs at least `steps:`")
    lines: dict = {}
    data = _plain(node, lines, ())
    return from_dict(data, source, lines)


def load_file(path: str | Path) -> Scenario:
    p = Path(path)
    if not p.is_file():
        raise ScenarioError(str(p), None, "file", "does not exist", "give the path of a .yaml scenario")
    scenario = load_text(p.read_text(encoding="utf-8"), str(p))
    if scenario.name == "<unnamed>":
        scenario.name = p.stem
    return scenario


def from_dict(data: Any, source: str = "<scenario>", lines: dict | None = None) -> Scenario:
    lines = lines or {}

    def err(path: tuple, problem: str, allowed: str = ""):
        line = lines.get(path) or lines.get(path[:-1]) or lines.get(())
        return ScenarioError(source, line, ".".join(map(str, path)) or "scenario", problem, allowed)

    if not isinstance(data, dict):
        raise err((), "must be a mapping with `steps:`")
    for key in data:
        if key not in TOP_FIELDS:
            raise err((key,), "unknown field", f"allowed: {', '.join(sorted(TOP_FIELDS))}")
    try:
        model = ModelSpec.from_dict(data.get("model") or {})
    except ConfigError as e:
        raise err(("model", e.field.split(".", 1)[-1]), e.problem, e.fix) from None
    except TypeError as e:
        raise err(("model",), f"must be a mapping of model fields ({e})") from None
    try:
        topology = Topology.parse(data.get("topology", "tp1pp1dp1"))
        model.check_topology(topology)
    except ConfigError as e:
        raise err(("topology",), e.problem, e.fix) from None
    combos = _combinations(data.get("combinations", "all"), err)
    steps = [_step(raw, i, err, lines, model) for i, raw in enumerate(data.get("steps") or [])]
    if not steps:
        raise err(("steps",), "no steps", "list steps such as `- train: 2` and `- save`")
    expect = data.get("expect") or {}
    if not isinstance(expect, dict) or set(expect) - EXPECT_FIELDS:
        raise err(("expect",), "unknown expectation", f"allowed: {', '.join(sorted(EXPECT_FIELDS))}")
    timeout = data.get("timeout", 120.0)
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise err(("timeout",), f"must be a positive number of seconds, got {timeout!r}")
    seed = data.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise err(("seed",), f"must be an integer, got {seed!r}")
    return Scenario(str(data.get("name", "<unnamed>")), steps, model, topology, combos, seed,
                    str(data.get("description", "")), expect, float(timeout), str(data.get("backend", "reference")),
                    list(data.get("tags") or []), source)


def _combinations(raw, err) -> list[Combination]:
    if raw in ("all", None):
        return valid_combinations()
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list):
        raise err(("combinations",), "must be `all` or a list like [GLOBAL/torch_dist/sync]")
    out = []
    for i, text in enumerate(items):
        try:
            out.append(Combination.parse(text))
        except ConfigError as e:
            raise err(("combinations", i), e.problem, e.fix) from None
    return out


def _step(raw, i: int, err, lines: dict, model: ModelSpec) -> Step:
    path = ("steps", i)
    allowed = "; ".join(f"{k}: {v}" for k, v in STEP_KINDS.items())
    if isinstance(raw, str):
        kind, args = raw, None
    elif isinstance(raw, dict) and len(raw) == 1:
        kind, args = next(iter(raw.items()))
    else:
        raise err(path, "a step is one kind, like `- train: 2` or `- save`", allowed)
    if kind not in STEP_KINDS:
        raise err(path, f"unknown step {kind!r}", f"allowed: {', '.join(STEP_KINDS)}")
    line = lines.get(path)
    if kind == "train":
        if not isinstance(args, int) or isinstance(args, bool) or args < 1:
            raise err(path + (kind,), f"train needs a positive number of steps, got {args!r}")
        return Step(kind, {"steps": args}, line)
    args = {} if args is None else args
    if not isinstance(args, dict):
        raise err(path + (kind,), f"takes a mapping of options, got {args!r}", STEP_KINDS[kind])
    if kind in FAULT_STEPS:
        from .faultplan import record_of, validate
        try:
            validate(record_of(kind, args), world=1 << 16)
        except ConfigError as e:
            raise err(path + (kind, e.field.removeprefix("fault.")), e.problem, e.fix) from None
    if kind == "resume":
        try:
            topo = Topology.parse(args.get("topology", "same")) if args.get("topology", "same") != "same" else None
            if topo is not None:
                model.check_topology(topo)
        except ConfigError as e:
            raise err(path + (kind, "topology"), e.problem, e.fix) from None
        cont = args.get("continue", 2)
        if not isinstance(cont, int) or cont < 0:
            raise err(path + (kind, "continue"), f"must be a number of steps >= 0, got {cont!r}")
    return Step(kind, dict(args), line)
