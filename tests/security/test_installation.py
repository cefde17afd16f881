"""The kit's attacks of :mod:`stockade.conformance.suite.test_installation`, on both providers."""

from stockade.conformance.suite.test_installation import *  # noqa: F403
