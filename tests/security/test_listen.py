"""The kit's attacks of :mod:`stockade.conformance.suite.test_listen`, on both providers."""

from stockade.conformance.suite.test_listen import *  # noqa: F403
