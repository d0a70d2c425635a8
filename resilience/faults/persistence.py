"""What a power cut keeps: the persistence models crash states are built under.

Both models see an operation log as steps with effects on objects: entry effects on a folder (a name
added or removed: create, mkdir, rename, unlink) and data effects on a file (write, truncate). Both keep
the types of objects (a folder never comes back as a file), apply a rename or exchange whole or not at
all, and make a file's data durable once that file is fsynced. They differ in what makes entries durable
and in which subsets of the rest may land:

- `ext4_ordered` (the default), ext4 mounted data=ordered: entry effects go through one journal, so
  they land in order (a prefix of them), and any fsync, of a file or a folder, commits every entry effect
  before it. A rename that replaces a file flushes the renamed file's data first (auto_da_alloc). Unsynced
  data writes may each be lost.
- `posix_minimum`, only what POSIX promises: an entry effect is durable once its folder is fsynced, a
  file's data once the file is; any subset of the rest may land, in any order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ConfigError

ENTRY, DATA = ("add", "del", "trunc"), ("write",)


@dataclass(frozen=True)
class PersistenceModel:
    """A named rule for which operations survive a power cut. Steps are crash_states' _Step objects:
    `effects` [(kind, object, ...)], `syncs` (the object an fsync makes durable), `replaces` (a rename
    over an existing file: the moved file's id)."""

    name: str
    journal: bool  # entry effects land in order, and any fsync commits the ones before it
    flush_on_replace: bool  # a rename over a file makes the renamed file's earlier writes land with it
    doc: str

    def durable(self, steps: Sequence) -> list[bool]:
        """Per step: already on disk at the crash, whatever else is lost."""
        last_sync: dict[str, int] = {}
        last_any_sync = -1
        for k, s in enumerate(steps):
            if s.syncs is not None:
                last_sync[s.syncs] = k
                last_any_sync = k
        out = []
        for k, s in enumerate(steps):
            ok = True
            for e in s.effects:
                if e[0] in ENTRY and self.journal:
                    ok &= last_any_sync > k
                elif e[0] in ("add", "del"):
                    ok &= last_sync.get(e[1], -1) > k  # the folder holding the entry
                else:
                    ok &= last_sync.get(e[1], -1) > k  # the file holding the data
            out.append(ok)
        return out

    def close(self, steps: Sequence, durable: Sequence[bool], landed: frozenset) -> frozenset:
        """`landed` (indices of steps not durable that reach the disk) grown to what this model forces:
        every entry step before a landed one (journal), the renamed file's writes before a replacing
        rename. Idempotent."""
        grown = set(landed)
        if self.journal:
            entry = [k for k, s in enumerate(steps) if not durable[k] and _is_entry(s)]
            last = max((k for k in entry if k in grown), default=-1)
            grown |= {k for k in entry if k < last}
        if self.flush_on_replace:
            for k in sorted(grown):
                moved = getattr(steps[k], "replaces", None)
                if moved is not None:
                    grown |= {
                        j
                        for j in range(k)
                        if not durable[j] and any(e[0] in DATA and e[1] == moved for e in steps[j].effects)
                    }
        return frozenset(grown)

    def obeys(self, steps: Sequence, durable: Sequence[bool], landed: frozenset) -> bool:
        """Whether a set of landed steps is one this model allows."""
        return self.close(steps, durable, landed) == frozenset(landed)


def _is_entry(step) -> bool:
    return any(e[0] in ENTRY for e in step.effects)


EXT4_ORDERED = PersistenceModel(
    "ext4_ordered",
    journal=True,
    flush_on_replace=True,
    doc="ext4 data=ordered: entries in journal order, any fsync commits them",
)
POSIX_MINIMUM = PersistenceModel(
    "posix_minimum",
    journal=False,
    flush_on_replace=False,
    doc="POSIX only: entries durable by an fsync of their folder, any subset lands",
)
MODELS = {m.name: m for m in (EXT4_ORDERED, POSIX_MINIMUM)}
DEFAULT = EXT4_ORDERED.name


def persistence_model(name: str | PersistenceModel | None) -> PersistenceModel:
    """The model named `name` (None: the default, ext4_ordered)."""
    if isinstance(name, PersistenceModel):
        return name
    if name is None:
        return MODELS[DEFAULT]
    if name not in MODELS:
        raise ConfigError("persistence", f"unknown persistence model {name!r}", f"use one of {', '.join(MODELS)}")
    return MODELS[name]
