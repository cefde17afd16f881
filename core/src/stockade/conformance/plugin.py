"""The conformance kit as a pytest plugin: ``--sandbox NAME``, its markers, fixtures and table.

Registered through the ``pytest11`` entry point of the ``stockade`` distribution, so it is
loaded in every pytest session where Stockade is installed; it stays inert until a test
marked ``promise`` is collected. Such a test runs once per selected provider (``--sandbox``,
repeatable) and, when it takes ``mode``, once per confining mode the provider enforces.
What it expects comes from the provider's declaration (:func:`~stockade.conformance.ground.
expectation`): a pinned gap is a strict expected failure, an undeclared extra is skipped.
At the end of the session the plugin prints one table per provider: each promise, its
result, and the reason of a pin or the failing cases.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from ..config.schema import Config
from ..confine.promises import Promise
from ..confine.provider import SandboxProvider
from ..host import Host
from ..request.literals import Mode
from ..testing import AllowAll, under_home
from . import ground
from .table import PINNED, Outcomes, render

_OUTCOMES = pytest.StashKey[Outcomes]()
_PROVIDERS = pytest.StashKey[Mapping[str, type[SandboxProvider]]]()
_CONTAINED = pytest.StashKey[dict[str, str | None]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--sandbox NAME`` (repeatable) and ``--conformance-table PATH``."""
    group = parser.getgroup("stockade-conformance", "Stockade's sandbox conformance kit")
    group.addoption(
        "--sandbox",
        action="append",
        default=[],
        dest="conformance_sandboxes",
        metavar="NAME",
        help="the sandbox provider the conformance kit attacks (repeat for several)",
    )
    group.addoption(
        "--conformance-table",
        default=None,
        metavar="PATH",
        help="also write the per-promise table (Markdown) to PATH",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the kit's markers and start the tally."""
    config.addinivalue_line(
        "markers", "promise(name): a conformance attack on that provider promise"
    )
    config.addinivalue_line(
        "markers", "sandboxes(*names): run an attack-suite test against these providers only"
    )
    config.addinivalue_line(
        "markers", "gap(name, why): a known gap of that provider, pinned as a strict xfail"
    )
    config.stash[_OUTCOMES] = Outcomes()
    config.pluginmanager.register(_Tally(config.stash[_OUTCOMES]), "stockade-conformance-tally")


def _promise(item: pytest.Item | pytest.Function) -> Promise | None:
    marker = item.get_closest_marker("promise")
    return Promise(marker.args[0]) if marker else None


def _provider(config: pytest.Config, name: str) -> type[SandboxProvider]:
    if _PROVIDERS not in config.stash:
        config.stash[_PROVIDERS] = ground.providers()
    found = config.stash[_PROVIDERS]
    if name not in found:
        raise pytest.UsageError(
            f"--sandbox {name}: no such sandbox provider is installed "
            f"(installed: {', '.join(sorted(found))})"
        )
    return found[name]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run each attack against each selected provider, with what its declaration expects."""
    promise = _promise(metafunc.definition)
    if promise is None or "sandbox" not in metafunc.fixturenames:
        return
    names = metafunc.config.getoption("conformance_sandboxes")
    if not names:
        raise pytest.UsageError("the conformance kit needs --sandbox NAME (the provider to attack)")
    takes_mode = "mode" in metafunc.fixturenames
    params = []
    for name in names:
        cls = _provider(metafunc.config, name)
        expect, reason = ground.expectation(cls, promise)
        marks: list[pytest.MarkDecorator] = []
        if expect == "pinned":
            marks.append(pytest.mark.xfail(strict=True, reason=PINNED + reason))
        elif expect == "skip":
            marks.append(pytest.mark.skip(reason=reason))
        if not takes_mode:
            params.append(pytest.param(name, marks=marks, id=name))
            continue
        for mode in ground.MODES:
            skip = [] if mode in cls.MODES else [pytest.mark.skip(reason=f"{name}: no {mode}")]
            params.append(pytest.param(name, mode, marks=marks + skip, id=f"{mode}-{name}"))
    metafunc.parametrize(["sandbox", "mode"] if takes_mode else "sandbox", params)


class _Tally:
    """Counts each attack's outcome under its promise and provider."""

    def __init__(self, outcomes: Outcomes) -> None:
        self.outcomes = outcomes

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Add the report of a labelled attack (its call, or a setup that did not pass)."""
        labels = dict(report.user_properties)
        promise, sandbox = labels.get("promise"), labels.get("sandbox")
        if not promise or not sandbox:
            return
        if report.when == "call" or report.outcome != "passed":
            xfail = getattr(report, "wasxfail", None)
            self.outcomes.add(str(sandbox), str(promise), report.nodeid, report.outcome, xfail)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Label each attack with its promise and provider, for the table."""
    for item in items:
        promise = _promise(item)
        callspec = getattr(item, "callspec", None)
        if promise is None or callspec is None or "sandbox" not in callspec.params:
            continue
        item.user_properties.append(("promise", promise.value))
        item.user_properties.append(("sandbox", callspec.params["sandbox"]))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Print the per-promise table last (after pytest's own summary), and write it if asked."""
    if _OUTCOMES not in config.stash:
        return
    outcomes = config.stash[_OUTCOMES]
    if not outcomes.sandboxes():
        return
    text = render(outcomes, config.stash.get(_PROVIDERS, {}))
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("")
        for line in text.splitlines():
            reporter.write_line(line)
    path = config.getoption("conformance_table")
    if path:
        Path(path).write_text(text + "\n", encoding="utf-8")


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture
def sandbox_provider(request: pytest.FixtureRequest, sandbox: str) -> type[SandboxProvider]:
    """The class of the provider under attack, after checking it works on this machine."""
    cls = _provider(request.config, sandbox)
    missing = ground.incapable(cls)
    if missing:
        pytest.fail(missing, pytrace=False)
    if os.geteuid() == 0:
        _refuse_if_uncontained(request.config, sandbox, cls)
    return cls


def _refuse_if_uncontained(config: pytest.Config, sandbox: str, cls: type[SandboxProvider]) -> None:
    """As root, stop the whole run before any attack when ``sandbox`` fails the first
    containment probe (a write outside the workspace): a provider that confines nothing
    would let the attacks damage the machine running the kit."""
    seen = config.stash.setdefault(_CONTAINED, {})
    if sandbox not in seen:
        seen[sandbox] = _first_probe(sandbox, cls)
    breach = seen[sandbox]
    if breach is not None:
        pytest.exit(
            f"refusing to attack {sandbox} as root: {breach}. Run the kit of a provider you "
            "do not trust as an ordinary user, in a throwaway account or container",
            returncode=ground.REFUSED,
        )


def _first_probe(sandbox: str, cls: type[SandboxProvider]) -> str | None:
    """What the first containment probe got through (``None``: it held): a command in the
    workspace writes a file beside it, with a file in the workspace as its control."""
    root = under_home("probe-")
    made = ground.Box(root, sandbox, cls)
    mode: Mode = "workspace-write" if "workspace-write" in cls.MODES else "read-only"
    beside = made.outside / ("probe-" + made.canary)
    source = "import sys\ntry:\n    open(sys.argv[1], 'x').write('x')\nexcept OSError:\n    pass\n"
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("XDG_STATE_HOME", str(root / "state"))
            host = Host(Config(sandbox=sandbox), plugins=[AllowAll()])
            try:
                host.run(made.py(source, str(beside), mode=mode))
            finally:
                host.close()
        return f"its first probe wrote {beside} outside the workspace" if beside.exists() else None
    finally:
        made.remove()


@pytest.fixture
def box(
    sandbox: str,
    sandbox_provider: type[SandboxProvider],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ground.Box]:
    """A fresh :class:`~stockade.conformance.ground.Box` under the user's home, removed after.

    Stockade's own state (held steps, the record) goes to a folder of the test's own.
    """
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
    made = ground.Box(under_home(), sandbox, sandbox_provider)
    try:
        yield made
    finally:
        made.remove()


@pytest.fixture
def host(make_host: Callable[..., Host], sandbox: str, box: ground.Box) -> Host:
    """An allow-all host whose commands go to the provider under attack."""
    del box  # the box sets the private state folder first
    return make_host(allow_all=True, config=Config(sandbox=sandbox))


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Name the providers under attack, with who runs the kit."""
    names = config.getoption("conformance_sandboxes")
    if not names:
        return []
    return [f"stockade conformance: {', '.join(names)} (uid {os.getuid()})"]
