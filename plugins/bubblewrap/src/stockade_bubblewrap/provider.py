"""The ``bubblewrap`` sandbox provider: a spec in, a ``bwrap`` launch plan out.

Every namespace is unshared (user, PID, network, IPC, UTS, cgroup), the session is new (no
TIOCSTI into the caller's terminal), the sandbox dies with its parent, every capability is
dropped, and the shared seccomp policy is applied right before the command starts.

The options reach bwrap through a memfd (``--args``), not its command line: the environment
is rebuilt inside with ``--clearenv`` and ``--setenv``, and a credential on a command line
would be readable by every user in ``/proc/*/cmdline``. Only the command follows ``--``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from stockade import resolved
from stockade.confine import protected as paths
from stockade.confine import seccomp
from stockade.confine.hiding import Recent
from stockade.confine.promises import Gap, Promise
from stockade.confine.provider import SandboxProvider, looks_denied, proxy_env, sealed_memfd
from stockade.confine.roots import RootRules
from stockade.errors import SandboxUnavailable, UsageError
from stockade.layers import place
from stockade.layers.place import Layer
from stockade.request.literals import Mode, Writes
from stockade.request.plan import HiddenPath, LaunchPlan, Probe, SandboxFacts
from stockade.request.result import ProcessOutcome
from stockade.request.spec import ExecSpec

from . import discover, layout, overlay
from .settings import Settings

if TYPE_CHECKING:
    from .bridge import Bridge

INSIDE_PORT = 3128
"""Where the forwarder listens inside the sandbox's own network namespace."""
INSIDE_CA = "/run/stockade/ca-bundle.pem"
"""Where the run's trust bundle (for a proxy that injects credentials) lies in the sandbox."""
_BASE_ARGS = ("--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL")


class BubblewrapSandbox(SandboxProvider):
    """Confines commands with bubblewrap and the shared seccomp policy.

    Settings (``[plugins.settings.bubblewrap]``):
        writable_roots: more directories writable in ``workspace-write``.
        deny_read: more paths to mask (unreadable) in every mode.
        scan_limit: directories to scan for protected paths before refusing.
        seccomp_cache: where the compiled filter is cached (``""``: no disk cache).
        unix_sockets: allow ``socket(AF_UNIX)`` (default false; ``socketpair`` always works).
    """

    PLUGIN_NAME = "bubblewrap"
    MODES: ClassVar[frozenset[Mode]] = frozenset({"read-only", "workspace-write"})
    PRIORITY = 100
    # Every one, extras included, but one pinned: bwrap lays its mounts by path when the
    # command starts, after confine named them.
    # New protected names land in the command's layer and are quarantined, not refused.
    PROMISES: ClassVar[frozenset[Promise]] = frozenset(Promise) - {
        Promise.SWAP_SAFE,
        Promise.NEW_NAMES_REFUSED,
    }
    GAPS: ClassVar[tuple[Gap, ...]] = (
        Gap(
            Promise.SWAP_SAFE,
            "masks are mounted by path when bwrap starts: a folder swapped for a relative "
            "symlink between confine and the start moves a mask onto the link's target",
        ),
    )

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.settings = Settings.parse(self.options)
        self._bridges: dict[int, Bridge] = {}
        self._recent = Recent()

    @classmethod
    def probe(cls) -> Probe:
        """Whether some bwrap here can make a sandbox, with the seccomp filter at hand.

        Tried once per process. The filter is compiled the first time (and cached), so a
        machine without pyseccomp or libseccomp says so here rather than at the first run.
        """
        found = discover.select()
        if not found.usable:
            return Probe(False, found.detail)
        why = seccomp.unavailable()
        if why is not None:
            return Probe(False, f"{found.detail}; but the seccomp filter cannot be built: {why}")
        return Probe(True, found.detail)

    def confine(self, spec: ExecSpec) -> LaunchPlan:
        """Translate ``spec`` into ``bwrap --args FD`` with the layout for its mode."""
        if spec.mode not in self.MODES:
            raise SandboxUnavailable(
                f"bubblewrap does not run {spec.mode} commands",
                hint="danger-full-access runs unconfined, without this provider",
            )
        settings = self.settings
        roots = (resolved.realpath(spec.workspace), *settings.writable_roots, *spec.grant_writable)
        layers: tuple[Layer, ...] = ()
        bwrap = discover.select(roots if spec.mode == "workspace-write" else ())
        if not bwrap.usable:
            raise SandboxUnavailable(
                f"bubblewrap cannot run here: {bwrap.detail}",
                hint="run `stockade doctor`; install bubblewrap or stockade-landlock",
            )
        # A network command gets inet sockets, in a namespace with loopback only; the
        # forwarder there hands its connections to the host's egress proxy.
        network = spec.egress is not None
        # The filter first: its cache directory then exists, and is kept read-only below.
        # Where the writes are direct (no layer clears them as it lands), setuid and setgid
        # bits are refused; the layers are known once laid, so the filter is chosen again.
        setid = spec.mode != "workspace-write" or (settings.layers and bool(spec.layer_store))
        program, keep = self._filter(network, bwrap.path, setid=setid)
        layers, plan_layout = self._laid(spec, keep, bwrap.path)
        filter_fd, bridge = -1, None
        try:
            direct = spec.mode == "workspace-write" and not layers
            program = self._filter(network, bwrap.path, setid=False)[0] if direct else program
            filter_fd = sealed_memfd("stockade-seccomp", program)
            self._recent.remember(spec, plan_layout.hiding)
            env = dict(spec.env)
            command: tuple[str, ...] = (spec.program, *spec.argv[1:])
            trust: list[str] = []
            if spec.egress is not None and spec.egress.ca_bundle is not None:
                # The run's trust bundle, read-only, where only this sandbox sees it.
                trust = ["--ro-bind", spec.egress.ca_bundle, INSIDE_CA]
            if spec.egress is not None:
                from .bridge import Bridge

                bridge = Bridge(spec.egress.socket)
                env.update(proxy_env(INSIDE_PORT, INSIDE_CA if trust else None))
                command = (
                    _inside_python(),
                    "-I",
                    "-S",
                    "-c",
                    _forwarder(),
                    str(INSIDE_PORT),
                    str(bridge.inside.fileno()),
                    spec.program,
                    *spec.argv,
                )
            args = [*_BASE_ARGS, *plan_layout.args, *trust, "--clearenv"]
            for key, value in env.items():
                args += ["--setenv", key, value]
            args += ["--seccomp", str(filter_fd)]
            if bwrap.capable and bridge is None:
                args += ["--argv0", spec.argv[0]]
            _check_count(spec, len(args) + 4 + len(command))
            args_fd = sealed_memfd(
                "stockade-bwrap-args", b"".join(a.encode() + b"\0" for a in args)
            )
        except BaseException:
            if filter_fd >= 0:
                os.close(filter_fd)
            place.discard(layers)
            if bridge is not None:
                bridge.close()
            raise
        write_mode = spec.mode == "workspace-write"
        writes: Writes | None = ("layered" if layers else "direct") if write_mode else None
        facts = SandboxFacts(self.PLUGIN_NAME, spec.mode, enforcement="full", writes=writes)
        fds = (
            (args_fd, filter_fd) if bridge is None else (args_fd, filter_fd, bridge.inside.fileno())
        )
        plan = LaunchPlan.from_spec(
            spec,
            facts,
            executable=bwrap.path,
            # The command itself must follow on the command line: bwrap reads only options
            # from --args. The options (environment included) stay off /proc/*/cmdline.
            argv=(bwrap.path, "--args", str(args_fd), "--", *command),
            env={},
            pass_fds=fds,
            runner=True,
            # Existing protected paths are read-only mounts: the host checks only for new ones.
            protection=attrs.evolve(plan_layout.survey, held=True) if plan_layout.survey else None,
            layers=layers,
        )
        if bridge is not None:
            self._bridges[id(plan)] = bridge
        return plan

    def _filter(
        self,
        network: bool,  # noqa: FBT001
        bwrap: str,
        *,
        setid: bool,
    ) -> tuple[bytes, tuple[str, ...]]:
        """The seccomp program for a command, and the folders its layout keeps read-only
        (this Python's, bwrap's, the program's cache). SysV IPC stays (the command's IPC
        namespace holds only its own segments); ``setid``: whether a ``chmod`` may set a
        setuid or setgid bit (:data:`stockade.confine.seccomp.CHMODS`)."""
        unix, cache_dir = self.settings.unix_sockets, self.settings.seccomp_cache
        program = seccomp.required(
            network=network, unix=unix, sysv_ipc=True, setid=setid, cache_dir=cache_dir
        )
        cache = seccomp.cache_path(
            network=network, unix=unix, sysv_ipc=True, setid=setid, cache_dir=cache_dir
        )
        keep = _resolved(
            sys.prefix,
            sys.base_prefix,
            os.path.dirname(bwrap),
            os.path.dirname(cache) if cache is not None else sys.prefix,
        )
        return program, keep

    def _laid(
        self, spec: ExecSpec, keep: tuple[str, ...], bwrap: str
    ) -> tuple[tuple[Layer, ...], layout.Layout]:
        """``spec``'s layers and its layout; the homes read once for both checks of its
        roots (a layout that cannot be made discards the layers)."""
        system = RootRules.of(None, os.environ) if spec.mode == "workspace-write" else None
        layers = self._layers(spec, bwrap, system)
        try:
            return layers, self._layout(spec, keep, layers, system)
        except BaseException:
            place.discard(layers)
            raise

    def _layers(
        self, spec: ExecSpec, bwrap: str, system: RootRules | None = None
    ) -> tuple[Layer, ...]:
        """``spec``'s layers (:func:`.overlay.layers_for`), unless ``layers = false``."""
        if not self.settings.layers or spec.mode != "workspace-write" or not spec.layer_store:
            return ()  # (a read-only command's folder is no writable root: a home may be)
        roots = paths.writable_roots(
            (spec.workspace, *self.settings.writable_roots, *spec.grant_writable), system
        )
        return overlay.layers_for(spec, tuple(roots), bwrap)

    def _layout(
        self,
        spec: ExecSpec,
        keep: tuple[str, ...] = (),
        layers: tuple[Layer, ...] = (),
        system: RootRules | None = None,
    ) -> layout.Layout:
        """The mounts for ``spec``; ``keep``: the host's own paths, kept read-only;
        ``layers``: the roots that are overlays, and the folders that hold them (masked)."""
        settings = self.settings
        return layout.build(
            mode=spec.mode,
            cwd=spec.cwd,
            workspace=spec.workspace,
            env=spec.env,
            host_env=os.environ,
            extra_writable=(*settings.writable_roots, *spec.grant_writable),
            deny_read=settings.deny_read,
            store=(*spec.hidden, *dict.fromkeys(layer.hide for layer in layers)),
            keep_read_only=keep,
            scratch=(spec.home,) if spec.home else (),
            shared=spec.caches,
            secrets=spec.system_secrets,
            scan_limit=settings.scan_limit,
            writable_dotfiles=paths.opened(spec.writable_dotfiles),
            overlays={layer.root: (layer.upper, layer.work) for layer in layers},
            private=spec.private_data,
            system=system,
        )

    def hides(self, path: str, spec: ExecSpec) -> HiddenPath | None:
        """Where ``spec``'s mounts hide ``path``: a private tmpfs (``/tmp``, ``/var/tmp``,
        ``/run``, ``/dev/shm``, a home's ``.cache``), the fresh ``/dev``, or a mask; from
        the layout :meth:`confine` laid (built again if it did not confine ``spec``)."""
        hiding = self._recent.recall(spec)
        if hiding is None:
            hiding = self._layout(spec).hiding
            self._recent.remember(spec, hiding)
        return hiding.find(path)

    def release(self, plan: LaunchPlan) -> None:
        """Close the plan's descriptors, and its bridge to the egress proxy if it has one."""
        bridge = self._bridges.pop(id(plan), None)
        inside = bridge.inside.fileno() if bridge is not None else -1
        for fd in plan.pass_fds:
            if fd != inside:
                with contextlib.suppress(OSError):
                    os.close(fd)
        if bridge is not None:
            bridge.close()
        place.discard(plan.layers)  # landed already, or never taken (the host lands them)

    def interpret(self, plan: LaunchPlan, outcome: ProcessOutcome) -> SandboxFacts:
        """Add ``runner_failed`` (bwrap itself failed) and ``denied`` (a denial's signature)."""
        facts = plan.facts
        if outcome.exit_code in (0, None):
            return facts
        stderr = outcome.stderr.text
        if outcome.exit_code == 1 and stderr.startswith("bwrap: "):
            return attrs.evolve(facts, runner_failed=True, stale=_stale(outcome))
        if looks_denied(outcome):
            return attrs.evolve(facts, denied=True)
        return facts


# bwrap's words when a mount's destination is missing from the view it builds and cannot be
# made there (the view's folders are read-only): the host path was there at confine time.
_MISSING_DEST = re.compile(r"bwrap: Can't (?:create file at|mkdir) (/[^\n]*?): [^\n]*\n?")


def _stale(outcome: ProcessOutcome) -> bool:
    """Whether bwrap's whole output is its refusal to make a mount's destination, naming a
    path gone since confine (a system secret's lock file, removed meanwhile): a hint that
    the command, asked again, sees the host as it is now. Never acted on by itself: a
    command can write the same line."""
    found = _MISSING_DEST.fullmatch(outcome.stderr.text)
    return (
        found is not None
        and not outcome.stdout.text
        and not outcome.stderr.truncated
        and not os.path.lexists(found.group(1))
    )


@functools.lru_cache(maxsize=16)
def _resolved(*paths: str) -> tuple[str, ...]:
    """The host's own paths, resolved once per process: no command can move them (each is
    kept read-only inside every sandbox that could reach it)."""
    return tuple(dict.fromkeys(resolved.realpath(p) for p in paths))


_FUTURE = "from __future__ import annotations\n"


@functools.cache
def _forwarder() -> str:
    """The forwarder's program, run with ``-c``: :mod:`stockade.run.spawn`'s source, then
    :mod:`.forward`'s, then a call of its ``main`` with ``spawn.fork_exec``.

    Sources, not files: a file may sit where the sandbox cannot see (a checkout under
    ``/tmp``); the standard library they need never does.
    """
    import inspect

    from stockade.run import spawn

    from . import forward

    # A __future__ import must open the program: spawn's does, and covers both.
    body = inspect.getsource(forward).replace(_FUTURE, "", 1)
    call = "import sys\nraise SystemExit(main(sys.argv[1:], fork_exec))\n"
    return f"{inspect.getsource(spawn)}\n{body}\n{call}"


@functools.cache
def _inside_python() -> str:
    """An interpreter the sandbox can run: this one's real file unless it lies in a folder
    the sandbox replaces (a virtualenv under ``/tmp``), else the system's ``python3``."""
    base = getattr(sys, "_base_executable", sys.executable)
    for candidate in (
        resolved.realpath(sys.executable),
        resolved.realpath(base),
        "/usr/bin/python3",
    ):
        if os.path.isfile(candidate) and not paths.inside(candidate, layout.PRIVATE_DIRS):
            return candidate
    raise SandboxUnavailable(
        "no Python interpreter outside /tmp and /run can start the egress forwarder",
        hint="install python3 in a system directory, or run Stockade from one",
    )


MAX_ARGS = 9000
"""bwrap refuses more arguments than this, its own options (read from ``--args``) included."""


def _check_count(spec: ExecSpec, total: int) -> None:
    """Refuse, as a usage error before anything starts, a command bwrap would refuse.

    Raises:
        UsageError: its arguments and bwrap's own options pass :data:`MAX_ARGS`.
    """
    if total > MAX_ARGS:
        raise UsageError(
            f"{spec.argv[0]} is given {len(spec.argv) - 1} arguments; bubblewrap takes at most "
            f"{MAX_ARGS} in all, {total - len(spec.argv)} of them its own options here",
            hint="pass a long list in a file (xargs -a FILE, or a tool's @FILE), or split the "
            "command into several",
        )
