"""The kit's attacks of :mod:`stockade.conformance.suite.test_lists`, on both providers."""

from stockade.conformance.suite.test_lists import *  # noqa: F403
