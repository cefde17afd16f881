"""The ``landlock`` sandbox provider: confinement without namespaces.

Landlock needs no user namespace, so it works where bubblewrap cannot start: under
Ubuntu's AppArmor restriction, in containers, as an ordinary user on kernels from 5.13.

How it is applied. Landlock and seccomp restrict the calling *thread* and whatever it starts
afterwards. So nothing runs in a forked child of the (multi-threaded) host: the ruleset and
the filter are prepared here, in the host, and the executor spawns the command from a fresh
thread that first calls :meth:`Prepared.restrict` on itself (``no_new_privs``, Landlock,
seccomp). The thread ends right after the spawn; the host's other threads are untouched.

What it enforces, in both modes: read and execute everywhere except the credential stores,
the host's ``/tmp``, ``/run`` and ``~/.cache`` (names there stay listable, contents do not),
writes only to a private scratch directory (``TMPDIR``) and, in ``workspace-write``, to the
writable roots minus their protected paths; no TCP (ABI 4) and the shared seccomp policy
(no sockets but netlink, and Unix ones only when allowed); abstract Unix sockets and signals
scoped to the sandbox (ABI 6); device ioctls refused (ABI 5). On an older ABI the missing
parts are listed, and the run happens only when ``accept_partial`` is set.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from typing import Any, ClassVar

import attrs
from attrs import frozen

from stockade import protected, seccomp
from stockade.errors import SandboxUnavailable
from stockade.sandbox import SandboxProvider, looks_denied
from stockade.types import ExecSpec, LaunchPlan, Mode, Probe, ProcessOutcome, SandboxFacts

from . import abi
from .rules import Rule, expand
from .settings import Settings

# The host's scratch and socket directories: unreadable; a private TMPDIR replaces them.
# /dev too: only the devices below are granted (no disks, no terminals, no /dev/shm).
PRIVATE_DIRS = ("/tmp", "/var/tmp", "/run", "/var/run", "/dev")  # noqa: S108 - masked
_SINK = abi.FS_READ_FILE | abi.FS_WRITE_FILE | abi.FS_IOCTL_DEV  # ioctls there are harmless
DEVICES = {
    "/dev/null": _SINK,
    "/dev/zero": _SINK,
    "/dev/full": _SINK,
    "/dev/random": abi.FS_READ_FILE,
    "/dev/urandom": abi.FS_READ_FILE,
}
# What a masked path keeps: its names can be listed (Landlock cannot take that away from a
# directory above it without taking it from everything there), nothing else.
MASKED_KEEPS = abi.FS_READ_DIR
FULL_ABI = 6  # scopes for signals and abstract sockets: nothing left to seccomp's care
_SECCOMP_SET_MODE_FILTER = 1
_SYS_SECCOMP = 317  # x86_64; the shared policy is x86_64-only too


def missing_at(level: int) -> tuple[str, ...]:
    """What Landlock ABI ``level`` cannot enforce that this provider promises."""
    missing = []
    if level < 3:
        missing.append("truncate of files outside the writable roots (ABI 3)")
    if level < 5:
        missing.append("device ioctls (ABI 5)")
    if level < FULL_ABI:
        missing.append("signals to processes outside the sandbox (ABI 6)")
    return tuple(missing)


@frozen
class Prepared:
    """A ruleset and a filter ready to be applied by the thread that spawns the command.

    Attributes:
        ruleset: the Landlock ruleset descriptor (closed by the provider's ``release``).
        program: the seccomp BPF program.
        scratch: the private scratch directory (removed by ``release``).
        rules: the rules in the ruleset (for ``doctor`` and the tests).
    """

    ruleset: int
    program: bytes
    scratch: str
    rules: tuple[Rule, ...]

    def restrict(self) -> None:
        """Confine the calling thread for good: no capabilities, ``no_new_privs``, Landlock,
        then seccomp."""
        abi.drop_capabilities()
        abi.restrict_self(self.ruleset)
        _load_filter(self.program)


class LandlockSandbox(SandboxProvider):
    """Confines commands with Landlock and the shared seccomp policy, without namespaces.

    Settings (``[plugins.settings.landlock]``): see :class:`~stockade_landlock.settings.Settings`.
    """

    PLUGIN_NAME = "landlock"
    MODES: ClassVar[frozenset[Mode]] = frozenset({"read-only", "workspace-write"})
    PRIORITY = 50  # below bubblewrap: namespaces hide more (other processes, host /tmp)

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.settings = Settings.parse(self.options)
        self._prepared: dict[int, Prepared] = {}

    @classmethod
    def probe(cls) -> Probe:
        """Whether Landlock is enabled here, which ABI it offers, and the seccomp filter."""
        level = abi.version()
        if level == 0:
            return Probe(
                False,
                "Landlock is not enabled in this kernel (needs 5.13 and landlock in lsm=)",
            )
        why = seccomp.unavailable()
        if why is not None:
            return Probe(
                False, f"Landlock ABI {level}; but the seccomp filter cannot be built: {why}"
            )
        missing = missing_at(level)
        gaps = f"; partial: no {', no '.join(missing)}" if missing else ""
        return Probe(True, f"Landlock ABI {level}{gaps}")

    def level(self) -> int:
        """The ABI in use: the kernel's, capped by the ``max_abi`` setting."""
        level = abi.version()
        cap = self.settings.max_abi
        return min(level, cap) if cap is not None else level

    def confine(self, spec: ExecSpec) -> LaunchPlan:
        """Prepare the ruleset and the filter; the plan's ``restrict`` applies them."""
        if spec.mode not in self.MODES:
            raise SandboxUnavailable(
                f"landlock does not run {spec.mode} commands",
                hint="danger-full-access runs unconfined, without this provider",
            )
        level = self.level()
        if level == 0:
            raise SandboxUnavailable(
                "Landlock is not enabled in this kernel",
                hint="run `stockade doctor`; boot with lsm=...,landlock or use bubblewrap",
            )
        missing = missing_at(level)
        if missing and not self.settings.accept_partial:
            raise SandboxUnavailable(
                f"Landlock ABI {level} cannot enforce: {'; '.join(missing)}",
                hint="set plugins.settings.landlock.accept_partial = true to run anyway",
                details={"abi": level, "missing": list(missing)},
            )
        program = self._program()
        scratch = tempfile.mkdtemp(prefix="stockade-landlock-")
        try:
            rules = self._rules(spec, scratch)
            ruleset = _ruleset(level, rules)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        prepared = Prepared(ruleset, program, scratch, tuple(rules))
        self._prepared[ruleset] = prepared
        env = {**spec.env, "TMPDIR": scratch, "XDG_CACHE_HOME": os.path.join(scratch, "cache")}
        facts = SandboxFacts(
            self.PLUGIN_NAME,
            spec.mode,
            enforcement="partial" if missing else "full",
            missing=missing,
        )
        return LaunchPlan.from_spec(
            spec, facts, env=env, restrict=prepared.restrict, new_session=True
        )

    def interpret(self, plan: LaunchPlan, outcome: ProcessOutcome) -> SandboxFacts:
        """Add ``denied`` when a failed run's stderr reads like a Landlock or seccomp refusal."""
        if looks_denied(outcome):
            return attrs.evolve(plan.facts, denied=True)
        return plan.facts

    def release(self, plan: LaunchPlan) -> None:
        """Close the ruleset and remove the scratch directory."""
        super().release(plan)
        restrict = plan.restrict
        owner = getattr(restrict, "__self__", None)
        if isinstance(owner, Prepared) and self._prepared.pop(owner.ruleset, None) is owner:
            with contextlib.suppress(OSError):
                os.close(owner.ruleset)
            shutil.rmtree(owner.scratch, ignore_errors=True)

    def _program(self) -> bytes:
        settings = self.settings
        try:
            return seccomp.bpf_program(
                network=False, unix=settings.unix_sockets, cache_dir=settings.seccomp_cache
            )
        except ImportError as error:
            why = f"pyseccomp is not installed ({error})"
        except OSError as error:
            why = f"libseccomp cannot be loaded ({error})"
        raise SandboxUnavailable(
            f"the seccomp filter cannot be built: {why}",
            hint="install stockade[seccomp] and the system's libseccomp2",
        )

    def _rules(self, spec: ExecSpec, scratch: str) -> list[Rule]:
        """The grants and carve-outs for ``spec``'s mode, expanded into rules."""
        settings = self.settings
        every = abi.FS_ALL
        writable: list[str] = []
        if spec.mode == "workspace-write":
            for root in (os.path.realpath(spec.cwd), *settings.writable_roots):
                real = os.path.realpath(root)
                if real == "/":
                    raise SandboxUnavailable(
                        "refusing / as a writable root: it would make every file writable",
                        hint="name a project directory as the workspace",
                    )
                if os.path.isdir(real) and real not in writable:
                    writable.append(real)
        keep, _ = (
            protected.scan(
                writable, settings.scan_limit, setting="plugins.settings.landlock.scan_limit"
            )
            if writable
            else ([], 0)
        )
        cache = seccomp.cache_path(
            network=False, unix=settings.unix_sockets, cache_dir=settings.seccomp_cache
        )
        keep += [sys.prefix, sys.base_prefix]
        if cache is not None:
            keep.append(os.path.dirname(cache))
        masked = [*PRIVATE_DIRS, *settings.deny_read, *protected.socket_paths(os.environ)]
        for home in protected.homes(spec.env, os.environ):
            masked.append(os.path.join(home, ".cache"))
            masked += [os.path.join(home, name) for name in protected.CREDENTIAL_STORES]
        grants = [("/", abi.FS_READ), (scratch, every), *((r, every) for r in writable)]
        grants += list(DEVICES.items())
        carveouts = [(p, every & ~MASKED_KEEPS) for p in masked]
        carveouts += [(p, every & ~abi.FS_READ) for p in keep]
        return expand(grants, carveouts)


def _ruleset(level: int, rules: list[Rule]) -> int:
    handled = abi.fs_rights(level)
    fd = abi.create_ruleset(level, fs=handled, net=abi.net_rights(level), scoped=abi.scopes(level))
    try:
        for rule in rules:
            access = rule.access & handled
            if access:
                abi.add_path_rule(fd, rule.path, access)
    except BaseException:
        os.close(fd)
        raise
    return fd


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def _load_filter(program: bytes) -> None:
    """Install the BPF ``program`` on the calling thread (``no_new_privs`` must be set)."""
    buffer = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(_SYS_SECCOMP, _SECCOMP_SET_MODE_FILTER, 0, ctypes.byref(prog)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp(SET_MODE_FILTER): {os.strerror(err)}")
