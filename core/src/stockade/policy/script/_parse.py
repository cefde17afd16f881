"""A shell script read into its parts with tree-sitter's bash grammar, or the reason it is not.

Only the plainest scripts are read: simple commands of literal words, joined by ``;``,
newlines, ``&&``, ``||`` and ``|``, each with redirections to literal files or descriptors,
here-documents that do not expand, and ``[ ... ]`` tests of literal words. Every byte of the
script must belong to a node read here (or be blank between them): a node the reader does
not know, a parse error, or text the grammar placed where bash would not, leaves the script
unread, never half read.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import re

import tree_sitter
import tree_sitter_bash

from ._types import Part, Redirect, Script, Unread
from ._words import literal

_LANGUAGE = tree_sitter.Language(tree_sitter_bash.language())
_PARSER = tree_sitter.Parser(_LANGUAGE)
# Named node kinds by id: `kind_id in _NAMED` costs half of `node.is_named`.
_NAMED = frozenset(
    kind for kind in range(_LANGUAGE.node_kind_count) if _LANGUAGE.node_kind_is_named(kind)
)
LIMIT = 64 * 1024
"""Bytes of script read at most; a longer script is unread."""
_WORDS = frozenset({"word", "string", "raw_string", "concatenation", "number"})
_JOINERS = frozenset({"&&", "||", "|"})
_FILE_OPS = frozenset({">", ">>", ">|", "<"})
_DUP_OPS = frozenset({">&", "<&"})
_CLOSE_OPS = frozenset({">&-", "<&-"})
_TEST_TOKENS = frozenset({"!", "=", "!=", "=="})
_TEST_NODES = frozenset({"unary_expression", "binary_expression"})
# Bytes past ASCII are plain word characters to bash and dash, never an operator or a quote:
# the grammar reads them as `a` (same offsets), since its scanner can crash on some of them.
_ASCII = bytes(range(128)) + b"a" * 128
_PLAIN = re.compile(rb"[A-Za-z0-9_./,%+^-]+")  # no ~, = or : (a tilde after them expands)
_BLANK = re.compile(rb"(?:[ \t\n]|\\\n)*")
_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)
_NEWLINES = itertools.repeat(b"\n")
_NAMES = {
    "command_substitution": "a command substitution",
    "simple_expansion": "a variable expansion",
    "expansion": "a parameter expansion",
    "arithmetic_expansion": "an arithmetic expansion",
    "process_substitution": "a process substitution",
    "ansi_c_string": "a $'...' string",
    "translated_string": 'a $"..." string',
    "variable_assignment": "a variable assignment",
    "function_definition": "a function definition",
    "subshell": "a subshell",
    "compound_statement": "a { ... } group",
    "negated_command": "a negated command (!)",
    "if_statement": "an if statement",
    "for_statement": "a for loop",
    "c_style_for_statement": "a for loop",
    "while_statement": "a while loop",
    "case_statement": "a case statement",
    "declaration_command": "a declaration",
    "unset_command": "an unset command",
    "brace_expression": "a brace expansion",
    "heredoc_redirect": "a here-document",
}


class _NotRead(Exception):
    """The script is not read; ``Unread`` says why."""

    def __init__(self, why: str, node: tree_sitter.Node | None = None) -> None:
        if node is not None:
            row, column = node.start_point
            why = f"{why} at line {row + 1}, column {column + 1}"
        super().__init__(why)


def read(text: str) -> Script | Unread:
    """``text`` read into its parts, or why it is not."""
    source = text.encode("utf-8", "surrogateescape")
    if len(source) > LIMIT:
        return Unread(f"it is longer than {LIMIT} bytes")
    if b"\0" in source or b"\r" in source:
        return Unread("it holds a NUL or carriage-return character")
    tree = _PARSER.parse(source.translate(_ASCII))
    if tree.root_node.has_error:
        return Unread(_error(tree.root_node))
    reader = _Reader(source)
    try:
        reader.program(tree.root_node)
        reader.covered()
    except _NotRead as error:
        return Unread(str(error))
    return Script(tuple(reader.parts))


def _error(root: tree_sitter.Node) -> str:
    stack = [root]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            row, column = node.start_point
            return f"it does not parse as a shell script (line {row + 1}, column {column + 1})"
        stack.extend(reversed(node.children))
    return "it does not parse as a shell script"


def _name(node: tree_sitter.Node) -> str:
    return _NAMES.get(node.type, f"a shell construct the reader does not know ({node.type})")


class _Reader:
    """Walks one parse tree, collecting the parts and the byte ranges it understood."""

    def __init__(self, source: bytes) -> None:
        self.source = source
        self.parts: list[Part] = []
        self.spans: list[tuple[int, int]] = []
        # Each part's own tokens, and the joiners: checked against the newlines bash sees.
        self.groups: list[list[tuple[int, int]]] = []
        self.joiners: list[tuple[int, int]] = []
        self.group: list[tuple[int, int]] | None = None
        self.words: list[tuple[int, int]] = []

    def text(self, node: tree_sitter.Node) -> str:
        return self.source[node.start_byte : node.end_byte].decode("utf-8", "surrogateescape")

    def take(self, node: tree_sitter.Node) -> None:
        span = (node.start_byte, node.end_byte)
        self.spans.append(span)
        if self.group is not None:
            self.group.append(span)

    def word(self, node: tree_sitter.Node, kind: str = "") -> str:
        if (kind or node.type) not in _WORDS:
            raise _NotRead(_name(node), node)
        start, end = node.start_byte, node.end_byte
        raw = self.source[start:end]
        if _PLAIN.fullmatch(raw):  # most words: nothing to unquote, nothing that could expand
            value: str | None = raw.decode("ascii")
        else:
            value = literal(raw.decode("utf-8", "surrogateescape"))
        if value is None:
            raise _NotRead(f"the word {self.text(node)!r} would expand", node)
        span = (start, end)
        self.spans.append(span)
        if self.group is not None:
            self.group.append(span)
        self.words.append(span)
        return value

    def program(self, root: tree_sitter.Node) -> None:
        joiner = ""
        for child in root.children:
            kind = child.type
            if kind == "comment":
                self.take(child)
            elif kind == ";":
                self.take(child)
                self.joiners.append((child.start_byte, child.end_byte))
                joiner = ";"
            elif kind == "command":  # most statements: no list, pipeline or redirection
                self.command(child, joiner or (";" if self.parts else ""))
                joiner = ""
            elif child.kind_id in _NAMED:
                self.statement(child, joiner or (";" if self.parts else ""))
                joiner = ""
            else:
                raise _NotRead(f"the operator {child.type!r}", child)

    def statement(self, node: tree_sitter.Node, joiner: str) -> None:
        # Lists and pipelines nest to the left (a && b && c): walk them without recursion.
        stack: list[tuple[tree_sitter.Node, str]] = [(node, joiner)]
        while stack:
            current, join = stack.pop()
            kind = current.type
            if kind == "command":
                self.command(current, join)
            elif kind in ("list", "pipeline"):
                pending: list[tuple[tree_sitter.Node, str]] = []
                next_join = join
                for child in current.children:
                    if child.kind_id in _NAMED:
                        pending.append((child, next_join))
                    elif (token := child.type) in _JOINERS:
                        self.take(child)
                        self.joiners.append((child.start_byte, child.end_byte))
                        next_join = token
                    else:
                        raise _NotRead(f"the operator {child.type!r}", child)
                stack.extend(reversed(pending))
            elif kind == "redirected_statement":
                self.redirected(current, join)
            elif kind == "test_command":
                self.test(current, join)
            else:
                raise _NotRead(_name(current), current)

    def redirected(self, node: tree_sitter.Node, joiner: str) -> None:
        body = node.child_by_field_name("body")
        if body is None:
            raise _NotRead("a redirection with no command", node)
        before = len(self.parts)
        self.statement(body, joiner)
        if len(self.parts) == before:
            raise _NotRead("a redirection with no command", node)
        redirects: list[Redirect] = []
        extra: list[str] = []
        self.group = self.groups[-1]
        for child in node.children:
            if child.id == body.id:
                continue
            redirects.append(self.redirect(child, extra))
        self.group = None
        last = self.parts[-1]
        self.parts[-1] = Part(
            last.joiner, (*last.argv, *extra), (*last.redirects, *redirects), line=last.line
        )

    def command(self, node: tree_sitter.Node, joiner: str) -> None:
        self.group = []
        self.groups.append(self.group)
        argv: list[str] = []
        redirects: list[Redirect] = []
        for child in node.children:
            kind = child.type
            if kind in _WORDS:
                argv.append(self.word(child, kind))
            elif kind == "command_name":
                inner = child.children
                if len(inner) != 1 or not inner[0].is_named:
                    raise _NotRead("a command name the reader does not know", child)
                argv.append(self.word(inner[0]))
            elif kind.endswith("_redirect"):
                redirects.append(self.redirect(child, argv))
            elif child.is_named:
                argv.append(self.word(child))
            else:
                raise _NotRead(f"the token {kind!r}", child)
        if not argv:
            raise _NotRead("a redirection with no command", node)
        self.group = None
        self.parts.append(Part(joiner, tuple(argv), tuple(redirects), line=node.start_point[0] + 1))

    def test(self, node: tree_sitter.Node, joiner: str) -> None:
        children = node.children
        if len(children) < 2 or children[0].type != "[" or children[-1].type != "]":
            raise _NotRead("a [[ ... ]] test", node)
        self.group = []
        self.groups.append(self.group)
        self.take(children[0])
        self.take(children[-1])
        argv = ["["]
        stack = list(reversed(children[1:-1]))
        while stack:
            child = stack.pop()
            if child.type in _TEST_NODES:
                stack.extend(reversed(child.children))
            elif child.type == "test_operator":
                self.take(child)
                argv.append(self.text(child))
            elif not child.is_named and child.type in _TEST_TOKENS:
                self.take(child)
                argv.append(child.type)
            elif child.is_named:
                argv.append(self.word(child))
            else:
                raise _NotRead(f"the test operator {child.type!r}", child)
        argv.append("]")
        self.group = None
        self.parts.append(Part(joiner, tuple(argv), (), line=node.start_point[0] + 1))

    def redirect(self, node: tree_sitter.Node, arguments: list[str]) -> Redirect:
        if node.type == "heredoc_redirect":
            return self.heredoc(node)
        if node.type not in ("file_redirect", "herestring_redirect"):
            raise _NotRead(_name(node), node)
        fd, op, target = "", "", ""
        for child in node.children:
            kind, named = child.type, child.kind_id in _NAMED
            if kind == "file_descriptor" and not op:
                self.take(child)
                fd = self.text(child)
            elif not named and not op:
                self.take(child)
                op = kind
            elif named and op and not target and op not in _CLOSE_OPS:
                target = self.word(child, kind)
            elif named and op:
                arguments.append(self.word(child, kind))  # `ls >f -l`: -l is ls's argument
            else:
                raise _NotRead("a redirection the reader does not know", node)
        if op == "<<<":
            return Redirect(op, fd, target)
        if op in _CLOSE_OPS or (op in _DUP_OPS and (target.isdigit() or target == "-")):
            return Redirect(op, fd, target)
        if op in _FILE_OPS and target:
            return Redirect(op, fd, target)
        raise _NotRead(f"the redirection {op or '?'}{target}", node)

    def heredoc(self, node: tree_sitter.Node) -> Redirect:
        kinds = [child.type for child in node.children]
        if kinds not in (
            ["<<", "heredoc_start", "heredoc_body", "heredoc_end"],
            ["<<-", "heredoc_start", "heredoc_body", "heredoc_end"],
        ):
            raise _NotRead("a here-document the reader does not know", node)
        op, start, body, end = node.children
        raw = self.text(start)
        delimiter = literal(raw)
        if delimiter is None or not delimiter or self.text(end) != delimiter:
            raise _NotRead("a here-document delimiter the reader does not know", node)
        # The body runs from the line after the one that opened it to its end line.
        newline = self.source.find(b"\n", start.end_byte)
        if newline < 0 or newline >= body.start_byte:
            newline = body.start_byte - 1
        lines = self.source[newline + 1 : end.start_byte].decode("utf-8", "surrogateescape")
        strip = "\t" if op.type == "<<-" else ""
        if any(line.lstrip(strip) == delimiter for line in lines.split("\n")[:-1]):
            raise _NotRead("a here-document that ends before its end line", node)
        if lines.split("\n")[-1].lstrip(strip):
            raise _NotRead("a here-document whose end line holds more", node)
        after = self.source[end.end_byte : end.end_byte + 1]
        if after not in (b"", b"\n"):
            raise _NotRead("a here-document whose end line holds more", node)
        expands = raw == delimiter  # an unquoted delimiter: the body expands
        if expands and any(c in lines for c in "$`\\"):
            raise _NotRead("a here-document that expands ($, ` or \\ in its body)", node)
        self.take(op)
        self.take(start)
        self.spans.append((newline, end.end_byte))  # the body, from the newline that opens it
        return Redirect(op.type, "", delimiter)

    def covered(self) -> None:
        """Every byte belongs to a node read here, or is blank between them; and parts are
        split where bash splits them: a part's words never span a bare newline, no two words
        touch, and two parts are always apart by a joiner or a newline."""
        spans = sorted(self.spans)
        source = self.source
        starts = list(map(_FIRST, spans))
        ends = [0]
        ends += map(_SECOND, spans)
        if any(map(operator.lt, starts, ends)):
            raise _NotRead("text the grammar read twice")
        starts.append(len(source))
        gaps = list(map(source.__getitem__, map(slice, ends, starts)))
        starts.pop()
        if _BLANK.fullmatch(b"".join(gaps)) is None:
            bad = next(gap for gap in gaps if _BLANK.fullmatch(gap) is None)
            raise _NotRead(f"text the reader did not understand ({bad[:20]!r})")
        # The blanks (gaps[i]: the one before spans[i], the end last) that hold a bare
        # newline, in order: bisect_right(bare, i) of them lie before spans[i].
        lines = itertools.compress(itertools.count(), map(operator.contains, gaps, _NEWLINES))
        bare = [i for i in lines if b"\n" in gaps[i].replace(b"\\\n", b"")]
        words = self.words
        if not set(map(_FIRST, words)).isdisjoint(map(_SECOND, words)):
            raise _NotRead("a word the grammar split in two")
        joiners = sorted(map(_FIRST, self.joiners))
        before = bisect.bisect_right
        previous = -1
        for group in self.groups:
            first = bisect.bisect_left(starts, min(group)[0])
            last = bisect.bisect_left(starts, max(group)[0])
            if before(bare, last) > before(bare, first):
                raise _NotRead("a command whose words the grammar joined across a line")
            if previous >= 0:
                end, start = spans[previous][1], spans[first][0]
                if start < end:
                    raise _NotRead("commands the grammar read out of order")
                newline = before(bare, first) > before(bare, previous)  # in a blank between
                joined = bisect.bisect_left(joiners, end) < bisect.bisect_left(joiners, start)
                if not joined and not newline:
                    raise _NotRead("commands the grammar split where bash would not")
            previous = last
