"""The kit's attacks of :mod:`stockade.conformance.suite.test_state`, on both providers."""

from stockade.conformance.suite.test_state import *  # noqa: F403
