"""The layout rules of ``tests/test_layout.py``, checked on any tree shaped like this one.

A tree has ``core/src/<package>``, ``plugins/*/src/<package>``, ``contrib/*/src/<package>``
and ``bench/*.py``. :func:`check` reads every ``.py`` file there with :mod:`ast` (no import,
no third-party tool) and returns what breaks a rule, each with its file, line and rule:

- ``import-cycle``: a runtime import circle among core modules, or among bench modules;
- ``core-imports-plugin``: core imports a ``stockade_*`` package, or names a plugin's or
  contrib's package in a string (``import_module("stockade_ui")``);
- ``plugin-imports-plugin``: a plugin or contrib package imports (or names) another one;
- ``process-start``: ``subprocess``, ``pty``, ``multiprocessing`` or ``webbrowser`` imported,
  or ``os.fork*``, ``os.exec*``, ``os.spawn*``, ``os.posix_spawn*``, ``os.system`` or
  ``os.popen`` used, outside ``plugins/local/src/stockade_local/`` and the spawn module
  (``spawn.py`` directly in the core package or in its ``run`` package);
- ``file-size``: a source file over :data:`LIMIT` lines;
- ``policy-run``: a module under ``<core>.policy`` imports ``<core>.run`` or the other way
  round (no such module yet: the rule applies once the packages exist).

Runtime imports are those at module level and inside functions; the body of an
``if TYPE_CHECKING:`` is skipped. Relative imports are resolved. Importing ``a.b.c`` is an
edge to ``a.b.c`` only, not to the packages above it (their ``__init__`` files import nothing
of their children).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import attrs

LIMIT = 500
PROCESS_MODULES = frozenset({"subprocess", "pty", "multiprocessing", "webbrowser"})
OS_STARTS = re.compile(r"fork\w*|exec\w*|spawn\w*|posix_spawn\w*|system|popen")
STARTERS = ("plugins/local/src/stockade_local/", "core/src/stockade/conformance/suite/")
"""Folders whose files may start processes: the executor, and the conformance kit's attacks
(tests shipped in core: they set their ground up with ``git`` and run attackers)."""
SPAWN_DIRS = ("core/src/*", "core/src/*/run")
"""Where the spawn module (``spawn.py``) may sit, as globs relative to the root."""
_PACKAGE_NAME = re.compile(r"stockade_\w+(\.\w+)*")


@attrs.frozen
class Module:
    """One source file.

    Attributes:
        name: its import name (``stockade.cli.run``; in bench, the file's stem).
        path: its path from the root, with ``/``.
        group: ``core``, ``plugins``, ``contrib`` or ``bench``.
        package: its top-level package (``bench`` for bench).
        lines: its number of lines.
    """

    name: str
    path: str
    group: str
    package: str
    lines: int


@attrs.frozen
class Violation:
    """A broken rule where it happens.

    Attributes:
        rule: the rule's name (see the module docstring).
        path: the file, from the root.
        line: the line in it (1 for a whole-file rule).
        detail: what breaks it; with ``rule`` and ``path``, the key ``KNOWN`` lists.
        note: more to read, not part of the key (a circle's steps, a file's length).
    """

    rule: str
    path: str
    line: int
    detail: str
    note: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        """``(rule, path, detail)``: stable while lines move."""
        return (self.rule, self.path, self.detail)

    def __str__(self) -> str:
        note = f" ({self.note})" if self.note else ""
        return f"{self.path}:{self.line}: [{self.rule}] {self.detail}{note}"


@attrs.frozen
class Found:
    """What one file does at run time.

    Attributes:
        imports: ``(line, dotted name)`` of each module it imports, resolved to absolute;
            ``from a import b`` gives ``a.b`` and ``a`` (whichever is a module counts).
        starts: ``(line, what)`` of each process start.
        names: ``(line, string)`` of each string constant shaped like a package path.
    """

    imports: tuple[tuple[int, tuple[str, ...]], ...]
    starts: tuple[tuple[int, str], ...]
    names: tuple[tuple[int, str], ...]


def modules(root: Path) -> list[Module]:
    """Every source file of the tree at ``root``, sorted by path."""
    found: list[Module] = []
    for group, pattern in (
        ("core", "core/src"),
        ("plugins", "plugins/*/src"),
        ("contrib", "contrib/*/src"),
    ):
        for src in sorted(root.glob(pattern)):
            for path in sorted(src.rglob("*.py")):
                parts = path.relative_to(src).with_suffix("").parts
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                found.append(_module(root, path, ".".join(parts), group, parts[0]))
    for path in sorted((root / "bench").glob("*.py")):
        found.append(_module(root, path, path.stem, "bench", "bench"))
    return found


def _module(root: Path, path: Path, name: str, group: str, package: str) -> Module:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    return Module(name, path.relative_to(root).as_posix(), group, package, lines)


def read(root: Path, module: Module) -> Found:
    """Parse ``module``'s file and collect its runtime imports, process starts and names."""
    tree = ast.parse((root / module.path).read_text(encoding="utf-8"), module.path)
    base = module.name if module.path.endswith("__init__.py") else module.name.rpartition(".")[0]
    os_names = {
        a.asname or a.name.partition(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.Import)
        for a in n.names
        if a.name == "os" or (a.asname is None and a.name.startswith("os."))
    }
    imports: list[tuple[int, tuple[str, ...]]] = []
    starts: list[tuple[int, str]] = []
    names: list[tuple[int, str]] = []
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                imports.append((node.lineno, (alias.name,)))
                if alias.name.partition(".")[0] in PROCESS_MODULES:
                    starts.append((node.lineno, f"import {alias.name}"))
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(node, base)
            for alias in node.names:
                imports.append((node.lineno, (f"{source}.{alias.name}", source)))
                if source == "os" and OS_STARTS.fullmatch(alias.name):
                    starts.append((node.lineno, f"from os import {alias.name}"))
            if source.partition(".")[0] in PROCESS_MODULES:
                starts.append((node.lineno, f"from {source} import ..."))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id in os_names and OS_STARTS.fullmatch(node.attr):
                starts.append((node.lineno, f"os.{node.attr}"))
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and _PACKAGE_NAME.fullmatch(node.value)
        ):
            names.append((node.lineno, node.value))
    return Found(tuple(imports), tuple(starts), tuple(names))


def _absolute(node: ast.ImportFrom, base: str) -> str:
    if not node.level:
        return node.module or ""
    parts = base.split(".")
    anchor = ".".join(parts[: len(parts) - (node.level - 1)])
    return f"{anchor}.{node.module}" if node.module else anchor


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node that runs, skipping the bodies of ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _type_checking(node.test):
            stack.extend(reversed(node.orelse))
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def edges(mods: list[Module], found: dict[str, Found]) -> dict[str, list[tuple[int, Module]]]:
    """For each module's path, the tree's modules it imports at run time, with the line."""
    by_name = {(m.group == "bench", m.name): m for m in mods}
    graph: dict[str, list[tuple[int, Module]]] = {}
    for module in mods:
        out = graph.setdefault(module.path, [])
        bench = module.group == "bench"
        for line, candidates in found[module.path].imports:
            for name in candidates:
                # Bench scripts import their siblings by bare name; then the installed packages.
                target = (by_name.get((True, name)) if bench else None) or by_name.get(
                    (False, name)
                )
                if target is not None:
                    if target is not module:
                        out.append((line, target))
                    break
    return graph


def check(root: Path) -> list[Violation]:
    """Every violation in the tree at ``root``, sorted by rule, path and line."""
    mods = modules(root)
    found = {m.path: read(root, m) for m in mods}
    graph = edges(mods, found)
    plugin_packages = {m.package for m in mods if m.group in ("plugins", "contrib")}
    core = {m.package for m in mods if m.group == "core"}
    out: list[Violation] = []
    out += _cycles(mods, graph, "core") + _cycles(mods, graph, "bench")
    for module in mods:
        if module.lines > LIMIT:
            out.append(
                Violation("file-size", module.path, 1, f"over {LIMIT} lines", f"{module.lines}")
            )
        if module.group == "bench":
            continue
        info = found[module.path]
        out += _foreign(module, info, plugin_packages)
        if not _may_start(root, module):
            out += [
                Violation("process-start", module.path, line, what) for line, what in info.starts
            ]
        out += _policy_run(module, graph[module.path], core)
    return sorted(set(out), key=lambda v: (v.rule, v.path, v.line, v.detail))


def _foreign(module: Module, info: Found, plugin_packages: set[str]) -> list[Violation]:
    """Core naming any ``stockade_*`` package; a plugin naming another plugin's."""
    rule = "core-imports-plugin" if module.group == "core" else "plugin-imports-plugin"
    out = []
    for line, candidates in info.imports:
        top = candidates[-1].partition(".")[0]
        if top.startswith("stockade_") and top != module.package:
            out.append(Violation(rule, module.path, line, f"imports {top}"))
    for line, name in info.names:
        top = name.partition(".")[0]
        if top in plugin_packages and top != module.package:
            out.append(Violation(rule, module.path, line, f"names {top}"))
    return out


def _may_start(root: Path, module: Module) -> bool:
    if module.path.startswith(STARTERS):
        return True
    return module.path.endswith("/spawn.py") and any(
        (root / module.path).parent in root.glob(pattern) for pattern in SPAWN_DIRS
    )


def _policy_run(module: Module, out: list[tuple[int, Module]], core: set[str]) -> list[Violation]:
    """Deciding (``<core>.policy``) and doing (``<core>.run``) never import each other."""
    sides = {f"{package}.{side}": side for package in core for side in ("policy", "run")}
    mine = next((s for prefix, s in sides.items() if _within(module.name, prefix)), None)
    if mine is None:
        return []
    return [
        Violation("policy-run", module.path, line, f"imports {target.name}")
        for line, target in out
        for prefix, side in sides.items()
        if side != mine and _within(target.name, prefix)
    ]


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _cycles(
    mods: list[Module], graph: dict[str, list[tuple[int, Module]]], group: str
) -> list[Violation]:
    """One violation per import circle (strongly connected set) among ``group``'s modules.

    Its detail names the circle's modules, sorted; its message walks one shortest cycle,
    ``file:line`` per step.
    """
    nodes = [m for m in mods if m.group == group]
    inner = {m.path: [(line, t) for line, t in graph[m.path] if t.group == group] for m in nodes}
    out = []
    for component in _components([m.path for m in nodes], inner):
        if len(component) < 2:
            continue
        start = min(component)
        steps = _shortest_cycle(start, inner, component)
        walk = "; ".join(f"{path}:{line} imports {target.name}" for path, line, target in steps)
        members = sorted(m.name for m in nodes if m.path in component)
        line = steps[0][1]
        out.append(Violation("import-cycle", start, line, " <-> ".join(members), walk))
    return out


def _components(paths: list[str], inner: dict[str, list[tuple[int, Module]]]) -> list[set[str]]:
    """Strongly connected components (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    result: list[set[str]] = []
    for first in paths:
        if first in index:
            continue
        work = [(first, iter(inner[first]))]
        index[first] = low[first] = len(index)
        stack.append(first)
        on.add(first)
        while work:
            node, children = work[-1]
            for _, target in children:
                if target.path not in index:
                    index[target.path] = low[target.path] = len(index)
                    stack.append(target.path)
                    on.add(target.path)
                    work.append((target.path, iter(inner[target.path])))
                    break
                if target.path in on:
                    low[node] = min(low[node], index[target.path])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    result.append(component)
    return result


def _shortest_cycle(
    start: str, inner: dict[str, list[tuple[int, Module]]], component: set[str]
) -> list[tuple[str, int, Module]]:
    """The steps ``(path, line, target)`` of a shortest cycle from ``start`` back to it."""
    previous: dict[str, tuple[str, int, Module]] = {}
    queue = [start]
    for node in queue:
        for line, target in inner[node]:
            if target.path not in component:
                continue
            if target.path == start:
                steps = [(node, line, target)]
                back = node
                while back != start:
                    steps.append(previous[back])
                    back = previous[back][0]
                return steps[::-1]
            if target.path not in previous:
                previous[target.path] = (node, line, target)
                queue.append(target.path)
    return []
