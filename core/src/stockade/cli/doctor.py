"""``stockade doctor``: what works on this machine, and why not."""

from __future__ import annotations

import os
import platform
import sys
import sysconfig
from typing import TYPE_CHECKING

from attrs import frozen

from ..confine.kernel import Fact, all_facts
from ..errors import StockadeError
from ..request.literals import MODES

if TYPE_CHECKING:
    import argparse

    from ..confine.provider import SandboxProvider
    from ..host import Host
    from ..request.plan import SandboxFacts
    from ..request.spec import ExecSpec


@frozen
class DoctorReport:
    """What ``stockade doctor --json`` prints.

    Attributes:
        ok: the configured default mode can run here.
        python: interpreter version and platform.
        config: where configuration came from.
        kernel: kernel features that confinement depends on.
        executors: each executor and whether it works.
        sandboxes: each sandbox provider and whether it works.
        modes: for each mode, what ``auto`` would use, or why nothing can; a provider that
            enforces the mode only partly says so, and what it leaves out.
        broken: installed plugins that failed to load (skipped; selecting one fails).
        partial: the modes whose provider enforces them only partly.
        problem: why nothing could be probed (an invalid config, say); empty otherwise.
        client: which ``stockade`` command this installation has (:func:`installed_client`).
    """

    ok: bool
    python: str
    config: str
    kernel: tuple[Fact, ...]
    executors: tuple[Fact, ...]
    sandboxes: tuple[Fact, ...]
    modes: tuple[Fact, ...]
    broken: tuple[Fact, ...] = ()
    partial: tuple[str, ...] = ()
    problem: str = ""
    client: str = ""


def installed_client() -> str:
    """Which ``stockade`` command this installation has: the native client (compiled from
    ``core/native/`` when the package was built), or the Python client where no C compiler
    was found then; ``stockade-py`` is the Python client either way."""
    path = os.path.join(sysconfig.get_path("scripts"), "stockade")
    try:
        with open(path, "rb") as handle:
            head = handle.read(4)
    except OSError as error:
        return f"none at {path} ({error.strerror}); stockade-py is the Python client"
    if head == b"\x7fELF":
        return f"native, {path} (it hands what it does not serve to stockade-py)"
    return f"Python, {path} (no C compiler was found when it was built: calls start slower)"


def build_report(args: argparse.Namespace) -> DoctorReport:
    """Probe everything; a broken config or plugin is reported, not raised."""
    from ..policy.resolve import resolve
    from ..request.spec import ExecRequest
    from .common import make_host

    python = f"{platform.python_implementation()} {platform.python_version()} on {sys.platform}"
    kernel = tuple(all_facts())
    try:
        host: Host = make_host(args, warn=False)
    except StockadeError as error:
        from ..config.load import config_path
        from ..errors import ConfigError

        where = args.config or config_path(os.environ) or "embedded defaults (no config file)"
        unusable = (Fact("host", False, error.message),)
        problem = (
            f"the config {where} cannot be used: fix it, then run doctor again"
            if isinstance(error, ConfigError)
            else f"no host could be made: {error.message}"
        )
        return DoctorReport(
            False,
            python,
            f"{where} (unusable)",
            kernel,
            unusable,
            (),
            (),
            problem=problem,
            client=installed_client(),
        )
    config = host.config.source or "embedded defaults (no config file)"
    kernel += (_forks(host),)
    executors = tuple(
        Fact(c.PLUGIN_NAME, probe.usable, probe.detail)
        for c in host.executors.classes()
        for probe in (c.probe(),)
    )
    sandboxes = tuple(
        Fact(c.PLUGIN_NAME, probe.usable, f"modes: {', '.join(sorted(c.MODES))}; {probe.detail}")
        for c in host.sandboxes.classes()
        for probe in (host.doer.providers.probe(c),)
    )
    broken = tuple(
        Fact(f"{p.name} ({p.dist} {p.version})", False, f"failed to load ({p.stage}): {p.cause}")
        for p in host.hooks.broken()
    )
    modes: list[Fact] = []
    partial: list[str] = []
    for mode in MODES:
        spec = resolve(
            ExecRequest(["true"], os.path.abspath(os.sep), mode=mode), host.config, host.environ
        )
        try:
            provider = host.doer.providers.provider_for(spec)
        except StockadeError as error:
            modes.append(Fact(mode, False, str(error)))
            continue
        # A fallback says so: which stronger providers could not run, and why.
        passed = [
            f"{c.PLUGIN_NAME} cannot run: {probe.detail}"
            for c in host.sandboxes.classes()
            if mode in c.MODES and c.PRIORITY > provider.PRIORITY and spec.sandbox == "auto"
            for probe in (host.doer.providers.probe(c),)
            if not probe.usable
        ]
        fallback = f" (fallback: {'; '.join(passed)})" if passed else ""
        try:
            facts = trial(provider, spec, host)
        except StockadeError as error:
            modes.append(Fact(mode, False, f"sandbox {provider.PLUGIN_NAME}: {error}"))
            continue
        missing = None
        if facts is not None and facts.enforcement == "partial":
            missing = facts.missing or ("(the provider did not say what)",)
        if facts is not None and facts.writes is not None:
            fallback += f"; writes: {WRITES[facts.writes]}"
        if missing is not None:
            partial.append(mode)
            fallback += f"; PARTIAL enforcement, not enforced: {'; '.join(missing)}"
        modes.append(Fact(mode, True, f"sandbox {provider.PLUGIN_NAME}{fallback}"))
    executor_ok = any(f.ok and f.name == host.config.executor for f in executors)
    if not executor_ok:
        executors += (Fact(host.config.executor, False, "configured executor is not installed"),)
    default_ok = executor_ok and any(f.ok and f.name == host.config.mode for f in modes)
    return DoctorReport(
        default_ok,
        python,
        config,
        kernel,
        executors,
        sandboxes,
        tuple(modes),
        broken,
        tuple(partial),
        client=installed_client(),
    )


def _forks(host: Host) -> Fact:
    """How a fork of a snapshot is made here (:mod:`stockade.layers.snapshots`)."""
    from ..config.schema import store_folder
    from ..layers import mounts

    try:
        why = mounts.refusal(store_folder(host.config))
    except OSError as error:
        why = f"the store cannot be probed: {error.strerror}"
    if why is None:
        return Fact("forks", True, "overlay mounts: one mount a fork, whatever its size")
    return Fact("forks", False, f"hard links, one a file ({why})")


WRITES = {
    "layered": "layered (a command's writes land through the host's checks; protected "
    "names are never visible)",
    "direct": "direct (no overlay here: new protected names are quarantined after the "
    "command, visible while it runs)",
}


def trial(provider: SandboxProvider, spec: ExecSpec, host: Host) -> SandboxFacts | None:
    """How ``provider`` confines ``spec.mode`` (its enforcement, what it leaves out, how
    writes land), from a plan it makes (and frees) for ``true`` in an empty folder;
    ``None`` for an unconfined mode. Nothing runs.

    Raises:
        StockadeError: the provider refuses to confine the mode here.
    """
    import tempfile

    from ..policy.resolve import resolve
    from ..request.spec import ExecRequest

    if spec.mode == "danger-full-access":
        return None
    with tempfile.TemporaryDirectory(prefix="stockade-doctor-") as folder:
        trial = resolve(ExecRequest(["true"], folder, mode=spec.mode), host.config, host.environ)
        plan = provider.confine(trial)
        provider.release(plan)
    return plan.facts


def doctor_command(args: argparse.Namespace, _parser: object = None) -> int:
    """Print the report; exit 0 when the configured default mode can run here, else 1."""
    report = build_report(args)
    if args.json:
        from ..request.wire import to_json

        print(to_json(report, indent=2))
        return 0 if report.ok else 1
    from ..display import visible

    print(f"python: {visible(report.python)}")
    print(f"config: {visible(report.config)}")
    print(f"client: {visible(report.client)}")
    for title, facts in (
        ("kernel", report.kernel),
        ("executors", report.executors),
        ("sandboxes", report.sandboxes),
        ("modes", report.modes),
    ):
        print(f"{title}:")
        for fact in facts:
            print(f"  [{'ok' if fact.ok else 'no'}] {visible(fact.name)}: {visible(fact.detail)}")
    if report.broken:
        print("plugins that failed to load (skipped; selecting one fails):")
        for fact in report.broken:
            print(f"  [no] {visible(fact.name)}: {visible(fact.detail)}")
    why = report.problem or "the default mode cannot run confined here"
    verdict = "ready" if report.ok else f"NOT ready: {why}"
    if report.ok and report.partial:
        verdict += f" (PARTIAL enforcement of {', '.join(report.partial)}: see modes)"
    print(f"verdict: {verdict}")
    return 0 if report.ok else 1
