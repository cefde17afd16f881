"""The process helpers now ship with the conformance kit: :mod:`stockade.conformance.procs`."""

from stockade.conformance.procs import *  # noqa: F403
