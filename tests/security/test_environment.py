"""The kit's attacks of :mod:`stockade.conformance.suite.test_environment`, on both providers."""

from stockade.conformance.suite.test_environment import *  # noqa: F403
