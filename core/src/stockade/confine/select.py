"""Choosing the sandbox provider that confines a command: the one it names, or ``auto``'s pick.

Each provider class is probed once (a broken probe means unusable, never a crash) and made
once, with its plugin settings. A mode no usable provider can enforce is refused: a command
is never run unconfined unless it asked for ``danger-full-access``.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ..errors import SandboxUnavailable
from ..request.plan import Probe

if TYPE_CHECKING:
    from ..config.schema import Config
    from ..plugin.manager import Registry
    from ..request.spec import ExecSpec
    from .provider import SandboxProvider


class Providers:
    """The sandbox providers of one host (or one doer), probed and made on first use."""

    def __init__(self, config: Config, sandboxes: Registry[SandboxProvider]) -> None:
        self.config = config
        self.sandboxes = sandboxes
        self._lock = threading.Lock()
        self._probing = threading.Lock()
        self._providers: dict[str, SandboxProvider] = {}
        self._probes: dict[str, Probe] = {}

    def probe(self, cls: type[SandboxProvider]) -> Probe:
        """``cls.probe()``, asked once."""
        name = cls.PLUGIN_NAME
        if name in self._probes:
            return self._probes[name]
        with self._probing:  # one probe at a time: a warm server's first calls come at once
            if name not in self._probes:
                try:
                    self._probes[name] = cls.probe()
                except Exception as error:  # noqa: BLE001 - broken means unusable, not a crash
                    self._probes[name] = Probe(False, f"probe failed: {error}")
        return self._probes[name]

    def close(self) -> None:
        """Close every provider made so far (:meth:`SandboxProvider.close`)."""
        with self._lock:
            made, self._providers = list(self._providers.values()), {}
        for provider in made:
            provider.close()

    def provider_for(self, spec: ExecSpec) -> SandboxProvider:
        """The provider that confines ``spec``: the named one, or ``auto``'s pick.

        Raises:
            SandboxUnavailable: it cannot enforce the mode, or is not usable here.
        """
        name = spec.sandbox
        if name == "auto":
            name = "none" if spec.mode == "danger-full-access" else self._pick(spec)
        cls = self.sandboxes.get(name)
        if spec.mode not in cls.MODES:
            raise SandboxUnavailable(
                f"sandbox {name!r} cannot enforce mode {spec.mode} "
                f"(it supports {', '.join(sorted(cls.MODES))})",
                hint="pick another --sandbox or --mode",
            )
        probe = self.probe(cls)
        if not probe.usable:
            raise SandboxUnavailable(
                f"sandbox {name!r} is not usable here: {probe.detail}",
                hint="run `stockade doctor` to see what this machine lacks",
            )
        with self._lock:
            provider = self._providers.get(name)
            if provider is None:
                provider = cls(self.config.plugins.settings.get(name))
                self._providers[name] = provider
        return provider

    def _pick(self, spec: ExecSpec) -> str:
        why = []
        candidates = sorted(self.sandboxes.classes(), key=lambda c: -c.PRIORITY)
        for cls in candidates:
            if cls.PLUGIN_NAME == "none" or spec.mode not in cls.MODES:
                continue
            probe = self.probe(cls)
            if probe.usable:
                return cls.PLUGIN_NAME
            why.append(f"{cls.PLUGIN_NAME}: {probe.detail}")
        found = "; ".join(why) if why else "no sandbox provider plugin is installed"
        raise SandboxUnavailable(
            f"cannot confine mode {spec.mode}: {found}",
            hint="install stockade-bubblewrap or stockade-landlock, or pass "
            "--mode danger-full-access to run unconfined on purpose",
            details={"mode": spec.mode, "tried": why},
        )
