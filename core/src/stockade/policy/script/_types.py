"""What the script reader finds: the parts of a script, or why it read none."""

from __future__ import annotations

from attrs import field, frozen


@frozen
class Redirect:
    """One redirection of a part.

    Attributes:
        op: ``>``, ``>>``, ``>|``, ``<``, ``>&``, ``<&``, ``>&-``, ``<&-``, ``<<``, ``<<-``
            or ``<<<``.
        fd: the descriptor written before the operator (``2`` in ``2>log``), or empty.
        target: the file, the descriptor (``1`` in ``2>&1``), the here-string's word or the
            here-document's delimiter.
    """

    op: str
    fd: str
    target: str

    @property
    def writes_file(self) -> bool:
        """Whether it opens ``target`` as a file to write (``>``, ``>>``, ``>|``)."""
        return self.op in (">", ">>", ">|")


@frozen
class Part:
    """One simple command of a script.

    Attributes:
        joiner: what joins it to the part before: ``""`` (the first), ``;`` (or a newline),
            ``&&``, ``||`` or ``|``.
        argv: its words, each the literal value the shell gives it.
        redirects: its redirections, in order.
        line: the script's line it starts on, from 1.
    """

    joiner: str
    argv: tuple[str, ...]
    redirects: tuple[Redirect, ...] = ()
    line: int = field(kw_only=True, default=1)


@frozen
class Script:
    """A script read into its parts: every byte of it understood.

    Attributes:
        parts: its simple commands, in the order they appear.
    """

    parts: tuple[Part, ...]


@frozen
class Unread:
    """A script the reader does not reduce to parts.

    Attributes:
        reason: what in it the reader does not understand, and where.
    """

    reason: str
