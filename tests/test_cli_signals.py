"""SIGTERM ends a `resilience` command as Ctrl-C does: an Interrupted that nothing mistakes for a failure,
and a stop that Python dropped (its exception raised where exceptions are ignored) is raised again."""

import os
import signal
import time

import pytest

from resilience.checkers.base import run_checker
from resilience.errors import Interrupted, ResilienceError
from resilience.stopping import check, stop_on_signals


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


class _SignalsInDel:
    """Sends `sig` to this process from its __del__, where Python prints and drops any exception."""

    def __init__(self, sig):
        self.sig = sig

    def __del__(self):
        os.kill(os.getpid(), self.sig)
        for _ in range(1000):  # bytecodes: the handler runs (and raises) here, inside __del__
            pass


@pytest.mark.parametrize("sig, raised", [(signal.SIGTERM, Interrupted), (signal.SIGINT, KeyboardInterrupt)])
def test_a_stop_dropped_inside_a_del_is_raised_again_by_check_and_said_nowhere(capfd, sig, raised):
    with stop_on_signals():
        _SignalsInDel(sig)  # dropped at once: the interruption is raised and ignored inside __del__
        with pytest.raises(raised):
            check()
        check()  # raised once: nothing left
    assert "Exception ignored" not in capfd.readouterr().err


def test_check_raises_nothing_when_no_stop_was_asked():
    with stop_on_signals():
        check()
