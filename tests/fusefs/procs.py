"""Real rank processes for the FUSE tests: each leads its own process group, as the launcher's ranks do,
waits for `go` (so the mount knows its pid first), runs a function and reports its result or error."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
import traceback

import psutil

WAIT = 60.0  # seconds a test waits for a rank process; far above what any needs


def _main(fn, args, conn) -> None:
    status = 1
    try:
        os.setpgid(0, 0)
        conn.recv()  # go
        conn.send(("ok", fn(conn, *args)))
        status = 0
    except BaseException as e:
        try:
            conn.send(("error", f"{type(e).__name__}: {e}", traceback.format_exc()))
        except Exception:
            pass
    finally:
        os._exit(status)


class Rank:
    """One rank process running fn(conn, *args); fn may send extra messages on conn before returning."""

    def __init__(self, fn, *args):
        self._conn, child = mp.get_context("fork").Pipe()
        self.proc = mp.get_context("fork").Process(target=_main, args=(fn, args, child), daemon=True)
        self.proc.start()
        child.close()
        self.pid = self.proc.pid

    def go(self) -> Rank:
        self._conn.send("go")
        return self

    def recv(self, timeout: float = WAIT):
        assert self._conn.poll(timeout), "the rank process sent nothing"
        return self._conn.recv()

    def wait(self, timeout: float = WAIT):
        """(exit code, the message it ended with or None)."""
        msg = None
        end = time.monotonic() + timeout
        while self.proc.is_alive() and time.monotonic() < end:
            if self._conn.poll(0.05):
                try:
                    msg = self._conn.recv()
                except EOFError:
                    pass
        self.proc.join(max(0.0, end - time.monotonic()))
        while msg is None and self._conn.poll(0):
            try:
                msg = self._conn.recv()
            except EOFError:
                break
        return self.proc.exitcode, msg

    def kill(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.join(WAIT)


def gone(pid: int, timeout: float = WAIT) -> bool:
    """Whether `pid` ends (dead or a zombie) within `timeout`."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.02)
    return False
