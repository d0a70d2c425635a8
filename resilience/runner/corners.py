"""The corners table: one case per corner where checkpoint bugs hide just outside the matrix's fixed sample
(iteration numbers, sizes, time, sequences, files, values, layouts), each for every combination the backend
declares. A corner is a scenario in the scenario language, with one line saying what it probes."""

from __future__ import annotations

import os
import random
import re
from dataclasses import dataclass, field

from ..errors import ConfigError
from .scenario_checks import from_dict
from .scenario_model import Scenario
from .scenario_schema import safe_name

# elements of the sizes corner's extra parameters: fp32 tensors 4 bytes past 4 KiB, 64 KiB and 1 MiB, and one row
SIZED = {"past_4k": 1025, "past_64k": 16385, "past_1m": 262145, "one_row": 1}
_SAVE_TWICE: list = [{"train": 2}, "save", {"train": 1}, "save", "finalize"]


@dataclass(frozen=True)
class Corner:
    name: str
    kind: str  # the class of corner: iterations, sizes, time, sequences, files, values, layouts
    probes: str  # one line: what a backend that gets it wrong does
    steps: list
    expect: dict = field(default_factory=dict)
    model: dict = field(default_factory=dict)
    topology: str = "tp2pp1dp1"

    def scenario(self, seed: int) -> Scenario:
        data = {
            "name": f"corner-{self.name}",
            "description": self.probes,
            "seed": seed,
            "model": self.model,
            "topology": self.topology,
            "steps": self.steps,
            "expect": self.expect,
            "tags": ["corner", self.kind],
        }
        return from_dict(data, f"<corner {self.name}>")


CORNERS: dict[str, Corner] = {
    c.name: c
    for c in [
        Corner(
            "iterations-9-to-12",
            "iterations",
            "saves at 9 and 12: a newest checkpoint chosen by sorting unpadded names takes 9",
            [{"train": 1}, "save", {"train": 3}, "save", {"resume": {"continue": 1}}],
            {"loaded_iteration": 12},
            {"start_iteration": 8},
        ),
        Corner(
            "past-the-padding",
            "iterations",
            "saves at 9,999,999 and 10,000,000, where iter_%07d gets an eighth digit: the resume must take the later",
            [{"train": 1}, "save", {"train": 1}, "save", {"resume": {"continue": 1}}],
            {"loaded_iteration": 10_000_000},
            {"start_iteration": 9_999_998},
        ),
        Corner(
            "iteration-zero",
            "iterations",
            "a save at iteration 0, before any step: a loader that takes iteration 0 for 'no checkpoint' starts over",
            ["save", {"resume": {"continue": 1}}],
            {"loaded_iteration": 0},
        ),
        Corner(
            "release-tracker",
            "iterations",
            "the tracker reads 'release', as beside a converted checkpoint, and no release folder is there: a "
            "loader that parses it as a number stops, one that trusts it looks for a folder that is not there",
            [*_SAVE_TWICE, {"corrupt": {"kind": "tracker", "how": "release"}}, {"resume": {"continue": 1}}],
        ),
        Corner(
            "sizes-and-empty-shards",
            "sizes",
            "tensors just past 4 KiB, 64 KiB and 1 MiB and one of a single row (the distributed optimizer's "
            "shard of it is empty on dp rank 0): a writer that loses a last partial chunk, or skips an empty "
            "shard, loads wrong or not at all",
            [*_SAVE_TWICE, {"resume": {"continue": 1}}],
            {"loaded_iteration": 3},
            {"optimizer": "distributed", "sized_params": SIZED},
            topology="tp1pp1dp2",
        ),
        Corner(
            "empty-shards-resharded",
            "sizes",
            "parameters of one and two rows saved on dp 2 and loaded on dp 3: shards empty on some ranks on "
            "both sides of the change (DCP once dropped real shards beside an empty one)",
            [*_SAVE_TWICE, {"resume": {"topology": "tp1pp1dp3", "continue": 1}}],
            {"loaded_iteration": 3},
            {"optimizer": "distributed", "sized_params": {"one_row": 1, "two_rows": 2}},
            topology="tp1pp1dp2",
        ),
        Corner(
            "slow-storage",
            "time",
            "rank 1's data writes and fsyncs and every rank's renames of the second save stall for a second: "
            "an async finalize that waits with a timeout takes a still-running write for done",
            [
                {"train": 2},
                "save",
                {"train": 1},
                "finalize",
                {"fault": {"kind": "slow_write", "rank": 1, "delay": 1.0, "times": 1, "path": "@data"}},
                {"fault": {"kind": "slow_write", "rank": 1, "op": "fsync", "delay": 1.0, "times": 1}},
                {"fault": {"kind": "slow_write", "op": "rename", "delay": 1.0, "times": 1}},
                "save",
                "finalize",
                {"resume": {"continue": 1}},
            ],
            {"loaded_iteration": 3},
        ),
        Corner(
            "start-up-crosses-a-second",
            "time",
            "the resumed job's ranks but rank 0 start 1.1 s late, so their clocks read another second: a staging "
            "folder or run stamp each rank names from the wall clock splits one save over two folders",
            [{"train": 2}, "save", {"resume": {"continue": 1, "stagger": 1.1}}, "save", {"resume": {"continue": 1}}],
            {"loaded_iteration": 3},
        ),
        Corner(
            "crash-during-resave",
            "sequences",
            "rank 1 dies while iteration 3, already committed, is saved again: a start-up cleanup of the stale "
            "temporaries, or a re-save that replaces the old copy first, loses the committed save",
            [
                *_SAVE_TWICE,
                {"crash": {"rank": 1, "after_bytes": 256, "file": "@data"}},
                "save",
                {"resume": {"continue": 1}},
            ],
            {"loaded_iteration": 3},
        ),
        Corner(
            "two-crashes",
            "sequences",
            "a crash mid-save, a resume, and a crash mid-save again: what the first crash left must not trip the "
            "second resume",
            [
                *_SAVE_TWICE,
                {"train": 1},
                {"crash": {"rank": 1, "after_bytes": 256, "file": "@data"}},
                "save",
                {"resume": {"continue": 1}},
                {"crash": {"rank": 0, "after_bytes": 256, "file": "@data"}},
                "save",
                {"resume": {"continue": 1}},
            ],
            {"loaded_iteration": 3},
        ),
        Corner(
            "crash-during-load",
            "sequences",
            "rank 1 dies as the resume's load reads its first file; a second resume must load the newest whole",
            [
                *_SAVE_TWICE,
                {"fault": {"kind": "rank_crash", "rank": 1, "op": "read", "when": "before"}},
                {"resume": {"continue": 1}},
                {"resume": {"continue": 1}},
            ],
            {"loaded_iteration": 3},
        ),
        Corner(
            "manifest-and-data",
            "sequences",
            "the newest checkpoint's manifest garbled and a bit of its data flipped: a loader that takes an "
            "unreadable manifest for an old format without checksums loads wrong values",
            [
                *_SAVE_TWICE,
                {"corrupt": [{"kind": "metadata", "how": "garble"}, {"kind": "bitflip"}]},
                {"resume": {"continue": 1}},
            ],
            model={"optimizer": "distributed"},
        ),
        Corner(
            "chained-resumes",
            "sequences",
            "save, resume on dp 2 and save there, resume again on dp 1: the second resume must load what the "
            "first resumed job saved",
            [
                *_SAVE_TWICE,
                {"resume": {"topology": "tp2pp1dp2", "continue": 1}},
                "save",
                {"resume": {"topology": "tp2pp1dp1", "continue": 1}},
            ],
            {"loaded_iteration": 4},
        ),
        Corner(
            "padding-with-values",
            "values",
            "the vocabulary's padding rows carry values and train, as Megatron's do: a loader that restores only "
            "the real rows passes while padding is always zero",
            [*_SAVE_TWICE, {"resume": {"continue": 1}}],
            {"loaded_iteration": 3},
            {"padding_values": True},
        ),
        Corner(
            "two-dims-changed",
            "layouts",
            "a save on pp 2 x dp 2 loaded on tp 2 x dp 2: rank coordinates nested in the wrong order agree within "
            "one topology and disagree across this change",
            [*_SAVE_TWICE, {"resume": {"topology": "tp2pp1dp2", "continue": 1}}],
            {"loaded_iteration": 3},
            topology="tp1pp2dp2",
        ),
        Corner(
            "pp-and-dp-saved",
            "layouts",
            "a save on pp 2 x dp 2 loaded on pp 2 x dp 1: a rank's place computed in the nesting tp, pp, dp instead "
            "of tp, dp, pp is right whenever pp or dp is 1, and here files one stage's state in the other's place",
            [*_SAVE_TWICE, {"resume": {"topology": "tp1pp2dp1", "continue": 1}}],
            {"loaded_iteration": 3},
            topology="tp1pp2dp2",
        ),
        Corner(
            "world-of-three",
            "layouts",
            "a save on 3 pipeline stages loaded on 2: a world that is not a power of two",
            [*_SAVE_TWICE, {"resume": {"topology": "tp1pp2dp1", "continue": 1}}],
            {"loaded_iteration": 3},
            {"num_layers": 6},
            topology="tp1pp3dp1",
        ),
    ]
}


# damage-each-file: one case per data-file role of the learned layout (its name, the rank's digits left out)
# and kind of damage, each in the file of one rank drawn from the seed
EACH_FILE = "damage-each-file"
FILE_DAMAGES = ("truncate", "bitflip", "delete")
EACH_FILE_PROBES = (
    "each data file of the newest checkpoint in turn truncated, bit-flipped and deleted: a loader that falls back "
    "per file, verifies only some ranks' files or fills a missing shard in passes while the damage lands elsewhere"
)


def _each_file_corner(kind: str, glob: str | None, role: str = "") -> Corner:
    damage = {"kind": kind, **({"file": glob} if glob else {})}
    steps = [*_SAVE_TWICE, {"corrupt": damage}, {"resume": {"continue": 1}}]
    name = safe_name(f"{kind}-{role}") if role else EACH_FILE  # the scenario's name, in every summary line
    return Corner(name, "files", EACH_FILE_PROBES, steps, model={"optimizer": "distributed"})


def each_file_scenarios(templates: list[str] | None, seed: int) -> list[tuple[str, Scenario]]:
    """(column, scenario) of the damage-each-file corner: `templates` are the data files of the learned
    layout (faults.layout templates; None: not learned, one case damaging a data file drawn from the seed)."""
    from ..faults.layout import path_glob

    if not templates:
        return [(EACH_FILE, _each_file_corner("truncate", None).scenario(seed))]
    roles: dict[str, list[str]] = {}
    for t in sorted(templates):
        # a file's role: its name with the iteration's field and a rank's digits left out (iter_N_N_local.pt)
        roles.setdefault(re.sub(r"\{[^}]*\}|\d+", "N", os.path.basename(t)), []).append(t)
    out = []
    for role, files in roles.items():
        glob = path_glob(random.Random(f"{seed}:{role}").choice(files), None)
        out += [(f"{kind}:{role}", _each_file_corner(kind, glob, role).scenario(seed)) for kind in FILE_DAMAGES]
    return out


def is_file_column(column: str) -> bool:
    """A column of the damage-each-file corner ('truncate:__N_N.distcp')."""
    kind, colon, _ = column.partition(":")
    return column == EACH_FILE or (bool(colon) and kind in FILE_DAMAGES)


def corner_probes(columns: list[str]) -> dict[str, str]:
    """Each corners-table column's one line: what it probes (the damage-each-file columns share one)."""
    out = {c: CORNERS[c].probes for c in columns if c in CORNERS}
    files = [c for c in columns if is_file_column(c)]
    if files:
        out[files[0]] = (
            f"(and the other {len(files) - 1} file columns) {EACH_FILE_PROBES}" if len(files) > 1 else EACH_FILE_PROBES
        )
    return out


def corner_names(items: list[str] | None) -> list[str]:
    """The corners asked for: all (the default, or 'all'), none ('none') or the names given; an unknown
    name is one ConfigError naming the known ones."""
    if not items or items == ["all"]:
        return [*CORNERS, EACH_FILE]
    if items == ["none"]:
        return []
    for name in items:
        if name not in CORNERS and name != EACH_FILE:
            raise ConfigError(
                "--corners", f"no corner {name!r}", f"use all, none or names from {', '.join([*CORNERS, EACH_FILE])}"
            )
    return list(dict.fromkeys(items))


def corner_scenario(name: str, seed: int) -> Scenario:
    return CORNERS[name].scenario(seed)
