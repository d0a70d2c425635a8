"""Faults that reach every byte: a passthrough FUSE file system that carries out the seam's fault records.

The in-process seam (resilience.storage, resilience.faults.inject) reaches only code that writes through
it. Mounted over the checkpoint root for the length of a job, this file system reaches every writer: a
forked writer, `dd`, C++ or another language, while taking the same records and writing the same
operation log, so one scenario step works either way in.

- `mounted(backing, mountpoint, ranks=..., faults=..., log=...)`: mount for a block, always unmounted;
  `Mount.set_ranks` attributes callers (pid -> the rank whose process tree holds it).
- faults: errno failures, short, torn and slow writes, a crash (SIGKILL of the writing rank's process
  group) at a byte or before/after an operation, power loss (`power_loss_states` builds the disks it
  can leave, under a persistence model, from the mount's log).
- `fuse_available()` says whether this machine can mount, and why not; `clean_stale_mounts(prefix)`
  removes mounts a killed run left."""

from ..faults.fuse_log import read_log
from .mount import Mount, MountError, fuse_available, mounted
from .mounts import clean_stale_mounts, fuse_mounts, is_mounted, unmount
from .power import power_loss_states, unmodelled
from .words import FIRINGS, FSNAME, FUSE_LOG, NO_RANK, Caller, seam_op, tell

__all__ = [
    "Caller",
    "FIRINGS",
    "FSNAME",
    "FUSE_LOG",
    "Mount",
    "MountError",
    "NO_RANK",
    "clean_stale_mounts",
    "fuse_available",
    "fuse_mounts",
    "is_mounted",
    "mounted",
    "power_loss_states",
    "read_log",
    "seam_op",
    "tell",
    "unmodelled",
    "unmount",
]
