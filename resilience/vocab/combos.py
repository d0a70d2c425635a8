"""The seed's three layers and which combinations of them are valid."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..errors import InvalidCombination


class CheckpointType(str, enum.Enum):
    """Semantics: what a checkpoint means."""

    LEGACY = "LEGACY"
    LOCAL = "LOCAL"
    GLOBAL = "GLOBAL"
    TORCH_DCP = "TORCH_DCP"


class CkptFormat(str, enum.Enum):
    """Representation: how it is laid out on disk."""

    TORCH = "torch"
    TORCH_DIST = "torch_dist"
    TORCH_DCP = "torch_dcp"


class IOMode(str, enum.Enum):
    """Execution: whether training blocks while it is written."""

    SYNC = "sync"
    ASYNC = "async"


@dataclass(frozen=True)
class Combination:
    type: CheckpointType
    format: CkptFormat
    io: IOMode

    def __str__(self) -> str:
        return f"{self.type.value}/{self.format.value}/{self.io.value}"

    @property
    def is_async(self) -> bool:
        return self.io is IOMode.ASYNC

    def to_dict(self) -> dict:
        return {"type": self.type.value, "format": self.format.value, "io": self.io.value}

    @classmethod
    def from_dict(cls, d: dict) -> Combination:
        return combination(d["type"], d["format"], d["io"])

    @classmethod
    def parse(cls, text: str) -> Combination:
        """'GLOBAL/torch_dist/async' (case of the type does not matter)."""
        parts = str(text).replace(",", "/").split("/")
        if len(parts) != 3:
            raise InvalidCombination(
                "combination", f"cannot read {text!r}", "write it as TYPE/format/io, e.g. GLOBAL/torch_dist/async"
            )
        return combination(*parts)


# The seed's table: (type, format, io) -> status.
VALID: dict[tuple[CheckpointType, CkptFormat, IOMode], str] = {
    (CheckpointType.LEGACY, CkptFormat.TORCH, IOMode.SYNC): "mainstream default",
    (CheckpointType.LOCAL, CkptFormat.TORCH, IOMode.SYNC): "debugging",
    (CheckpointType.GLOBAL, CkptFormat.TORCH_DIST, IOMode.SYNC): "new mainline",
    (CheckpointType.GLOBAL, CkptFormat.TORCH_DIST, IOMode.ASYNC): "experimental",
    (CheckpointType.TORCH_DCP, CkptFormat.TORCH_DCP, IOMode.SYNC): "early support",
    (CheckpointType.TORCH_DCP, CkptFormat.TORCH_DCP, IOMode.ASYNC): "future direction",
}

# Which formats can carry which semantics, and why not.
_FORMAT_REASON = {
    (
        CheckpointType.LEGACY,
        CkptFormat.TORCH_DIST,
    ): "LEGACY means whole per-rank torch.save files; torch_dist stores sharded tensors with distributed metadata",
    (
        CheckpointType.LEGACY,
        CkptFormat.TORCH_DCP,
    ): "LEGACY means whole per-rank torch.save files; torch_dcp is DCP's object-graph layout",
    (
        CheckpointType.LOCAL,
        CkptFormat.TORCH_DIST,
    ): "LOCAL means one self-contained file per rank with no collective; torch_dist needs a global plan",
    (
        CheckpointType.LOCAL,
        CkptFormat.TORCH_DCP,
    ): "LOCAL means one self-contained file per rank with no collective; torch_dcp needs a global plan",
    (
        CheckpointType.GLOBAL,
        CkptFormat.TORCH,
    ): "torch cannot carry GLOBAL semantics: it has no distributed metadata (global shapes and offsets)",
    (
        CheckpointType.GLOBAL,
        CkptFormat.TORCH_DCP,
    ): "GLOBAL is Megatron's sharded-tensor view, stored as torch_dist; torch_dcp belongs to TORCH_DCP",
    (
        CheckpointType.TORCH_DCP,
        CkptFormat.TORCH,
    ): "TORCH_DCP is DCP's object graph; torch (torch.save) has no distributed metadata",
    (
        CheckpointType.TORCH_DCP,
        CkptFormat.TORCH_DIST,
    ): "TORCH_DCP is DCP's object graph; torch_dist is Megatron's sharded-tensor layout for GLOBAL",
}
_ASYNC_REASON = (
    "torch format is written synchronously with torch.save: it has no snapshot stage or planner "
    "to run in the background"
)


def _enum(cls, value, layer: str):
    try:
        return value if isinstance(value, cls) else cls(value if cls is not CheckpointType else str(value).upper())
    except ValueError:
        allowed = ", ".join(m.value for m in cls)
        raise InvalidCombination(layer, f"unknown value {value!r}", f"use one of {allowed}") from None


def why_invalid(type_, format_, io) -> tuple[str, str] | None:
    """(layer, reason) if the combination is invalid, else None."""
    key = (type_, format_, io)
    if key in VALID:
        return None
    if (type_, format_) in _FORMAT_REASON:
        return "format", _FORMAT_REASON[(type_, format_)]
    return "io", _ASYNC_REASON


def combination(type_, format_, io) -> Combination:
    """The combination, or InvalidCombination naming the layer that forbids it and why."""
    t = _enum(CheckpointType, type_, "type")
    f = _enum(CkptFormat, format_, "format")
    i = _enum(IOMode, io, "io")
    problem = why_invalid(t, f, i)
    if problem:
        layer, reason = problem
        raise InvalidCombination(
            layer,
            f"{t.value}/{f.value}/{i.value} is not a valid combination: {reason}",
            "valid: " + "; ".join(str(c) for c in valid_combinations()),
        )
    return Combination(t, f, i)


def valid_combinations() -> list[Combination]:
    return [Combination(*k) for k in VALID]


def table() -> list[dict]:
    """Every (type, format, io) with valid and status, or the reason it is rejected."""
    rows = []
    for t in CheckpointType:
        for f in CkptFormat:
            for i in IOMode:
                problem = why_invalid(t, f, i)
                row = {"type": t.value, "format": f.value, "io": i.value, "valid": problem is None}
                if problem:
                    row["layer"], row["reason"] = problem
                else:
                    row["status"] = VALID[(t, f, i)]
                rows.append(row)
    return rows
