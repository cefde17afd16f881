"""The kit's attacks on new protected names (:mod:`stockade.conformance.suite.test_new_names`)."""

from __future__ import annotations

from stockade.conformance.suite.test_new_names import *  # noqa: F403
