"""The runner's long-lived heap and Python's cyclic garbage collector.

Importing torch, DCP and the checkpoint code leaves some 300,000 tracked objects that live as long as
the process. A full collection walks every one of them and frees none: about 0.2 s each, 0.5 s of
collections while they load, 0.7 s more at exit. In the `resilience` command, collections wait while
they load, and what loaded is then moved out of the collector's sight (gc.freeze): later collections
walk only what the run itself allocates, which they still free as before.

Only the command opts in (manage): a process that imports the package (pytest, a user's script) keeps
its collector as it is, since freezing there would also keep whatever garbage was waiting."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

_managed = False


def manage() -> None:
    """This process is the `resilience` command: loading() and leaving() act from now on."""
    global _managed
    _managed = True


@contextlib.contextmanager
def loading() -> Iterator[None]:
    """No collection while the block imports; what exists after it is kept out of later collections."""
    if not _managed:
        yield
        return
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()  # with the little garbage the block left: collecting it first would walk all it loaded
        if was_enabled:
            gc.enable()


def leaving() -> None:
    """The process is about to exit: its final collections need not walk what it built."""
    if _managed:
        gc.freeze()


__all__ = ["leaving", "loading", "manage"]
