"""Bounded YAML for files a user hands us: plain data and the line of every value, or every problem found.

PyYAML's safe loader still lets a small file cost unbounded time and memory (a billion-laughs alias
bomb), dies with RecursionError on deep nesting, and accepts duplicate keys (the last wins). This
loader reads the parser's events itself, without recursion, and refuses:

- files over MAX_BYTES, text that is not UTF-8 (naming the byte offset);
- nesting deeper than MAX_DEPTH collections;
- more than MAX_ALIASES aliases, an alias inside the node it names, or aliases that expand the
  document past MAX_VALUES values;
- every tag but the YAML core schema's (str, int, float, bool, null, seq, map): no !!python/*, no !custom;
- a list or mapping used as a key, a key given twice, more than one document.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import yaml

from .errors import ResilienceError

MAX_BYTES = 1 << 20  # 1 MiB: a scenario is a page of text
MAX_DEPTH = 50  # nested lists/mappings
MAX_ALIASES = 100  # *alias uses in one file
MAX_VALUES = 10_000  # values (keys included) once every alias is expanded; bounds the parse time too

CORE = "tag:yaml.org,2002:"
ALLOWED_TAGS = {CORE + t for t in ("str", "int", "float", "bool", "null", "seq", "map")} | {"!"}
# libyaml's parser when it is there (tens of times faster); both are iterative state machines
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_IMPLICIT = {CORE + t for t in ("str", "int", "float", "bool", "null", "timestamp")}


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a file: the line (1-based; None for the whole file) and what is wrong."""

    line: int | None
    problem: str
    fix: str = ""


class Refused(ResilienceError, ValueError):
    """Raised with every problem found so far when reading cannot go on (a file a user gave: bad input)."""

    def __init__(self, problems: list[Problem]):
        super().__init__("; ".join(p.problem for p in problems))
        self.problems = problems


@dataclass
class Document:
    """The plain data (dicts, lists, scalars), the line of each value by its path of keys and indexes
    (a mapping entry points at its key's line), and the problems that did not stop the reading."""

    data: Any
    lines: dict[tuple, int | None] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    def line_of(self, path: tuple) -> int | None:
        """The line of `path`, or of its nearest ancestor that has one."""
        return line_of(self.lines, path)


def line_of(lines: dict, path: tuple) -> int | None:
    path = tuple(path)
    while path not in lines and path:
        path = path[:-1]
    return lines.get(path)


def decode(data: bytes) -> str:
    """UTF-8 text (an optional BOM dropped), or Refused naming the first bad byte and its offset."""
    if len(data) > MAX_BYTES:
        raise Refused(
            [
                Problem(
                    None,
                    f"is {len(data)} bytes, larger than the limit of {MAX_BYTES} bytes",
                    "a scenario is a short text file",
                )
            ]
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise Refused(
            [
                Problem(
                    line, f"is not UTF-8 text: byte 0x{data[e.start]:02x} at offset {e.start}", "save the file as UTF-8"
                )
            ]
        ) from None


def load(text: str | bytes) -> Document:
    """Read one YAML document within the limits above. Raises Refused with every problem found."""
    if isinstance(text, str):
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as e:
            line = text.count("\n", 0, e.start) + 1
            raise Refused([Problem(line, f"is not UTF-8 text: {text[e.start]!r} at character {e.start}")]) from None
    else:
        data = text
    text = decode(data)
    doc = _Builder(text).build()
    if doc.problems:
        raise Refused(sorted(doc.problems, key=lambda p: p.line or 0))
    return doc


_NO_KEY = object()
_BAD_KEY = object()


@dataclass
class _Frame:
    kind: str  # "map" or "seq"
    value: Any
    path: tuple
    line: int | None
    anchor: str | None
    is_key: bool  # this collection is itself being used as a mapping key
    key: Any = _NO_KEY  # map: the key waiting for its value
    key_lines: dict = field(default_factory=dict)
    size: int = 1


class _Builder:
    def __init__(self, text: str):
        self.text = text
        self.loader: Any = None  # a yaml loader while build() runs
        self.lines: dict[tuple, int | None] = {}
        self.problems: list[Problem] = []
        self.anchors: dict[str, tuple[Any, int]] = {}
        self.open_anchors: set[str] = set()
        self.aliases = 0
        self.values = 0
        self.stack: list[_Frame] = []
        self.root: Any = None
        self.documents = 0

    def refuse(self, line: int | None, problem: str, fix: str = ""):
        raise Refused(sorted(self.problems + [Problem(line, problem, fix)], key=lambda p: p.line or 0))

    def build(self) -> Document:
        try:
            self.loader = _Loader(self.text)  # the pure-Python reader checks every character here
            while self.loader.check_event():
                self.event(self.loader.get_event())
        except yaml.reader.ReaderError as e:
            line = self.text.count("\n", 0, e.position) + 1
            code = e.character if isinstance(e.character, int) else ord(e.character)
            self.refuse(
                line,
                f"holds character U+{code:04X}, which YAML does not allow (at character {e.position})",
                "remove control characters and binary data",
            )
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark or e.context_mark
            at = mark.line + 1 if mark else None
            if "nesting depth" in str(e.problem):  # libyaml's own bound (1000), met before ours in flow style
                self.refuse(
                    at, f"nests lists and mappings deeper than {MAX_DEPTH} levels", "a scenario needs a few levels"
                )
            self.refuse(at, f"is not valid YAML: {e.problem or e.context}")
        except yaml.YAMLError as e:
            self.refuse(None, f"is not valid YAML: {e}")
        finally:
            if self.loader is not None:
                self.loader.dispose()
        return Document(self.root, self.lines, self.problems)

    # ---- events -------------------------------------------------------------------------------------
    def event(self, ev) -> None:
        line = ev.start_mark.line + 1 if ev.start_mark else None
        if isinstance(ev, yaml.DocumentStartEvent):
            self.documents += 1
            if self.documents > 1:
                self.refuse(line, "holds more than one YAML document", "keep one scenario per file")
        elif isinstance(ev, yaml.AliasEvent):
            self.alias(ev, line)
        elif isinstance(ev, yaml.ScalarEvent):
            value = self.scalar(ev, line)
            self.values += 1
            self.check_values(line)
            self.add(value, line, 1, is_scalar=True, anchor=ev.anchor)
        elif isinstance(ev, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            if len(self.stack) >= MAX_DEPTH:
                self.refuse(
                    line, f"nests lists and mappings deeper than {MAX_DEPTH} levels", "a scenario needs a few levels"
                )
            self.check_tag(ev.tag, line, CORE + ("seq" if isinstance(ev, yaml.SequenceStartEvent) else "map"))
            path, is_key = self.child_path()
            kind = "seq" if isinstance(ev, yaml.SequenceStartEvent) else "map"
            self.values += 1
            self.check_values(line)
            if ev.anchor is not None:
                self.open_anchors.add(ev.anchor)
            self.stack.append(_Frame(kind, [] if kind == "seq" else {}, path, line, ev.anchor, is_key))
            if not is_key:
                self.lines.setdefault(path, line)
        elif isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            frame = self.stack.pop()
            if frame.anchor is not None:
                self.open_anchors.discard(frame.anchor)
            self.add(frame.value, frame.line, frame.size, is_scalar=False, anchor=frame.anchor, frame=frame)

    def alias(self, ev, line) -> None:
        name = ev.anchor
        self.aliases += 1
        if self.aliases > MAX_ALIASES:
            self.refuse(line, f"uses more than {MAX_ALIASES} aliases", "write the values out")
        if name in self.open_anchors:
            self.refuse(
                line,
                f"alias *{name} refers to a node that contains it (a recursive alias)",
                "aliases may only repeat a finished node",
            )
        if name not in self.anchors:
            self.refuse(line, f"alias *{name} names no anchor before it", f"define &{name} first")
        value, size = self.anchors[name]
        self.values += size
        self.check_values(line)
        self.add(copy.deepcopy(value), line, size, is_scalar=not isinstance(value, (dict, list)), anchor=None)

    def check_values(self, line) -> None:
        if self.values > MAX_VALUES:
            why = " once its aliases are expanded" if self.aliases else ""
            self.refuse(line, f"holds more than {MAX_VALUES} values{why}", "a scenario is a few dozen values")

    def check_tag(self, tag, line, default) -> bool:
        if tag is None or tag in ALLOWED_TAGS:
            return True
        shown = "!!" + tag[len(CORE) :] if tag.startswith(CORE) else tag
        self.problems.append(
            Problem(
                line,
                f"tag {shown} is not allowed",
                "only plain YAML values: strings, numbers, booleans, null, lists, mappings",
            )
        )
        return False

    def scalar(self, ev, line):
        if not self.check_tag(ev.tag, line, None):
            return None
        if ev.tag == "!" or (ev.tag is None and not ev.implicit[0]):
            return ev.value  # quoted, or the non-specific tag: a string
        tag = ev.tag or self.loader.resolve(yaml.ScalarNode, ev.value, ev.implicit)
        if tag not in _IMPLICIT and ev.tag is None:
            return ev.value  # '<<' (merge) and '=' (value) keys: plain strings here
        node = yaml.ScalarNode(tag, ev.value, ev.start_mark, ev.end_mark, ev.style)
        try:
            return self.loader.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, OverflowError) as e:
            self.problems.append(
                Problem(
                    line, f"cannot read {ev.value[:40]!r} as {tag[len(CORE) :]}: {getattr(e, 'problem', None) or e}"
                )
            )
            return None

    # ---- building ---------------------------------------------------------------------------------
    def child_path(self) -> tuple[tuple, bool]:
        """The path of the node about to start, and whether it is a mapping key."""
        if not self.stack:
            return (), False
        top = self.stack[-1]
        if top.kind == "seq":
            return top.path + (len(top.value),), top.is_key
        if top.key is _NO_KEY:
            return top.path + ("<key>",), True
        return top.path + (top.key if top.key is not _BAD_KEY else "<key>",), top.is_key

    def add(self, value, line, size, *, is_scalar: bool, anchor, frame: _Frame | None = None) -> None:
        if anchor is not None:
            self.anchors[anchor] = (value, size)
        if not self.stack:
            self.root = value
            self.lines.setdefault((), line)
            return
        top = self.stack[-1]
        top.size += size
        if top.kind == "seq":
            path = top.path + (len(top.value),)
            if not top.is_key:
                self.lines[path] = line
            top.value.append(value)
            return
        if top.key is _NO_KEY:  # this value is a key
            if not is_scalar:
                self.problems.append(Problem(line, "a list or mapping is used as a key", "keys are plain names"))
                top.key = _BAD_KEY
            else:
                try:
                    hash(value)
                except TypeError:
                    value = _BAD_KEY
                if value is not _BAD_KEY and value in top.value:
                    first = top.key_lines.get(value)
                    self.problems.append(
                        Problem(line, f"key {value!r} is given twice (first on line {first})", "give each key once")
                    )
                    value = _BAD_KEY
                top.key = value
                if value is not _BAD_KEY:
                    top.key_lines[value] = line
            return
        key, top.key = top.key, _NO_KEY
        if key is _BAD_KEY:
            return
        top.value[key] = value
        if not top.is_key:
            self.lines[top.path + (key,)] = top.key_lines[key]  # errors point at the key's line


__all__ = [
    "ALLOWED_TAGS",
    "Document",
    "MAX_ALIASES",
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_VALUES",
    "Problem",
    "Refused",
    "decode",
    "line_of",
    "load",
]
