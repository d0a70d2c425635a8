"""What damage at rest did, and why it did nothing: the records and refusals that the damage aimed by
the vocabulary's names (faults.corruption), the damage aimed through a learned layout
(faults.layout_damage) and the hostile pickle (faults.hostile_pickle) all return or raise."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from ..errors import ConfigError
from .base import Fault


class NothingToDamage(ConfigError):
    """The corruption found nothing to damage (no checkpoint yet, no tracker to delete, an empty file):
    the fault is not applied, and a run reports it unprobed rather than stopping."""


class NotApplicable(NothingToDamage):
    """This backend has nothing the fault is about (no tracker, no manifest with a file list): the case
    is N/A with this reason, never a PASS."""


@dataclass(frozen=True)
class Damage:
    """What one corruption did. Paths are absolute; `rel` is relative to the checkpoint root."""

    kind: str
    action: str
    file: str
    rel: str
    offset: int | None = None
    bits: tuple[int, ...] | None = None
    old_size: int | None = None
    new_size: int | None = None
    old: str | None = None  # the byte (hex) or text before
    new: str | None = None  # and after
    detail: str = ""
    marker: str | None = None  # a file that exists only if code planted in the checkpoint ran

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items() if v not in (None, "")}

    def __str__(self) -> str:
        d = self.to_dict()
        return " ".join(
            [self.action, self.rel] + [f"{k}={v}" for k, v in d.items() if k not in ("kind", "action", "file", "rel")]
        )


def record(fault: Fault, action: str, root: str, path: str, **kw) -> Damage:
    """The Damage of `fault` doing `action` to `path` under the checkpoint root `root`."""
    return Damage(fault.kind, action, path, os.path.relpath(path, root), **kw)


def flip_record(fault: Fault, root: str, path: str, offset: int, bits, old: int, mask: int, **kw) -> Damage:
    """What a bit flip did: the byte before and after, the file's size unchanged."""
    size = os.path.getsize(path)
    return record(
        fault,
        "flip",
        root,
        path,
        offset=offset,
        bits=tuple(bits),
        old_size=size,
        new_size=size,
        old=f"{old:02x}",
        new=f"{old ^ mask:02x}",
        **kw,
    )


@dataclass(frozen=True)
class Planted:
    """What planting a hostile pickle did to one file (faults.hostile_pickle)."""

    path: str
    marker: str
    old_size: int
    new_size: int
    record: str | None  # the archive's data.pkl; None for DCP's .metadata
    manifest: str  # what became of a manifest listing the file ("" when there is none)


def planted_record(root: str, fault: Fault, planted: Planted) -> Damage:
    """What a hostile pickle's planting did."""
    run = "os.system('echo ran >> " + os.path.relpath(planted.marker, root) + "')"
    what = (
        f"pickle runs {run}, then yields the original metadata"
        if planted.record is None
        else f"{planted.record} runs {run}, then unpickles the original object (every other record byte-identical)"
    )
    return record(
        fault,
        "replace" if planted.record is None else "rewrite",
        root,
        planted.path,
        old_size=planted.old_size,
        new_size=planted.new_size,
        marker=planted.marker,
        detail=what + (f"; {planted.manifest}" if planted.manifest else ""),
    )
