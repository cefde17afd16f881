"""The sandbox provider contract: turn a resolved spec into a confined launch plan.

A provider never starts processes; it describes how the executor must start one (a runner
prefix such as ``bwrap ...``, descriptors to pass, environment additions) and reports the
facts of the confinement. It must refuse, with :class:`~stockade.errors.SandboxUnavailable`,
any spec it cannot confine as asked: it never degrades to an unconfined run.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from ..request.literals import Mode
from ..request.plan import HiddenPath, LaunchPlan, Probe, SandboxFacts
from ..request.result import ProcessOutcome
from ..request.spec import ExecSpec
from .promises import Gap, Promise

# What a command prints when a sandbox, not its own logic, stopped it. Conservative:
# ``denied`` is a hint for the reader of a failed run, never a verdict.
DENIAL_SIGNATURES = (
    "Permission denied",
    "Read-only file system",
    "Operation not permitted",
    "Address family not supported",
    "Network is unreachable",
)


PROXY_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)


CA_VARIABLES = (
    "SSL_CERT_FILE",  # OpenSSL's default (Python's ssl, Go, Ruby, wget)
    "REQUESTS_CA_BUNDLE",  # requests, pip
    "CURL_CA_BUNDLE",  # curl
    "GIT_SSL_CAINFO",  # git over HTTPS
    "NODE_EXTRA_CA_CERTS",  # Node.js (added to its own store)
    "AWS_CA_BUNDLE",  # the AWS CLI and SDKs
    "CARGO_HTTP_CAINFO",  # cargo
    "PIP_CERT",  # pip, when it does not use requests' variable
)


def proxy_env(port: int, ca_bundle: str | None = None) -> dict[str, str]:
    """The environment that points a command's tools at the egress proxy on ``port``, and
    (for a proxy that injects credentials) their trust at ``ca_bundle``, as the command
    sees that path.

    ``NO_PROXY`` is set empty: an inherited list must not send a host around the proxy
    (there is no other way out anyway).
    """
    url = f"http://127.0.0.1:{port}"
    env = {**dict.fromkeys(PROXY_VARIABLES, url), "NO_PROXY": "", "no_proxy": ""}
    if ca_bundle is not None:
        env.update(dict.fromkeys(CA_VARIABLES, ca_bundle))
    return env


def looks_denied(outcome: ProcessOutcome) -> bool:
    """Whether a failed run's stderr carries one of :data:`DENIAL_SIGNATURES`."""
    if outcome.exit_code == 0 or (outcome.exit_code is None and outcome.signal is None):
        return False
    return any(signature in outcome.stderr.text for signature in DENIAL_SIGNATURES)


def sealed_memfd(name: str, data: bytes) -> int:
    """A close-on-exec memfd holding ``data``, sealed against change, at offset 0.

    For what a provider hands its runner by descriptor (options, a BPF program): no process
    that shares it can write, grow or shrink it.
    """
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.write(fd, data)
        seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


class SandboxProvider(ABC):
    """Confines commands. Subclasses set the class attributes and implement :meth:`confine`.

    Attributes:
        PLUGIN_NAME: the name configuration selects it by.
        MODES: the modes it can enforce.
        PRIORITY: ``auto`` picks the usable provider with the highest priority.
        PROMISES: the promises it keeps in its confining modes
            (:class:`~stockade.confine.promises.Promise`); the conformance kit holds it to
            them, and to every promise of :data:`~stockade.confine.promises.CORE`.
        GAPS: the promises it knowingly does not keep, each pinned with its reason
            (:class:`~stockade.confine.promises.Gap`); the kit expects their attacks to
            succeed and shows them as ``pinned``.
    """

    PLUGIN_NAME: ClassVar[str]
    MODES: ClassVar[frozenset[Mode]]
    PRIORITY: ClassVar[int] = 0
    PROMISES: ClassVar[frozenset[Promise]] = frozenset()
    GAPS: ClassVar[tuple[Gap, ...]] = ()

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options: Mapping[str, Any] = dict(options or {})

    @classmethod
    @abstractmethod
    def probe(cls) -> Probe:
        """Whether this provider works on this kernel, and if not, why not."""

    @abstractmethod
    def confine(self, spec: ExecSpec) -> LaunchPlan:
        """The launch plan that runs ``spec`` confined to ``spec.mode``."""

    def hides(self, path: str, spec: ExecSpec) -> HiddenPath | None:
        """Where the sandbox for ``spec`` hides ``path`` (absolute) from the command: the
        hidden folder it lies in, as named or as it resolves, and why; ``None`` when the
        command sees it.

        The host asks before a command starts (its program and ``#!`` interpreter: a hidden
        one is refused with :class:`~stockade.errors.SpawnFailed`) and after a failed run
        (its path arguments). A provider answers from the lists it masks with, through
        :class:`stockade.confine.hiding.Hiding`. The default says nothing is hidden: right for a
        provider that hides nothing, and what a provider written before this method gets.
        """
        del path, spec
        return None

    def interpret(self, plan: LaunchPlan, outcome: ProcessOutcome) -> SandboxFacts:
        """The facts of a finished run: ``plan.facts``, plus what the outcome shows.

        A provider overrides this to say whether its runner failed before the command ran
        (``runner_failed``), whether that was because the host changed under the plan
        (``stale``, a hint: asking again may succeed), or the failure looks like its own
        denial (``denied``).
        """
        del outcome
        return plan.facts

    def release(self, plan: LaunchPlan) -> None:
        """Free what ``plan`` holds once the executor is done with it, however it ended.

        The default closes ``plan.pass_fds``: the descriptors a provider opens for a plan
        (a seccomp filter, an argument file) belong to that one plan.
        """
        for fd in plan.pass_fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:  # noqa: B027 - optional for a provider, so not abstract
        """Free what the provider keeps between plans (cached descriptors, scratch folders)
        when its host closes. Called once, after every plan it made was released; the
        default keeps nothing, so does nothing."""


class Unconfined(SandboxProvider):
    """The provider for ``danger-full-access``: runs the program as it is, and says so."""

    PLUGIN_NAME = "none"
    MODES = frozenset({"danger-full-access"})
    PRIORITY = -1

    @classmethod
    def probe(cls) -> Probe:
        """Always usable: it confines nothing."""
        return Probe(usable=True, detail="confines nothing; only for danger-full-access")

    def confine(self, spec: ExecSpec) -> LaunchPlan:
        """Run the program directly, with the spec's environment and bounds."""
        return LaunchPlan.from_spec(spec, SandboxFacts(self.PLUGIN_NAME, spec.mode))
