"""SIGTERM ends a `resilience` command as Ctrl-C does: an Interrupted that nothing mistakes for a failure."""
import os
import signal
import time

import pytest

from resilience.checkers.base import run_checker
from resilience.cli import stop_on_signals
from resilience.errors import Interrupted, ResilienceError


def test_sigterm_raises_interrupted_inside_and_the_old_handler_comes_back():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted, match="SIGTERM"):
        with stop_on_signals():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises at the next bytecode
    assert signal.getsignal(signal.SIGTERM) is before


class _Interrupted:
    name = "interrupted"

    def check(self, ev):
        raise Interrupted("SIGTERM")


def test_an_interrupt_is_not_turned_into_a_verdict_or_an_error():
    with pytest.raises(Interrupted):  # a crashing checker is UNKNOWN; an interrupt stops the run
        run_checker(_Interrupted(), None)
    assert not issubclass(Interrupted, (Exception, ResilienceError)) and issubclass(Interrupted, KeyboardInterrupt)
