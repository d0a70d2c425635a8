"""The fault kinds: in-process (injector), external (nemesis) and at rest (corruption)."""

from __future__ import annotations

import errno as _errno
import os
import signal as _signal
from dataclasses import dataclass
from typing import ClassVar

from ..errors import ConfigError
from ..triggers import CRASH, FAIL, POWER_LOSS, SHORT, SLOW, TORN
from .base import HTTP_OPS, OPS, Fault, _choice, _int, _number

# ---- in-process faults (the carriers: the seam's injector, the FUSE file system) ---------------------
# Each says its `effect`; when it fires, on which operation, is resilience.triggers' rule for that effect.
_OP_USES = frozenset({"rank", "path", "op", "thread", "nth"})
_WRITE_USES = frozenset({"rank", "path", "thread", "nth", "op"})
_CRASH_USES = frozenset({"rank", "path", "op", "thread", "nth", "when", "at_byte", "phase"})


@dataclass(frozen=True)
class IOFailure(Fault):
    """The nth matching operation raises OSError with a real errno (ENOSPC, EIO, EDQUOT, EROFS, ...)."""

    kind: ClassVar[str] = "io_error"
    effect: ClassVar[str | None] = FAIL
    uses: ClassVar[frozenset[str]] = _OP_USES
    errno: str = "EIO"

    @property
    def code(self) -> int:
        return getattr(_errno, self.errno)

    def _check(self, where):
        if not isinstance(self.errno, str) or self.errno not in _errno.errorcode.values():
            raise ConfigError(
                f"{where}.errno", f"unknown errno {self.errno!r}", "use a name such as ENOSPC, EIO, EDQUOT or EROFS"
            )


def _write_only(fault: Fault, where: str) -> None:
    if fault.target.op not in (None, "write"):
        raise ConfigError(
            f"{where}.target.op",
            f"{fault.kind} acts on writes, not {fault.target.op!r}",
            "leave target.op out or set it to write",
        )


@dataclass(frozen=True)
class ShortWrite(Fault):
    """The nth matching write stores only `keep` bytes (None: half) and returns that count; a correct
    caller writes the rest."""

    kind: ClassVar[str] = "short_write"
    effect: ClassVar[str | None] = SHORT
    uses: ClassVar[frozenset[str]] = _WRITE_USES
    keep: int | None = None

    def _check(self, where):
        _write_only(self, where)
        _int(self.keep, f"{where}.keep", minimum=0)


@dataclass(frozen=True)
class TornWrite(Fault):
    """The nth matching write reports full success but only its first `keep` bytes (None: half) reach the
    file; the rest of its range holds zeros ('zeros') or seeded noise ('garbage'), as a torn sector."""

    kind: ClassVar[str] = "torn_write"
    effect: ClassVar[str | None] = TORN
    uses: ClassVar[frozenset[str]] = _WRITE_USES
    keep: int | None = None
    fill: str = "zeros"

    def _check(self, where):
        _write_only(self, where)
        _int(self.keep, f"{where}.keep", minimum=0)
        _choice(self.fill, ("zeros", "garbage"), f"{where}.fill")


@dataclass(frozen=True)
class SlowWrite(Fault):
    """A straggler: matching operations (default: writes; an object store's requests too) from the nth on
    each wait `delay` seconds first; `times` of them (None: all)."""

    kind: ClassVar[str] = "slow_write"
    effect: ClassVar[str | None] = SLOW
    uses: ClassVar[frozenset[str]] = _OP_USES
    ops: ClassVar[tuple[str, ...]] = OPS + HTTP_OPS
    delay: float = 0.1
    times: int | None = None

    def _check(self, where):
        _number(self.delay, f"{where}.delay", minimum=0.0)
        _int(self.times, f"{where}.times", minimum=1)


def _check_crash_point(fault: Fault, where: str, required: bool) -> None:
    t, g = fault.target, fault.trigger
    if g.phase is not None:
        for name, value in (("target.op", t.op), ("target.path", t.path), ("trigger.at_byte", g.at_byte)):
            if value is not None:
                raise ConfigError(
                    f"{where}.{name}",
                    "a phase trigger cannot be combined with it",
                    "give either trigger.phase or an operation",
                )
        if g.when != "before":
            raise ConfigError(
                f"{where}.trigger.when",
                "a phase is announced just before it runs",
                "leave trigger.when out for a phase trigger",
            )
    elif g.at_byte is not None:
        if t.op not in (None, "write"):
            raise ConfigError(
                f"{where}.target.op", f"at_byte counts written bytes, not {t.op!r}", "leave target.op out"
            )
        if g.when != "before":
            raise ConfigError(f"{where}.trigger.when", "at_byte already says exactly where", "leave trigger.when out")
    elif t.op is None and required:
        raise ConfigError(
            f"{where}.trigger",
            "says nowhere to crash",
            "give trigger.at_byte, trigger.phase, or target.op with trigger.when",
        )


@dataclass(frozen=True)
class RankCrash(Fault):
    """The rank is SIGKILLed at an exact point: once a matching file holds `at_byte` bytes, before or
    after the nth matching operation (an object store's request too: its proxy kills the client), or as
    the nth matching named phase begins."""

    kind: ClassVar[str] = "rank_crash"
    effect: ClassVar[str | None] = CRASH
    uses: ClassVar[frozenset[str]] = _CRASH_USES
    ops: ClassVar[tuple[str, ...]] = OPS + HTTP_OPS

    def _check(self, where):
        _check_crash_point(self, where, required=True)


@dataclass(frozen=True)
class LostUnsyncedWrites(Fault):
    """Power loss: the job stops at the crash point (or after its last recorded operation when no point is
    given) and every write not made durable by an fsync may be lost. The injector records each rank's
    operations; crash_states builds up to `max_states` possible disks from them."""

    kind: ClassVar[str] = "lost_unsynced_writes"
    effect: ClassVar[str | None] = POWER_LOSS
    uses: ClassVar[frozenset[str]] = _CRASH_USES
    max_states: int = 32
    torn: bool = True
    persistence: str = "ext4_ordered"  # what a power cut keeps: ext4_ordered or posix_minimum (faults.persistence)

    def _check(self, where):
        _check_crash_point(self, where, required=False)
        _int(self.max_states, f"{where}.max_states", minimum=1)
        from .persistence import MODELS

        _choice(self.persistence, tuple(MODELS), f"{where}.persistence")
        if not isinstance(self.torn, bool):
            raise ConfigError(f"{where}.torn", f"must be true or false, got {self.torn!r}")


# ---- external nemesis ------------------------------------------------------------------------------
_NEMESIS_USES = frozenset({"rank", "path", "after", "size"})


def _check_nemesis(fault: Fault, where: str) -> None:
    g = fault.trigger
    if g.after is None and g.size is None:
        raise ConfigError(
            f"{where}.trigger",
            "says nothing about when",
            "give trigger.after (seconds) or trigger.size (bytes of a matching file)",
        )
    if g.size is not None and fault.target.path is None:
        raise ConfigError(
            f"{where}.target.path", "a size trigger needs the file to watch", "give a glob such as '*.pt'"
        )


@dataclass(frozen=True)
class RankKill(Fault):
    """The runner kills rank processes from outside (psutil): one rank, several, or all (preemption),
    `after` seconds or once a matching file under the checkpoint folder reaches `size` bytes."""

    kind: ClassVar[str] = "rank_kill"
    layer: ClassVar[str] = "nemesis"
    uses: ClassVar[frozenset[str]] = _NEMESIS_USES
    signal: str = "SIGKILL"

    @property
    def signum(self) -> int:
        return int(getattr(_signal, self.signal))

    def _check(self, where):
        _choice(self.signal, ("SIGKILL", "SIGTERM", "SIGINT", "SIGABRT"), f"{where}.signal")
        _check_nemesis(self, where)


@dataclass(frozen=True)
class RankHang(Fault):
    """SIGSTOP rank processes (a hung node); SIGCONT after `resume_after` seconds, or never (None)."""

    kind: ClassVar[str] = "rank_hang"
    layer: ClassVar[str] = "nemesis"
    uses: ClassVar[frozenset[str]] = _NEMESIS_USES
    resume_after: float | None = None

    def _check(self, where):
        _number(self.resume_after, f"{where}.resume_after", minimum=0.0)
        _check_nemesis(self, where)


WRITER_SCOPES = ("tree", "holder")


@dataclass(frozen=True)
class WriterKill(Fault):
    """SIGKILL the background writer of rank processes from outside (psutil), never the rank itself: a
    process the rank started (forked or spawned, at any depth) that holds a file under the checkpoint
    folder open for writing (matching target.path when given; once its write position or the file's
    size reaches trigger.size when given; no sooner than trigger.after seconds). `scope` tree: the writer
    the rank started, with every process below it (megatron-core's forked caller and its write workers);
    holder: only the processes seen holding the file. With several target ranks it fires once a writer of
    each was seen, so they die together. A writer that is a thread of the rank is not reachable alone: the
    fault then does not apply (faults.writers). Defined on async saves: a sync combination is N/A."""

    kind: ClassVar[str] = "writer_kill"
    layer: ClassVar[str] = "nemesis"
    uses: ClassVar[frozenset[str]] = _NEMESIS_USES
    scope: str = "tree"

    def _check(self, where):
        _choice(self.scope, WRITER_SCOPES, f"{where}.scope")
        if self.trigger.size is not None and self.target.path is None:
            raise ConfigError(
                f"{where}.target.path", "a size trigger needs the file to watch", "give a glob such as '*.distcp'"
            )


# ---- corruption at rest ----------------------------------------------------------------------------
_REST_USES = frozenset({"rank", "path", "iteration"})


def _single_rank(fault: Fault, where: str) -> None:
    if isinstance(fault.target.rank, tuple):
        raise ConfigError(f"{where}.target.rank", "damage at rest picks one rank", "give one rank or none")


@dataclass(frozen=True)
class Truncate(Fault):
    """Cut a shard to `length` bytes (0: empty; None: a length drawn from the seed)."""

    kind: ClassVar[str] = "truncate"
    layer: ClassVar[str] = "at_rest"
    uses: ClassVar[frozenset[str]] = _REST_USES
    length: int | None = None

    def _check(self, where):
        _single_rank(self, where)
        _int(self.length, f"{where}.length", minimum=0)


@dataclass(frozen=True)
class BitFlip(Fault):
    """Flip `bits` (positions 0-7) of the byte at target.offset of a shard; unset ones are drawn from the seed."""

    kind: ClassVar[str] = "bit_flip"
    layer: ClassVar[str] = "at_rest"
    uses: ClassVar[frozenset[str]] = _REST_USES | {"offset"}
    bits: tuple[int, ...] | None = None

    def _check(self, where):
        _single_rank(self, where)
        if self.bits is not None:
            if not isinstance(self.bits, tuple) or not self.bits:
                raise ConfigError(f"{where}.bits", f"must be a non-empty list of bit positions, got {self.bits!r}")
            for b in self.bits:
                _int(b, f"{where}.bits", minimum=0)
                if b > 7:
                    raise ConfigError(f"{where}.bits", f"bit {b} is not in a byte", "use 0..7")
            if len(set(self.bits)) != len(self.bits):
                raise ConfigError(f"{where}.bits", f"repeats a bit: {list(self.bits)}", "flipping twice undoes it")


@dataclass(frozen=True)
class DeleteFile(Fault):
    """Delete a shard."""

    kind: ClassVar[str] = "delete_file"
    layer: ClassVar[str] = "at_rest"
    uses: ClassVar[frozenset[str]] = _REST_USES

    def _check(self, where):
        _single_rank(self, where)


METADATA_FILES = ("manifest.json", ".metadata", "metadata.json")
METADATA_DAMAGE = ("garble", "truncate", "empty", "delete")


@dataclass(frozen=True)
class MetadataDamage(Fault):
    """Garble, truncate, empty or delete one metadata file of a checkpoint, named by `name` (our
    manifest.json, DCP's .metadata, Megatron's metadata.json, a user's index.json: any metadata file the
    backend's learned layout has; None: one of them, drawn)."""

    kind: ClassVar[str] = "metadata_damage"
    layer: ClassVar[str] = "at_rest"
    uses: ClassVar[frozenset[str]] = frozenset({"rank", "iteration"})
    name: str | None = None
    how: str = "garble"

    def _check(self, where):
        _single_rank(self, where)
        if self.name is not None and (
            not isinstance(self.name, str)
            or not self.name
            or "/" in self.name
            or "\\" in self.name
            or self.name in (".", "..")
        ):
            raise ConfigError(
                f"{where}.name",
                f"{self.name!r} is not a file name",
                f"name one metadata file the backend writes, e.g. {', '.join(METADATA_FILES)}",
            )
        _choice(self.how, METADATA_DAMAGE, f"{where}.how")


@dataclass(frozen=True)
class EscapingManifestPath(Fault):
    """Rewrite manifest.json, digest and all, so its file list names `escape`, a path outside the folder."""

    kind: ClassVar[str] = "escaping_path"
    layer: ClassVar[str] = "at_rest"
    uses: ClassVar[frozenset[str]] = frozenset({"rank", "iteration"})
    escape: str = "../outside.pt"

    def _check(self, where):
        _single_rank(self, where)
        norm = os.path.normpath(self.escape) if isinstance(self.escape, str) and self.escape else ""
        if not (os.path.isabs(self.escape or "") or norm.startswith("..")):
            raise ConfigError(
                f"{where}.escape",
                f"{self.escape!r} does not leave the folder",
                "use a path such as ../outside.pt or /etc/passwd",
            )


@dataclass(frozen=True)
class HostilePickle(Fault):
    """Replace DCP's `.metadata` (a pickle) with one whose `__reduce__` runs os.system to create a
    marker file, then yields the original metadata; with no `.metadata`, rewrite one torch.save archive
    (drawn from the seed, or the one `target.path` names) so its data.pkl runs the command first and then
    unpickles the original object. A loader that unpickles it runs the command and loads as if nothing
    happened. manifest.json, where there is one, gets the new size and checksum (a checksum is not
    authentication). Checkpoints with no pickle at all are not damaged (N/A with the reason)."""

    kind: ClassVar[str] = "hostile_pickle"
    layer: ClassVar[str] = "at_rest"
    uses: ClassVar[frozenset[str]] = frozenset({"rank", "iteration", "path"})

    def _check(self, where):
        _single_rank(self, where)


TRACKER_DAMAGE = ("stale", "empty", "non_numeric", "future", "delete", "release")


@dataclass(frozen=True)
class TrackerDamage(Fault):
    """latest_checkpointed_iteration.txt names an older checkpoint (stale), is empty, is not a number,
    names an iteration never saved (future), is gone, or reads `release` (what Megatron writes beside a
    converted checkpoint, kept in a `release` folder: here there is none)."""

    kind: ClassVar[str] = "tracker_damage"
    layer: ClassVar[str] = "at_rest"
    uses: ClassVar[frozenset[str]] = frozenset({"rank"})
    how: str = "stale"

    def _check(self, where):
        _single_rank(self, where)
        _choice(self.how, TRACKER_DAMAGE, f"{where}.how")


@dataclass(frozen=True)
class LeftoverStaging(Fault):
    """A staging folder a crashed save left behind, holding a partial copy of the newest checkpoint."""

    kind: ClassVar[str] = "leftover_staging"
    layer: ClassVar[str] = "at_rest"
    uses: ClassVar[frozenset[str]] = frozenset({"rank"})

    def _check(self, where):
        _single_rank(self, where)


@dataclass(frozen=True)
class ExtraFile(Fault):
    """An unknown file of `length` seeded bytes inside a committed checkpoint folder."""

    kind: ClassVar[str] = "extra_file"
    layer: ClassVar[str] = "at_rest"
    uses: ClassVar[frozenset[str]] = frozenset({"rank", "iteration"})
    name: str = "unexpected.bin"
    length: int = 16

    def _check(self, where):
        _single_rank(self, where)
        if not isinstance(self.name, str) or not self.name or "/" in self.name or self.name in (".", ".."):
            raise ConfigError(f"{where}.name", f"must be a plain file name, got {self.name!r}")
        _int(self.length, f"{where}.length", minimum=0)


__all__ = [
    "BitFlip",
    "DeleteFile",
    "EscapingManifestPath",
    "ExtraFile",
    "HostilePickle",
    "IOFailure",
    "LeftoverStaging",
    "LostUnsyncedWrites",
    "METADATA_DAMAGE",
    "METADATA_FILES",
    "MetadataDamage",
    "RankCrash",
    "RankHang",
    "RankKill",
    "ShortWrite",
    "SlowWrite",
    "TRACKER_DAMAGE",
    "TornWrite",
    "TrackerDamage",
    "Truncate",
    "WRITER_SCOPES",
    "WriterKill",
]
