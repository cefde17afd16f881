"""The mount layout of one sandbox: what is read-only, writable, masked or private.

Order matters to bubblewrap (a later mount covers an earlier one, and a mount point inside
a tmpfs must be made while that tmpfs is still writable). So after the read-only root and
fresh ``/dev`` and ``/proc``, every mount is laid outer before inner, whatever its kind:
private scratch over every directory where host sockets live, the writable and read-only
roots, the protected paths inside them, and the masks over credential stores and system
secrets (at one path a mask is laid last, so it wins even inside a workspace). Masked
folders are made read-only at the very end.

Only what exists can be mounted over: a protected name that appears during the run is the
host's to quarantine afterwards (:mod:`stockade.run.guard`), from the survey kept here.
Credential stores found inside a writable root are masked like those under a home.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from attrs import frozen

from stockade import resolved
from stockade.confine import protected as paths
from stockade.confine import scratch, stores, system_secrets
from stockade.confine.hiding import Hiding
from stockade.errors import SandboxUnavailable
from stockade.request.literals import HiddenKind

if TYPE_CHECKING:
    from stockade.confine.roots import RootRules

# Where host sockets and shared scratch live: replaced by private, empty tmpfs.
PRIVATE_DIRS = scratch.SCRATCH_DIRS
# What bwrap's fresh ``/dev`` holds of the host's devices (all else there is hidden).
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")


@frozen
class Layout:
    """The mount arguments for bwrap and what they protect.

    Attributes:
        args: bwrap options, in order.
        writable: the writable roots (empty in read-only mode).
        protected: paths inside writable roots kept read-only.
        masked: paths made unreadable.
        scanned: directories visited looking for protected paths.
        survey: the protected paths found in the writable roots (``None`` when none is
            writable), for the host's check after the run.
        hiding: what the command cannot see of the host, from the same mounts.
    """

    args: tuple[str, ...]
    writable: tuple[str, ...]
    protected: tuple[str, ...]
    masked: tuple[str, ...]
    scanned: int
    survey: paths.Survey | None = None
    hiding: Hiding = Hiding(())  # noqa: RUF009 - frozen, so one shared empty value is safe


def build(
    *,
    mode: str,
    cwd: str,
    workspace: str | None = None,
    env: Mapping[str, str],
    host_env: Mapping[str, str],
    extra_writable: Iterable[str] = (),
    deny_read: Iterable[str] = (),
    store: Iterable[str] = (),
    keep_read_only: Iterable[str] = (),
    scratch: Iterable[str] = (),
    shared: Iterable[str] = (),
    secrets: Iterable[str] = (),
    scan_limit: int = paths.DEFAULT_SCAN_LIMIT,
    writable_dotfiles: frozenset[str] = frozenset(),
    overlays: Mapping[str, tuple[str, str]] | None = None,
    private: Iterable[str] = (),
    system: RootRules | None = None,
) -> Layout:
    """The layout for one run.

    Args:
        mode: ``read-only`` or ``workspace-write``.
        cwd: the command's working directory.
        workspace: the writable root of ``workspace-write`` (``cwd`` when omitted).
        env: the command's environment (its ``HOME`` is masked too).
        host_env: the host's environment (to find its home and sockets).
        extra_writable: more writable roots from configuration.
        deny_read: more paths to mask.
        store: Stockade's own state, masked like ``deny_read``.
        keep_read_only: resolved paths to keep read-only if they lie in a writable root
            (the host's own installation, the bwrap binary, the seccomp cache).
        scratch: folders writable in every mode (the run's home).
        shared: folders writable in ``workspace-write`` and read-only otherwise (caches).
        secrets: more system secrets (paths or globs) masked besides
            :data:`stockade.confine.system_secrets.SYSTEM_SECRETS`.
        scan_limit: directories to visit at most looking for protected paths.
        writable_dotfiles: protected dotfiles left writable (the profile's opt-out).
        overlays: writable root -> the upper and work folders of its layer: such a root
            is an overlay (:func:`overlay_args`), not a writable bind.
        private: resolved paths of private data this command is not granted
            (:func:`private_masks`), hidden last, over every other mount.
        system: the root rules read once for the command
            (:func:`stockade.confine.protected.writable_roots`).

    Masks, scratch, binds and protected paths may nest in any order (an agent's workspace,
    home and caches live in Stockade's hidden store; a ``HOME`` may lie in the host's
    ``~/.cache``): see :func:`_ordered`.

    Raises:
        SandboxUnavailable: a writable root is ``/``, or a protected path is a symlink or
            reached through one, or the scan limit was hit, or the working directory is
            masked, or a bound folder lies in a system secret.
    """
    workspace = resolved.realpath(workspace or cwd)
    shared = [resolved.realpath(p) for p in shared if os.path.isdir(p)]
    writing = mode == "workspace-write"
    writable = paths.writable_roots(
        (*((workspace, *extra_writable, *shared) if writing else ()), *scratch), system
    )
    read_only = [p for p in (workspace, *shared) if p not in writable]
    masks = _masks(
        env, host_env, deny_read, writable, secrets, bound=(*writable, *read_only), store=store
    )
    # The run's home and the caches are the agent's own scratch, outside the person's reach.
    own = {resolved.realpath(p) for p in (*scratch, *shared)}
    survey = _survey([r for r in writable if r not in own], scan_limit, writable_dotfiles)
    protected = list(survey.read_only) if survey is not None else []
    stores = survey.masked if survey is not None else ()
    for real in keep_read_only:  # resolved by the caller
        if paths.inside(real, writable) and os.path.exists(real):
            protected.append(real)
    mounts = [
        _Mount(p, SCRATCH, "private")
        for p in PRIVATE_DIRS
        if os.path.isdir(p) and not os.path.islink(p)
    ]
    mounts += [_Mount(f, READ_ONLY) for f in read_only]  # seen even under a private /tmp
    layered = overlays or {}
    mounts += [_Mount(r, WRITABLE, layer=layered.get(r)) for r in writable]
    mounts += [_Mount(p, PROTECT) for p in protected]
    for mask in masks:
        kind = SCRATCH if mask.scratch else MASK_DIR if mask.is_dir else MASK_FILE
        mounts.append(_Mount(mask.path, kind, mask.why))
    # Credential stores inside a writable root, masked as under a home.
    hidden = {m.path for m in masks}
    for path in stores:
        if path not in hidden:
            kind = MASK_DIR if os.path.isdir(path) else MASK_FILE
            mounts.append(_Mount(path, kind, "credential-store"))
    laid = _ordered(mounts)
    chdir = resolved.realpath(cwd)
    _reachable(chdir, laid)
    args: list[str] = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for mount in laid:
        args += mount.args()
    # Read-only last: until then bwrap may make mount points inside a masked folder.
    for mount in laid:
        if mount.kind == MASK_DIR:
            args += ["--remount-ro", mount.path]
    hid, private_mounts = private_masks(private, laid)
    args += hid
    mounts += private_mounts
    args += ["--chdir", chdir]
    masked = (*(p for p in stores if p not in hidden), *(m.path for m in masks if not m.scratch))
    masked += tuple(m.path for m in private_mounts)
    scanned = survey.scanned if survey is not None else 0
    # The fresh /dev hides the host's but a few devices; then every mount, laid or not.
    veils: list[tuple[str, HiddenKind]] = [("/dev", "private")]
    veils += [(m.path, m.why) for m in mounts if m.kind in (*_EMPTY, MASK_FILE)]
    shown = [*DEVICES, *(m.path for m in mounts if m.kind not in (*_EMPTY, MASK_FILE))]
    sight = Hiding(veils, shown)
    return Layout(tuple(args), tuple(writable), tuple(protected), masked, scanned, survey, sight)


def private_masks(private: Iterable[str], laid: list[_Mount]) -> tuple[list[str], list[_Mount]]:
    """The bwrap options that hide private data from a command not granted it, and their
    mounts: an empty read-only tmpfs over a folder, ``/dev/null`` over a file. They are laid
    after every other mount (a writable root, whatever its kind), so they win over it; a path
    a mask or scratch tmpfs laid before already empties is left alone."""
    args: list[str] = []
    mounts: list[_Mount] = []
    for path in private:
        if not os.path.lexists(path):
            continue
        above = _nearest(path, laid)
        if above is not None and above.kind in (*_EMPTY, MASK_FILE):
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            args += ["--tmpfs", path, "--remount-ro", path]
            mounts.append(_Mount(path, MASK_DIR, "private-data"))
        else:
            args += ["--ro-bind", "/dev/null", path]
            mounts.append(_Mount(path, MASK_FILE, "private-data"))
    return args, mounts


def _survey(
    roots: list[str], scan_limit: int, writable_dotfiles: frozenset[str]
) -> paths.Survey | None:
    """The protected paths in ``roots`` (none to look for when no root is writable)."""
    if not roots:
        return None
    setting = "plugins.settings.bubblewrap.scan_limit"
    return paths.survey(roots, scan_limit, setting=setting, writable_dotfiles=writable_dotfiles)


# The kinds of mount, and the order of kinds laid at one path (the last laid wins).
SCRATCH = "scratch"  # an empty writable tmpfs (the host's /tmp, a home's .cache)
READ_ONLY = "read-only"  # a read-only bind of a folder onto itself
WRITABLE = "writable"  # a writable bind of a folder onto itself
PROTECT = "protect"  # a read-only bind of a protected path inside a writable root
MASK_DIR = "mask-dir"  # an empty tmpfs, made read-only once everything inside it is laid
MASK_FILE = "mask-file"  # /dev/null bound over a file
_RANK = {SCRATCH: 0, READ_ONLY: 1, WRITABLE: 1, PROTECT: 2, MASK_DIR: 3, MASK_FILE: 3}
_EMPTY = (SCRATCH, MASK_DIR)  # nothing of the host shows beneath these but later mounts


@frozen
class _Mount:
    path: str
    kind: str
    why: HiddenKind = "private"  # what hides it, for a mask or a scratch tmpfs
    layer: tuple[str, str] | None = None  # a writable root's upper and work folders

    def args(self) -> list[str]:
        if self.kind in _EMPTY:
            return ["--tmpfs", self.path]
        if self.kind == WRITABLE and self.layer is not None:
            return overlay_args(self.path, *self.layer)
        if self.kind == WRITABLE:
            return ["--bind", self.path, self.path]
        if self.kind == MASK_FILE:
            return ["--ro-bind", "/dev/null", self.path]
        return ["--ro-bind", self.path, self.path]


def overlay_args(root: str, upper: str, work: str) -> list[str]:
    """A writable root as an overlay: the real folder below, the command's layer above
    (its writes land in ``upper`` only; the host lands them later: :mod:`stockade.layers`)."""
    return ["--overlay-src", root, "--overlay", upper, work, root]


def _ordered(mounts: list[_Mount]) -> list[_Mount]:
    """``mounts`` outer before inner, whatever their kinds, less those with nothing to do.

    A mount is laid after every mount above it, so bwrap makes its mount point inside a
    tmpfs laid before (writable until the end). At one path, a mask is laid last and wins.
    A mask or protected path whose nearest mount (at or above it) is an empty tmpfs is
    dropped: its host content is not there to hide, and binding it would show it again.
    """
    laid: list[_Mount] = []
    for mount in sorted(mounts, key=lambda m: (m.path.rstrip("/").count("/"), _RANK[m.kind])):
        above = _nearest(mount.path, laid)  # a bind at its very path counts
        hidden = mount.kind in (PROTECT, MASK_DIR, MASK_FILE)
        if hidden and above is not None and above.kind in _EMPTY:
            continue
        laid.append(mount)
    return laid


def _nearest(path: str, laid: list[_Mount]) -> _Mount | None:
    """The last laid mount at or above ``path``."""
    for mount in reversed(laid):  # paths.inside(path, [mount.path]), without a list a mount
        top = mount.path
        if path == top or path.startswith(top.rstrip("/") + "/"):
            return mount
    return None


def _reachable(cwd: str, laid: list[_Mount]) -> None:
    """Refuse a working directory that a mask (or a scratch tmpfs) hides, before bwrap
    starts: it would be empty, or missing."""
    mount = _nearest(cwd, laid)
    if mount is None or mount.kind not in (*_EMPTY, MASK_FILE):
        return
    if mount.kind == SCRATCH and mount.path == cwd:
        return  # the command works in an empty scratch folder of its own
    raise SandboxUnavailable(
        f"the working directory {cwd} lies in {mount.path}, which the sandbox "
        f"{'replaces with an empty scratch folder' if mount.kind == SCRATCH else 'masks'}",
        hint="work in a folder outside the credential stores, system secrets and deny_read "
        "paths (or take the path out of deny_read / system_secrets)",
        details={"cwd": cwd, "masked": mount.path},
    )


@frozen
class _Mask:
    path: str
    is_dir: bool
    scratch: bool = False  # an empty writable tmpfs rather than an unreadable one
    why: HiddenKind = "private"


def _masks(
    env: Mapping[str, str],
    host_env: Mapping[str, str],
    deny_read: Iterable[str],
    writable: list[str],
    secrets: Iterable[str] = (),
    *,
    bound: Iterable[str] = (),
    store: Iterable[str] = (),
) -> list[_Mask]:
    """What to hide, resolved, each once: credential stores, sockets, ``deny_read``, the
    system secrets; and each home's ``.cache`` replaced by scratch (tools' caches; the
    host's stay unseen)."""
    masks: list[_Mask] = []
    seen: set[str] = set()
    homes = paths.homes(env, host_env)
    for home in homes:
        cache = os.path.join(home, ".cache")
        if os.path.isdir(cache) and not os.path.islink(cache) and not paths.inside(cache, writable):
            masks.append(_Mask(cache, True, scratch=True))
            seen.add(cache)
        for name in stores.CREDENTIAL_STORES:
            _add_mask(os.path.join(home, name), masks, seen, "credential-store")
    for path in deny_read:
        _add_mask(path, masks, seen, "deny-read")
    for path in store:
        _add_mask(path, masks, seen, "store")
    for path in paths.socket_paths(host_env):
        _add_mask(path, masks, seen, "socket")
    found = system_secrets.system_secrets(homes, secrets)  # globs expanded now, at confine time
    system_secrets.refuse_bound_secrets(bound, found)
    for path in found:
        _add_mask(path, masks, seen, "system-secret")
    return masks


def _add_mask(path: str, masks: list[_Mask], seen: set[str], why: HiddenKind) -> None:
    found = paths.existing(path)  # a symlinked store is masked where it really is
    if found is None:
        return  # nothing there to hide (a dangling symlink shows nothing either)
    real, is_dir = found
    if real in seen or paths.inside(real, PRIVATE_DIRS):
        return  # (the host's /tmp is not there at all: the sandbox's is a fresh tmpfs)
    masks.append(_Mask(real, is_dir, why=why))
    seen.add(real)
