"""The wire format: JSON round trips, strict parsing, events told apart by kind."""

from __future__ import annotations

import json

import pytest

from stockade.errors import UsageError
from stockade.record.events import ActionEvent, PermissionEvent, ResultEvent
from stockade.request.spec import ExecRequest
from stockade.request.wire import from_json, structure, to_json, unstructure


def test_result_json_has_the_documented_keys(make_host):
    host = make_host(allow_all=True)
    result = host.run(ExecRequest(["echo", "hi"], mode="danger-full-access"))
    data = json.loads(to_json(result))
    for key in ("exit_code", "signal", "timed_out", "aborted", "duration_ms", "timeout_s"):
        assert key in data
    for stream in ("stdout", "stderr"):
        assert set(data[stream]) == {"text", "truncated", "total_bytes", "sha256", "spill_path"}
    assert data["stdout"]["text"] == "hi\n"
    assert data["sandbox"]["provider"] == "none"
    assert data["sandbox"]["mode"] == "danger-full-access"
    assert from_json(to_json(result), type(result)) == result


def test_request_from_json_is_strict():
    request = from_json('{"argv": ["cat"], "stdin": "abc", "env": {"A": "1"}}', ExecRequest)
    assert request.stdin == b"abc"
    assert dict(request.env) == {"A": "1"}
    with pytest.raises(UsageError, match=r"unknown key 'argvv'"):
        from_json('{"argv": ["x"], "argvv": 1}', ExecRequest)
    with pytest.raises(UsageError, match=r"expected a list of strings.*@ \$\.argv"):
        from_json('{"argv": "rm -rf /"}', ExecRequest)
    with pytest.raises(UsageError, match=r"required key missing @ \$\.argv"):
        from_json("{}", ExecRequest)
    with pytest.raises(UsageError, match="not valid JSON"):
        from_json("{", ExecRequest)


def test_events_round_trip_through_their_kind(make_host, event_log):
    make_host(plugins=[event_log], allow_all=True).run(
        ExecRequest(["true"], mode="danger-full-access")
    )
    action, permission, result = event_log.events
    assert isinstance(action, ActionEvent)
    assert isinstance(permission, PermissionEvent)
    assert isinstance(result, ResultEvent)
    assert {action.action_id, permission.action_id, result.action_id} == {action.action_id}
    event_type = ActionEvent | PermissionEvent | ResultEvent
    for event in event_log.events:
        data = unstructure(event)
        assert data["version"] == 1
        assert structure(data, event_type) == event
