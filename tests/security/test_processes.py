"""The kit's attacks of :mod:`stockade.conformance.suite.test_processes`, on both providers."""

from stockade.conformance.suite.test_processes import *  # noqa: F403
