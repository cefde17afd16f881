"""Whether bwrap can mount a command's layers here: an overlay inside the user namespace.

The kernel mounts an overlay in a user namespace only from 5.11 on, and only over
filesystems that allow it (the upper one must store ``user.`` extended attributes: tmpfs
from 6.6 on, ext4, xfs, btrfs). So before a command's roots are layered on a filesystem,
the smallest overlay is tried there once per process (a few milliseconds); where it fails,
the command writes directly, and the result and ``stockade doctor`` say so.
"""

from __future__ import annotations

import os
import tempfile
import threading

from stockade.layers import place
from stockade.layers.place import Layer
from stockade.request.spec import ExecSpec
from stockade.run import spawn
from stockade.trees import remove_tree

from .discover import PROBE_TIMEOUT

_tried: dict[tuple[str, int], str | None] = {}
_lock = threading.Lock()


def refusal(bwrap: str, home: str) -> str | None:
    """Why bwrap cannot mount an overlay in ``home``'s filesystem (``None``: it can)."""
    try:
        device = os.stat(home).st_dev
    except OSError as error:
        return f"{home}: {error.strerror}"
    key = (bwrap, device)
    with _lock:
        if key in _tried:
            return _tried[key]
    why = _try(bwrap, home)
    with _lock:
        _tried[key] = why
    return why


def _try(bwrap: str, home: str) -> str | None:
    folder = tempfile.mkdtemp(prefix="probe.", dir=home)
    try:
        lower, upper, work = (os.path.join(folder, n) for n in ("lower", "upper", "work"))
        for path in (lower, upper, work):
            os.mkdir(path, 0o700)
        argv = [
            bwrap,
            "--unshare-all",
            "--die-with-parent",
            "--ro-bind",
            "/",
            "/",
            "--overlay-src",
            lower,
            "--overlay",
            upper,
            work,
            lower,
            "--",
            "/bin/sh",
            "-c",
            f": > {lower}/probe",
        ]
        try:
            done = spawn.probe(argv, timeout=PROBE_TIMEOUT)
        except (TimeoutError, OSError) as error:
            return f"bwrap could not try an overlay in {home}: {error}"
        if done.returncode != 0 or not os.path.exists(os.path.join(upper, "probe")):
            said = done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}"
            return f"bwrap could not mount an overlay in {home}: {said}"
        return None
    finally:
        remove_tree(folder)  # without recursion, as every tree removal


def layers_for(spec: ExecSpec, roots: tuple[str, ...], bwrap: str) -> tuple[Layer, ...]:
    """The command's layers, one per writable root of the person's (its run home and caches
    are its own scratch), or none: it writes directly (no store to keep them, or an overlay
    cannot be mounted on one root's filesystem)."""
    if spec.mode != "workspace-write" or spec.layer_store is None or not roots:
        return ()
    made = place.make(roots, spec.layer_store, spec.action_id)
    if made is None:
        return ()
    for home in dict.fromkeys(layer.hide for layer in made):
        if refusal(bwrap, home) is not None:
            place.discard(made)
            return ()
    return made
