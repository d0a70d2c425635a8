"""Faults of a real cluster, precise and replayable.

- records: every fault is a small frozen record (kind, target, trigger, seed); `faults_from` reads a list.
- in process: `inject(faults, rank=...)` wraps this rank's checkpoint I/O (errors with a real errno, short,
  torn and slow writes, SIGKILL at a byte, an operation or a phase) and logs operations for crash states.
- crash states: `crash_states(snapshot, oplog_dir, out_dir)` builds the disks a power loss can leave.
- nemesis: `Nemesis(job, faults, folder=...)` kills or stops rank processes from outside, or kills a rank's
  background writer processes alone (`WriterKill`, faults.writers).
- at an object store's requests (its proxy, objectstore.proxy): error answers, resets, lost answers, and
  slow_write or rank_crash aimed at an HTTP operation (`HTTP_OPS`).
- at rest: `corrupt(fault, root)` truncates, flips, deletes, garbles, forges, plants a hostile pickle.
A fault that fired is recorded (`FaultReport`); `unprobed(faults, firings)` lists those that never did."""

from .base import (
    HTTP_OPS,
    KINDS,
    OPS,
    THREADS,
    Fault,
    FaultLayer,
    Target,
    Trigger,
    fault_from_dict,
    faults_from,
    faults_from_text,
    matches_path,
    typed,
    with_layer,
)
from .corruption import checkpoint_folders, corrupt, corrupt_all, files_of_rank, iteration_in
from .crash_states import CrashState, CrashStates, Snapshot, crash_states, power_loss_states
from .damage_records import Damage, NothingToDamage
from .firings import UNPROBED, FaultReport, fired, firing, read_firings, unprobed
from .http import ConnectionReset, HttpError, ResponseLost
from .inject import FaultyFileSystem, FaultyWriteStream, inject, sigkill_self
from .kinds import (
    BitFlip,
    DeleteFile,
    EscapingManifestPath,
    ExtraFile,
    HostilePickle,
    IOFailure,
    LeftoverStaging,
    LostUnsyncedWrites,
    MetadataDamage,
    RankCrash,
    RankHang,
    RankKill,
    ShortWrite,
    SlowWrite,
    TornWrite,
    TrackerDamage,
    Truncate,
    WriterKill,
)
from .nemesis import Nemesis, file_sizes, kill_ranks, open_positions, signal_ranks
from .oplog import Op, OpLog, read_ops

__all__ = [
    "BitFlip",
    "ConnectionReset",
    "CrashState",
    "CrashStates",
    "Damage",
    "DeleteFile",
    "EscapingManifestPath",
    "ExtraFile",
    "Fault",
    "HostilePickle",
    "FaultLayer",
    "FaultReport",
    "FaultyFileSystem",
    "FaultyWriteStream",
    "HTTP_OPS",
    "HttpError",
    "IOFailure",
    "KINDS",
    "LeftoverStaging",
    "LostUnsyncedWrites",
    "MetadataDamage",
    "Nemesis",
    "NothingToDamage",
    "OPS",
    "Op",
    "OpLog",
    "RankCrash",
    "RankHang",
    "RankKill",
    "ResponseLost",
    "ShortWrite",
    "SlowWrite",
    "Snapshot",
    "THREADS",
    "Target",
    "TornWrite",
    "TrackerDamage",
    "Trigger",
    "Truncate",
    "UNPROBED",
    "WriterKill",
    "checkpoint_folders",
    "corrupt",
    "corrupt_all",
    "crash_states",
    "fault_from_dict",
    "faults_from",
    "faults_from_text",
    "typed",
    "file_sizes",
    "files_of_rank",
    "fired",
    "firing",
    "inject",
    "iteration_in",
    "kill_ranks",
    "matches_path",
    "open_positions",
    "power_loss_states",
    "read_firings",
    "read_ops",
    "sigkill_self",
    "signal_ranks",
    "unprobed",
    "with_layer",
]
