"""HTML from templates: Jinja2 with autoescaping on for every template, and the filters
that make hostile text plain.

Everything a command or an agent wrote (argv, paths, output, reasons that quote them) is
text an attacker may have chosen. Autoescaping makes markup inert; :func:`visible` goes
further for what a person approves: control characters, bidirectional overrides and
invisible characters are drawn as marked escapes (``\\u202e``), so a command cannot look
like another one. Which characters, and how each is written, is
:mod:`stockade.display`'s, the same as at the terminal and over MCP; :func:`command` shows
argv as the same shell words as ``stockade pending``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping

import jinja2
from markupsafe import Markup, escape

from stockade import display

HERE = os.path.dirname(__file__)


def _html(pieces: Iterable[display.Piece]) -> Markup:
    """Plain stretches escaped as HTML, each escape in a marked span naming its code point."""
    out = Markup()
    for shown, code in pieces:
        if code is None:
            out += escape(shown)
        else:
            out += Markup('<span class="esc" title="U+{:04X}">{}</span>').format(code, shown)
    return out


def visible(value: object) -> Markup:
    """``value`` escaped, with every control, bidirectional or invisible character drawn
    as a marked escape."""
    return _html(display.pieces(str(value)))


def visible_text(value: object) -> Markup:
    """As :func:`visible`, for output: newlines and tabs stay as they are, and a CR just
    before a newline is part of that line end (CRLF), not a hidden character. A lone CR
    is still drawn as ``\\r``: at a terminal it returns to the line's start, so text after
    it would hide the text before."""
    return _html(display.pieces(str(value).replace("\r\n", "\n"), keep="\n\t"))


def command(argv: Iterable[str]) -> Markup:
    """``argv`` as shell words, as the terminal shows it, with each escape marked."""
    return _html(display.command_pieces(argv))


def clock(when: float) -> str:
    """A time of day, with the date when it is not today."""
    local = time.localtime(when)
    if time.strftime("%Y-%m-%d", local) == time.strftime("%Y-%m-%d"):
        return time.strftime("%H:%M:%S", local)
    return time.strftime("%Y-%m-%d %H:%M:%S", local)


def stamp(when: float) -> str:
    """A date and time of day, whatever the day."""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(when))


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
    env.filters.update(
        visible=visible,
        visible_text=visible_text,
        command=command,
        clock=clock,
        stamp=stamp,
        size=size,
    )
    return env


class Pages:
    """Renders the page's templates with what every page shares (the CSRF value)."""

    def __init__(self, shared: Mapping[str, object]) -> None:
        self.env = environment()
        self.shared = dict(shared)

    def render(self, name: str, **context: object) -> str:
        """The template ``name`` filled in."""
        return self.env.get_template(name).render(**self.shared, **context)
