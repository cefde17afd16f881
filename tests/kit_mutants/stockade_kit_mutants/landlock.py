"""Copies of the Landlock provider, each with one mistake."""

from __future__ import annotations

import os
import sys
from typing import Any

import attrs
import stockade_landlock.engine as ll_engine
import stockade_landlock.rules as ll_rules
from stockade_landlock import abi
from stockade_landlock.provider import LandlockSandbox
from stockade_landlock.supervisor import rules as ll_rules_supervised
from stockade_landlock.supervisor import terminals as ll_terminals

from stockade.confine import seccomp
from stockade.confine.promises import Promise
from stockade.request.plan import LaunchPlan
from stockade.request.spec import ExecSpec

from .base import Mutant, Patch, Shim, setid_allowed, survey_without, without_secret


class LandlockSslPrivate(Mutant, LandlockSandbox):
    """The system-secret list copied without ``/etc/ssl/private`` (TLS private keys)."""

    PLUGIN_NAME = "mutant-landlock-ssl-private"
    BREAKS = Promise.SYSTEM_SECRETS
    SELECT = "test_every_system_secret"

    def patches(self) -> list[Patch]:
        return [(ll_engine, "system_secrets", without_secret("/etc/ssl/private"))]


class LandlockPreCommit(Mutant, LandlockSandbox):
    """An existing ``.pre-commit-config.yaml`` left out of what the host puts back."""

    PLUGIN_NAME = "mutant-landlock-pre-commit"
    BREAKS = Promise.PROTECTED_NAMES
    SELECT = "test_every_protected_name"

    def patches(self) -> list[Patch]:
        return [(ll_engine, "protected", survey_without(".pre-commit-config.yaml"))]


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

        # Where the supervisor runs it performs each truncate itself, inside the ruleset's
        # writable roots only, and hides the mistake; on a kernel without it (the fallback
        # every Landlock host may meet) the mistake is the whole story.
        unsupervised = Shim(ll_engine.supervisor, unavailable=lambda: "a mutant without it")
        return [
            (ll_rules, "abi", Shim(abi, fs_rights=fs_rights)),
            (ll_engine, "supervisor", unsupervised),
        ]


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


class LandlockProcOpen(Mutant, LandlockSandbox):
    """The command's extra layer leaves ``/proc`` open: the supervisor still judges every
    ``/proc/...`` path it is sent, but a relative open, a swapped path or a symlink reaches
    the kernel unjudged."""

    PLUGIN_NAME = "mutant-landlock-proc-open"
    BREAKS = Promise.PROCESS_ENTRIES
    SELECT = "test_other_processes_entries"

    def patches(self) -> list[Patch]:
        return [(ll_terminals, "PROC", "/nonexistent-proc")]


class _AnyNewName(ll_rules_supervised.Rules):
    def refuses_new(
        self, path: str, how: ll_rules_supervised.Making, at: tuple[int, bytes] | None = None
    ) -> bool:
        del how, at
        return self.refuses(path)  # the names the survey found, nothing new


class LandlockNewNames(Mutant, LandlockSandbox):
    """The supervisor judges only the protected names the survey found, not new ones."""

    PLUGIN_NAME = "mutant-landlock-new-names"
    BREAKS = Promise.NEW_NAMES_REFUSED
    SELECT = "test_every_new_protected_name"

    def patches(self) -> list[Patch]:
        return [(ll_engine, "Rules", _AnyNewName)]


class _NamedRepositoriesOnly(ll_rules_supervised.Rules):
    def refuses_new(
        self, path: str, how: ll_rules_supervised.Making, at: tuple[int, bytes] | None = None
    ) -> bool:
        del at  # a folder that becomes a repository by its contents is never looked at
        return super().refuses_new(path, how)


class LandlockBareRepositories(Mutant, LandlockSandbox):
    """The supervisor keeps a ``.git`` the command makes, but not a repository made under
    another name (``git init --bare x.git``): its hooks take anything."""

    PLUGIN_NAME = "mutant-landlock-bare-repositories"
    BREAKS = Promise.NEW_NAMES_REFUSED
    SELECT = "test_a_repository_under_any_name"

    def patches(self) -> list[Patch]:
        return [(ll_engine, "Rules", _NamedRepositoriesOnly)]


@attrs.frozen
class _KeepCapabilities(ll_engine.Prepared):
    def restrict(self) -> None:
        abi.restrict_self(self.ruleset)
        ll_engine._load_filter(self.program)


class LandlockSetid(Mutant, LandlockSandbox):
    """The filter of a command whose supervisor judges its ``chmod`` calls, where none runs:
    a setuid or setgid bit set on a file of the workspace stays."""

    PLUGIN_NAME = "mutant-landlock-setid"
    BREAKS = Promise.NO_SETID
    SELECT = "test_no_file_lands_setuid_or_setgid"

    def patches(self) -> list[Patch]:
        # Where the supervisor runs it refuses the bits itself and hides the mistake; judged,
        # as the truncate mutant is, as on a kernel without it.
        unsupervised = Shim(ll_engine.supervisor, unavailable=lambda: "a mutant without it")
        return [
            (ll_engine, "seccomp", setid_allowed()),
            (ll_engine, "supervisor", unsupervised),
        ]
