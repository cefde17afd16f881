"""Copies of the bubblewrap provider, each with one mistake."""

from __future__ import annotations

import os
from typing import Any

import attrs
import stockade_bubblewrap.layout as bwrap_layout
import stockade_bubblewrap.provider as bwrap_provider
from stockade_bubblewrap.provider import BubblewrapSandbox

from stockade.confine.promises import Promise
from stockade.request.plan import HiddenPath, LaunchPlan
from stockade.request.spec import ExecSpec, Limits

from .base import (
    Mutant,
    Patch,
    Shim,
    bwrap_args,
    drop,
    rebind,
    setid_allowed,
    survey_without,
    without_secret,
)


class BwrapBindRoot(Mutant, BubblewrapSandbox):
    """``--bind / /`` where ``--ro-bind / /`` was meant: the whole machine writable."""

    PLUGIN_NAME = "mutant-bwrap-bind-root"
    BREAKS = Promise.WRITES_CONFINED
    SELECT = "test_every_kind_of_write"
    CONFINES_NOTHING = True

    def mutate(self, plan: LaunchPlan, spec: ExecSpec) -> LaunchPlan:
        return bwrap_args(plan, lambda a: rebind(a, {"/"}, "--ro-bind", "--bind"))


class BwrapSslPrivate(Mutant, BubblewrapSandbox):
    """The system-secret list copied without ``/etc/ssl/private`` (TLS private keys)."""

    PLUGIN_NAME = "mutant-bwrap-ssl-private"
    BREAKS = Promise.SYSTEM_SECRETS
    SELECT = "test_every_system_secret"

    def patches(self) -> list[Patch]:
        return [(bwrap_layout, "system_secrets", without_secret("/etc/ssl/private"))]


class BwrapPreCommit(Mutant, BubblewrapSandbox):
    """An existing ``.pre-commit-config.yaml`` left out of the protected mounts."""

    PLUGIN_NAME = "mutant-bwrap-pre-commit"
    # Its layer keeps the content (the commit quarantines protected names): the name is
    # writable while the command runs, which bubblewrap promises it is not.
    BREAKS = Promise.PROTECTED_READ_ONLY
    SELECT = "test_every_protected_name"

    def patches(self) -> list[Patch]:
        return [(bwrap_layout, "paths", survey_without(".pre-commit-config.yaml"))]


class BwrapSession(Mutant, BubblewrapSandbox):
    """``--new-session`` dropped: the command keeps the caller's terminal."""

    PLUGIN_NAME = "mutant-bwrap-session"
    BREAKS = Promise.CALLER_SESSION
    SELECT = "test_the_command_cannot_read_what"

    def mutate(self, plan: LaunchPlan, spec: ExecSpec) -> LaunchPlan:
        return bwrap_args(plan, lambda a: drop(a, "--new-session"))


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
        return bwrap_args(plan, lambda a: rebind(a, ws, "--ro-bind", "--bind"))


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

        return bwrap_args(plan, share)


class BwrapSharePid(Mutant, BubblewrapSandbox):
    """Every namespace unshared but the PID one."""

    PLUGIN_NAME = "mutant-bwrap-share-pid"
    BREAKS = Promise.PID_NAMESPACE
    SELECT = "test_host_processes_are_not_even_listed"

    def mutate(self, plan: LaunchPlan, spec: ExecSpec) -> LaunchPlan:
        each = ["--unshare-user-try", "--unshare-ipc", "--unshare-net", "--unshare-uts"]
        return bwrap_args(
            plan, lambda a: [x for y in a for x in (each if y == "--unshare-all" else [y])]
        )


class BwrapNoSeccomp(Mutant, BubblewrapSandbox):
    """The seccomp filter never given to bwrap."""

    PLUGIN_NAME = "mutant-bwrap-no-seccomp"
    BREAKS = Promise.SECCOMP
    SELECT = "test_the_filter_refuses_each_call"

    def mutate(self, plan: LaunchPlan, spec: ExecSpec) -> LaunchPlan:
        return bwrap_args(plan, lambda a: drop(a, "--seccomp", 1))


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
        plan = bwrap_args(plan, lambda a: rebind(a, kept, "--ro-bind", "--bind"))
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
        return bwrap_args(plan, lambda a: rebind(a, caches, "--ro-bind", "--bind"))


class BwrapHostTmp(Mutant, BubblewrapSandbox):
    """The scratch list copied without ``/tmp``: the host's ``/tmp`` shows (read-only)."""

    PLUGIN_NAME = "mutant-bwrap-host-tmp"
    BREAKS = Promise.PRIVATE_VIEW
    SELECT = "test_private_tmp or test_every_scratch_folder"
    ALSO = frozenset({Promise.PRIVATE_SCRATCH})

    def patches(self) -> list[Patch]:
        kept = tuple(d for d in bwrap_layout.PRIVATE_DIRS if d != "/tmp")
        return [(bwrap_layout, "PRIVATE_DIRS", kept)]


class BwrapDirect(Mutant, BubblewrapSandbox):
    """Writable roots bound as they are, no layer: a command's planted names are seen by
    other programs while it runs (the provider still declares that they never are)."""

    PLUGIN_NAME = "mutant-bwrap-direct"
    BREAKS = Promise.PROTECTED_NEVER_VISIBLE
    SELECT = "test_a_planted_protected_name_is_never_visible"

    def _layers(self, spec: ExecSpec, bwrap: str) -> tuple[Any, ...]:
        del spec, bwrap
        return ()


class BwrapSetid(Mutant, BubblewrapSandbox):
    """The filter of layered writes (setuid and setgid bits allowed: the landing clears
    them) kept where the writes are direct, as when no layer can be made for a command."""

    PLUGIN_NAME = "mutant-bwrap-setid"
    BREAKS = Promise.NO_SETID
    SELECT = "test_no_file_lands_setuid_or_setgid"

    def patches(self) -> list[Patch]:
        return [(bwrap_provider, "seccomp", setid_allowed())]

    def mutate_spec(self, spec: ExecSpec) -> ExecSpec:
        return attrs.evolve(spec, layer_store=None)  # no layers: the writes are direct
