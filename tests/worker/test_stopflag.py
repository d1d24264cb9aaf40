import os
import signal

import pytest

from worker.stopflag import StopFlag


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_only_sets_the_flag(signum):
    with StopFlag() as flag:
        assert not flag.is_set
        os.kill(os.getpid(), signum)
        assert flag.is_set
        assert flag.signum == signum


def test_first_signal_is_remembered():
    with StopFlag() as flag:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
    assert flag.signum == signal.SIGTERM


def test_restore_puts_previous_handlers_back():
    before = signal.getsignal(signal.SIGTERM)
    with StopFlag():
        assert signal.getsignal(signal.SIGTERM) != before
    assert signal.getsignal(signal.SIGTERM) == before
