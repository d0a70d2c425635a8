"""A backend's checkpoint layout, learned from one clean save: which files a save writes per iteration
and per rank, and what each one is (tensor data, metadata, a pointer to the newest checkpoint).

Two ways to learn it. From the operation log of the save (code that writes through the storage seam):
every created file followed through its renames to where it ends, with the rank that wrote it and the
path it was written at. Otherwise from a before/after scan of the checkpoint root (names, sizes, mtimes):
the files, without ranks or write paths. Either way a file's role comes from its name and content:
a root-level file whose text names the saved iteration is a pointer (latest.txt,
latest_checkpointed_iteration.txt); inside the iteration's folder known metadata names, text files and
small non-tensor files are metadata, the rest is data. An adapter may declare `layout_hints`
({role: [glob, ...]}) that override the guess.

Paths are kept as templates of the iteration (`iter_{iteration:07d}/__1_0.distcp`, `step-{iteration}`),
so every fault and corruption targets the same role in any save (kill in a data file of the second save,
flip bits in data, damage each metadata file) without knowing any implementation's names."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import socket
from dataclasses import asdict, dataclass, field

from ..vocab.phases import WRITER_KINDS
from .fuse_log import FUSE_LOG, read_log
from .stable_names import stable_name

ROLES = ("data", "metadata", "pointer", "other")
# WRITER_KINDS (vocab.phases): the first of them seen names the layout's data_writer
IN_RANK_WRITERS = frozenset({"thread", "inline", "rank"})  # "rank": either, in layouts written before
KNOWN_METADATA = ("manifest.json", ".metadata", "metadata.json", "common.pt", "index.json", "metadata.yaml")
TEXT_SUFFIXES = (".json", ".yaml", ".yml", ".txt", ".toml", ".ini", ".md")
_NUMBER = re.compile(r"\d+")
_FIELD = re.compile(r"\{iteration(?::0(\d+)d)?\}")


@dataclass(frozen=True)
class LayoutFile:
    """One file of a save. `template` is its path relative to the root with `{iteration}` fields;
    `written_as` the template of the path it was written at (None: learned from a scan)."""

    template: str
    role: str
    rank: int | None = None
    written_as: str | None = None
    size: int = 0
    read: bool | None = None  # a load of the save opened it (None: not learned)

    @property
    def per_iteration(self) -> bool:
        return "{iteration" in self.template

    def path(self, iteration: int) -> str:
        """The relative path in the save of `iteration`: a glob where the name differs between runs ('*')."""
        return _fill(self.template, iteration)

    def pattern(self) -> re.Pattern:
        """A regex of the relative path; group 1.. capture the iteration, a '*' (what differs between runs)
        matches any part of one name."""
        out, pos = [], 0
        for m in _FIELD.finditer(self.template):
            out.append(_literal(self.template[pos : m.start()]))
            out.append(r"(\d+)")
            pos = m.end()
        out.append(_literal(self.template[pos:]))
        return re.compile("".join(out))


@dataclass(frozen=True)
class Layout:
    """What one clean save of iteration `iteration` wrote. `seam`: its writes went through the storage
    seam (the in-process fault injector and the power-loss recorder reach them)."""

    iteration: int
    files: tuple[LayoutFile, ...]
    seam: bool
    source: str  # "oplog" or "scan"
    phases: dict = field(default_factory=dict)  # named phase -> the operation that starts it (op, role, rank)
    announced: tuple[str, ...] = ()  # phases the backend itself announced (vocab.phases)
    # who created the data files (WRITER_KINDS): "process" (a process the rank started), "thread" (a thread of
    # the rank's process), "inline" (its main thread); None: not seen (no data file went through the seam or
    # the file system, or the ranks' pids were not known) nor declared by the adapter (runner.learn)
    data_writer: str | None = None
    writer_declared: bool = False  # data_writer is what the adapter declares (factory.writer), not what was seen
    # operation kind (faults.base.OPS) -> the ranks that did one in the save: a fault on another never fires
    op_ranks: dict = field(default_factory=dict)

    # ---- questions --------------------------------------------------------------------------------
    def of(self, role: str, rank: int | None = None) -> list[LayoutFile]:
        return [f for f in self.files if f.role == role and (rank is None or f.rank is None or f.rank == rank)]

    @property
    def logged(self) -> bool:
        """Some of the save's files went through the seam (all of them when `seam`)."""
        return any(f.written_as is not None for f in self.files)

    def reaches(self, role: str, rank: int | None = None) -> bool:
        """The seam saw a `role` file of `rank` being written: in-process faults can strike it."""
        return any(f.written_as is not None for f in self._each_save(role, rank))

    def _each_save(self, role: str, rank: int | None) -> list[LayoutFile]:
        """The `role` files of `rank` a save writes: those of its iteration, else (a pointer at the root that
        every save rewrites) the role's files outside any iteration."""
        files = self.of(role, rank)
        return [f for f in files if f.per_iteration] or files

    def has(self, role: str) -> bool:
        return any(f.role == role for f in self.files)

    def write_glob(self, role: str, iteration: int | None, rank: int | None = None) -> str | None:
        """A glob (for a fault's target.path) matching the path the first `role` file of `rank` is written
        at in the save of `iteration` (None: any iteration); None when no such file or no write path."""
        ats = [f.written_as or f.template for f in self._each_save(role, rank)]  # scan: where it ends
        if not ats:
            return None
        return path_glob(ats[0] if rank is not None else _merge(ats), iteration)

    def found(
        self, root: str, role: str | None = None, rank: int | None = None
    ) -> list[tuple[int | None, str, LayoutFile]]:
        """(iteration or None, absolute path, file) of every file under `root` that is a `role` file
        of this layout, for any iteration."""
        root = os.path.abspath(root)
        existing = _files_under(root)
        out: dict[str, tuple[int | None, str, LayoutFile]] = {}
        for f in self.files:
            if (role is not None and f.role != role) or (rank is not None and f.rank not in (None, rank)):
                continue
            pat = f.pattern()
            for rel in existing:
                m = pat.fullmatch(rel)
                if m:
                    its = {int(g) for g in m.groups()}
                    if len(its) <= 1:  # a file two wildcard templates match is found once, as the first's
                        out.setdefault(rel, (its.pop() if its else None, os.path.join(root, rel), f))
        return sorted(out.values(), key=lambda x: (x[0] if x[0] is not None else -1, x[1]))

    def iterations(self, root: str) -> list[int]:
        return sorted({it for it, _, _ in self.found(root) if it is not None})

    def folder(self, iteration: int) -> str | None:
        """The folder (relative) that holds the files of one iteration: the deepest common folder of them."""
        paths = [f.path(iteration) for f in self.files if f.per_iteration]
        if not paths:
            return None
        common = os.path.commonpath([os.path.dirname(p) or "." for p in paths]).split(os.sep)
        # a folder whose name differs between runs is no folder to name: the part above it
        common = common[: next((k for k, c in enumerate(common) if "*" in c), len(common))]
        return os.path.join(*common) if common and common != ["."] else None

    def describe(self) -> str:
        roles = {r: [f.template for f in self.files if f.role == r] for r in ROLES}
        parts = [f"{r}: {', '.join(sorted(set(v)))}" for r, v in roles.items() if v]
        # where the bytes are written, when the name differs between runs (a pid, a random suffix: '*')
        moved = sorted({f"{f.written_as} -> {f.template}" for f in self.files if "*" in (f.written_as or "")})
        if moved:
            parts.append(f"written as: {', '.join(moved)}")
        unread = sorted({f.template for f in self.files if f.read is False})
        if unread:
            parts.append(f"never read by a load: {', '.join(unread)}")
        return (
            f"learned from {self.source} of iteration {self.iteration}"
            + ("" if self.seam else " (writes outside the storage seam)")
            + "; "
            + "; ".join(parts)
        )

    def to_dict(self) -> dict:
        return {
            "format_version": 1,
            "iteration": self.iteration,
            "seam": self.seam,
            "source": self.source,
            "files": [asdict(f) for f in self.files],
            "phases": self.phases,
            "announced": list(self.announced),
            "data_writer": self.data_writer,
            "writer_declared": self.writer_declared,
            "op_ranks": self.op_ranks,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Layout:
        return cls(
            int(d["iteration"]),
            tuple(LayoutFile(**f) for f in d["files"]),
            bool(d["seam"]),
            d["source"],
            dict(d.get("phases") or {}),
            tuple(d.get("announced") or ()),
            d.get("data_writer"),
            bool(d.get("writer_declared", False)),
            {str(k): [int(r) for r in v] for k, v in (d.get("op_ranks") or {}).items()},
        )

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=1)

    @classmethod
    def load(cls, path: str) -> Layout:
        with open(path) as f:
            return cls.from_dict(json.load(f))


# ---- learning -------------------------------------------------------------------------------------------
def scan(root: str) -> dict[str, tuple[int, int]]:
    """relative path -> (size, mtime_ns) of every file under `root`."""
    root = os.path.abspath(root)
    out = {}
    for rel in _files_under(root):
        st = os.stat(os.path.join(root, rel))
        out[rel] = (st.st_size, st.st_mtime_ns)
    return out


def learn(
    root: str,
    iteration: int,
    before: dict[str, tuple[int, int]] | None = None,
    *,
    oplog_dir: str | None = None,
    hints: dict | None = None,
    announced=(),
    reads: set[str] | None = None,
    rank_pids: dict[int, int] | None = None,
) -> Layout:
    """The layout of the save of `iteration` under `root`: `before` is scan(root) taken before it (None:
    empty), `oplog_dir` its operation log when it went through the seam, `reads` the relative paths a
    load of it opened (None: not learned), `rank_pids` each rank's process (who created the data files)."""
    root = os.path.abspath(root)
    before = before or {}
    after = scan(root)
    written = {rel for rel, sig in after.items() if before.get(rel) != sig}
    ops = []
    if oplog_dir is not None and os.path.isdir(oplog_dir):
        from .oplog import read_ops

        ops = [o for o in read_ops(oplog_dir) if _inside(root, o.path)]
    created = _follow(root, ops)  # final rel -> (rank, written-at rel)
    seam = bool(written) and all(rel in created for rel in written)
    writers = _stream_writers(ops, oplog_dir)
    # what differs between runs: the probe's processes and threads, and this machine's name
    pids, host = _probe_pids(writers, oplog_dir, rank_pids), socket.gethostname()
    files, roles = [], {}  # roles: each written file's role, by the path this save gave it
    for rel in sorted(written):
        rank, at = created.get(rel, (None, None))  # a file written outside the seam: neither is known
        roles[rel] = _role(root, rel, _template(rel, iteration), iteration, hints)
        files.append(
            LayoutFile(
                _template(rel, iteration, stable=True, pids=pids, hostname=host),
                roles[rel],
                rank,
                _template(at, iteration, stable=True, pids=pids, hostname=host) if at else None,
                after[rel][0],
                None if reads is None else rel in reads,
            )
        )
    source = "oplog" if seam else "oplog and scan" if created else "scan"
    if not created:
        return Layout(iteration, tuple(files), seam, source, {}, tuple(announced))
    return Layout(
        iteration,
        tuple(files),
        seam,
        source,
        _stable_phases(_phases(root, ops, roles), iteration, pids, host),
        tuple(announced),
        _data_writer(root, ops, roles, rank_pids or {}, writers),
        op_ranks={op: sorted({o.rank for o in ops if o.op == op and o.rank is not None}) for op in {o.op for o in ops}},
    )


def _stream_writers(ops, oplog_dir: str | None) -> dict[str, int]:
    """stream -> the pid of the process that opened it: the seam names it in the stream (rank:pid:n), the
    file system's log beside its operation log names the calling process of each stream (fuse:n)."""
    out = {}
    for o in ops:
        if o.stream and not o.stream.startswith("fuse:") and o.stream.count(":") == 2:
            out[o.stream] = int(o.stream.split(":")[1])  # OpLog.new_stream: rank:pid:n
    if oplog_dir is not None and os.path.isfile(os.path.join(oplog_dir, FUSE_LOG)):
        for rec in read_log(oplog_dir):
            if rec.get("stream") and isinstance(rec.get("pid"), int):
                out.setdefault(rec["stream"], rec["pid"])
    return out


def _probe_pids(writers: dict[str, int], oplog_dir: str | None, rank_pids: dict[int, int] | None) -> frozenset[int]:
    """Every process and thread id the probe save ran as: the ranks', the writers' of its streams, and the
    threads the file system's log names."""
    pids = set(writers.values()) | set((rank_pids or {}).values())
    if oplog_dir is not None and os.path.isfile(os.path.join(oplog_dir, FUSE_LOG)):
        pids |= {rec[k] for rec in read_log(oplog_dir) for k in ("pid", "tid") if isinstance(rec.get(k), int)}
    return frozenset(pids)


def _stable_phases(phases: dict, iteration: int, pids: frozenset[int], hostname: str) -> dict:
    """Each phase's path with what differs between runs made '*' (stable_names), as the write globs are."""
    return {k: dict(v, path=stable_name(v["path"], iteration, pids, hostname)) for k, v in phases.items()}


def _data_writer(
    root: str, ops, roles: dict[str, str], rank_pids: dict[int, int], writers: dict[str, int]
) -> str | None:
    """How the data files the log saw were created: by another process than their rank's ("process": one the
    rank started), else by a thread of the rank's process ("thread"), else by its main thread ("inline");
    None when it saw none or a rank's pid is not known. `roles`: each file's role by its path in the probe;
    `writers`: stream -> the pid that opened it."""
    data_at = {at for rel, (_, at) in _follow(root, ops).items() if roles.get(rel) == "data"}
    seen = set()
    for o in ops:
        if o.op != "create" or os.path.relpath(o.path, root) not in data_at or o.stream not in writers:
            continue
        if o.rank not in rank_pids:
            return None
        if writers[o.stream] != rank_pids[o.rank]:
            seen.add("process")
        else:
            seen.add("thread" if o.thread != "main" else "inline")
    for kind in WRITER_KINDS:
        if kind in seen:
            return kind
    return None


def _follow(root: str, ops) -> dict[str, tuple[int, str]]:
    """Every file the log created, followed through renames and exchanges: final rel -> (rank, rel it was
    written at)."""
    live: dict[str, tuple[int, str]] = {}  # current abs path -> (rank, first rel)
    for o in ops:
        if o.op == "create":
            live[o.path] = (o.rank, os.path.relpath(o.path, root))
        elif o.op in ("rename", "exchange") and o.dst:
            moves = [(o.path, o.dst)] + ([(o.dst, o.path)] if o.op == "exchange" else [])
            new = {p: v for p, v in live.items() if not any(p == s or p.startswith(s + os.sep) for s, _ in moves)}
            for src, dst in moves:
                for p, v in live.items():
                    if p == src or p.startswith(src + os.sep):
                        new[dst + p[len(src) :]] = v
            live = new
        elif o.op in ("unlink", "rmtree"):
            live = {p: v for p, v in live.items() if not (p == o.path or p.startswith(o.path + os.sep))}
    return {os.path.relpath(p, root): v for p, v in live.items()}


def _template(
    rel: str, iteration: int, stable: bool = False, pids: frozenset[int] = frozenset(), hostname: str | None = None
) -> str:
    """`rel` with each number equal to `iteration` replaced by an {iteration} field (keeping zero padding);
    stable: what differs between runs (random parts, `pids`, `hostname`: stable_names) becomes '*'."""
    parts = []
    for comp in rel.split(os.sep):
        comp = comp.replace("{", "{{").replace("}", "}}")
        if stable:
            comp = stable_name(comp, iteration, pids, hostname)

        def field_of(m):
            tok = m.group(0)
            if int(tok) != iteration:
                return tok
            return f"{{iteration:0{len(tok)}d}}" if tok.startswith("0") and len(tok) > 1 else "{iteration}"

        parts.append(_NUMBER.sub(field_of, comp))
    return "/".join(parts)


def _role(root: str, rel: str, template: str, iteration: int, hints: dict | None) -> str:
    name = os.path.basename(rel)
    for role, globs in (hints or {}).items():
        if any(fnmatch.fnmatchcase(rel, g) or fnmatch.fnmatchcase(name, g) for g in globs):
            return role
    path = os.path.join(root, rel)
    if "{iteration" not in template:
        return "pointer" if _names_iteration(path, iteration) else "other"
    if name in KNOWN_METADATA or name.endswith(TEXT_SUFFIXES):
        return "metadata"
    return "data"


def _names_iteration(path: str, iteration: int) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(256)
        text = head.decode("ascii")
    except (OSError, UnicodeDecodeError):
        return False
    return any(int(t) == iteration for t in _NUMBER.findall(text))


def _phases(root: str, ops, roles: dict[str, str]) -> dict:
    """Named phases of a save, from its operations: the first data write, the first metadata write, the
    rename that publishes (the first that carries a metadata file into place, a folder holding one or the
    file itself; else the first onto a file or folder of the layout), the pointer write. `roles`: each
    file's role by its path in this save."""
    created = {}
    for o in ops:
        if o.op == "create":
            created[o.stream] = o
    final = _follow(root, [o for o in ops if o.op in ("create", "rename", "exchange", "unlink", "rmtree")])
    role_at = {at: roles.get(rel) for rel, (_, at) in final.items()}
    out: dict[str, dict] = {}
    first_rename: dict | None = None
    for o in ops:
        if o.op not in ("create", "rename", "exchange"):
            continue  # the log's many writes name no phase
        rel = os.path.relpath(o.path, root)
        if o.op == "create" and role_at.get(rel) == "data" and "write" not in out:
            out["write"] = {"op": "create", "path": rel, "rank": o.rank}
        elif o.op == "create" and role_at.get(rel) == "metadata" and "manifest" not in out:
            out["manifest"] = {"op": "create", "path": rel, "rank": o.rank}
        elif o.op == "create" and role_at.get(rel) == "pointer" and "tracker_update" not in out:
            out["tracker_update"] = {"op": "create", "path": rel, "rank": o.rank}
        elif o.op in ("rename", "exchange") and o.dst:
            dst = os.path.relpath(o.dst, root)
            inside = [r for p, r in roles.items() if p.startswith(dst + os.sep)]
            target = roles.get(dst) or ("folder" if inside else None)
            if target == "pointer" and "tracker_update" not in out:
                out["tracker_update"] = {"op": o.op, "path": rel, "rank": o.rank}
            elif target is not None and "metadata" in inside + [target] and "commit_rename" not in out:
                out["commit_rename"] = {"op": o.op, "path": rel, "rank": o.rank}
            elif target is not None:
                first_rename = first_rename or {"op": o.op, "path": rel, "rank": o.rank}
    if "commit_rename" not in out and first_rename:
        out["commit_rename"] = first_rename  # a save whose metadata is written in place: its first rename
    for phase in out.values():  # which ranks do an operation of the phase: a fault on another never fires
        phase["ranks"] = sorted(
            {o.rank for o in ops if o.op == phase["op"] and _alike(os.path.relpath(o.path, root), phase["path"])},
            key=lambda r: (r is None, r if r is not None else 0),
        )
    return out


def _alike(a: str, b: str) -> bool:
    """Two paths of one save that differ only in their numbers (a rank's, a pid's, a random part's)."""
    return re.sub(r"[0-9a-f]{6,}|\d+", "#", a) == re.sub(r"[0-9a-f]{6,}|\d+", "#", b)


def _merge(templates: list[str]) -> str:
    """One glob for several templates that differ only in numbers (__0_0.distcp, __1_0.distcp: __*_0.distcp);
    else the first of them."""
    split = [re.split(r"(\d+)", t) for t in templates]
    if any(len(p) != len(split[0]) for p in split):
        return templates[0]
    out = []
    for k, parts in enumerate(zip(*split)):
        if len(set(parts)) == 1:
            out.append(parts[0])
        elif k % 2 == 1:  # a number that differs between the files
            out.append("*")
        else:
            return templates[0]
    return "".join(out)


def path_glob(template: str, iteration: int | None) -> str:
    """A glob for a fault's target.path matching `template` (a LayoutFile's) in the save of `iteration`
    (None: of any iteration), anywhere under the root."""
    return "*/" + _unbrace(_FIELD.sub("*", template) if iteration is None else _fill(template, iteration))


def _fill(template: str, iteration: int) -> str:
    return template.format(iteration=iteration)


def _unbrace(text: str) -> str:
    return text.replace("{{", "{").replace("}}", "}")


def _literal(text: str) -> str:
    """A regex of a template's text between fields: '*' (a part that differs between runs) matches within
    one name."""
    return "[^/]*".join(re.escape(part) for part in _unbrace(text).split("*"))


def _inside(root: str, path: str) -> bool:
    # a prefix test on normalized paths: what relpath answers, at a fraction of its cost per logged write
    return os.path.abspath(path).startswith(root.rstrip(os.sep) + os.sep)


def _files_under(root: str) -> list[str]:
    out = []
    if os.path.isdir(root):
        for dirpath, _, names in os.walk(root):
            out += [os.path.relpath(os.path.join(dirpath, n), root) for n in names]
    return sorted(out)
