"""Where a command's layers live: an upper and a work folder per writable root, on the root's
own filesystem (a commit is then renames, never copies), where no sandboxed command reaches.

The layers of a command are kept, in order of preference:

1. under the store, ``<store>/layers/<action_id>/<n>/``, when the store lies on the root's
   filesystem (the usual case: a workspace and ``~/.local/state`` on one disk); every sandbox
   masks the store already;
2. else in ``.stockade-layers-<uid>`` in the nearest folder above the root that lies on the
   same filesystem and in no writable root (``/tmp/.stockade-layers-1000`` for a workspace on
   a ``/tmp`` tmpfs); the sandbox masks that folder too (:attr:`Layer.hide`).

A root in a fork mounted as an overlay (:mod:`~stockade.layers.mounts`) is the one exception:
every folder on its filesystem is inside the fork, so its layers are under the store, on
another filesystem, and landing copies each file it brings (once, beside its name, then a
rename over it: :mod:`~stockade.layers.across`) where it would rename it.

When none of these exists (the root is the top of its own filesystem, and that filesystem holds no
store), the root cannot have a layer: :func:`make` returns ``None`` and the command runs in
today's direct mode, which the result's ``sandbox.writes`` and ``stockade doctor`` say.

A layer holds whatever its command made, a tree of any depth included: it is walked and
removed without recursion (:mod:`~stockade.trees`).
"""

from __future__ import annotations

import contextlib
import os
import stat

import attrs
from attrs import frozen

from ..confine.protected import inside
from ..trees import remove_tree
from . import mounts

LAYERS = "layers"
"""The store's folder of layers."""
SIBLING = ".stockade-layers-{uid}"
"""The folder of layers beside a root whose filesystem holds no store."""


@frozen
class Layer:
    """One writable root's layer for one command.

    Attributes:
        root: the real folder (resolved), the overlay's lower layer.
        folder: the layer's own folder, holding ``upper`` and ``work`` (and the journal).
        hide: the folder that holds ``folder`` and must be masked in the sandbox.
    """

    root: str
    folder: str
    hide: str

    @property
    def upper(self) -> str:
        """Where the command's writes go."""
        return os.path.join(self.folder, "upper")

    @property
    def work(self) -> str:
        """The overlay's own scratch (same filesystem as ``upper``)."""
        return os.path.join(self.folder, "work")


def home_for(root: str, store: str, roots: tuple[str, ...]) -> str | None:
    """The folder of layers for ``root`` (made 0700 when missing), or ``None`` when no folder
    on its filesystem lies outside every writable root."""
    try:
        device = os.stat(root).st_dev
    except OSError:
        return None
    own = os.path.join(store, LAYERS)
    with contextlib.suppress(OSError):
        os.makedirs(store, mode=0o700, exist_ok=True)
        if not inside(own, roots) and (
            os.stat(store).st_dev == device or mounts.in_fork(root, store)
        ):
            _private(own)
            return own
    above = os.path.dirname(root)
    while True:
        try:
            info = os.stat(above)
        except OSError:
            return None
        if info.st_dev != device:
            return None
        if not inside(above, roots):
            sibling = os.path.join(above, SIBLING.format(uid=os.getuid()))
            with contextlib.suppress(OSError):
                _private(sibling)
                return sibling
        if above == "/":
            return None
        above = os.path.dirname(above)


def _private(folder: str) -> None:
    """``folder`` made (0700) or checked: a real folder of this user, nobody else's.

    Raises:
        OSError: it is a link, not a folder, or another user's.
    """
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o700)
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise OSError(f"{folder} is not a folder of this user")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(folder, 0o700)


def make(roots: tuple[str, ...], store: str, action_id: str) -> tuple[Layer, ...] | None:
    """A fresh layer per root for command ``action_id``; ``None`` when one root cannot have
    one (the command then writes directly, every root alike)."""
    layers: list[Layer] = []
    for n, root in enumerate(roots):
        home = home_for(root, store, roots)
        if home is None:
            discard(layers)
            return None
        folder = os.path.join(home, f"{action_id}.{n}")
        remove_tree(folder)  # an old try of the same id
        os.mkdir(folder, 0o700)
        os.mkdir(os.path.join(folder, "upper"), 0o755)
        os.mkdir(os.path.join(folder, "work"), 0o700)
        layers.append(Layer(root, folder, home))
    return tuple(layers)


def aside(layers: tuple[Layer, ...]) -> tuple[Layer, ...]:
    """The same layers renamed (``ACTION.waitingN``): what released the command's plan
    discards (its layers by their first name) no longer finds them; they wait for a person."""
    moved = []
    for layer in layers:
        head, n = layer.folder.rsplit(".", 1)
        folder = f"{head}.waiting{n}"
        os.rename(layer.folder, folder)
        moved.append(attrs.evolve(layer, folder=folder))
    return tuple(moved)


def discard(layers: list[Layer] | tuple[Layer, ...]) -> None:
    """Remove layers and all they hold (the overlay's work folder included)."""
    for layer in layers:
        remove_tree(layer.folder)
