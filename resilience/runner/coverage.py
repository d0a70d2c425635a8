"""What a run exercised: per dimension (iterations, sizes, delays, sequences, layouts, values, faults per
file kind) the values its scenarios reached, and the corners of runner.corners none of them reached. Pure:
read from the scenarios, before or after they ran."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..errors import ConfigError
from ..state import Topology, Transition
from .scenario_model import Scenario

PADDING_LIMIT = 9_999_999  # the last iteration iter_%07d writes in seven digits
DIMENSIONS = ("iterations", "sizes", "delays", "sequences", "layouts", "values", "faults by file kind")
# corner -> (dimension, the values that reach it, all of them)
REACHES = {
    "iterations-9-to-12": ("iterations", ("saves at 9 and past 10",)),
    "past-the-padding": ("iterations", ("saves past 9,999,999",)),
    "iteration-zero": ("iterations", ("a save at 0",)),
    "release-tracker": ("iterations", ("a release tracker",)),
    "sizes-and-empty-shards": ("sizes", ("a tensor past 1 MiB", "an empty shard")),
    "empty-shards-resharded": ("sizes", ("an empty shard resharded",)),
    "slow-storage": ("delays", ("seconds",)),
    "start-up-crosses-a-second": ("delays", ("a start-up across a second",)),
    "crash-during-resave": ("sequences", ("a crash during a re-save",)),
    "two-crashes": ("sequences", ("two crashes",)),
    "crash-during-load": ("sequences", ("a crash during a load",)),
    "manifest-and-data": ("sequences", ("two damages at once",)),
    "chained-resumes": ("sequences", ("chained resumes",)),
    "padding-with-values": ("values", ("padding rows with values",)),
    "two-dims-changed": ("layouts", ("two dimensions changed",)),
    "pp-and-dp-saved": ("layouts", ("a save on pp and dp > 1",)),
    "world-of-three": ("layouts", ("a world not a power of two",)),
    "damage-each-file": (
        "faults by file kind",
        tuple(f"one data file: {k}" for k in ("truncate", "bitflip", "delete")),
    ),
}
_CRASHES = ("crash", "kill")
_DATA_DAMAGE = {
    "truncate": "truncate",
    "bitflip": "bitflip",
    "bit_flip": "bitflip",
    "delete": "delete",
    "delete_file": "delete",
}


@dataclass
class Coverage:
    seen: dict[str, set[str]] = field(default_factory=lambda: {d: set() for d in DIMENSIONS})

    def add(self, scenario: Scenario) -> None:
        for dimension, value in _values(scenario):
            self.seen[dimension].add(value)

    def add_all(self, scenarios: Iterable[Scenario]) -> Coverage:
        for s in scenarios:
            self.add(s)
        return self

    def unreached(self) -> list[str]:
        """The corners none of the scenarios reached."""
        return [corner for corner, (dim, values) in REACHES.items() if not set(values) <= self.seen[dim]]

    def render(self) -> str:
        lines = ["coverage:"]
        for d in DIMENSIONS:
            lines.append(f"  {d}: {', '.join(sorted(self.seen[d])) or 'nothing'}")
        never = self.unreached()
        lines.append(f"  corners never reached: {', '.join(never) if never else 'none'}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"seen": {d: sorted(v) for d, v in self.seen.items()}, "unreached": self.unreached()}

    def keep(self, folder: str) -> str | None:
        """Write coverage.json into the run folder `folder`; why not, or None. A report of its own: a full
        disk changes no verdict."""
        try:
            with open(os.path.join(folder, "coverage.json"), "w") as f:
                json.dump(self.to_dict(), f, indent=1)
        except OSError as e:
            return str(e)
        return None


def of_files(paths: Iterable[str]) -> Coverage:
    """The coverage of scenario files a run kept (its case folders' scenario.yaml, a fuzz run's cases/*.yaml);
    one that is missing or does not read back whole is left out."""
    from .scenario import load_file

    out = Coverage()
    for path in paths:
        try:
            out.add(load_file(path))
        except ConfigError:
            continue
    return out


def _values(s: Scenario) -> list[tuple[str, str]]:
    out = [("layouts", f"world {s.topology.world}")]
    out += _iterations(s) + _sizes(s) + _sequences(s) + _delays(s) + _layouts(s) + _faults(s)
    if s.model.padding_values:
        out.append(("values", "padding rows with values"))
    out.append(("values", s.model.value_range + " values"))
    return out


def _iterations(s: Scenario) -> list[tuple[str, str]]:
    it, saves = s.model.start_iteration, []
    for step in s.steps:
        if step.kind == "train":
            it += step.args["steps"]
        elif step.kind == "save":
            saves.append(it)
        elif step.kind == "resume":
            it += int(step.args.get("continue", 2))  # from the newest save or later: an upper bound is enough
    out = [("iterations", f"start {s.model.start_iteration}")]
    if any(
        st.kind == "corrupt" and "tracker" in str(st.args.get("kind")) and st.args.get("how") == "release"
        for st in s.steps
    ):
        out.append(("iterations", "a release tracker"))
    if 0 in saves:
        out.append(("iterations", "a save at 0"))
    if any(n > PADDING_LIMIT for n in saves):
        out.append(("iterations", "saves past 9,999,999"))
    if any(n < 10 for n in saves) and any(10 <= n <= PADDING_LIMIT for n in saves):
        out.append(("iterations", "saves at 9 and past 10"))
    return out


def _sizes(s: Scenario) -> list[tuple[str, str]]:
    out = []
    largest = max((n for _, n in s.model.sized_params), default=0) * 4  # fp32 bytes
    for limit, name in ((1 << 20, "1 MiB"), (64 << 10, "64 KiB"), (4 << 10, "4 KiB")):
        if largest > limit:
            out.append(("sizes", f"a tensor past {name}"))
            break
    dps = [s.topology.dp] + [Topology.parse(st.args["topology"]).dp for st in s.steps if _moves(st)]
    empty = s.model.optimizer == "distributed" and any(n < max(dps) for _, n in s.model.sized_params)
    if empty:
        out.append(("sizes", "an empty shard"))
        if len(set(dps)) > 1:
            out.append(("sizes", "an empty shard resharded"))
    return out


def _moves(step) -> bool:
    return step.kind == "resume" and bool(step.args.get("topology")) and step.args["topology"] != "same"


def _sequences(s: Scenario) -> list[tuple[str, str]]:
    out, crashes, saved_here, last, resumed = [], 0, False, "", False
    resumed_then_saved = False
    for step in s.steps:
        kind = step.kind
        if kind == "fault" and step.args.get("kind") == "rank_crash" and step.args.get("op") == "read":
            out.append(("sequences", "a crash during a load"))
        if kind in _CRASHES:
            crashes += 1
            if saved_here:  # the save it strikes is of an iteration already saved: no train since
                out.append(("sequences", "a crash during a re-save"))
        if kind == "corrupt" and last == "corrupt":
            out.append(("sequences", "two damages at once"))
        if kind == "resume" and resumed_then_saved:
            out.append(("sequences", "chained resumes"))
        saved_here = kind == "save" or (saved_here and kind not in ("train", "resume"))
        resumed_then_saved = resumed_then_saved or (kind == "save" and resumed)
        resumed = resumed or kind == "resume"
        last = kind
    if crashes >= 2:
        out.append(("sequences", "two crashes"))
    return out


def _delays(s: Scenario) -> list[tuple[str, str]]:
    slow = [step.args for step in s.steps if step.kind == "fault" and step.args.get("kind") == "slow_write"]
    out = [("delays", "seconds" if float(a.get("delay", 0.1)) >= 1 else "milliseconds") for a in slow]
    if any(step.kind == "resume" and float(step.args.get("stagger", 0)) >= 1 for step in s.steps):
        out.append(("delays", "a start-up across a second"))
    return out


def _layouts(s: Scenario) -> list[tuple[str, str]]:
    out, here = [], s.topology
    for step in s.steps:
        if step.kind == "save" and here.pp > 1 and here.dp > 1:
            out.append(("layouts", "a save on pp and dp > 1"))
        if not _moves(step):
            continue
        there = Topology.parse(step.args["topology"])
        changed = Transition(here, there).changed
        out.append(("layouts", "two dimensions changed" if len(changed) >= 2 else "one dimension changed"))
        out += [("layouts", f"{d} changed") for d in changed if d in ("ep", "etp", "cp", "vpp")]
        out.append(("layouts", f"world {there.world}"))
        here = there
    if s.model.num_experts:
        out.append(("layouts", "experts"))
    worlds = [s.topology.world] + [Topology.parse(st.args["topology"]).world for st in s.steps if _moves(st)]
    if any(w & (w - 1) for w in worlds):
        out.append(("layouts", "a world not a power of two"))
    return out


def _faults(s: Scenario) -> list[tuple[str, str]]:
    out = []
    for step in s.steps:
        if step.kind == "corrupt":
            kind = str(step.args.get("kind", "truncate"))
            if kind in _DATA_DAMAGE:
                out.append(("faults by file kind", f"data: {_DATA_DAMAGE[kind]}"))
                if step.args.get("file"):  # aimed at one file of the layout, not drawn
                    out.append(("faults by file kind", f"one data file: {_DATA_DAMAGE[kind]}"))
            else:
                out.append(
                    ("faults by file kind", f"{'pointer' if kind.startswith('tracker') else 'metadata'}: {kind}")
                )
        elif step.fault is not None:
            path = str(step.args.get("file") or step.args.get("path") or "")
            role = path[1:].split("#")[0] if path.startswith("@") else "any file" if not path else "a named file"
            out.append(("faults by file kind", f"{role}: {step.fault.kind}"))
    return out
