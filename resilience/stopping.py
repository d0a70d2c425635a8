"""A stop asked for by a signal (Ctrl-C, SIGTERM, SIGHUP) is never lost, and never cuts teardown short.

Python runs a signal's handler between two bytecodes of the main thread, wherever that is. An exception
raised there inside a garbage-collector callback, a `__del__` or a weakref callback is printed and dropped
("Exception ignored in ..."): Hypothesis installs a gc callback, and a Ctrl-C that landed in it let a fuzz
run on to its end. So the handlers also record the signal, and the loops that wait (for ranks, for the
next case) call `check()`, which raises the stop again if its first raise was dropped.

Only the main thread may set handlers: elsewhere (a command run from a thread) everything here is a no-op."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

from .errors import Interrupted

STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
INTERRUPTED_STATUSES = tuple(128 + int(s) for s in STOPPING)  # 130, 143, 129: what a shell says of them
_asked: list[int] = []  # the signal of a stop asked for and not yet taken by the command


def interruption(signum: int) -> KeyboardInterrupt:
    """What a stop by `signum` raises: Ctrl-C stays Python's KeyboardInterrupt, the others errors.Interrupted."""
    if signum == signal.SIGINT:
        return KeyboardInterrupt()
    return Interrupted(signal.Signals(signum).name)


def ask(signum: int) -> KeyboardInterrupt:
    """Record a stop asked for by `signum`; return the exception that carries it."""
    _asked[:] = [signum]
    return interruption(signum)


def _raise(signum: int, frame) -> None:
    raise ask(signum)


def check() -> None:
    """Raise a stop that was asked for and not taken yet (its first raise may have been dropped)."""
    if _asked:
        raise interruption(_asked.pop())


def taken() -> None:
    """The command has acted on the stop: nothing left to raise again."""
    _asked.clear()


def ignore_stops() -> None:
    """From now on the stop signals are ignored (a command that already acted on one, on its way out)."""
    if _main_thread():
        for sig in STOPPING:
            signal.signal(sig, signal.SIG_IGN)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """While in it, SIGINT, SIGTERM and SIGHUP end the command through every `finally` (rank teardown, the
    results so far) instead of killing it on the spot. The previous handlers come back after."""
    if not _main_thread():
        yield
        return
    taken()
    old = {sig: signal.signal(sig, _raise) for sig in STOPPING}
    old_hook = sys.unraisablehook
    sys.unraisablehook = _quiet_for_stops(old_hook)
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        sys.unraisablehook = old_hook
        taken()


def _quiet_for_stops(previous):
    """An unraisable hook that says nothing of a stop Python dropped (`check()` raises it again) and
    passes everything else on."""

    def hook(unraisable) -> None:
        if (
            _asked
            and not isinstance(unraisable.exc_value, Exception)
            and isinstance(unraisable.exc_value, BaseException)
        ):
            return
        previous(unraisable)

    return hook


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM while in it; one that came is acted on once it ends. The mask alone is not
    enough: another thread may take the signal, and Python then runs the handler wherever the main thread
    is, e.g. in the after-fork hooks, which drop the exception; so the handlers only record it meanwhile."""
    if not _main_thread():
        yield
        return
    got: list[int] = []
    sigs = (signal.SIGINT, signal.SIGTERM)
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, set(sigs))
    old = {sig: signal.signal(sig, lambda signum, frame: got.append(signum)) for sig in sigs}
    try:
        yield
    finally:
        # unmasked first, while the recording handlers are still in: a raise between these lines (a signal
        # Python had not yet handed to its handler) would otherwise leave the main thread deaf to them
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if got:
            handler = old[signal.Signals(got[0])]
            if callable(handler):
                handler(got[0], None)  # Ctrl-C's KeyboardInterrupt, the command's recorded stop
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), got[0])


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A second Ctrl-C or SIGTERM while in it (the reports of an interrupted run being written) is
    dropped: the first one is already ending the run."""
    if not _main_thread():
        yield
        return
    sigs = (signal.SIGINT, signal.SIGTERM)
    old = {sig: signal.signal(sig, lambda signum, frame: None) for sig in sigs}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
