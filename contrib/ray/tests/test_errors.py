"""A worker's error comes back as the class its code names on the driver, or as
``RemoteFailure``; whatever a reply holds, reading it gives an error, never a crash."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.errors import SandboxUnavailable, StockadeError, UsageError

errors = pytest.importorskip("stockade_ray.errors")  # where stockade-ray is installed

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


def test_a_known_code_is_its_class() -> None:
    sent = SandboxUnavailable("no sandbox on node n1", hint="install bwrap", details={"node": "n1"})
    back = errors.rebuilt(sent.to_dict())
    assert type(back) is SandboxUnavailable
    assert (back.message, back.hint, back.details) == (sent.message, sent.hint, sent.details)
    assert type(errors.rebuilt(UsageError("bad path").to_dict())) is UsageError
    assert errors.rebuilt(errors.WorkerLost("gone").to_dict()).code == "worker_lost"


def test_an_unknown_code_is_a_remote_failure_that_keeps_it() -> None:
    back = errors.rebuilt({"code": "made_up", "message": "m", "hint": None, "details": {"a": 1}})
    assert isinstance(back, errors.RemoteFailure)
    assert back.details == {"a": 1, "code": "made_up"}


# database=None: CI runs this as a user too, who cannot write the checkout's .hypothesis
@settings(database=None, deadline=None)
@given(st.dictionaries(st.sampled_from(["code", "message", "hint", "details", "x"]), JSON))
def test_any_reply_reads_as_an_error(data: dict[str, object]) -> None:
    back = errors.rebuilt(data)
    assert isinstance(back, StockadeError)
    assert isinstance(back.to_dict()["details"], dict)
