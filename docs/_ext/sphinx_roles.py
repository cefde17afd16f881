"""A griffe extension: render the reST roles in Stockade's docstrings as cross-references.

The source docstrings use Sphinx roles (``:class:`~stockade.errors.PolicyHeld```), which
Markdown would show literally. Each role becomes an *optional* autorefs link: it links when
the target is documented on the site and stays plain code otherwise, so it never breaks the
strict build.
"""

from __future__ import annotations

import html
import re

import griffe

_ROLE = re.compile(r":(?:py:)?(class|meth|func|attr|mod|data|exc|obj):`(~?)([^`<>]+)`")
_CALLABLE_ROLES = frozenset({"meth", "func"})


def _members(obj: griffe.Object | griffe.Alias) -> dict[str, object]:
    try:
        return dict(obj.members)
    except Exception:  # noqa: BLE001 - an unresolvable alias simply has no members here
        return {}


def _qualify(obj: griffe.Object, target: str) -> str:
    """The full path of ``target`` as Python would find it from inside ``obj``."""
    if target.startswith("stockade"):
        return target
    first = target.split(".", 1)[0]
    node: griffe.Object | griffe.Alias | None = obj
    while node is not None:
        if first in _members(node):
            return f"{node.path}.{target}"
        node = node.parent
    return target


class SphinxRoles(griffe.Extension):
    """Rewrite ``:role:`target``` in every docstring into an optional autorefs link."""

    def on_object(
        self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: object
    ) -> None:
        """Rewrite the docstring of every object once the tree is built."""
        _rewrite(obj)

    def on_package(
        self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: object
    ) -> None:
        """Rewrite the top-level package's own docstring (not visited by ``on_object``)."""
        _rewrite(pkg)


def _rewrite(obj: griffe.Object) -> None:
    if obj.docstring is None:
        return

    def link(match: re.Match[str]) -> str:
        role, short, target = match.groups()
        identifier = _qualify(obj, target)
        title = target.rsplit(".", 1)[-1] if short else target
        if role in _CALLABLE_ROLES:
            title += "()"
        return (
            f'<autoref identifier="{html.escape(identifier)}" optional>'
            f"<code>{html.escape(title)}</code></autoref>"
        )

    obj.docstring.value = _ROLE.sub(link, obj.docstring.value)
