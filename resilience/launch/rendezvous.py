"""How a job's ranks meet and part: the job's TCPStore (rank 0 serves it on a socket the parent bound),
the loopback interface gloo connects over, and the waits that keep a rank from leaving while a peer still
joins through it."""

from __future__ import annotations

import socket
from datetime import timedelta

import psutil
import torch.distributed as dist


def loopback_interface() -> str:
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == "127.0.0.1" for a in addrs):
            return name
    return "lo"


def open_store(rank: int, world: int, listener: socket.socket, init_timeout: float):
    """The job's TCPStore: rank 0 serves it on the socket the parent bound (no port race), the others join."""
    port = listener.getsockname()[1]
    if rank != 0:
        listener.close()
        return dist.TCPStore("127.0.0.1", port, world, is_master=False, timeout=timedelta(seconds=init_timeout))
    return dist.TCPStore(
        "127.0.0.1",
        port,
        world,
        is_master=True,
        timeout=timedelta(seconds=init_timeout),
        wait_for_workers=False,
        master_listen_fd=listener.fileno(),
        use_libuv=False,
    )


_JOINED, _LEFT = "resilience/joined", "resilience/left"
_ALL_JOINED, _ALL_LEFT = "resilience/all-joined", "resilience/all-left"


def joined(store, world: int) -> None:
    """This rank is in the group; the last to join says so, for the waits in `leave`."""
    if store.add(_JOINED, 1) == world:
        store.set(_ALL_JOINED, b"1")


def leave(store, rank: int, world: int, timeout: float) -> None:
    """A rank that exits while another is still joining the group makes that one fail (its connections to
    the rank gone), and rank 0 serves the store: wait until all joined; rank 0 also until all left.
    The waits are the store's own (a key the last one sets), not polls: a hundred ranks polling rank 0's
    store every millisecond starve the ranks still joining through it."""
    wait = timedelta(seconds=max(timeout, 1.0))
    try:
        store.wait([_ALL_JOINED], wait)
        if rank != 0:
            if store.add(_LEFT, 1) == world - 1:
                store.set(_ALL_LEFT, b"1")
            return
        if world > 1:
            store.wait([_ALL_LEFT], wait)
    except RuntimeError:  # the store gone (rank 0 ended) or a wait past its time: leave all the same
        pass
