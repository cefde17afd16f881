"""Find the ``stockade`` entry points of installed distributions, without importlib.metadata.

Why by hand: ``importlib.metadata`` pulls in ``email``, ``zipfile``, ``csv`` and more, and on
the 2-core machines this project targets that import alone costs ~40-60 ms, more than the
whole CLI budget (3x ``python -c pass``). Entry points are plain INI sections in
``*.dist-info/entry_points.txt`` (the packaging spec); reading the one section we need from
each ``sys.path`` directory is a few directory scans. The result is checked against
``importlib.metadata`` by the test suite.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable

from attrs import frozen

_DIST_INFO = re.compile(r"^(?P<name>.+?)-(?P<version>[^-]+)\.dist-info$")


@frozen
class EntryPoint:
    """One entry point of one distribution.

    Attributes:
        name: the entry point's name (also the plugin's name in the manager).
        value: ``module`` or ``module:attribute``.
        dist: the distribution's project name, as its dist-info directory spells it.
        version: the distribution's version.
    """

    name: str
    value: str
    dist: str
    version: str

    def load(self) -> object:
        """Import the module and return the named object."""
        import importlib

        module_name, _, attr = self.value.partition(":")
        obj: object = importlib.import_module(module_name.strip())
        for part in attr.strip().split(".") if attr.strip() else ():
            obj = getattr(obj, part)
        return obj


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _section(text: str, group: str) -> Iterable[tuple[str, str]]:
    inside = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            inside = line[1:-1].strip() == group
            continue
        if inside and "=" in line:
            name, _, value = line.partition("=")
            yield name.strip(), value.strip()


def entry_points(group: str, path: Iterable[str] | None = None) -> list[EntryPoint]:
    """The entry points in ``group``; the first distribution of a name on the path wins."""
    seen: set[str] = set()
    found: list[EntryPoint] = []
    for directory in sys.path if path is None else path:
        try:
            names = sorted(os.listdir(directory or "."))
        except OSError:
            continue
        for entry in names:
            match = _DIST_INFO.match(entry)
            if match is None:
                continue
            dist = match["name"]
            key = _normalize(dist)
            if key in seen:
                continue
            seen.add(key)
            try:
                path = os.path.join(directory, entry, "entry_points.txt")
                with open(path, encoding="utf-8") as f:
                    text = f.read()
            except OSError:
                continue
            version = match["version"]
            found.extend(EntryPoint(n, v, dist, version) for n, v in _section(text, group))
    return found
