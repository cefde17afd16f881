"""The mounts of one run, computed on the host from Stockade's public lists.

What is private (:mod:`stockade.confine.scratch`), masked (:mod:`stockade.confine.stores`,
:mod:`stockade.confine.system_secrets`, the host sockets and Stockade's own store), writable,
and kept read-only inside a writable root (:func:`stockade.confine.protected.survey`). The
in-namespace setup (:mod:`stockade_unshare.inside`) lays them in the order given here: outer
before inner, and at one path a mask after a bind, so the mask wins.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from attrs import frozen

from stockade.confine import protected, scratch, stores, system_secrets
from stockade.confine.hiding import Hiding
from stockade.errors import SandboxUnavailable
from stockade.request.literals import HiddenKind

DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
"""The host devices the fresh ``/dev`` shows; every other one is hidden."""
_RANK = {"scratch": 0, "bind": 1, "protect": 2, "mask-dir": 3, "mask-file": 3}
_EMPTY = ("scratch", "mask-dir")
_HIDING = ("scratch", "mask-dir", "mask-file")


@frozen
class Mount:
    """One mount of the layout.

    Attributes:
        kind: ``scratch`` (an empty private tmpfs), ``bind`` (a root onto itself),
            ``protect`` (a protected path onto itself, read-only), ``mask-dir`` (an empty
            read-only tmpfs) or ``mask-file`` (``/dev/null`` over it).
        path: where, resolved.
        how: for a bind, ``rw`` or ``ro``; for the others, what hides it (a ``HiddenKind``).
    """

    kind: str
    path: str
    how: str


@frozen
class Layout:
    """The mounts of one run and what they hide.

    Attributes:
        mounts: in the order to lay them.
        survey: the protected paths found in the writable roots (``None``: none writable).
        hiding: what the command cannot see, for ``hides``.
    """

    mounts: tuple[Mount, ...]
    survey: protected.Survey | None
    hiding: Hiding


def build(
    *,
    writing: bool,
    cwd: str,
    workspace: str,
    env: Mapping[str, str],
    host_env: Mapping[str, str],
    grants: Iterable[str] = (),
    home: str | None = None,
    caches: Iterable[str] = (),
    store: Iterable[str] = (),
    secrets: Iterable[str] = (),
    keep_read_only: Iterable[str] = (),
    writable_dotfiles: frozenset[str] = frozenset(),
    scan_limit: int = protected.DEFAULT_SCAN_LIMIT,
    sockets: Iterable[str] = (),
) -> Layout:
    """The layout for one run (the arguments are the spec's fields of the same names;
    ``sockets``: the egress proxy's socket, bound in for the relay).

    Raises:
        SandboxUnavailable: a protected path is a symlink, the scan limit was hit, a bound
            folder lies in a system secret, or the working directory is masked.
        UnsafeRoot: a writable root is ``/``, a home, a system folder.
    """
    workspace = os.path.realpath(workspace)
    shared = [os.path.realpath(c) for c in caches if os.path.isdir(c)]
    own = [os.path.realpath(h) for h in (home,) if h]
    writable = protected.writable_roots((*((workspace, *grants, *shared) if writing else ()), *own))
    read_only = [p for p in (workspace, *shared) if p not in writable]
    homes = protected.homes(env, host_env)
    watched = [r for r in writable if r not in {*own, *shared}]
    survey = None
    if watched:
        setting = "plugins.settings.unshare.scan_limit"
        survey = protected.survey(
            watched, scan_limit, setting=setting, writable_dotfiles=writable_dotfiles
        )
    found = system_secrets.system_secrets(homes, secrets)
    system_secrets.refuse_bound_secrets((*writable, *read_only), found)
    masks: dict[str, HiddenKind] = {}
    for kind, paths in (
        ("credential-store", stores.stores_under(homes)),
        ("credential-store", survey.masked if survey else ()),
        ("store", (os.path.realpath(p) for p in store if os.path.exists(p))),
        ("socket", (os.path.realpath(p) for p in protected.socket_paths(host_env))),
        ("system-secret", found),
    ):
        for path in paths:
            if os.path.exists(path):
                masks.setdefault(path, kind)  # type: ignore[arg-type]
    kept = [
        *(survey.read_only if survey else ()),
        *(p for p in keep_read_only if protected.inside(p, writable) and os.path.exists(p)),
    ]
    mounts = [Mount("scratch", p, "private") for p in scratch.private_folders(homes, writable)]
    mounts += [Mount("bind", p, "ro") for p in read_only]
    mounts += [Mount("bind", p, "rw") for p in writable]
    mounts += [Mount("protect", p, "ro") for p in kept]
    mounts += [Mount("bind", p, "ro") for p in sockets]  # the egress proxy, for the init
    mounts += [
        Mount("mask-dir" if os.path.isdir(p) else "mask-file", p, why) for p, why in masks.items()
    ]
    laid = _ordered(mounts)
    _reachable(os.path.realpath(cwd), laid)
    veils: list[tuple[str, HiddenKind]] = [("/dev", "private")]
    veils += [(m.path, m.how) for m in mounts if m.kind in _HIDING]  # type: ignore[misc]
    shown = [*DEVICES, *(m.path for m in mounts if m.kind not in _HIDING)]
    return Layout(tuple(laid), survey, Hiding(veils, shown))


def _ordered(mounts: list[Mount]) -> list[Mount]:
    """Outer before inner; at one path a mask last. A read-only bind or a mask whose
    nearest mount above is an empty tmpfs is dropped: binding it would show the host's."""
    laid: list[Mount] = []
    for mount in sorted(mounts, key=lambda m: (m.path.rstrip("/").count("/"), _RANK[m.kind])):
        above = _nearest(mount.path, laid)
        hides = mount.kind in ("protect", "mask-dir", "mask-file")
        if hides and above is not None and above.kind in _EMPTY:
            continue
        laid.append(mount)
    return laid


def _nearest(path: str, laid: list[Mount]) -> Mount | None:
    for mount in reversed(laid):
        if protected.inside(path, [mount.path]):
            return mount
    return None


def _reachable(cwd: str, laid: list[Mount]) -> None:
    mount = _nearest(cwd, laid)
    if mount is None or mount.kind not in ("mask-dir", "mask-file"):
        return
    raise SandboxUnavailable(
        f"the working directory {cwd} lies in {mount.path}, which the unshare sandbox masks",
        hint="work in a folder outside the credential stores and system secrets",
        details={"cwd": cwd, "masked": mount.path},
    )
