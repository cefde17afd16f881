"""A ``Host.run`` inside a caller's own ``Recording.batch()`` (same thread): the step's
action and permission are stored before its command starts, not when the caller's block
ends (a recorder failing then would leave a command that ran with no record)."""

from __future__ import annotations

import pytest

from stockade.config.schema import Config
from stockade.record.chain import rows


@pytest.mark.sandboxes("bubblewrap")
def test_a_run_inside_an_outer_batch_is_recorded_before_it_starts(make_host, box):
    host = make_host(allow_all=True, config=Config(sandbox=box.sandbox))
    marker = box.ws / "ran"
    with host.recording.batch():
        admission = host.admit(box.py(f"open({str(marker)!r}, 'w').write('x')"))
        prepared = host.prepare(admission)
        assert [r.kind for r in rows(host.store, host.run_id)] == []  # the control: kept
        result = host.recording.result(host.carry_out(prepared))
        stored = [r.kind for r in rows(host.store, host.run_id)]
    assert result.exit_code == 0 and marker.exists()
    assert stored == ["action", "permission"], stored  # before it ran; its result kept
    assert [r.kind for r in rows(host.store, host.run_id)] == ["action", "permission", "result"]
