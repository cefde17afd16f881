"""``stockade plugins``: the distributions, versions, hooks, and what each plugin offers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from attrs import frozen

from ..errors import StockadeError
from ..plugin.manager import BrokenPlugin, PluginInfo
from .common import make_host, report_error

if TYPE_CHECKING:
    import argparse


@frozen
class RegisteredClass:
    """An executor or sandbox provider class, by the name config selects it with.

    Attributes:
        name: its ``PLUGIN_NAME``.
        cls: its import path.
    """

    name: str
    cls: str


@frozen
class PluginsReport:
    """What ``stockade plugins --json`` prints.

    Attributes:
        plugins: every loaded plugin.
        executors: the registered executors.
        sandboxes: the registered sandbox providers.
        broken: the installed plugins that failed to load, and were skipped.
    """

    plugins: tuple[PluginInfo, ...]
    executors: tuple[RegisteredClass, ...]
    sandboxes: tuple[RegisteredClass, ...]
    broken: tuple[BrokenPlugin, ...] = ()


def plugins_command(args: argparse.Namespace, _parser: object = None) -> int:
    """List the plugins a host would load with this configuration."""
    try:
        host = make_host(args, warn=False)
    except StockadeError as error:
        return report_error(error, as_json=args.json)
    report = PluginsReport(
        tuple(host.hooks.plugin_infos()),
        tuple(
            RegisteredClass(c.PLUGIN_NAME, f"{c.__module__}.{c.__qualname__}")
            for c in host.executors.classes()
        ),
        tuple(
            RegisteredClass(c.PLUGIN_NAME, f"{c.__module__}.{c.__qualname__}")
            for c in host.sandboxes.classes()
        ),
        host.hooks.broken(),
    )
    if args.json:
        from ..request.wire import to_json

        print(to_json(report, indent=2))
        return 0
    print("plugins:")
    for info in report.plugins:
        version = f" {info.version}" if info.version else ""
        print(f"  {info.name}  ({info.dist}{version})")
        print(f"      hooks: {', '.join(info.hooks) or '-'}")
        offers = _offers(info)
        if offers:
            print(f"      offers: {offers}")
    print("executors: " + (", ".join(f"{r.name} ({r.cls})" for r in report.executors) or "none"))
    print("sandboxes: " + (", ".join(f"{r.name} ({r.cls})" for r in report.sandboxes) or "none"))
    if report.broken:
        from ..display import visible

        print("failed to load (skipped; selecting one of them fails):")
        for plugin in report.broken:
            print(f"  {plugin.name}  ({plugin.dist} {plugin.version})")
            print(f"      {plugin.stage}: {visible(plugin.cause)}")
    return 0


def _offers(info: PluginInfo) -> str:
    """What ``info``'s plugin offers, e.g. ``command skill; MCP tool skill``."""
    return "; ".join(
        f"{kind} {name}"
        for kind, names in (
            ("executor", info.executors),
            ("sandbox", info.sandboxes),
            ("command", info.commands),
            ("MCP tool", info.tools),
        )
        for name in names
    )
