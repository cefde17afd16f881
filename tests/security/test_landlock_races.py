"""The Landlock provider lists the entries beside a carve-out when it makes its rules and opens
each one later, when it builds a run's ruleset. Whatever another process does to those entries
in between, a run goes on (a vanished entry needs no rule) or fails with a structured error
naming the path, and no grant lands anywhere else.

The race is made deterministic: the listing (``expand``) is wrapped so that the change happens
right after it, before any entry is opened.
"""

from __future__ import annotations

import os
import shutil

import pytest
from stockade_landlock import engine

from stockade.errors import SandboxUnavailable

pytestmark = pytest.mark.sandboxes("landlock")


def _after_listing(monkeypatch, change):
    """Make ``change(rules)`` happen right after the rules are listed, once."""
    real = engine.expand
    seen: list[list[str]] = []

    def racing(*args, **kwargs):
        rules = real(*args, **kwargs)
        if not seen:
            seen.append([rule.path for rule in rules])
            change()
        return rules

    monkeypatch.setattr(engine, "expand", racing)
    return seen


def _layout(box):
    """A workspace split by credential stores: ``.ssh`` at its top, ``.aws`` in ``sub``."""
    for store in (box.ws / ".ssh", box.ws / "sub" / ".aws"):
        store.mkdir(parents=True)
        (store / "key").write_text(box.canary)
    for name in ("a", "b", "sub/deep"):
        (box.ws / name).mkdir()


def test_entries_removed_after_listing_get_no_rule_and_the_run_goes_on(host, box, monkeypatch):
    _layout(box)
    gone = (box.ws / "a", box.ws / "sub")  # an entry, and a listed (split) folder
    seen = _after_listing(monkeypatch, lambda: [shutil.rmtree(p) for p in gone])
    result = host.run(box.request(["sh", "-c", "echo hi > b/x && cat b/x; cat .ssh/key"]))
    assert seen and {str(p) for p in gone} <= set(seen[0])  # the rules named them
    assert result.stdout.text == "hi\n", result.stderr.text  # the run went on, confined
    assert box.canary not in result.stdout.text and result.exit_code != 0
    # The next run lists again (a listed folder is gone) and still works.
    again = host.run(box.request(["sh", "-c", "cat b/x"]))
    assert again.exit_code == 0 and again.stdout.text == "hi\n", again.stderr.text


def test_a_folder_swapped_for_a_link_after_listing_carries_no_grant_there(host, box, monkeypatch):
    _layout(box)
    write = ["sh", "-c", "echo pwned > sub/deep/x"]
    control = host.run(box.request(write))  # a grant the swap would carry
    assert control.exit_code == 0 and (box.ws / "sub" / "deep" / "x").exists()
    (box.ws / "sub" / "deep" / "x").unlink()
    target = box.outside / "deep"
    target.mkdir()
    (box.ws / "c").mkdir()  # a listed folder changes: the next run lists again

    def swap():
        os.rename(box.ws / "sub", box.ws / "sub.old")
        os.symlink(box.outside, box.ws / "sub")

    seen = _after_listing(monkeypatch, swap)
    result = host.run(box.request(write))
    assert seen and str(box.ws / "sub" / "deep") in seen[0]
    assert result.exit_code != 0 and box.refused(result.stderr.text), result.stderr.text
    assert not (target / "x").exists()


def test_an_entry_replaced_by_another_kind_fails_with_a_structured_error(host, box, monkeypatch):
    _layout(box)

    def replace():
        os.rmdir(box.ws / "a")
        (box.ws / "a").write_text("now a file")

    _after_listing(monkeypatch, replace)
    with pytest.raises(SandboxUnavailable) as caught:
        host.run(box.request(["sh", "-c", "touch made"]))  # writes: the roots are set up
    assert str(box.ws / "a") in caught.value.message
    assert caught.value.details["path"] == str(box.ws / "a") and caught.value.hint
