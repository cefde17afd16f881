"""Writable roots: which folders a command may be given to write in, and which never.

A *writable root* is a folder a command may write anywhere beneath: the workspace (the
working directory, or an agent's workspace) in ``workspace-write``, every one-shot grant
(``--grant-write``, :attr:`~stockade.request.spec.ExecRequest.grant_writable`), every
``writable_roots`` entry in a sandbox plugin's settings, and every agent's configured
``workspace``. One rule decides them all, after symlinks and ``..`` are resolved:

- ``/`` never;
- a *system folder* (:data:`SYSTEM_TREES`) never, nor anything beneath one;
- a folder of :data:`SYSTEM_TREES_BUT_OWN_HOME` never, nor anything beneath one, except a
  folder beneath the account's own home (``/root/project`` for root, a service account's
  ``/var/lib/jenkins/workspace``);
- a *shared folder* (:data:`SHARED_FOLDERS`: ``/home``, ``/tmp``, ``/mnt``, ...) never
  itself; a folder inside one may be (``/tmp/build``, ``/mnt/data/project``);
- a home directory never (the account's own, ``$HOME`` of the host and of the command, and
  every home in the password database), nor a folder that holds one, nor a credential
  store in one (``~/.ssh``, :data:`stockade.confine.stores.CREDENTIAL_STORES`) or anything in it.
  A home's other subfolders may be: that is where projects live;
- Stockade's store never, nor a folder that holds it, nor a folder inside it other than
  an agent's own workspace (``workspaces/NAME``) or a fork (``workspaces/.forks/SNAP/N``:
  the folder of forks and a snapshot's folder of forks never, rule ``forks``);
- the warm server's folder (``$XDG_RUNTIME_DIR/stockade``, where its socket is) never, nor
  a folder that holds it, nor one inside it: a command that could move the socket would
  stop the server and every call it runs (its secret is in the store's folder).

The host applies it before a command is decided, held or run (:func:`check_spec`), so every
front end (the CLI, the Python API, MCP, skills) gets it; a refusal is
:class:`~stockade.errors.UnsafeRoot`. Only writable roots are checked: a ``read-only``
command, or one that only reads and so runs read-only, may run in a home or in ``/etc``.
``danger-full-access`` is unconfined and has no writable root; it is only ever explicit.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pwd
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

import attrs

from .. import resolved
from ..errors import UnsafeRoot
from .stores import CREDENTIAL_STORES

if TYPE_CHECKING:
    from ..config.schema import Config
    from ..request.spec import ExecSpec

SYSTEM_TREES = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/nix",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
)
"""The system's own folders: never a writable root, nor anything beneath them."""

SYSTEM_TREES_BUT_OWN_HOME = ("/opt", "/root", "/snap", "/srv", "/var")
"""System folders that may hold the account's own home (``/root``, ``/var/lib/jenkins``):
never a writable root, nor anything beneath them, except beneath that home."""

SHARED_FOLDERS = ("/home", "/media", "/mnt", "/run/media", "/tmp", "/var/tmp")  # noqa: S108 - names
"""Folders that hold other people's or other disks' folders: never a writable root
themselves; a folder inside one may be."""

OWN_WORKSPACES = "workspaces"
"""The folder of the store that holds the agents' own workspaces, which may be roots."""
OWN_FORKS = ".forks"
"""The folder of the workspaces holding forks (``SNAPSHOT/FORK``): only a fork may be a root."""


@attrs.frozen
class RootRefusal:
    """Why a folder cannot be a writable root.

    Attributes:
        rule: which rule it broke: ``root``, ``system``, ``shared``, ``home``,
            ``holds_home``, ``credentials``, ``store``, ``holds_store``, ``forks``, ``server`` or
            ``holds_server``.
        folder: the folder the rule is about (the system folder, the home, the store).
        reason: the rule in words, for the message.
    """

    rule: str
    folder: str
    reason: str


@attrs.frozen
class RootRules:
    """The rule with the homes and stores of one host filled in.

    Attributes:
        homes: home directories, resolved: the password database's, ``$HOME``'s.
        own_home: the account's own home from the password database, resolved.
        stores: Stockade's store folders, resolved (the configured one, the default one).
        servers: the warm server's folders under ``XDG_RUNTIME_DIR``, resolved.
    """

    homes: tuple[str, ...]
    own_home: str | None = None
    stores: tuple[str, ...] = ()
    servers: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        config: Config | None,
        environ: Mapping[str, str],
        env: Mapping[str, str] | None = None,
    ) -> RootRules:
        """The rules for a host with ``config`` and ``environ``, for a command with ``env``.

        ``config`` ``None`` leaves the store out (the providers' last check at confine,
        which sees the run's home and caches inside the store).
        """
        own = _own_home()
        found = [own, environ.get("HOME"), os.environ.get("HOME")]
        if env is not None:
            found.append(env.get("HOME"))
        found += _passwd_homes()
        homes = tuple(dict.fromkeys(_resolved(found)))
        stores: tuple[str, ...] = ()
        if config is not None:
            from ..config.dirs import state_dir
            from ..config.schema import store_folder

            stores = tuple(
                dict.fromkeys(
                    _resolved([store_folder(config), state_dir(environ), state_dir(os.environ)])
                )
            )
        runtimes = [e.get("XDG_RUNTIME_DIR") for e in (environ, os.environ, env or {})]
        servers = tuple(
            dict.fromkeys(
                _resolved([os.path.join(r, "stockade") for r in runtimes if r and r[0] == "/"])
            )
        )
        return cls(
            homes, own_home=next(iter(_resolved([own])), None), stores=stores, servers=servers
        )

    def refusal(self, real: str) -> RootRefusal | None:
        """Why the resolved folder ``real`` cannot be a writable root, or ``None``.

        The rules are tried in the order of the module's list; the first that applies
        is the one named.
        """
        for rule in (self._system, self._home, self._credentials, self._store, self._server):
            found = rule(real)
            if found is not None:
                return found
        return None

    def _system(self, real: str) -> RootRefusal | None:
        """``/``, a system folder or beneath one, a shared folder itself."""
        if real == "/":
            return RootRefusal("root", "/", "it is the root of the file system")
        shared = any(_beneath(real, folder) for folder in SHARED_FOLDERS)
        for tree in SYSTEM_TREES:
            if _at_or_beneath(real, tree) and not shared:
                return RootRefusal("system", tree, _inside(real, tree))
        if real in SHARED_FOLDERS:
            return RootRefusal("shared", real, "it holds other people's or other disks' folders")
        if real in self.homes:
            return None  # a home in /var or /root is named a home, by the next rule
        for tree in SYSTEM_TREES_BUT_OWN_HOME:
            if _at_or_beneath(real, tree) and not shared and not self._exempt(real):
                return RootRefusal("system", tree, _inside(real, tree))
        return None

    def _home(self, real: str) -> RootRefusal | None:
        """A home directory, or a folder holding one."""
        if real in self.homes:
            return RootRefusal(
                "home",
                real,
                "it is a home directory: programs read its startup files, autostart "
                "entries and user services later, outside any sandbox",
            )
        for home in self.homes:
            if _beneath(home, real):
                return RootRefusal("holds_home", home, f"it holds the home directory {home}")
        return None

    def _credentials(self, real: str) -> RootRefusal | None:
        """A credential store in a home, or a folder inside one."""
        for store, inside in _credential_stores(self.homes):
            if real == store or real.startswith(inside):
                return RootRefusal("credentials", store, f"{store} is a credential store")
        return None

    def _exempt(self, real: str) -> bool:
        """Beneath the account's own home (unless that home is a system folder itself)."""
        own = self.own_home
        if own is None or (own in SYSTEM_TREES_BUT_OWN_HOME and own != "/root"):
            return False
        return _beneath(real, own)

    def _store(self, real: str) -> RootRefusal | None:
        """The store, a folder holding it, a folder inside it but an agent's workspace."""
        for store in self.stores:
            if real == store:
                return RootRefusal("store", store, "it is Stockade's store")
            if _beneath(store, real):
                return RootRefusal("holds_store", store, f"it holds Stockade's store ({store})")
            own = os.path.join(store, OWN_WORKSPACES)
            if _beneath(real, store) and not _beneath(real, own):
                return RootRefusal(
                    "store",
                    store,
                    f"it lies inside Stockade's store ({store}), outside {own}/",
                )
            forks = os.path.join(own, OWN_FORKS)
            if _at_or_beneath(real, forks) and real[len(forks) :].count("/") < 2:
                return RootRefusal(
                    "forks",
                    forks,
                    f"it is or holds forks ({forks}/SNAPSHOT/FORK): a command there could "
                    "change or move every fork in it; only one fork may be a root",
                )
        return None

    def _server(self, real: str) -> RootRefusal | None:
        """The warm server's folder, a folder holding it, or one inside it."""
        for server in self.servers:
            if _at_or_beneath(real, server):
                return RootRefusal(
                    "server",
                    server,
                    f"it is Stockade's warm server's folder ({server})"
                    if real == server
                    else f"it lies inside Stockade's warm server's folder ({server})",
                )
            if _beneath(server, real):
                return RootRefusal(
                    "holds_server", server, f"it holds Stockade's warm server's folder ({server})"
                )
        return None

    def check(
        self,
        path: str,
        *,
        role: str,
        hint: str | None = None,
        base: str | None = None,
    ) -> str:
        """``path`` resolved (symlinks, ``..``, ``~``), when it may be a writable root.

        Args:
            path: the folder, absolute or relative to ``base`` (the working directory).
            role: what names it, for the message: ``workspace``, ``grant``, a setting.
            hint: what to do instead; a hint for ``role`` when omitted.
            base: what a relative ``path`` is relative to.

        Raises:
            UnsafeRoot: it is ``/``, a system or shared folder, a home, a folder holding
                one, a credential store, the store or the server's folder or a folder
                holding either.
        """
        real = resolve_path(path, base, role=role)
        refusal = self.refusal(real)
        if refusal is None:
            return real
        shown = path if path == real else f"{path} (which is {real})"
        raise UnsafeRoot(
            f"refusing {shown} as a writable root ({role}): {refusal.reason}",
            hint=hint or HINTS.get(role, HINTS["grant"]),
            details={
                "path": path,
                "resolved": real,
                "role": role,
                "rule": refusal.rule,
                "folder": refusal.folder,
            },
        )


HINTS = {
    "workspace": "work in a project folder (cd into it or pass --cwd; a folder inside your "
    "home is fine), pass --mode read-only to only read here, or use an agent whose "
    "workspace is a project folder (--agent NAME)",
    "sandbox": "name a project folder as the workspace or the grant",
    "grant": "grant a project folder instead (a folder inside a home is fine; the home "
    "itself, a system folder or the store is not)",
}


def resolve_path(path: str, base: str | None = None, *, role: str = "grant") -> str:
    """``path`` as the kernel would reach it: ``~`` expanded, made absolute against
    ``base``, symlinks and ``..`` resolved.

    Raises:
        UnsafeRoot: a step of the way cannot be read (``/proc/1/root`` for another
            process), so what it reaches cannot be known: refused (rule ``unresolvable``).
    """
    expanded = os.path.expanduser(path)
    try:
        return resolved.realpath(os.path.join(base or os.getcwd(), expanded))
    except (OSError, ValueError) as error:
        why = error.strerror if isinstance(error, OSError) else str(error)
        raise UnsafeRoot(
            f"refusing {path} as a writable root ({role}): it cannot be resolved ({why})",
            hint="name the folder by its plain path",
            details={"path": path, "role": role, "rule": "unresolvable"},
        ) from None


def check_spec(spec: ExecSpec, config: Config, environ: Mapping[str, str]) -> None:
    """Refuse ``spec`` when one of its writable roots breaks the rule.

    Its grants are checked in every mode (a grant asks for a writable root whatever the
    mode); its workspace and the sandbox plugins' ``writable_roots`` settings only when it
    runs in ``workspace-write``.

    Raises:
        UnsafeRoot: naming the folder, the rule it broke and what to do instead.
    """
    if spec.mode != "workspace-write" and not spec.grant_writable:
        return  # no writable root to check (and the rules cost a resolve of every home)
    rules = RootRules.of(config, environ, spec.env)
    for grant in spec.grant_writable:
        rules.check(grant, role="grant", base=spec.cwd)
    if spec.mode != "workspace-write":
        return
    rules.check(spec.workspace, role="workspace", base=spec.cwd)
    for setting, path in configured_roots(config):
        rules.check(
            path,
            role=setting,
            hint=f"take {path} out of {setting}, or name a project folder there",
        )


def check_system(real: str, rules: RootRules | None = None) -> None:
    """The providers' last check of a resolved writable root, at confine time: ``/``,
    system and shared folders, homes and credential stores (not the store, where the
    run's home and caches live). ``rules``: ``RootRules.of(None, os.environ)`` made by
    the caller for several roots checked at one moment (made here when omitted).

    Raises:
        UnsafeRoot: ``real`` breaks the rule.
    """
    (rules or RootRules.of(None, os.environ)).check(real, role="sandbox")


def configured_roots(config: Config) -> Iterator[tuple[str, str]]:
    """Every ``writable_roots`` entry in a plugin's settings: ``(setting, path)``."""
    for name, options in config.plugins.settings.items():
        entries = options.get("writable_roots") if isinstance(options, Mapping) else None
        if isinstance(entries, (list, tuple)):
            for entry in entries:
                if isinstance(entry, str) and entry:
                    yield f"plugins.settings.{name}.writable_roots", entry


def _inside(real: str, tree: str) -> str:
    if real == tree:
        return f"{tree} is a system folder"
    return f"it lies inside the system folder {tree}"


def _own_home() -> str | None:
    with contextlib.suppress(KeyError):
        return pwd.getpwuid(os.getuid()).pw_dir
    return None


_PASSWD_FRESH = 2.0  # seconds a listing is reused while /etc/passwd is unchanged
_passwd: list[tuple[object, float, list[str]]] = []


def _passwd_homes() -> list[str]:
    """Every home in the password database (other people's too). A warm server checks
    roots on every call: the listing (~1.5 ms) is reused for a moment while
    ``/etc/passwd`` is the same file, unchanged; a name service behind it is asked again
    after :data:`_PASSWD_FRESH` seconds."""
    import time

    try:
        info = os.stat("/etc/passwd")
        key: object = (info.st_ino, info.st_size, info.st_mtime_ns)
    except OSError:
        key = None
    now = time.monotonic()
    if _passwd and _passwd[0][0] == key and now - _passwd[0][1] < _PASSWD_FRESH:
        return _passwd[0][2]
    try:
        homes = [entry.pw_dir for entry in pwd.getpwall()]
    except OSError:  # pragma: no cover - a broken name service: the other homes still count
        return []
    _passwd[:] = [(key, now, homes)]
    return homes


def _resolved(paths: Iterable[str | None]) -> Iterator[str]:
    """The absolute paths among ``paths``, resolved; ``/`` left out (it holds no home)."""
    for path in paths:
        if path and os.path.isabs(path):
            real = resolved.realpath(path)
            if real != "/":
                yield real


@functools.lru_cache(maxsize=32)
def _credential_stores(homes: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """Each credential store of each of ``homes`` (resolved), with the prefix of what lies
    beneath it: strings only, so the same homes give the same list (checked per step by
    every provider, it was 228 joins a root)."""
    return tuple(
        (store, store.rstrip("/") + "/")
        for home in homes
        for store in (os.path.join(home, name) for name in CREDENTIAL_STORES)
    )


def _beneath(path: str, folder: str) -> bool:
    """Whether ``path`` lies strictly beneath ``folder`` (both resolved)."""
    return path.startswith(folder.rstrip("/") + "/")


def _at_or_beneath(path: str, folder: str) -> bool:
    return path == folder or _beneath(path, folder)
