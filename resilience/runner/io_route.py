"""Which way a case's in-process faults reach the implementation (`--io`):

- `seam`: inside the rank processes, through resilience.storage (faults.inject). Reaches only code that
  writes through the seam: the reference and its broken variants, and adapters written for it.
- `fuse`: the fault-injecting file system (resilience.fusefs) mounted over the checkpoint root for each
  job of the case. Reaches every writer of every rank: forked writer processes, C++ writers, `dd`.
- `auto` (the default): the seam where the backend declares that all its I/O goes through it (the
  reference does; an adapter says so with `io_through_seam = True` on its factory), the file system
  otherwise.

A case on an object store (`--storage s3`) takes a third way, `s3`: each job behind the fault-injecting HTTP
proxy before the S3 server (objectstore.proxy), which carries the faults aimed at requests, the seam in the
ranks carrying the rest; no file system mounts over a bucket, so `--io fuse` is refused there.

A case whose faults are all outside the ranks (kills from the nemesis, damage at rest) needs no mount
and runs the seam's way whatever was asked; a fuse case on a machine that cannot mount is UNPROBED, with
the reason. Each way has its carriers (`CARRIERS`, each stating what it carries); an in-process fault no
carrier of the case's way carries is refused before the case runs (`refuse_uncarried`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from ..errors import ConfigError
from ..faults import KINDS, Fault
from ..faults.inject import FaultyFileSystem
from ..fusefs.injector import FuseInjector, carries_out
from ..objectstore.carrier import ProxyCarrier
from ..triggers import Carries
from .adapters import BackendName, resolve_backend
from .plan import ArmedFault

SEAM, FUSE, AUTO = "seam", "fuse", "auto"
CHOICES = (SEAM, FUSE, AUTO)
OBJECT = "s3"  # a case on an object store (--storage): the fault proxy before the server, the seam in the ranks
PROXY_LOGS = "s3"  # the proxy's logs of requests, one per job, in the case folder
MOUNT = "mnt"  # the mount point, in the case folder: the root every rank of a fuse case sees
FUSE_LOGS = "fuse"  # the file system's logs, one folder per job, in the case folder


# The carriers of each way, in the order they take a record: under fuse the file system takes what it
# carries, the seam in the ranks what only code in process can hear (a phase).
CARRIERS: dict[str, tuple[Carries, ...]] = {
    SEAM: (FaultyFileSystem.CARRIES,),
    FUSE: (FuseInjector.CARRIES, FaultyFileSystem.CARRIES),
    OBJECT: (ProxyCarrier.CARRIES, FaultyFileSystem.CARRIES),
}


def carrier_of(way: str, fault: Fault) -> Carries | None:
    """The carrier of `way` (seam or fuse) that takes an in-process fault; None when none carries it."""
    return next((c for c in CARRIERS[way] if c.carries(fault)), None)


def refuse_uncarried(way: str, faults: Iterable[Fault]) -> None:
    """ConfigError naming the first in-process fault no carrier of `way` carries out: it would never fire."""
    for f in faults:
        if f.layer == "inject" and carrier_of(way, f) is None:
            raise ConfigError(
                "fault.kind",
                f"no carrier of --io {way} carries out {f.kind} (its effect: {f.effect}), so it would never fire",
                "; ".join(c.describe(KINDS.values()) for c in CARRIERS[way])
                + "; see docs/architecture.md, Adding a carrier",
            )


def check(io: str | None) -> str:
    """`io` as given on a command line or in a scenario, checked; None is auto."""
    io = AUTO if io is None else io
    if io not in CHOICES:
        raise ConfigError(
            "io",
            f"unknown way in {io!r}",
            "use seam (the in-process storage seam), fuse (the fault-injecting file system) or auto",
        )
    return io


def through_seam(backend: BackendName) -> bool:
    """Whether the backend declares that every byte it writes or reads goes through resilience.storage."""
    return resolve_backend(backend).through_seam


def resolve(io: str | None, backend: BackendName) -> str:
    """seam or fuse: auto made concrete for this backend (a name, or one resolved: runner.adapters)."""
    io = check(io)
    if io != AUTO:
        return io
    return SEAM if through_seam(backend) else FUSE


@dataclass
class JobWay:
    """How one job's ranks see the checkpoint: `root` (the mount point, or the folder itself), the
    faults left in process, and the rank operations at which the file system's faults arm."""

    root: str
    in_process: list[ArmedFault]
    control: str = ""  # the mount point ranks tell who they are and arm at
    arms: list[int] = field(default_factory=list)  # the rank operations at which file-system records arm
    log: str = ""  # the file system's log folder (its seam-format oplog), or the proxy's log of requests
    mount: object | None = None
    proxy: str = ""  # the fault proxy's endpoint, which the ranks reach the object store through


@contextlib.contextmanager
def job_way(
    way: str, root: str, case_dir: str, job_no: int, faults: list[ArmedFault], fault_log: str, store=None
) -> Iterator[JobWay]:
    """For the length of a job: nothing for the seam; for fuse, the file system mounted over `root` at
    the case's mount point, carrying out the `faults` it can (fusefs.injector.carries_out); on an object
    store (`store`, objectstore.store.CaseStore), the fault proxy before its server, carrying out those it
    can (objectstore.carrier)."""
    if way == SEAM:
        yield JobWay(root, list(faults))
        return
    if way == OBJECT:
        with _proxied(root, case_dir, job_no, faults, fault_log, store) as w:
            yield w
        return
    from ..fusefs import mounted

    to_fs = [f for f in faults if carries_out(f.fault)]
    mountpoint = os.path.join(case_dir, MOUNT)
    log = os.path.join(case_dir, FUSE_LOGS, f"job{job_no}")
    os.makedirs(root, exist_ok=True)
    os.makedirs(mountpoint, exist_ok=True)
    with mounted(
        root,
        mountpoint,
        faults=[f.fault for f in to_fs],
        arm_at=[f.arm_at for f in to_fs],
        log=log,
        report=fault_log,
        paths_as=root,
    ) as m:
        yield JobWay(
            mountpoint,
            [f for f in faults if not carries_out(f.fault)],
            control=mountpoint,
            arms=sorted({f.arm_at for f in to_fs}),
            log=log,
            mount=m,
        )


@contextlib.contextmanager
def _proxied(root: str, case_dir: str, job_no: int, faults: list[ArmedFault], fault_log: str, store):
    """The job behind the fault proxy, which takes the records it carries (armed at their rank operation, as
    the ranks tell it) and logs every request into the case's s3/jobN.jsonl."""
    from ..objectstore.proxy import FaultProxy

    to_proxy = [f for f in faults if f.fault.layer == "inject" and ProxyCarrier.CARRIES.carries(f.fault)]
    log = os.path.join(case_dir, PROXY_LOGS, f"job{job_no}.jsonl")
    os.makedirs(os.path.dirname(log), exist_ok=True)
    with FaultProxy(
        store.endpoint,
        [f.fault for f in to_proxy],
        arm_at=[f.arm_at for f in to_proxy],
        report=fault_log,
        log=log,
        prefix=store.prefix,
    ) as proxy:
        yield JobWay(
            root,
            [f for f in faults if f not in to_proxy],
            arms=sorted({f.arm_at for f in to_proxy}),
            log=log,
            proxy=proxy.endpoint,
        )


def unavailable() -> str | None:
    """Why this machine cannot mount the file system, or None when it can."""
    from ..fusefs import fuse_available

    ok, why = fuse_available()
    return None if ok else why


__all__ = [
    "AUTO",
    "CHOICES",
    "FUSE",
    "FUSE_LOGS",
    "JobWay",
    "MOUNT",
    "OBJECT",
    "PROXY_LOGS",
    "CARRIERS",
    "SEAM",
    "carrier_of",
    "check",
    "job_way",
    "refuse_uncarried",
    "resolve",
    "through_seam",
    "unavailable",
]
