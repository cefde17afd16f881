"""The kit's attacks of :mod:`stockade.conformance.suite.test_session`, on both providers."""

from stockade.conformance.suite.test_session import *  # noqa: F403
