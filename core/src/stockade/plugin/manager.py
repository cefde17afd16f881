"""The plugin manager factory, the typed facade over its hooks, and the class registries.

Nothing here is global: :func:`get_plugin_manager` builds a fresh manager from config every
time, so tests and embedders never share state. Blocked names are set before any entry point
loads, so a blocked plugin's module is never imported.

An installed plugin that fails to load (its import raises, its entry point names nothing, it
breaks a hook spec, or its ``register`` hook raises) is kept as a :class:`BrokenPlugin` and
skipped: the other plugins still work. Selecting a name it would have provided fails closed,
with an error naming the plugin and the cause (:meth:`Registry.get`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import pluggy
from attrs import frozen

from .. import NAME
from ..config.schema import Config
from ..confine.provider import SandboxProvider
from ..errors import PluginError
from ..request.literals import ClassifierRule
from ..request.result import PendingApproval
from ..request.spec import ExecSpec, Profile
from ..request.verdict import Classification, Decision
from ..run.executor import Executor
from . import hookspecs
from .entrypoints import entry_points

if TYPE_CHECKING:
    from ..frontends import CliCommand, McpTool
    from ..record.events import Event

DISABLE_ENV = "STOCKADE_DISABLE_PLUGINS"
BUILTIN_PLUGINS = {
    "stockade.builtin.classify": "stockade.policy.classifier",
    "stockade.builtin.policy": "stockade.policy.rules",
    "stockade.builtin.approval": "stockade.policy.prompt",
    "stockade.builtin.credentials": "stockade.record.broker",
    "stockade.builtin.recorder": "stockade.record.recorder",
    "stockade.builtin.unconfined": "stockade.confine.unconfined",
}
"""The built-in defaults: the name each is registered under (like any plugin) -> its module.

The names are stable (``plugins.disable``, ``STOCKADE_DISABLE_PLUGINS``); the modules live
in their concern's package.

A module that needs the configuration defines ``make_plugin(config, environ)``; what it
returns is registered in the module's place (so no state lives in a module, shared by
every host of the process).
"""

T = TypeVar("T", Executor, SandboxProvider)
BrokenStage = Literal["import", "hook spec", "register"]


@frozen
class BrokenPlugin:
    """An installed plugin that failed to load, and was skipped.

    Attributes:
        name: its entry point's name.
        dist: the distribution that provides it.
        version: that distribution's version.
        stage: where it failed: ``import`` (its module or the object its entry point
            names), ``hook spec`` (a hook that does not match the specs), ``register``
            (its ``stockade_register_executors`` / ``stockade_register_sandboxes`` raised).
        cause: the error, as ``ModuleNotFoundError: No module named 'x'``.
    """

    name: str
    dist: str
    version: str
    stage: BrokenStage
    cause: str

    def message(self) -> str:
        """One line for a person: which plugin, from which distribution, and why."""
        return (
            f"plugin {self.name!r} from {self.dist} {self.version} failed to load "
            f"({self.stage}): {self.cause}"
        )


def _cause(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


@frozen
class PluginInfo:
    """A loaded plugin, for ``stockade plugins``.

    Attributes:
        name: the name the manager knows it by (the entry point's name for installed ones).
        dist: the distribution that provides it (``stockade`` for built-ins).
        version: that distribution's version.
        hooks: the ``stockade_*`` hooks it implements.
        executors: the executors it registers, by ``PLUGIN_NAME``.
        sandboxes: the sandbox providers it registers, by ``PLUGIN_NAME``.
        commands: the ``stockade`` subcommands it offers.
        tools: the MCP tools it offers.
    """

    name: str
    dist: str
    version: str
    hooks: tuple[str, ...]
    executors: tuple[str, ...] = ()
    sandboxes: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()


def blocked_names(config: Config, environ: Mapping[str, str]) -> frozenset[str]:
    """Plugin names blocked by config and by ``STOCKADE_DISABLE_PLUGINS`` (comma separated)."""
    from_env = (n.strip() for n in environ.get(DISABLE_ENV, "").split(","))
    return frozenset(config.plugins.disable) | {n for n in from_env if n}


def get_plugin_manager(
    config: Config,
    *,
    environ: Mapping[str, str],
    plugins: Sequence[object] = (),
    load_entry_points: bool = True,
) -> pluggy.PluginManager:
    """A fresh manager: specs added, blocked names set, built-ins and entry points loaded.

    Args:
        config: supplies ``plugins.disable``.
        environ: supplies ``STOCKADE_DISABLE_PLUGINS``.
        plugins: extra plugin objects (modules or instances) registered last, e.g. by tests.
        load_entry_points: load the installed ``stockade`` entry points.

    An installed plugin that fails to import or breaks a hook spec is skipped and kept in
    ``pm.stockade_broken`` (see :class:`BrokenPlugin`).

    Raises:
        PluginError: a plugin passed in ``plugins`` implements a hook that does not exist.
    """
    import importlib

    pm = pluggy.PluginManager(NAME)
    pm.add_hookspecs(hookspecs)
    for name in blocked_names(config, environ):
        pm.set_blocked(name)
    dists: dict[str, tuple[str, str]] = {}
    broken: list[BrokenPlugin] = []
    for name, module_name in BUILTIN_PLUGINS.items():
        if not pm.is_blocked(name):
            module = importlib.import_module(module_name)
            factory = getattr(module, "make_plugin", None)
            plugin = factory(config, environ) if factory is not None else module
            pm.register(plugin, name=name)
    if load_entry_points:
        for ep in entry_points(NAME):
            if pm.is_blocked(ep.name) or pm.has_plugin(ep.name):
                continue
            try:
                plugin = ep.load()
            except Exception as error:  # noqa: BLE001 - any failure of a third party's import
                broken.append(BrokenPlugin(ep.name, ep.dist, ep.version, "import", _cause(error)))
                continue
            try:
                pm.register(plugin, name=ep.name)
            except pluggy.PluginValidationError as error:
                broken.append(
                    BrokenPlugin(ep.name, ep.dist, ep.version, "hook spec", _cause(error))
                )
                continue
            dists[ep.name] = (ep.dist, ep.version)
    try:
        for plugin in plugins:
            pm.register(plugin)
        _check_pending(pm, dists, broken)
    except pluggy.PluginValidationError as error:
        raise PluginError(
            f"plugin {error.plugin!r} implements an unknown hook: {error}",
            hint="check the hook name against the hooks reference",
        ) from None
    pm.stockade_dists = dists  # type: ignore[attr-defined]
    pm.stockade_broken = broken  # type: ignore[attr-defined]
    return pm


def _check_pending(
    pm: pluggy.PluginManager, dists: dict[str, tuple[str, str]], broken: list[BrokenPlugin]
) -> None:
    """``pm.check_pending()``; an installed plugin with an unknown hook is unregistered and
    kept as broken (a plugin registered in code still raises)."""
    while True:
        try:
            pm.check_pending()
        except pluggy.PluginValidationError as error:
            name = pm.get_name(error.plugin)
            if name is None or name not in dists:
                raise
            dist, version = dists.pop(name)
            broken.append(BrokenPlugin(name, dist, version, "hook spec", _cause(error)))
            pm.unregister(name=name)
            continue
        return


class Registry(Generic[T]):
    """Classes registered by name; an unknown name is an error that lists what is there."""

    def __init__(self, kind: str, broken: Sequence[BrokenPlugin] = ()) -> None:
        self.kind = kind
        self.broken: Sequence[BrokenPlugin] = broken
        self._classes: dict[str, type[T]] = {}

    def add(self, cls: type[T]) -> None:
        """Register ``cls`` under its ``PLUGIN_NAME``; a second class of that name is an error."""
        name = getattr(cls, "PLUGIN_NAME", None)
        if not isinstance(name, str) or not name:
            raise PluginError(f"{self.kind} class {cls.__qualname__} has no PLUGIN_NAME")
        previous = self._classes.get(name)
        if previous is not None and previous is not cls:
            raise PluginError(
                f"two {self.kind}s are named {name!r}: "
                f"{previous.__module__}.{previous.__qualname__} and "
                f"{cls.__module__}.{cls.__qualname__}",
                hint="uninstall or block one of them",
            )
        self._classes[name] = cls

    def get(self, name: str) -> type[T]:
        """The class named ``name``."""
        try:
            return self._classes[name]
        except KeyError:
            pass
        installed = ", ".join(sorted(self._classes)) or "none"
        details: dict[str, object] = {"name": name, "installed": sorted(self._classes)}
        for plugin in self.broken:
            if plugin.name == name:  # its entry point is named for what it provides
                raise PluginError(
                    f"{self.kind} {name!r} comes from a {plugin.message()}",
                    hint=f"fix or reinstall {plugin.dist} (`stockade plugins` shows the error), "
                    f"or pick another; installed: {installed}",
                    details={
                        **details,
                        "plugin": plugin.name,
                        "dist": plugin.dist,
                        "stage": plugin.stage,
                        "cause": plugin.cause,
                    },
                )
        failed = "".join(f"; {p.message()}" for p in self.broken)
        raise PluginError(
            f"unknown {self.kind} {name!r}; installed: {installed}{failed}",
            hint=f"install a plugin that provides the {self.kind} {name!r}, or pick one above",
            details={**details, "failed": [p.name for p in self.broken]} if failed else details,
        )

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._classes)

    def classes(self) -> list[type[T]]:
        """The registered classes, in name order."""
        return [self._classes[n] for n in self.names()]


class Hooks:
    """Typed calls into the plugins: the only code that touches ``pm.hook``."""

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.pm = pm
        self._hook = pm.hook
        self._single: Any = None  # (the batch takers, the caller of the other recorders)

    def broken(self) -> tuple[BrokenPlugin, ...]:
        """The installed plugins that failed to load, and were skipped."""
        return tuple(getattr(self.pm, "stockade_broken", ()))

    def executors(self) -> Registry[Executor]:
        """Every executor class the plugins register."""
        registry: Registry[Executor] = Registry("executor")
        self._register("stockade_register_executors", registry)
        return registry

    def sandboxes(self) -> Registry[SandboxProvider]:
        """Every sandbox provider class the plugins register."""
        registry: Registry[SandboxProvider] = Registry("sandbox provider")
        self._register("stockade_register_sandboxes", registry)
        return registry

    def _register(self, hook: str, registry: Registry[T]) -> None:
        """Call each implementation of ``hook`` on its own, in pluggy's order; an installed
        plugin whose call raises is unregistered and kept as broken, not half-registered.
        A plugin registered in code (a test's, an embedder's) raises as it did."""
        dists: dict[str, tuple[str, str]] = getattr(self.pm, "stockade_dists", {})
        broken: list[BrokenPlugin] = getattr(self.pm, "stockade_broken", [])
        for impl in reversed(getattr(self._hook, hook).get_hookimpls()):
            mine: list[type[T]] = []
            try:
                impl.function(**dict.fromkeys(impl.argnames, mine.append))
            except Exception as error:
                if impl.plugin_name not in dists:
                    raise
                dist, version = dists.pop(impl.plugin_name)
                broken.append(
                    BrokenPlugin(impl.plugin_name, dist, version, "register", _cause(error))
                )
                self.pm.unregister(name=impl.plugin_name)
                continue
            for cls in mine:
                registry.add(cls)
        registry.broken = broken  # shared: a later hook's failures show here too

    def classifier_rules(self) -> dict[str, ClassifierRule]:
        """The program rules every plugin adds to the classifier's table, merged.

        Raises:
            PluginError: two plugins name the same program.
        """
        merged: dict[str, ClassifierRule] = {}
        owner: dict[str, str] = {}
        impls = self._hook.stockade_classifier_rules.get_hookimpls()
        for impl in reversed(impls):  # registration order
            table: Mapping[str, ClassifierRule] | None = impl.function()  # type: ignore[assignment]
            for program, rule in (table or {}).items():
                if program in merged:
                    raise PluginError(
                        f"plugins {owner[program]!r} and {impl.plugin_name!r} both add a "
                        f"classifier rule for {program!r}",
                        hint="uninstall or block one of them",
                    )
                merged[program], owner[program] = rule, impl.plugin_name
        return merged

    def classify(self, spec: ExecSpec, rules: Mapping[str, ClassifierRule]) -> list[Classification]:
        """Every classifier's vote (abstentions dropped)."""
        votes: list[Classification | None] = self._hook.stockade_classify(spec=spec, rules=rules)
        return [v for v in votes if v is not None]

    def decide(
        self, spec: ExecSpec, classification: Classification, profile: Profile
    ) -> Decision | None:
        """The first policy decision."""
        result: Decision | None = self._hook.stockade_decide(
            spec=spec, classification=classification, profile=profile
        )
        return result

    def ask(self, pending: PendingApproval) -> Decision | None:
        """A person's answer, if an approver could reach one."""
        result: Decision | None = self._hook.stockade_ask(pending=pending)
        return result

    def resolve_credential(self, handle: str, spec: ExecSpec) -> str | None:
        """The secret value behind ``handle``, if a broker knows it."""
        result: str | None = self._hook.stockade_resolve_credential(handle=handle, spec=spec)
        return result

    def record(self, event: Event) -> None:
        """Hand ``event`` to every recorder."""
        self.record_batch((event,))

    def record_batch(self, events: Sequence[Event]) -> None:
        """Hand ``events`` to every recorder: as one batch to those that take batches,
        one by one to the others (:func:`~stockade.plugin.hookspecs.stockade_record_batch`)."""
        # Which recorders take batches, looked at each time (one may be registered or
        # swapped at any moment: the pool's sharding recorder is); the caller for the
        # others is made again only when that set changed.
        takers = tuple(i.plugin for i in self._hook.stockade_record_batch.get_hookimpls())
        cached = self._single
        if cached is None or cached[0] != takers:
            caller = (
                self.pm.subset_hook_caller("stockade_record", list(takers))
                if takers
                else self._hook.stockade_record
            )
            cached = self._single = (takers, caller)
        if takers:
            self._hook.stockade_record_batch(events=events)
        for event in events:
            cached[1](event=event)

    def has_recorder(self) -> bool:
        """Whether any plugin records events."""
        return bool(
            self._hook.stockade_record.get_hookimpls()
            or self._hook.stockade_record_batch.get_hookimpls()
        )

    def cli_commands(self, builtin: Collection[str] = ()) -> dict[str, CliCommand]:
        """The ``stockade`` subcommands the plugins offer, by name.

        Args:
            builtin: the names of the built-in commands, which no plugin may take.

        Raises:
            PluginError: a plugin offers a built-in command's name, or one another plugin
                offers; the message names both.
        """
        return self._offers("stockade_cli_commands", "command", builtin, "the built-in command")

    def mcp_tools(self, builtin: Collection[str] = ()) -> dict[str, McpTool]:
        """The tools the plugins offer to ``stockade mcp``, by name.

        Args:
            builtin: the names of the server's own tools, which no plugin may take.

        Raises:
            PluginError: a plugin offers one of the server's own tool names, or one another
                plugin offers; the message names both.
        """
        return self._offers("stockade_mcp_tools", "MCP tool", builtin, "the MCP server's own tool")

    def _offers(
        self, hook: str, kind: str, builtin: Collection[str], builtin_owner: str
    ) -> dict[str, Any]:
        # One call per implementation, so a clash names the plugin that offered each side.
        offered: dict[str, Any] = {}
        owner: dict[str, str] = {}
        for plugin_name, offer in self._each(hook):
            name: str = offer.name
            if name in builtin or name in offered:
                first = builtin_owner if name in builtin else f"plugin {owner[name]!r}"
                raise PluginError(
                    f"plugin {plugin_name!r} offers the {kind} {name!r}, which {first} already has",
                    hint=f"uninstall or block {plugin_name!r} ({DISABLE_ENV}={plugin_name}), "
                    "or ask its author to rename it",
                    details={"name": name, "plugin": plugin_name, "taken_by": first},
                )
            offered[name], owner[name] = offer, plugin_name
        return offered

    def _each(self, hook: str) -> list[tuple[str, Any]]:
        """What each implementation of the ``add``/``register`` hook ``hook`` hands over,
        with the name of the plugin that handed it, in registration order."""
        handed: list[tuple[str, Any]] = []
        for impl in getattr(self._hook, hook).get_hookimpls():  # registration order
            mine: list[Any] = []
            impl.function(**dict.fromkeys(impl.argnames, mine.append))
            handed.extend((impl.plugin_name, item) for item in mine)
        return handed

    def plugin_infos(self) -> list[PluginInfo]:
        """Every registered plugin with its distribution, version, hooks and what it offers."""
        from .. import __version__

        dists: dict[str, tuple[str, str]] = getattr(self.pm, "stockade_dists", {})
        offers: dict[tuple[str, str], list[str]] = {}
        for hook in (
            "stockade_register_executors",
            "stockade_register_sandboxes",
            "stockade_cli_commands",
            "stockade_mcp_tools",
        ):
            for plugin_name, item in self._each(hook):
                named = getattr(item, "PLUGIN_NAME", None) or getattr(item, "name", "?")
                offers.setdefault((plugin_name, hook), []).append(str(named))
        infos = []
        for name, plugin in self.pm.list_name_plugin():
            if plugin is None:
                continue
            hooks = tuple(sorted(h.name for h in self.pm.get_hookcallers(plugin) or ()))
            dist, version = dists.get(
                name,
                ("stockade", __version__)
                if name in BUILTIN_PLUGINS
                else ("(registered in code)", ""),
            )

            def offered(hook: str, plugin_name: str = name) -> tuple[str, ...]:
                return tuple(offers.get((plugin_name, hook), ()))

            infos.append(
                PluginInfo(
                    name,
                    dist,
                    version,
                    hooks,
                    executors=offered("stockade_register_executors"),
                    sandboxes=offered("stockade_register_sandboxes"),
                    commands=offered("stockade_cli_commands"),
                    tools=offered("stockade_mcp_tools"),
                )
            )
        return infos
