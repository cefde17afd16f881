"""The kit's terminal attacks of :mod:`stockade.conformance.suite.test_terminals`, on both
providers."""

from stockade.conformance.suite.test_terminals import *  # noqa: F403
