"""The kit's visibility attack (:mod:`stockade.conformance.suite.test_visibility`) on both
providers; and the control the kit cannot name: bubblewrap with ``layers = false`` (today's
direct writes) lets the same observer see every planted name while the command runs."""

from __future__ import annotations

import pytest

from stockade.config.schema import Config, PluginsConfig
from stockade.conformance.suite.test_visibility import *  # noqa: F403
from stockade.conformance.suite.test_visibility import PLANT, Observer, _repository


@pytest.mark.sandboxes("bubblewrap")
def test_without_layers_the_observer_sees_what_is_planted(box, make_host, sandbox):
    _repository(box.ws)
    settings = {"bubblewrap": {"layers": False}}
    config = Config(sandbox=sandbox, plugins=PluginsConfig(settings=settings))
    host = make_host(allow_all=True, config=config)
    observer = Observer(box.ws)
    observer.start()
    try:
        result = host.run(box.py(PLANT, "1.0"))
    finally:
        observer.done.set()
        observer.join()
    assert result.sandbox.writes == "direct"
    assert "PLANTED" in result.stdout.text, result.stderr.text
    # .git/config is a read-only mount under bubblewrap either way: refused, never seen.
    assert observer.seen >= {
        "nested/.git",
        ".claude/settings.json",
        ".vscode/tasks.json",
        "viagit/.git",
        ".idea/workspace.xml",
    }
    assert not (box.ws / ".claude").exists()  # quarantined after it, as before
