"""What a backend promises when a checkpoint is loaded elsewhere: for each change between the saving and
the loading job (tp, pp, dp, ep, etp, cp, vpp, precision), whether the load must come back exact or be refused clearly.

An adapter states it (`factory.contract = {"tp": "refuse", "pp": "refuse", "dp": "load"}`); a backend that
states none is held to the preset of its combination, the seed's table (LEGACY loads a dp change only,
LOCAL loads none, GLOBAL and TORCH_DCP load any). A change it leaves out is not judged either way: only
a wrong load fails it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..errors import ConfigError
from .combos import CheckpointType, Combination

CHANGES = ("tp", "pp", "dp", "ep", "etp", "cp", "vpp", "precision")
LAYOUT_CHANGES = CHANGES[:-1]
LOAD, REFUSE = "load", "refuse"
PROMISES = (LOAD, REFUSE)


@dataclass(frozen=True)
class TopologyContract:
    """Per change, LOAD (exactly) or REFUSE (clearly); `source` says who stated it."""

    promises: tuple[tuple[str, str], ...] = ()
    source: str = "declared by the adapter"

    def promise(self, changed: Iterable[str]) -> str | None:
        """What a load across `changed` must do: LOAD, REFUSE, or None when the contract does not say.
        One refused change makes the whole transition one to refuse."""
        stated = dict(self.promises)
        said = [stated.get(c) for c in changed]
        if REFUSE in said:
            return REFUSE
        return None if None in said else LOAD

    def to_dict(self) -> dict:
        return dict(self.promises)

    def __str__(self) -> str:
        """The changes grouped by promise, in the order first stated: 'tp, pp refuse; dp, cp load (...)'."""
        grouped: dict[str, list[str]] = {}
        for change, promise in self.promises:
            grouped.setdefault(promise, []).append(change)
        parts = [f"{', '.join(changes)} {promise}" for promise, changes in grouped.items()]
        return ("; ".join(parts) or "nothing stated") + f" ({self.source})"

    @classmethod
    def parse(cls, value: object, where: str = "contract", source: str = "declared by the adapter") -> TopologyContract:
        """A mapping {change: "load" | "refuse"}; ConfigError naming the bad entry and the fix."""
        if isinstance(value, TopologyContract):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(
                where,
                f"must be a mapping of change to promise, got {type(value).__name__}",
                'write it as {"tp": "load", "pp": "load", "dp": "load", "precision": "refuse"}',
            )
        out = []
        for change, promise in value.items():
            if change not in CHANGES:
                raise ConfigError(
                    f"{where}.{change}", "is not a change the framework makes", f"use {', '.join(CHANGES)}"
                )
            if promise not in PROMISES:
                raise ConfigError(
                    f"{where}.{change}",
                    f"unknown promise {promise!r}",
                    "use 'load' (must load exactly) or 'refuse' (must be refused clearly)",
                )
            out.append((change, promise))
        return cls(tuple(sorted(out, key=lambda p: CHANGES.index(p[0]))), source)

    @classmethod
    def preset(cls, combo: Combination) -> TopologyContract:
        """The seed's table for `combo`; precision is left to its own checker."""
        if combo.type is CheckpointType.LEGACY:
            loads = {"dp", "cp"}  # cp: dense state is replicated over it, as over dp
        elif combo.type is CheckpointType.LOCAL:
            loads = set()
        else:
            loads = set(LAYOUT_CHANGES)
        return cls(tuple((c, LOAD if c in loads else REFUSE) for c in LAYOUT_CHANGES), f"preset of {combo}")
