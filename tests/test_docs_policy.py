"""policy.md and workspaces.md tell the truth: every profile key has its row, the rules are
listed in their order, the default profile and the example profiles (docs/examples/agents.toml)
decide each row as the tables say, and the store and the kept caches are where they say."""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

import attrs
import pytest

from helpers.docs import DOCS, EXAMPLES, FULL_ACCESS, section
from stockade.config.load import parse_config
from stockade.config.schema import Config
from stockade.errors import PolicyDenied, StockadeError
from stockade.policy import rules as policy
from stockade.policy.resolve import resolve
from stockade.record.store import store_path
from stockade.request.spec import Budget, ExecRequest, Profile
from stockade.testing import EventLog

# --- the policy page ------------------------------------------------------------------------

POLICY_PAGE = DOCS / "policy.md"
AGENTS_TOML = EXAMPLES / "agents.toml"
EXAMPLE_WORKSPACE = "/home/me/project"


def table_rows(body: str) -> list[list[str]]:
    """The cells of the Markdown table rows in ``body`` (the header and rule left out)."""
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in body.splitlines()
        if line.startswith("| ")
    ]
    return [row for row in rows[1:] if not set("".join(row)) <= set("-: ")]


def unquoted(cell: str) -> str:
    assert cell.startswith("`") and cell.endswith("`"), cell
    return cell[1:-1]


def toml_default(value: object) -> str:
    """How the keys table writes an attrs default: unset, or the TOML value."""
    if value is None:
        return "unset"
    if isinstance(value, attrs.Factory):  # an empty table: credentials = {}
        return toml_default(value.factory())
    if isinstance(value, tuple):
        return "`[" + ", ".join(f'"{item}"' for item in value) + "]`"
    if isinstance(value, str):
        return f'`"{value}"`'
    return f"`{value}`"


def profile_keys() -> dict[str, object]:
    """Every key of ``[agents.NAME]`` with its default: the fields of Profile and Budget."""
    keys: dict[str, object] = {}
    for field in attrs.fields(Profile):
        if field.name == "name":  # the table's key, not a key in it
            continue
        if field.name == "budget":
            keys.update({f"budget.{sub.name}": sub.default for sub in attrs.fields(Budget)})
        else:
            keys[field.name] = field.default
    return keys


def test_the_policy_page_has_a_row_for_every_profile_key():
    rows = {unquoted(row[0]): row for row in table_rows(section(POLICY_PAGE, "### The keys"))}
    assert sorted(rows) == sorted(profile_keys())
    for key, default in profile_keys().items():
        assert rows[key][2].startswith(toml_default(default)), (key, rows[key][2])


def test_the_policy_page_lists_the_rules_in_their_order():
    body = section(POLICY_PAGE, "## The decision rules")
    named = re.findall(r"^\d+\. \*\*([a-z]+)\*\*:", body, flags=re.M)
    assert named == [rule.__name__ for rule in policy.RULES]


COMMAND_OF_CLASS = {
    "reads": ["ls"],
    "writes": ["touch", "notes"],
    "network": ["git", "fetch"],
    "destroys": ["rm", "notes"],
}


def decision_of(host, request: ExecRequest, log) -> tuple[str, str]:
    """The verdict and reason the host recorded for ``request``, whatever it did next."""
    # Denied, held, or allowed and then no sandbox here: the decision was recorded.
    with contextlib.suppress(StockadeError):
        host.run(request)
    permissions = [event for event in log.events if event.kind == "permission"]
    return permissions[-1].decision.verdict, permissions[-1].decision.reason


@pytest.mark.parametrize("origin", ["cli", "api", "mcp"])
def test_the_default_profile_decides_as_the_policy_page_says(make_host, tmp_path, origin):
    rows = table_rows(section(POLICY_PAGE, "## The default profile"))
    assert sorted(unquoted(row[0]) for row in rows) == sorted(COMMAND_OF_CLASS)
    for cell, verdict, reason in rows:
        kind = unquoted(cell)
        log = EventLog()
        host = make_host(plugins=[log])
        request = ExecRequest(
            COMMAND_OF_CLASS[kind], str(tmp_path), mode=FULL_ACCESS, origin=origin
        )
        assert decision_of(host, request, log) == (verdict, unquoted(reason))
        assert log.events[1].classification.kind == kind
        if verdict == "ask":  # approved in advance by a person, never by an MCP request
            yes = attrs.evolve(request, preapproved=True)
            expected = ("ask", unquoted(reason))
            if origin != "mcp":
                expected = ("allow", f"approved in advance: {unquoted(reason)}")
            assert decision_of(host, yes, log) == expected


def example_agents(workspace: Path) -> Config:
    """docs/examples/agents.toml, with its workspace moved to ``workspace``."""
    text = AGENTS_TOML.read_text(encoding="utf-8")
    assert EXAMPLE_WORKSPACE in text
    return parse_config(text.replace(EXAMPLE_WORKSPACE, str(workspace)))


@pytest.fixture
def workspace(tmp_path) -> Path:
    """The example's workspace, holding an ``ls`` of the agent's own."""
    folder = tmp_path.resolve() / "project"
    folder.mkdir()
    own = folder / "ls"
    own.write_text("#!/bin/sh\ntouch pwned\n")
    own.chmod(0o755)
    return folder


def test_the_policy_example_decides_as_the_table_says(make_host, workspace):
    config = example_agents(workspace)
    rows = table_rows(section(POLICY_PAGE, "### An example"))
    assert {unquoted(row[0]) for row in rows} == set(config.agents)
    for profile, command, verdict, reason in rows:
        match = re.fullmatch(r"`([^`]+)`(?:, as step (\d+))?", command)
        assert match, command
        argv, step = match.group(1).split(), int(match.group(2) or 1)
        log = EventLog()
        host = make_host(plugins=[log], config=config)
        name = unquoted(profile)
        # A profile without a workspace of its own name works in its folder under the store.
        own = name != "default" and not config.agents[name].workspace
        cwd = None if own else str(workspace)
        request = ExecRequest(argv, cwd, mode=FULL_ACCESS, profile=name)
        for _ in range(step - 1):  # every command asked counts as a step, denied or not
            with pytest.raises(PolicyDenied):
                host.run(attrs.evolve(request, argv=["touch", "x"]))
        expected = unquoted(reason).replace(EXAMPLE_WORKSPACE, str(workspace))
        assert decision_of(host, request, log) == (verdict, expected), command
    assert not (workspace / "pwned").exists()


def test_the_policy_example_profiles_set_what_the_keys_table_says(workspace, tmp_path):
    config = example_agents(workspace)
    reviewer = resolve(
        ExecRequest(["ls"], mode="workspace-write", profile="reviewer"), config, os.environ
    )
    assert (reviewer.mode, reviewer.timeout) == ("read-only", 60.0)
    own = os.path.join(os.environ["XDG_STATE_HOME"], "stockade", "workspaces", "reviewer")
    assert (reviewer.workspace, reviewer.cwd) == (own, own)  # a folder of its own
    builder = resolve(ExecRequest(["ls"], profile="builder", memory_mb=4096), config, os.environ)
    assert (builder.cwd, builder.workspace) == (str(workspace), str(workspace))
    assert builder.limits.memory_mb == 2048  # a cap: a request may not ask for more
    with pytest.raises(StockadeError) as outside:
        resolve(ExecRequest(["ls"], str(tmp_path), profile="builder"), config, os.environ)
    assert outside.value.code == "bad_cwd"


def test_the_workspaces_page_lists_every_kept_cache_and_the_quota_result():
    from stockade.workspace.folders import CACHE_ENV

    text = (DOCS / "workspaces.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\s*\| `([A-Za-z_]+)` \| `([a-z-]+)` \|$", text, re.MULTILINE))
    assert rows == CACHE_ENV
    assert '`limit_hit = "quota"`' in text and "`quota_exceeded`" in text


def test_the_store_is_where_the_policy_page_says(monkeypatch):
    text = POLICY_PAGE.read_text(encoding="utf-8")
    assert "`$XDG_STATE_HOME/stockade/store.db`" in text
    assert "`~/.local/state/stockade/store.db`" in text
    monkeypatch.setenv("XDG_STATE_HOME", "/state")
    assert store_path(Config()) == "/state/stockade/store.db"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", "/home/me")
    assert store_path(Config()) == "/home/me/.local/state/stockade/store.db"
