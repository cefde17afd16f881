"""The ``unshare`` sandbox provider: util-linux ``unshare`` and Stockade's public helpers.

The plan runs ``unshare`` with a user, mount, PID, network, IPC, UTS and cgroup namespace
of the command's own and ``--kill-child``; inside, a small setup in Python
(:mod:`stockade_unshare.inside`) lays the mounts, stays as PID 1 and starts the seccomp
launcher (:mod:`stockade.confine.seccomp_exec`), which loads the shared filter and becomes
the command. Everything it hides comes from Stockade's lists; nothing is special-cased here.

A ``network`` command gets a loopback of its own and ``HTTP_PROXY`` pointing at a port on
it, where the init relays each connection to the egress proxy's Unix socket (bound in; the
command itself cannot open Unix sockets). It has no other way out.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from stockade.confine import protected, seccomp, seccomp_exec
from stockade.confine.hiding import Recent
from stockade.confine.promises import CORE, Gap, Promise
from stockade.confine.provider import SandboxProvider, looks_denied, proxy_env, sealed_memfd
from stockade.errors import ConfigError, SandboxUnavailable
from stockade.request.literals import Mode
from stockade.request.plan import HiddenPath, LaunchPlan, Probe, SandboxFacts
from stockade.request.result import ProcessOutcome
from stockade.request.spec import ExecSpec

from . import inside, layout

NAMESPACES = (
    "--user",
    "--map-root-user",
    "--mount",
    "--pid",
    "--fork",
    "--kill-child",
    "--net",
    "--ipc",
    "--uts",
    "--cgroup",
    "--mount-proc",
)
"""unshare's options: every namespace, the command's init killed if unshare dies."""
SETTINGS = ("scan_limit",)
INSIDE_PORT = 3128
"""Where the init relays a ``network`` command's proxy traffic, on the namespace's loopback."""


class UnshareSandbox(SandboxProvider):
    """Confines commands with util-linux ``unshare``, mounts laid inside, and seccomp.

    Settings (``[plugins.settings.unshare]``):
        scan_limit: directories to scan for protected paths before refusing.
    """

    PLUGIN_NAME = "unshare"
    MODES: ClassVar[frozenset[Mode]] = frozenset({"read-only", "workspace-write"})
    PRIORITY = 10  # below bubblewrap and Landlock: `auto` never prefers an example
    PROMISES: ClassVar[frozenset[Promise]] = CORE | {
        Promise.PID_NAMESPACE,
        Promise.NETWORK_NAMESPACE,
        Promise.PRIVATE_VIEW,
        Promise.PROTECTED_READ_ONLY,
    } - {Promise.SWAP_SAFE}
    GAPS: ClassVar[tuple[Gap, ...]] = (
        Gap(
            Promise.SWAP_SAFE,
            "the init mounts by path once the command starts: a folder swapped for a "
            "relative symlink after confine moves a mask onto the link's target",
        ),
    )

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        unknown = sorted(set(self.options) - set(SETTINGS))
        limit = self.options.get("scan_limit", protected.DEFAULT_SCAN_LIMIT)
        if unknown or not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            what = f"unknown keys {unknown}" if unknown else f"scan_limit {limit!r}"
            raise ConfigError(
                f"plugins.settings.unshare: {what}",
                hint="the one setting is scan_limit, a positive whole number of directories",
                details={"unknown": unknown} if unknown else {"scan_limit": limit},
            )
        self.scan_limit = limit
        self._recent = Recent()

    @classmethod
    def probe(cls) -> Probe:
        """Whether ``unshare`` here makes every namespace, and the filter can be had."""
        path = shutil.which("unshare")
        if path is None:
            return Probe(False, "util-linux unshare is not installed")
        why = seccomp.unavailable()
        if why is not None:
            return Probe(False, f"the seccomp filter cannot be built: {why}")
        trial = subprocess.run(
            [path, *NAMESPACES, "true"], capture_output=True, timeout=10, check=False
        )
        if trial.returncode != 0:
            said = trial.stderr.decode(errors="replace").strip()
            return Probe(False, f"{path} cannot make the namespaces here: {said}")
        return Probe(True, f"{path}: user, mount, PID, network, IPC, UTS, cgroup namespaces")

    def confine(self, spec: ExecSpec) -> LaunchPlan:
        """The plan: ``unshare ... python -I -S -c SETUP FD LAUNCHER...``."""
        if spec.mode not in self.MODES:
            raise SandboxUnavailable(f"unshare does not run {spec.mode} commands")
        unshare = shutil.which("unshare")
        if unshare is None:
            raise SandboxUnavailable("util-linux unshare is not installed")
        laid = self._layout(spec)
        self._recent.remember(spec, laid.hiding)
        hidden = [f for f, _kind in laid.hiding.hidden]
        python = seccomp_exec.launcher(0, spec.program, spec.argv, hidden=hidden)[0]
        document = {
            "ops": [[m.kind, m.path, m.how] for m in laid.mounts],
            "devices": [d for d in layout.DEVICES if os.path.exists(d)],
            "cwd": os.path.realpath(spec.cwd),
            "loopback": True,
        }
        env = dict(spec.env)
        network = spec.egress is not None
        if spec.egress is not None:  # the init relays the namespace's port to the proxy
            document["egress"] = {"port": INSIDE_PORT, "socket": spec.egress.socket}
            env.update(proxy_env(INSIDE_PORT))
        layout_fd = sealed_memfd("stockade-unshare-layout", json.dumps(document).encode())
        # --8<-- [start:seccomp]
        filter_fd = seccomp.program_fd(network=network)  # the shared policy, compiled once
        command = seccomp_exec.launcher(filter_fd, spec.program, spec.argv, python=python)
        # --8<-- [end:seccomp]
        facts = SandboxFacts(self.PLUGIN_NAME, spec.mode, enforcement="full")
        return LaunchPlan.from_spec(
            spec,
            facts,
            env=env,
            executable=unshare,
            argv=(
                unshare,
                *NAMESPACES,
                python,
                "-I",
                "-S",
                "-c",
                inside_source(),
                str(layout_fd),
                *command,
            ),
            pass_fds=(layout_fd, filter_fd),
            runner=True,  # SIGTERM to unshare's descendants: unshare blocks it
            new_session=True,  # no controlling terminal for anything inside
            protection=attrs.evolve(laid.survey, held=True) if laid.survey else None,
        )

    def _layout(self, spec: ExecSpec) -> layout.Layout:
        cache = seccomp.cache_path(network=spec.egress is not None)
        keep = {
            os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, os.path.dirname(__file__))
        }
        if cache is not None:
            keep.add(os.path.realpath(os.path.dirname(cache)))
        return layout.build(
            writing=spec.mode == "workspace-write",
            cwd=spec.cwd,
            workspace=spec.workspace,
            env=spec.env,
            host_env=os.environ,
            grants=spec.grant_writable,
            home=spec.home,
            caches=spec.caches,
            store=spec.hidden,
            secrets=spec.system_secrets,
            keep_read_only=sorted(keep),
            writable_dotfiles=protected.opened(spec.writable_dotfiles),
            scan_limit=self.scan_limit,
            sockets=(spec.egress.socket,) if spec.egress is not None else (),
        )

    def hides(self, path: str, spec: ExecSpec) -> HiddenPath | None:
        """Where ``spec``'s mounts hide ``path``: a private scratch folder, ``/dev``, a mask."""
        hiding = self._recent.recall(spec)
        if hiding is None:
            hiding = self._layout(spec).hiding
            self._recent.remember(spec, hiding)
        return hiding.find(path)

    def interpret(self, plan: LaunchPlan, outcome: ProcessOutcome) -> SandboxFacts:
        """``runner_failed`` when unshare or the setup failed; ``denied`` on a denial's words."""
        facts = plan.facts
        if outcome.exit_code in (0, None):
            return facts
        stderr = outcome.stderr.text
        runner = stderr.startswith(("unshare: ", "stockade-unshare: "))
        if runner and outcome.exit_code in (1, inside.SETUP_FAILED):
            return attrs.evolve(facts, runner_failed=True)
        if looks_denied(outcome):
            return attrs.evolve(facts, denied=True)
        return facts


@functools.cache
def inside_source() -> str:
    """The in-namespace setup's program for ``python -c`` (:mod:`stockade_unshare.inside`)."""
    return inspect.getsource(inside)
