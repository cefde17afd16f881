"""An identity of the code a server runs: an edit, an upgrade or a reinstall changes it.

The server takes it when it starts and again at each client's hello; when the two differ,
the client is refused with ``version``, drains that server and starts one on the new code
(:mod:`stockade.cli.client`). The package version alone stays ``0.1.0`` through every edit
of a checkout and every reinstall.

- **An editable checkout** (this package under ``<root>/core/src/``): every ``.py`` file of
  the workspace's members (``core/src``, ``plugins/*/src``, ``contrib/*/src``), by path,
  size and modification time: about 200 files, about a millisecond.
- **An installed package** (``site-packages``): each ``stockade*`` entry beside this
  package (the packages and their ``.dist-info`` folders), by name, inode and modification
  time: a reinstall or an upgrade of any of them makes new ones.

Standard library only.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator


def identity() -> str:
    """A short digest of the installed code, as the files say now."""
    from .paths import _sha256

    package = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    parent = os.path.dirname(package)
    root = os.path.dirname(os.path.dirname(parent))
    parts: list[str] = []
    if os.path.basename(parent) == "src" and os.path.isfile(os.path.join(root, "pyproject.toml")):
        for path, info in _sources(root):
            parts.append(f"{path}\0{info.st_size}\0{info.st_mtime_ns}")
    else:
        try:
            with os.scandir(parent) as entries:
                for entry in entries:
                    if entry.name.startswith("stockade"):
                        info = entry.stat(follow_symlinks=False)
                        parts.append(f"{entry.name}\0{info.st_ino}\0{info.st_mtime_ns}")
        except OSError:
            parts.append(package)
    parts.sort()
    return _sha256("\n".join(parts).encode("utf-8", "surrogateescape"))[:12]


def _sources(root: str) -> Iterator[tuple[str, os.stat_result]]:
    """Every ``.py`` file of the checkout's members, with its ``stat``."""
    stack = [os.path.join(root, "core", "src")]
    for group in ("plugins", "contrib"):
        try:
            members = os.listdir(os.path.join(root, group))
        except OSError:
            continue
        stack.extend(os.path.join(root, group, member, "src") for member in members)
    while stack:
        top = stack.pop()
        try:
            entries = os.scandir(top)
        except OSError:
            continue
        with entries:
            for entry in entries:
                if entry.name.endswith(".py"):
                    try:
                        yield entry.path, entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                elif entry.name != "__pycache__" and entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
