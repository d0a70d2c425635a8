"""A scenario's fault steps read into fault records (resilience.faults), once, as the scenario is loaded.

`fault: {record}` takes any record of resilience.faults; the other steps are shorthands for the common
ones: `crash` (rank_crash), `kill` (rank_kill, or rank_hang or writer_kill with `kind:`), `corrupt` (the at-rest kinds
by short names), `lose_unsynced` (lost_unsynced_writes). A shorthand writes `file` for target.path,
`after_bytes` for trigger.at_byte and `rank: all` for every rank; a kill may nest its trigger as
`when: {file, size}` or `when: {after: seconds}`. Every later layer takes the `Fault` made here."""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import ConfigError
from ..faults import KINDS, Fault

FAULT_STEPS = ("crash", "fault", "kill", "corrupt", "lose_unsynced")
CORRUPT_KINDS = {
    "truncate": "truncate",
    "bitflip": "bit_flip",
    "bit_flip": "bit_flip",
    "delete": "delete_file",
    "delete_file": "delete_file",
    "metadata": "metadata_damage",
    "metadata_damage": "metadata_damage",
    "tracker": "tracker_damage",
    "tracker_damage": "tracker_damage",
    "staging": "leftover_staging",
    "leftover_staging": "leftover_staging",
    "extra": "extra_file",
    "extra_file": "extra_file",
    "escape": "escaping_path",
    "escaping_path": "escaping_path",
    "pickle": "hostile_pickle",
    "hostile_pickle": "hostile_pickle",
}
KILL_KINDS = ("rank_kill", "rank_hang", "writer_kill")
_NAMED = {"crash": "rank_crash", "lose_unsynced": "lost_unsynced_writes"}


def fault_of(step: str, args: Mapping, *, world: int | None = None) -> Fault:
    """The fault a step (`step` one of FAULT_STEPS, with its options) stands for; ConfigError naming the
    record's field ('fault.target.rank') when it cannot be carried out on `world` ranks."""
    return Fault.from_dict(_record_of(step, args), world=world, where="fault")


def fault_keys(step: str, args: Mapping) -> tuple[str, set[str]] | None:
    """The fault kind a step stands for and the option names it takes (None: the kind is unknown)."""
    extra: set[str] = set()
    if step == "fault":
        kind, extra = args.get("kind"), {"kind"}
    elif step == "corrupt":
        kind, extra = CORRUPT_KINDS.get(args.get("kind", "truncate")), {"kind"}
    elif step == "kill":
        kind, extra = args.get("kind", "rank_kill"), {"kind", "when"}
        if kind not in KILL_KINDS:
            return None
    else:
        kind = _NAMED[step]
    if not isinstance(kind, str) or kind not in KINDS:
        return None
    cls = KINDS[kind]
    keys = {"seed", "target", "trigger"} | set(cls.params()) | set(cls.uses) | extra
    keys |= {"file"} if "path" in cls.uses else set()
    keys |= {"after_bytes"} if "at_byte" in cls.uses else set()
    return kind, keys


def _record_of(step: str, args: Mapping) -> dict:
    """The record mapping a step stands for, shorthands spelled out (not yet checked)."""
    a = dict(args)
    if step == "fault":
        return a
    if step == "kill":
        rec = {"kind": a.pop("kind", "rank_kill")}
        if isinstance(a.get("when"), dict):  # `when: {file, size}` or `when: {after: seconds}`: the flat keys
            a.update(a.pop("when"))
    elif step == "corrupt":
        what = a.pop("kind", "truncate")
        if what not in CORRUPT_KINDS:
            raise ConfigError("kind", f"unknown corruption {what!r}", f"use one of {', '.join(sorted(CORRUPT_KINDS))}")
        rec = {"kind": CORRUPT_KINDS[what]}
    elif step in _NAMED:
        rec = {"kind": _NAMED[step]}
    else:
        raise ValueError(f"{step!r} is not a fault step (one of {', '.join(FAULT_STEPS)})")
    if a.get("rank") == "all":
        a.pop("rank")
    if "after_bytes" in a:
        a["at_byte"] = a.pop("after_bytes")
    if "file" in a:
        a["path"] = a.pop("file")
    rec.update(a)
    return rec


__all__ = ["CORRUPT_KINDS", "FAULT_STEPS", "KILL_KINDS", "fault_keys", "fault_of"]
