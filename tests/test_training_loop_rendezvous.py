"""A group that never forms: each error made on loopback, in a fresh interpreter, as a
launcher meets it (``training_loop.rendezvous``)."""

import pytest

from ddplab.chapters.training_loop import rendezvous


def test_a_port_in_use():
    message = rendezvous.port_in_use()
    assert message.startswith("The server socket has failed to listen on any local network")
    assert "EADDRINUSE" in message


def test_nobody_at_the_address():
    assert rendezvous.nobody_listening(timeout=1.0).startswith(
        "The client socket has timed out after 1000ms while trying to connect to (127.0.0.1,")
    with pytest.raises(ValueError, match="timeout"):
        rendezvous.nobody_listening(timeout=0)


def test_no_such_interface():
    assert rendezvous.no_such_interface("nosuch7").endswith(
        "Unable to find address for: nosuch7")


def test_a_master_that_starts_within_the_timeout_is_found():
    waited, answer = rendezvous.late_master(late=1.0)
    assert answer == "yes" and 1.0 <= waited < 10  # it waited for the master, then was answered
    with pytest.raises(ValueError, match="late"):
        rendezvous.late_master(late=10)
