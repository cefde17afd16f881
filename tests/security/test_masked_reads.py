"""The kit's attacks of :mod:`stockade.conformance.suite.test_masked_reads`, on both providers."""

from stockade.conformance.suite.test_masked_reads import *  # noqa: F403
