"""The attack suite's ground: a box of canaries outside the workspace, and the provider under test.

Everything is planted under the user's home (never under ``/tmp``, which a sandbox may
replace with a private one: a canary there would be hidden for the wrong reason). Each
attack has a control beside it (a file that must be readable, a write that must land) so
that a pass means the sandbox stopped the attack, not that the attack never reached anything.

Nothing here imports pytest: the plugin (:mod:`stockade.conformance.plugin`) does.
"""

from __future__ import annotations

import functools
import os
import platform
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..config.schema import Config
from ..confine.promises import CORE, Promise, pins
from ..confine.provider import SandboxProvider
from ..plugin.manager import Hooks, get_plugin_manager
from ..request.literals import Mode
from ..request.plan import HiddenPath
from ..request.spec import ExecRequest
from ..trees import remove_tree

PYTHON = "/usr/bin/python3"
"""The system interpreter: every sandbox must show it (it is what the attacks run)."""

MODES: tuple[Mode, ...] = ("read-only", "workspace-write")
"""The confining modes the kit attacks (those of them the provider enforces)."""

PRELUDE = """out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = "done"
    except OSError as e:
        out[name] = e.strerror
"""
"""Attack scripts' recorder, for the text they run inside the sandbox: ``attempt(name, fn)``
keeps ``done``, or the error's text, under ``name`` in ``out``."""

LIBC = """import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def call(rc):
    if rc < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
"""
"""Attack scripts' way to system calls Python does not wrap: ``libc``, and ``call(rc)``,
which raises a failed call's ``OSError``."""

REFUSED = 6
"""The kit's exit status when it refuses to attack a provider as root (pytest uses 0-5)."""

REFUSALS = ("Permission denied", "Operation not permitted", "Read-only file system")
"""How a refused write may read: ``EACCES``, ``EPERM`` or ``EROFS``."""


@functools.cache
def providers() -> Mapping[str, type[SandboxProvider]]:
    """Every sandbox provider installed (built in, and from ``stockade`` entry points), by
    name; read once per process."""
    hooks = Hooks(get_plugin_manager(Config(), environ=os.environ))
    registry = hooks.sandboxes()
    return MappingProxyType({cls.PLUGIN_NAME: cls for cls in registry.classes()})


def expectation(cls: type[SandboxProvider], promise: Promise) -> tuple[str, str]:
    """What the kit expects of ``cls`` for ``promise``: ``("hold", "")``, ``("pinned",
    reason)`` or ``("skip", reason)`` (an extra promise neither declared nor pinned)."""
    pinned = pins(cls.GAPS)
    if promise in pinned:
        return "pinned", pinned[promise]
    if promise in CORE or promise in cls.PROMISES:
        return "hold", ""
    return "skip", f"{cls.PLUGIN_NAME} does not declare {promise.value}"


def incapable(cls: type[SandboxProvider]) -> str | None:
    """What this machine lacks to run the attacks on ``cls`` (``None``: nothing). The kit
    fails on it: a missing kernel feature is a failure, never a silent skip."""
    if platform.machine() != "x86_64":
        return "the attack suite uses x86_64 syscall numbers"
    if not os.path.exists(PYTHON):
        return f"{PYTHON} is needed inside the sandbox"
    probe = cls.probe()
    if not probe.usable:
        return f"{cls.PLUGIN_NAME} must work on this machine: {probe.detail}"
    return None


class Box:
    """A private directory with ``ws`` (the workspace), ``home`` and ``outside``, for one
    provider.

    Attributes:
        sandbox: the provider's name, as requests select it.
        provider: the provider's class (its declarations).
        canary: a random string planted in ``secret`` (outside the workspace).
    """

    def __init__(self, root: Path, sandbox: str, provider: type[SandboxProvider]) -> None:
        self.root = root
        self.sandbox = sandbox
        self.provider = provider
        self.canary = "CANARY-" + secrets.token_hex(8)
        self.ws = root / "ws"
        self.home = root / "home"
        self.outside = root / "outside"
        for d in (self.ws, self.home, self.outside):
            d.mkdir()
        self.secret = self.outside / "secret.txt"
        self.secret.write_text(self.canary)

    def keeps(self, promise: Promise) -> bool:
        """Whether the provider keeps ``promise``: a core one not pinned, or a declared one."""
        return expectation(self.provider, promise)[0] == "hold"

    @staticmethod
    def refused(text: str) -> bool:
        """Whether ``text`` reads as a refused write (:data:`REFUSALS`)."""
        return any(reason in text for reason in REFUSALS)

    def request(
        self,
        argv: Sequence[str],
        *,
        mode: Mode = "workspace-write",
        **kw: Any,  # noqa: ANN401 - ExecRequest's own keywords, passed through
    ) -> ExecRequest:
        """A request to run ``argv`` in the workspace, with ``HOME`` at ``home``."""
        env: Mapping[str, str] = {"HOME": str(self.home), **kw.pop("env", {})}
        return ExecRequest(
            list(argv), str(self.ws), mode=mode, sandbox=self.sandbox, env=env, timeout=60, **kw
        )

    def py(
        self,
        source: str,
        *args: str,
        mode: Mode = "workspace-write",
        **kw: Any,  # noqa: ANN401 - ExecRequest's own keywords, passed through
    ) -> ExecRequest:
        """A request to run ``source`` with the system Python (``-S``), and ``args``."""
        return self.request([PYTHON, "-S", "-c", source, *args], mode=mode, **kw)

    def hides(
        self, path: str, *, mode: Mode = "workspace-write", config: Config | None = None
    ) -> HiddenPath | None:
        """What the provider says of ``path`` for a command run in this box: where it hides
        it (:meth:`~stockade.confine.provider.SandboxProvider.hides`), or ``None``."""
        from ..policy.resolve import resolve

        config = config or Config(sandbox=self.sandbox)
        spec = resolve(self.py("pass", mode=mode), config, os.environ)
        return self.provider().hides(path, spec)

    def remove(self) -> None:
        """Delete the box, whatever modes the attacks left on its folders.

        Only folders get their owner's rights back (to list and empty them): a file here may
        be a hard link an attack made to a host file (``/etc/passwd``), whose mode must not
        change; removing a name needs no right on the file itself. Each folder is opened
        without following a symlink and changed through that descriptor, so a process an
        attack left behind cannot swap a folder for a link to a host folder in between. Not
        recursive (:func:`stockade.trees.remove_tree`): an attack may leave a tree of any
        depth.
        """
        remove_tree(str(self.root))
