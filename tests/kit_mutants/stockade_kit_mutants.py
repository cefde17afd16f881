"""Deliberately broken sandbox providers: the conformance kit must fail each of them.

Each mutant is the bubblewrap or Landlock provider with one realistic mistake, the kind a
backend author makes (a list copied short, an option dropped, the host's environment merged
back). ``tests/test_kit_mutants.py`` installs this module out of tree (a ``*.dist-info`` with
a ``stockade`` entry point, on ``PYTHONPATH``) and runs ``python -m stockade.conformance``
against each mutant, on the attacks of the promise it breaks, and requires the kit to fail
with that promise named. Never shipped: it lives in the repository's tests only.

A mistake is made by swapping a name the provider's own modules look up (never the core's
lists, which the kit reads too) for the duration of ``confine`` and ``hides``, or by
rewriting the plan ``confine`` returned.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, ClassVar

import attrs
import stockade_bubblewrap.layout as bwrap_layout
import stockade_bubblewrap.provider as bwrap_provider
import stockade_landlock.engine as ll_engine
import stockade_landlock.rules as ll_rules
from stockade_bubblewrap.provider import BubblewrapSandbox
from stockade_landlock import abi
from stockade_landlock.provider import LandlockSandbox

from stockade import hookimpl
from stockade.confine import protected, seccomp, system_secrets
from stockade.confine.promises import Promise
from stockade.confine.provider import SandboxProvider, sealed_memfd
from stockade.request.plan import HiddenPath, LaunchPlan
from stockade.request.spec import ExecSpec, Limits


class Shim:
    """A module with some names replaced: every other name is the module's own."""

    def __init__(self, module: ModuleType, **overrides: object) -> None:
        self._module = module
        self.__dict__.update(overrides)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


Patch = tuple[object, str, object]


class Mutant(SandboxProvider):
    """One mistake: ``patches`` hold while ``confine`` and ``hides`` run; ``mutate`` may
    rewrite the plan. ``BREAKS``: the promise the kit must name; ``SELECT``: the ``-k``
    expression of the kit's attacks to run; ``ROOT``: only root can see the harm."""

    BREAKS: ClassVar[Promise]
    SELECT: ClassVar[str]
    ROOT: ClassVar[bool] = False
    CONFINES_NOTHING: ClassVar[bool] = False  # as root the kit must refuse to attack it
    ALSO: ClassVar[frozenset[Promise]] = frozenset()  # more promises it must name

    def patches(self) -> list[Patch]:
        return []

    def mutate_spec(self, spec: ExecSpec) -> ExecSpec:
        return spec

    def mutate(self, plan: LaunchPlan, spec: ExecSpec) -> LaunchPlan:
        del spec
        return plan

    @contextlib.contextmanager
    def _mutated(self) -> Iterator[None]:
        saved = []
        try:
            for target, name, value in self.patches():
                saved.append((target, name, getattr(target, name)))
                setattr(target, name, value)
            yield
        finally:
            for target, name, value in reversed(saved):
                setattr(target, name, value)

    def confine(self, spec: ExecSpec) -> LaunchPlan:
        spec = self.mutate_spec(spec)
        with self._mutated():
            plan = super().confine(spec)  # type: ignore[safe-super]
        if plan.facts.provider != self.PLUGIN_NAME:  # a copy says its own name (Landlock's
            facts = attrs.evolve(plan.facts, provider=self.PLUGIN_NAME)  # engine names it)
            plan = attrs.evolve(plan, facts=facts)
        return self.mutate(plan, spec)

    def hides(self, path: str, spec: ExecSpec) -> HiddenPath | None:
        spec = self.mutate_spec(spec)
        with self._mutated():
            return super().hides(path, spec)


# --- helpers for the mistakes -----------------------------------------------------------------


def _without_secret(prefix: str) -> Shim:
    real = system_secrets.system_secrets

    def found(homes: Any, extra: Any = ()) -> list[str]:
        return [p for p in real(homes, extra) if not p.startswith(prefix)]

    return Shim(system_secrets, system_secrets=found)


def _survey_without(name: str) -> Shim:
    real = protected.survey

    def survey(*args: Any, **kw: Any) -> protected.Survey:
        found = real(*args, **kw)
        kept = tuple(p for p in found.read_only if os.path.basename(p) != name)
        return attrs.evolve(found, read_only=kept)

    return Shim(protected, survey=survey)


def _bwrap_args(plan: LaunchPlan, change: Callable[[list[str]], list[str]]) -> LaunchPlan:
    """``plan`` with bwrap's options (its ``--args`` memfd) rewritten by ``change``."""
    old = plan.pass_fds[0]
    raw = os.pread(old, 1 << 24, 0)
    args = change([a.decode() for a in raw.split(b"\0")[:-1]])
    new = sealed_memfd("stockade-bwrap-args", b"".join(a.encode() + b"\0" for a in args))
    os.close(old)
    argv = list(plan.argv)
    argv[argv.index("--args") + 1] = str(new)
    return attrs.evolve(plan, argv=argv, pass_fds=(new, *plan.pass_fds[1:]))


def _drop(args: list[str], option: str, values: int = 0) -> list[str]:
    out, skip = [], 0
    for arg in args:
        if skip:
            skip -= 1
        elif arg == option:
            skip = values
        else:
            out.append(arg)
    return out


def _rebind(args: list[str], paths: set[str], old: str, new: str) -> list[str]:
    out = list(args)
    for i in range(len(out) - 2):
        if out[i] == old and out[i + 1] in paths and out[i + 1] == out[i + 2]:
            out[i] = new
    return out


# --- bubblewrap -------------------------------------------------------------------------------


class BwrapBindRoot(Mutant, BubblewrapSandbox):
    """``--bind / /`` where ``--ro-bind / /`` was meant: the whole machine writable."""

    PLUGIN_NAME = "mutant-bwrap-bind-root"
    BREAKS = Promise.WRITES_CONFINED
    SELECT = "test_every_kind_of_write"
    CONFINES_NOTHING = True

    def mutate(self, plan: LaunchPlan, spec: ExecSpec) -> LaunchPlan:
        return _bwrap_args(plan, lambda a: _rebind(a, {"/"}, "--ro-bind", "--bind"))


class BwrapSslPrivate(Mutant, BubblewrapSandbox):
    """The system-secret list copied without ``/etc/ssl/private`` (TLS private keys)."""

    PLUGIN_NAME = "mutant-bwrap-ssl-private"
    BREAKS = Promise.SYSTEM_SECRETS
    SELECT = "test_every_system_secret"

    def patches(self) -> list[Patch]:
        return [(bwrap_layout, "system_secrets", _without_secret("/etc/ssl/private"))]


class BwrapPreCommit(Mutant, BubblewrapSandbox):
    """An existing ``.pre-commit-config.yaml`` left out of the protected mounts."""

    PLUGIN_NAME = "mutant-bwrap-pre-commit"
    BREAKS = Promise.PROTECTED_NAMES
    SELECT = "test_every_protected_name"

    def patches(self) -> list[Patch]:
        return [(bwrap_layout, "paths", _survey_without(".pre-commit-config.yaml"))]


class BwrapSession(Mutant, BubblewrapSandbox):
    """``--new-session`` dropped: the command keeps the caller's terminal."""

    PLUGIN_NAME = "mutant-bwrap-session"
    BREAKS = Promise.CALLER_SESSION
    SELECT = "test_the_command_cannot_read_what"

    def mutate(self, plan: LaunchPlan, spec: ExecSpec) -> LaunchPlan:
        return _bwrap_args(plan, lambda a: _drop(a, "--new-session"))


class BwrapHostEnv(Mutant, BubblewrapSandbox):
    """The host's environment merged under the command's."""

    PLUGIN_NAME = "mutant-bwrap-host-env"
    BREAKS = Promise.ENVIRONMENT
    SELECT = "test_the_hosts_environment"

    def mutate_spec(self, spec: ExecSpec) -> ExecSpec:
        return attrs.evolve(spec, env={**os.environ, **spec.env})


class BwrapHostInstall(Mutant, BubblewrapSandbox):
    """The host's own installation (its Python, bwrap, the seccomp cache) not kept
    read-only inside a writable root."""

    PLUGIN_NAME = "mutant-bwrap-host-install"
    BREAKS = Promise.HOST_INSTALLATION
    SELECT = "test_installation"

    def patches(self) -> list[Patch]:
        return [(bwrap_provider, "_resolved", lambda *paths: ())]


class BwrapHomeCache(Mutant, BubblewrapSandbox):
    """Each home's ``.cache`` shown as it is instead of replaced by an empty folder."""

    PLUGIN_NAME = "mutant-bwrap-home-cache"
    BREAKS = Promise.PRIVATE_SCRATCH
    SELECT = "test_every_scratch_folder"

    def patches(self) -> list[Patch]:
        real = bwrap_layout._masks

        def masks(*args: Any, **kw: Any) -> list[Any]:
            return [m for m in real(*args, **kw) if not m.scratch]

        return [(bwrap_layout, "_masks", masks)]


class BwrapCmdline(Mutant, BubblewrapSandbox):
    """bwrap's options (the environment, credentials included) on its command line."""

    PLUGIN_NAME = "mutant-bwrap-cmdline"
    BREAKS = Promise.CREDENTIALS_OFF_COMMAND_LINE
    SELECT = "test_the_environment_is_never"

    def mutate(self, plan: LaunchPlan, spec: ExecSpec) -> LaunchPlan:
        fd = plan.pass_fds[0]
        args = [a.decode() for a in os.pread(fd, 1 << 24, 0).split(b"\0")[:-1]]
        cut = plan.argv.index("--args")
        argv = (*plan.argv[:cut], *args, *plan.argv[cut + 2 :])
        return attrs.evolve(plan, argv=argv)


class BwrapReadOnlyWorkspace(Mutant, BubblewrapSandbox):
    """In ``read-only``, the workspace bound writable."""

    PLUGIN_NAME = "mutant-bwrap-ro-workspace"
    BREAKS = Promise.WRITES_CONFINED
    SELECT = "test_nothing_outside_the_workspace_is_writable"

    def mutate(self, plan: LaunchPlan, spec: ExecSpec) -> LaunchPlan:
        if spec.mode != "read-only":
            return plan
        ws = {os.path.realpath(spec.workspace)}
        return _bwrap_args(plan, lambda a: _rebind(a, ws, "--ro-bind", "--bind"))


class BwrapShortStores(Mutant, BubblewrapSandbox):
    """The credential-store list copied without its last entry (``.git-credentials``)."""

    PLUGIN_NAME = "mutant-bwrap-short-stores"
    BREAKS = Promise.CREDENTIAL_STORES
    SELECT = "test_credential_stores_are_unreadable"

    def patches(self) -> list[Patch]:
        from stockade.confine import stores

        short = stores.CREDENTIAL_STORES[:-1]
        return [(bwrap_layout, "stores", Shim(stores, CREDENTIAL_STORES=short))]


class BwrapStoreShown(Mutant, BubblewrapSandbox):
    """Stockade's own state (``spec.hidden``) not masked."""

    PLUGIN_NAME = "mutant-bwrap-store-shown"
    BREAKS = Promise.STORE_HIDDEN
    SELECT = "test_a_command_cannot_read_or_change_the_record"

    def mutate_spec(self, spec: ExecSpec) -> ExecSpec:
        return attrs.evolve(spec, hidden=())


class BwrapNoHides(Mutant, BubblewrapSandbox):
    """``hides`` left unimplemented: it never names a hidden folder."""

    PLUGIN_NAME = "mutant-bwrap-no-hides"
    BREAKS = Promise.HIDDEN_PATHS
    SELECT = "test_a_program_in_dev_shm_is_refused"

    def hides(self, path: str, spec: ExecSpec) -> HiddenPath | None:
        return None


class BwrapShareNet(Mutant, BubblewrapSandbox):
    """``--share-net`` (after ``--unshare-all``): the host's network namespace."""

    PLUGIN_NAME = "mutant-bwrap-share-net"
    BREAKS = Promise.EGRESS_PROXY
    SELECT = "test_listen or test_only_loopback"
    ALSO = frozenset({Promise.NETWORK_NAMESPACE})

    def mutate(self, plan: LaunchPlan, spec: ExecSpec) -> LaunchPlan:
        def share(args: list[str]) -> list[str]:
            at = args.index("--unshare-all") + 1  # (bwrap reads its options in order)
            return [*args[:at], "--share-net", *args[at:]]

        return _bwrap_args(plan, share)


class BwrapSharePid(Mutant, BubblewrapSandbox):
    """Every namespace unshared but the PID one."""

    PLUGIN_NAME = "mutant-bwrap-share-pid"
    BREAKS = Promise.PID_NAMESPACE
    SELECT = "test_host_processes_are_not_even_listed"

    def mutate(self, plan: LaunchPlan, spec: ExecSpec) -> LaunchPlan:
        each = ["--unshare-user-try", "--unshare-ipc", "--unshare-net", "--unshare-uts"]
        return _bwrap_args(
            plan, lambda a: [x for y in a for x in (each if y == "--unshare-all" else [y])]
        )


class BwrapNoSeccomp(Mutant, BubblewrapSandbox):
    """The seccomp filter never given to bwrap."""

    PLUGIN_NAME = "mutant-bwrap-no-seccomp"
    BREAKS = Promise.SECCOMP
    SELECT = "test_the_filter_refuses_each_call"

    def mutate(self, plan: LaunchPlan, spec: ExecSpec) -> LaunchPlan:
        return _bwrap_args(plan, lambda a: _drop(a, "--seccomp", 1))


class BwrapNoLimits(Mutant, BubblewrapSandbox):
    """The plan built without the spec's limits."""

    PLUGIN_NAME = "mutant-bwrap-no-limits"
    BREAKS = Promise.LIMITS
    SELECT = "test_a_file_past_the_size_limit"

    def mutate(self, plan: LaunchPlan, spec: ExecSpec) -> LaunchPlan:
        return attrs.evolve(plan, limits=Limits())


class BwrapProtectUnheld(Mutant, BubblewrapSandbox):
    """Protected names not mounted read-only (put back after the run instead), while
    ``protected-read-only`` is still declared."""

    PLUGIN_NAME = "mutant-bwrap-protect-unheld"
    BREAKS = Promise.PROTECTED_READ_ONLY
    SELECT = "test_protected_names_are_read_only_while"

    def mutate(self, plan: LaunchPlan, spec: ExecSpec) -> LaunchPlan:
        if plan.protection is None:
            return plan
        kept = set(plan.protection.read_only)
        plan = _bwrap_args(plan, lambda a: _rebind(a, kept, "--ro-bind", "--bind"))
        return attrs.evolve(plan, protection=attrs.evolve(plan.protection, held=False))


class BwrapHomeReadOnly(Mutant, BubblewrapSandbox):
    """The run's home not made writable (it stays as the read-only root shows it)."""

    PLUGIN_NAME = "mutant-bwrap-home-read-only"
    BREAKS = Promise.RUN_HOME
    SELECT = "test_the_run_home_is_writable"

    def patches(self) -> list[Patch]:
        real = bwrap_layout.build

        def build(**kw: Any) -> bwrap_layout.Layout:
            return real(**{**kw, "scratch": ()})

        return [(bwrap_layout, "build", build)]


class BwrapCachesWritable(Mutant, BubblewrapSandbox):
    """An agent's caches writable in ``read-only`` too."""

    PLUGIN_NAME = "mutant-bwrap-caches-writable"
    BREAKS = Promise.CACHES
    SELECT = "test_caches_are_read"

    def mutate(self, plan: LaunchPlan, spec: ExecSpec) -> LaunchPlan:
        caches = {os.path.realpath(c) for c in spec.caches}
        return _bwrap_args(plan, lambda a: _rebind(a, caches, "--ro-bind", "--bind"))


class BwrapHostTmp(Mutant, BubblewrapSandbox):
    """The scratch list copied without ``/tmp``: the host's ``/tmp`` shows (read-only)."""

    PLUGIN_NAME = "mutant-bwrap-host-tmp"
    BREAKS = Promise.PRIVATE_VIEW
    SELECT = "test_private_tmp or test_every_scratch_folder"
    ALSO = frozenset({Promise.PRIVATE_SCRATCH})

    def patches(self) -> list[Patch]:
        kept = tuple(d for d in bwrap_layout.PRIVATE_DIRS if d != "/tmp")
        return [(bwrap_layout, "PRIVATE_DIRS", kept)]


# --- Landlock ---------------------------------------------------------------------------------


class LandlockSslPrivate(Mutant, LandlockSandbox):
    """The system-secret list copied without ``/etc/ssl/private`` (TLS private keys)."""

    PLUGIN_NAME = "mutant-landlock-ssl-private"
    BREAKS = Promise.SYSTEM_SECRETS
    SELECT = "test_every_system_secret"

    def patches(self) -> list[Patch]:
        return [(ll_engine, "system_secrets", _without_secret("/etc/ssl/private"))]


class LandlockPreCommit(Mutant, LandlockSandbox):
    """An existing ``.pre-commit-config.yaml`` left out of what the host puts back."""

    PLUGIN_NAME = "mutant-landlock-pre-commit"
    BREAKS = Promise.PROTECTED_NAMES
    SELECT = "test_every_protected_name"

    def patches(self) -> list[Patch]:
        return [(ll_engine, "protected", _survey_without(".pre-commit-config.yaml"))]


class LandlockHostEnv(Mutant, LandlockSandbox):
    """The host's environment merged under the command's."""

    PLUGIN_NAME = "mutant-landlock-host-env"
    BREAKS = Promise.ENVIRONMENT
    SELECT = "test_the_hosts_environment"

    def mutate(self, plan: LaunchPlan, spec: ExecSpec) -> LaunchPlan:
        return attrs.evolve(plan, env={**os.environ, **plan.env})


class LandlockHostInstall(Mutant, LandlockSandbox):
    """The host's own installation (its Python, the seccomp cache) not carved out of a
    writable root."""

    PLUGIN_NAME = "mutant-landlock-host-install"
    BREAKS = Promise.HOST_INSTALLATION
    SELECT = "test_installation"

    def patches(self) -> list[Patch]:
        nowhere = "/nonexistent-stockade-kit-mutant"
        return [
            (ll_engine, "sys", Shim(sys, prefix=nowhere, base_prefix=nowhere)),
            (ll_engine, "seccomp", Shim(seccomp, cache_path=lambda **kw: None)),
        ]


class LandlockHomeCache(Mutant, LandlockSandbox):
    """Each home's ``.cache`` left readable instead of carved out."""

    PLUGIN_NAME = "mutant-landlock-home-cache"
    BREAKS = Promise.PRIVATE_SCRATCH
    SELECT = "test_every_scratch_folder"

    def patches(self) -> list[Patch]:
        real = ll_engine.Engine._veils

        def veils(engine: ll_engine.Engine, *args: Any) -> list[tuple[str, Any]]:
            return [(p, k) for p, k in real(engine, *args) if not p.endswith("/.cache")]

        return [(ll_engine.Engine, "_veils", veils)]


class LandlockTruncate(Mutant, LandlockSandbox):
    """``LANDLOCK_ACCESS_FS_TRUNCATE`` not handled: ``truncate`` is allowed everywhere."""

    PLUGIN_NAME = "mutant-landlock-truncate"
    BREAKS = Promise.WRITES_CONFINED
    SELECT = "test_every_kind_of_write"

    def patches(self) -> list[Patch]:
        def fs_rights(level: int) -> int:
            return abi.fs_rights(level) & ~abi.FS_TRUNCATE

        return [(ll_rules, "abi", Shim(abi, fs_rights=fs_rights))]


class LandlockBind(Mutant, LandlockSandbox):
    """``LANDLOCK_ACCESS_NET_BIND_TCP`` not handled: a network command may listen."""

    PLUGIN_NAME = "mutant-landlock-bind"
    BREAKS = Promise.EGRESS_PROXY
    SELECT = "test_listen"

    def patches(self) -> list[Patch]:
        def net_rights(level: int) -> int:
            return abi.net_rights(level) & ~abi.NET_BIND_TCP

        return [(ll_rules, "abi", Shim(abi, net_rights=net_rights))]


class LandlockUnixSockets(Mutant, LandlockSandbox):
    """The seccomp filter built with ``socket(AF_UNIX)`` allowed (a tool needed it), which
    Landlock does not hold to the sandbox for pathname sockets."""

    PLUGIN_NAME = "mutant-landlock-unix-sockets"
    BREAKS = Promise.NO_HOST_SOCKETS
    SELECT = "test_no_socket_reaches_the_host"

    def patches(self) -> list[Patch]:
        real = seccomp.required

        def required(**kw: Any) -> bytes:
            return real(**{**kw, "unix": True})

        return [(ll_engine, "seccomp", Shim(seccomp, required=required))]


class LandlockNoScopes(Mutant, LandlockSandbox):
    """The ruleset made without Landlock's scopes (ABI 6): signals reach host processes."""

    PLUGIN_NAME = "mutant-landlock-no-scopes"
    BREAKS = Promise.PROCESS_ISOLATION
    SELECT = "test_host_processes_cannot_be_signalled"

    def patches(self) -> list[Patch]:
        return [(ll_rules, "abi", Shim(abi, scopes=lambda level: 0))]


class LandlockCapabilities(Mutant, LandlockSandbox):
    """The capabilities never dropped (the command keeps root's)."""

    PLUGIN_NAME = "mutant-landlock-capabilities"
    BREAKS = Promise.NO_CAPABILITIES
    SELECT = "test_no_capabilities_even_as_root"
    ROOT = True

    def mutate(self, plan: LaunchPlan, spec: ExecSpec) -> LaunchPlan:
        old = plan.restrict.__self__  # type: ignore[union-attr]
        new = _KeepCapabilities(old.ruleset, old.program, old.scratch, old.rules)
        self.engine._prepared[old.ruleset] = new
        return attrs.evolve(plan, restrict=new.restrict)


@attrs.frozen
class _KeepCapabilities(ll_engine.Prepared):
    def restrict(self) -> None:
        abi.restrict_self(self.ruleset)
        ll_engine._load_filter(self.program)


MUTANTS: tuple[type[Mutant], ...] = tuple(
    cls
    for cls in list(globals().values())
    if isinstance(cls, type) and issubclass(cls, Mutant) and cls is not Mutant
)
"""Every mutant, in the order defined."""


@hookimpl
def stockade_register_sandboxes(register: Callable[[type[SandboxProvider]], None]) -> None:
    """Register every mutant under its ``mutant-*`` name."""
    for cls in MUTANTS:
        register(cls)
