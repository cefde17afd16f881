"""The kit's attacks of :mod:`stockade.conformance.suite.test_record_blobs`, on both providers."""

from stockade.conformance.suite.test_record_blobs import *  # noqa: F403
