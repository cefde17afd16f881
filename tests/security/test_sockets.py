"""The kit's attacks of :mod:`stockade.conformance.suite.test_sockets`, on both providers."""

from stockade.conformance.suite.test_sockets import *  # noqa: F403
