"""The kit's attacks of :mod:`stockade.conformance.suite.test_network`, on both providers."""

from stockade.conformance.suite.test_network import *  # noqa: F403
