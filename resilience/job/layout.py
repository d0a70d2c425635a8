"""Where the job keeps its checkpoints, learned from the golden run's file-system log: the files of each
save, per rank, and its tracker or pointer file.

The files and their roles come from faults.layout, learned from the mount's operation log as for any
backend (data, metadata, pointer; each path a template of the step, what differs between runs a '*').

Save k is the k-th distinct step among the data files the ranks created, in the order of their first
create in the log: `iter_0000008/rank_1.bin.tmp` created by rank 1 starts the save of step 8 if no file
of step 8 was created before. A job whose checkpoint names carry no step (`ckpt-a/`, `latest.pt` rewritten
in place) has no save to aim at: its columns are N/A with that reason. A rank's data file of a save is its
largest one (the one the bytes of its state go to: a torch.save file, a .distcp shard)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, replace

from ..faults.fuse_log import read_log
from ..faults.layout import Layout, LayoutFile, learn
from .base import FORMAT_VERSION, readable

_FIELD = re.compile(r"\{iteration(?::0(\d+)d)?\}")


@dataclass(frozen=True)
class Save:
    """The k-th save of the golden run: its step and, per rank, the data files it created (as written)."""

    number: int
    step: int
    files: dict[int, tuple[str, ...]]

    def to_dict(self) -> dict:
        return {"number": self.number, "step": self.step, "files": {str(r): list(f) for r, f in self.files.items()}}


@dataclass(frozen=True)
class JobLayout:
    """The golden run's checkpoint layout and saves, and the ranks that wrote them."""

    layout: Layout
    saves: tuple[Save, ...]
    ranks: tuple[int, ...]

    def data_file(self, rank: int) -> LayoutFile | None:
        """The rank's data file of every save: its largest per-step data file."""
        mine = [f for f in self.layout.of("data", rank) if f.per_iteration and f.rank == rank]
        return max(mine, key=lambda f: f.size, default=None)

    def write_glob(self, step: int, rank: int) -> str | None:
        """A glob of the path the rank's data file of the save of `step` is written at (target.path)."""
        f = self.data_file(rank)
        if f is None:
            return None
        at = (f.written_as or f.template).format(iteration=step)
        return "*/" + at

    def final_path(self, step: int, rank: int) -> str | None:
        """Where the rank's data file of the save of `step` ends, relative to the checkpoint folder."""
        f = self.data_file(rank)
        return None if f is None else f.path(step)

    def pointer(self) -> str | None:
        """The tracker or pointer file (relative), if the job keeps one."""
        pointers = [f.template for f in self.layout.of("pointer") if not f.per_iteration]
        return pointers[0].replace("{{", "{").replace("}}", "}") if pointers else None

    def describe(self) -> str:
        steps = ", ".join(str(s.step) for s in self.saves) or "none"
        return f"ranks {', '.join(map(str, self.ranks)) or 'none'}; saves at steps {steps}; {self.layout.describe()}"

    def to_dict(self) -> dict:
        return {
            "format_version": FORMAT_VERSION,
            "layout": self.layout.to_dict(),
            "saves": [s.to_dict() for s in self.saves],
            "ranks": list(self.ranks),
        }

    @classmethod
    def from_dict(cls, d: dict) -> JobLayout:
        readable(d)
        saves = tuple(
            Save(int(s["number"]), int(s["step"]), {int(r): tuple(f) for r, f in s["files"].items()})
            for s in d["saves"]
        )
        return cls(Layout.from_dict(d["layout"]), saves, tuple(int(r) for r in d["ranks"]))

    def save(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, indent=1)

    @classmethod
    def load(cls, path: str) -> JobLayout:
        with open(path, encoding="utf-8") as f:
            return cls.from_dict(json.load(f))


def learn_job_layout(backing: str, fs_log: str, newest_step: int) -> JobLayout:
    """The layout of the golden run whose checkpoint folder is `backing` (as the mount's logs in `fs_log`
    name it), its files' templates taken from the save of `newest_step` (the tracker names it)."""
    layout = learn(backing, newest_step, {}, oplog_dir=fs_log)
    per_step = [f for f in layout.files if f.per_iteration]
    # the other saves' files are the same files of other steps: kept once, as the templates
    kept = tuple(
        f for f in layout.files if f.per_iteration or not any(g.pattern().fullmatch(f.template) for g in per_step)
    )
    layout = replace(layout, files=kept)
    entries = read_log(fs_log)
    ranks = tuple(sorted({e["rank"] for e in entries if isinstance(e.get("rank"), int)}))
    return JobLayout(layout, _saves(layout, backing, entries), ranks)


def _saves(layout: Layout, backing: str, entries: list[dict]) -> tuple[Save, ...]:
    data = [f for f in layout.files if f.role == "data" and f.per_iteration]
    patterns = [_written_pattern(f.written_as or f.template) for f in data]
    order: list[int] = []
    files: dict[int, dict[int, list[str]]] = {}
    for e in entries:
        if e.get("op") != "create" or not isinstance(e.get("rank"), int):
            continue
        rel = os.path.relpath(e["path"], backing)
        for p in patterns:
            m = p.fullmatch(rel)
            if m is None or len({int(g) for g in m.groups()}) != 1:
                continue
            step = int(m.group(1))
            if step not in files:
                order.append(step)
                files[step] = {}
            files[step].setdefault(e["rank"], []).append(rel)
            break
    return tuple(
        Save(k + 1, step, {r: tuple(v) for r, v in sorted(files[step].items())}) for k, step in enumerate(order)
    )


def _written_pattern(template: str) -> re.Pattern:
    """A regex of a written-at template: each {iteration} field a group, each '*' any run of characters."""
    out, pos = [], 0
    for m in _FIELD.finditer(template):
        out.append(_literal(template[pos : m.start()]))
        out.append(r"(\d+)")
        pos = m.end()
    out.append(_literal(template[pos:]))
    return re.compile("".join(out))


def _literal(text: str) -> str:
    text = text.replace("{{", "{").replace("}}", "}")
    return ".*?".join(re.escape(part) for part in text.split("*"))


__all__ = ["JobLayout", "Save", "learn_job_layout"]
