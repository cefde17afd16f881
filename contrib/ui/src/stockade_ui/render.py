"""HTML from templates: Jinja2 with autoescaping on for every template, and the filters
that make hostile text plain.

Everything a command or an agent wrote (argv, paths, output, reasons that quote them) is
text an attacker may have chosen. Autoescaping makes markup inert; :func:`visible` goes
further for what a person approves: control characters, bidirectional overrides and
invisible characters are drawn as marked escapes (``\\u202e``), so a command cannot look
like another one.
"""

from __future__ import annotations

import os
import re
import shlex
import time
from collections.abc import Mapping

import jinja2
from markupsafe import Markup, escape

HERE = os.path.dirname(__file__)

_HIDDEN = re.compile(
    "[\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f"
    "\ufeff\ufff9-\ufffb\ud800-\udfff]"
)
_HIDDEN_IN_TEXT = re.compile(_HIDDEN.pattern.replace("\x00-\x1f", "\x00-\x08\x0b-\x1f"))


def _mark(found: re.Match[str]) -> str:
    char = found.group()
    code = ord(char)
    name = f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    return f'<span class="esc" title="U+{code:04X}">{name}</span>'


def visible(value: object) -> Markup:
    """``value`` escaped, with every control, bidirectional or invisible character drawn
    as a marked escape."""
    text = str(value)
    escaped = str(escape(text))
    return Markup(_HIDDEN.sub(_mark, escaped) if _HIDDEN.search(text) else escaped)  # noqa: S704 - escaped first


def visible_text(value: object) -> Markup:
    """As :func:`visible`, for output: newlines and tabs stay as they are."""
    text = str(value)
    escaped = str(escape(text))
    return Markup(_HIDDEN_IN_TEXT.sub(_mark, escaped) if _HIDDEN_IN_TEXT.search(text) else escaped)  # noqa: S704 - escaped first


def clock(when: float) -> str:
    """A time of day, with the date when it is not today."""
    local = time.localtime(when)
    if time.strftime("%Y-%m-%d", local) == time.strftime("%Y-%m-%d"):
        return time.strftime("%H:%M:%S", local)
    return time.strftime("%Y-%m-%d %H:%M:%S", local)


def size(count: int) -> str:
    """A byte count a person reads at a glance."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024  # type: ignore[assignment]
    return f"{count} B"  # pragma: no cover - the loop always returns


def environment() -> jinja2.Environment:
    """The templates, autoescaped, with the page's filters; a missing variable is an error."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(os.path.join(HERE, "templates")),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(visible=visible, visible_text=visible_text, clock=clock, size=size)
    env.filters["shell"] = shlex.join
    return env


class Pages:
    """Renders the page's templates with what every page shares (the CSRF value)."""

    def __init__(self, shared: Mapping[str, object]) -> None:
        self.env = environment()
        self.shared = dict(shared)

    def render(self, name: str, **context: object) -> str:
        """The template ``name`` filled in."""
        return self.env.get_template(name).render(**self.shared, **context)
