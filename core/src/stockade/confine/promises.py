"""What a sandbox provider promises, by name: its declaration, and the gaps it pins.

A provider declares the promises it keeps in ``PROMISES`` and pins the ones it knowingly
does not keep in ``GAPS``, each with the reason (a :class:`Gap`). The conformance kit
(:mod:`stockade.conformance`) reads both, never the provider's name: it attacks every
promise, expects a declared one to hold, expects a pinned one to fail (and says so the day it
holds), and reports a table of both.

The promises of :data:`CORE` are what ``enforcement="full"`` certifies in a confining mode:
the kit attacks them whatever the provider declares, so a provider that leaves one out fails
unless it pins it. The promises of :data:`EXTRA` go further (a namespace the kernel offers,
a read-only mount); the kit attacks them only when declared or pinned.
"""

from __future__ import annotations

import enum

from attrs import field, frozen


class Promise(enum.StrEnum):
    """One named promise a provider keeps. Its value is the name the kit's table shows."""

    WRITES_CONFINED = "writes-confined"
    """Nothing outside the writable roots can be created, changed or removed; ``read-only``
    writes nothing. A refused write fails with ``EACCES``, ``EPERM`` or ``EROFS``."""

    CREDENTIAL_STORES = "credential-stores"
    """The masked credential stores (:data:`stockade.confine.stores.MASKED`) are unreadable
    and unwritable, in the command's home, the user's real home and any writable root."""

    SYSTEM_SECRETS = "system-secrets"
    """The system secrets (``/etc/shadow``, ``/etc/ssl/private``, configured ones, another
    user's ``/root``) are unreadable, while their neighbours (``/etc/passwd``) stay readable."""

    PROTECTED_NAMES = "protected-names"
    """Protected names in a writable root (``.git``, its ``gitdir:`` target and hooks path,
    ``.claude``, ``.vscode``, dotfiles) keep their content after the run: refused while it
    runs, or put back by the host after it (the provider reports ``protection``)."""

    PRIVATE_SCRATCH = "private-scratch"
    """``/tmp`` (and ``TMPDIR``) is the run's own: empty at start, not shared with another
    run, and nothing a run leaves there reaches the host's ``/tmp``."""

    HIDDEN_PATHS = "hidden-paths"
    """:meth:`~stockade.confine.provider.SandboxProvider.hides` answers for every folder
    the sandbox hides: a program or interpreter there is refused before it starts, and a
    failed run names the hidden argument."""

    STORE_HIDDEN = "store-hidden"
    """Stockade's own state (the record, its key, held outputs) can be neither read nor
    changed by a command, even when the workspace lies beside it."""

    NO_HOST_SOCKETS = "no-host-sockets"
    """No socket reaches a listener of the host: Unix (path and abstract) and TCP/UDP, on
    loopback and on the host's addresses."""

    EGRESS_PROXY = "egress-proxy"
    """A command classed ``network`` reaches the network only through Stockade's egress
    proxy (TCP streams to its port); any other command has no network at all."""

    PROCESS_ISOLATION = "process-isolation"
    """Host processes cannot be signalled, traced or read (environment, memory)."""

    NO_TERMINAL_INJECTION = "no-terminal-injection"
    """``TIOCSTI`` (pushing input into a terminal) is refused."""

    NOTHING_OUTLIVES = "nothing-outlives"
    """Nothing the command starts outlives it (daemons, ``setsid``, double forks, a timeout),
    a timed out command gets ``SIGTERM`` and its grace, and a signal death shows in the
    result."""

    LIMITS = "limits"
    """The spec's resource limits hold (memory, file size, CPU time, processes, no core)."""

    SECCOMP = "seccomp"
    """The seccomp policy (:mod:`stockade.confine.seccomp`) refuses each denied system call,
    and a foreign system call table (x32, i386) kills the process."""

    NO_CAPABILITIES = "no-capabilities"
    """The command holds no capability, even when the host runs as root."""

    ORDINARY_WORK = "ordinary-work"
    """Ordinary work still runs: ``git init/add/commit``, a venv and ``pip install``,
    ``make`` and pipes."""

    RUN_HOME = "run-home"
    """An agent's run home (``spec.home``) is its ``HOME``: writable in every mode and the
    same for every step of the run, while another run's home, beside it in Stockade's
    hidden store, can be neither read nor written."""

    CACHES = "caches"
    """An agent's package caches (``spec.caches``) are readable in every mode and writable
    only in ``workspace-write``; another agent's caches can be neither read nor written."""

    SWAP_SAFE = "swap-safe"
    """What the sandbox masks stays masked even when, after ``confine`` returned and before
    the command starts, a folder above a masked credential store is moved away and a
    symlink put in its place (as a command running beside it could): nothing named at
    confine time is found again by a path another process can change."""

    QUOTA = "quota"
    """A command under a workspace quota is stopped while it runs once it writes past it
    (the host's abort reaches every process it started), and the caller's abort still stops
    a command under a quota."""

    ENVIRONMENT = "environment"
    """The command's environment is the spec's ``env`` and the provider's own additions
    (``TMPDIR``, the proxy's variables): nothing of the host's own environment reaches it."""

    CREDENTIALS_OFF_COMMAND_LINE = "credentials-off-command-line"
    """No part of the command's environment (credentials included) is ever on a process's
    command line: ``/proc/PID/cmdline`` is readable by every user of the machine."""

    CALLER_SESSION = "caller-session"
    """The command runs in a session of its own: it cannot take the caller's terminal
    (``/dev/tty``) to read what the person types or to write to it."""

    NO_SETID = "no-setid"
    """No file a command writes reaches a writable root setuid or setgid: a ``chmod`` that
    sets either bit on a file is refused while the command runs, or the bits are cleared as
    the file lands (a command run as root would otherwise leave a setuid-root program in the
    person's folder). A folder may keep a setgid bit: it only names a group."""

    HOST_INSTALLATION = "host-installation"
    """The host's own installation (the Python prefix that runs Stockade, the seccomp
    filter's cache) stays read-only even when a writable root holds it: a ``.pth`` planted
    there would run in the host itself."""

    PID_NAMESPACE = "pid-namespace"
    """Host processes are not even listed (a PID namespace of the run's own)."""

    PROCESS_ENTRIES = "process-entries"
    """No other process's ``/proc/PID`` entry (command line, status, memory map) can be
    opened: only the command's own and its descendants'. (Listing them is
    :attr:`PID_NAMESPACE`.)"""

    NEW_NAMES_REFUSED = "new-names-refused"
    """A protected name made anew in a writable root (``.bashrc``, ``.vscode``, ``.claude``,
    a symlink, a hard link, a socket's name or a rename onto one) is refused while the
    command runs, not quarantined after it; but a ``.git`` the command makes empty itself
    (``git init``, ``git clone``), or a folder that becomes a repository by its contents
    (``git init --bare``), whose ``hooks`` take only git's ``*.sample`` files, quarantined
    after."""

    NETWORK_NAMESPACE = "network-namespace"
    """The command sees only a loopback interface of its own (a network namespace)."""

    PRIVATE_VIEW = "private-view"
    """Hidden folders show no names: a masked store, the host's ``/tmp`` and ``/run`` list as
    empty (a mount namespace), not merely refuse their contents."""

    PROTECTED_READ_ONLY = "protected-read-only"
    """Protected names are read-only while the command runs (a read-only mount), not only
    put back after it."""

    PROTECTED_NEVER_VISIBLE = "protected-never-visible"
    """A protected name a command plants (a nested repository's hook, ``.claude``,
    ``.vscode``, a rewritten ``.git/config``) is never visible to another program looking at
    the workspace, while the command runs or after it: its writes land only through the
    host's checks (:mod:`stockade.layers`)."""


CORE: frozenset[Promise] = frozenset(
    {
        Promise.WRITES_CONFINED,
        Promise.CREDENTIAL_STORES,
        Promise.SYSTEM_SECRETS,
        Promise.PROTECTED_NAMES,
        Promise.PRIVATE_SCRATCH,
        Promise.HIDDEN_PATHS,
        Promise.STORE_HIDDEN,
        Promise.NO_HOST_SOCKETS,
        Promise.EGRESS_PROXY,
        Promise.PROCESS_ISOLATION,
        Promise.NO_TERMINAL_INJECTION,
        Promise.NOTHING_OUTLIVES,
        Promise.LIMITS,
        Promise.SECCOMP,
        Promise.NO_CAPABILITIES,
        Promise.ORDINARY_WORK,
        Promise.RUN_HOME,
        Promise.CACHES,
        Promise.QUOTA,
        Promise.SWAP_SAFE,
        Promise.ENVIRONMENT,
        Promise.CREDENTIALS_OFF_COMMAND_LINE,
        Promise.CALLER_SESSION,
        Promise.HOST_INSTALLATION,
        Promise.NO_SETID,
    }
)
"""What ``enforcement="full"`` certifies in ``read-only`` and ``workspace-write``."""

EXTRA: frozenset[Promise] = frozenset(Promise) - CORE
"""Promises beyond the contract, that a provider may declare."""


def _reason(_instance: object, _attribute: object, value: str) -> None:
    if not value.strip():
        raise ValueError("a Gap needs a reason: say what is not kept and why")


@frozen
class Gap:
    """A known gap a provider pins: ``promise`` is not kept, for ``reason``.

    The kit then expects the attacks on that promise to succeed (a strict expected failure:
    the day the gap closes, the run fails until the pin is removed), and its table shows
    ``pinned`` with the reason.

    Attributes:
        promise: the promise not kept.
        reason: why, as a reader of the table should see it (not empty).
    """

    promise: Promise = field(converter=Promise)
    reason: str = field(validator=_reason)


def pins(gaps: tuple[Gap, ...]) -> dict[Promise, str]:
    """``gaps`` as a map from promise to reason; a promise pinned twice is an error."""
    found: dict[Promise, str] = {}
    for gap in gaps:
        if gap.promise in found:
            raise ValueError(f"{gap.promise} is pinned twice: keep one Gap per promise")
        found[gap.promise] = gap.reason
    return found
