"""What a front end and a plugin's command or MCP tool exchange.

A plugin offers a ``stockade`` subcommand by handing a :class:`CliCommand` to the
``stockade_cli_commands`` hook, and a tool of ``stockade mcp`` by handing an :class:`McpTool`
to ``stockade_mcp_tools``. The command line gives a command's code a :class:`CliContext`; the
MCP server calls a tool with an :class:`McpSession` and gets a :class:`ToolOutput` back.

Every plugin module loaded by entry point is imported by every host, so this module stays
light: attrs and the standard library, everything else only for the type checker.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from attrs import Attribute, field, frozen

from .errors import PluginError

if TYPE_CHECKING:
    import argparse

    from .config.schema import Config
    from .errors import StockadeError
    from .host import Host
    from .plugin.manager import Hooks
    from .run.executor import AbortToken

_LOWER = frozenset("abcdefghijklmnopqrstuvwxyz")
_WORD = _LOWER | frozenset("0123456789-")
_TOOL_CHARS = _WORD | frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ_.")  # what MCP allows in a tool's name


def _command(name: str) -> bool:
    return name[:1] in _LOWER and set(name) <= _WORD


def _switch(flag: str) -> bool:
    return flag.startswith("--") and _command(flag[2:])


def _tool(name: str) -> bool:
    return 1 <= len(name) <= 128 and set(name) <= _TOOL_CHARS


# Plain checks, not regular expressions: compiling them would cost every host that loads a
# plugin offering a front end a few milliseconds.
def _matches(
    valid: Callable[[str], bool], what: str, shape: str
) -> Callable[[object, Attribute[str], str], None]:
    def check(_instance: object, _attribute: Attribute[str], value: str) -> None:
        if not isinstance(value, str) or not valid(value):
            raise PluginError(
                f"{what} {value!r} is not a valid name",
                hint=f"a {what} is {shape}",
                details={"name": value},
            )

    return check


def _object_schema(_instance: object, attribute: Attribute[Any], value: object) -> None:
    if value is None and attribute.name == "output_schema":
        return
    if not isinstance(value, Mapping) or value.get("type") != "object":
        raise PluginError(
            f"an MCP tool's {attribute.name} must be a JSON schema of type 'object'",
            hint='start it with {"type": "object", "properties": {...}}',
        )


@frozen
class CliCommand:
    """A ``stockade`` subcommand offered by a plugin.

    Attributes:
        name: the word after ``stockade`` (lowercase letters, digits and hyphens).
        help: one line for ``stockade --help``.
        arguments: adds the command's options (and sub-commands) to its parser; a sub-parser
            should be made with ``parser_class=type(parser)``, so usage errors look like the
            built-in commands' (exit status 125).
        handler: runs the command and returns its exit status. A
            :class:`~stockade.errors.StockadeError` it raises is reported like a built-in
            command's (as JSON when the command has a ``--json`` option that was given).
        description: the text of ``stockade NAME --help`` (``help`` when empty).
    """

    name: str = field(
        validator=_matches(_command, "command", "lowercase letters, digits and hyphens")
    )
    help: str
    arguments: Callable[[argparse.ArgumentParser, CliContext], None]
    handler: Callable[[argparse.Namespace, CliContext], int]
    description: str = ""


@frozen
class ToolSwitch:
    """An on/off option of ``stockade mcp`` that a tool reads from its session.

    Attributes:
        flag: the option, e.g. ``--unsafe-skills``; ``McpSession.switches[flag]`` says
            whether it was given.
        help: one line for ``stockade mcp --help``.
    """

    flag: str = field(
        validator=_matches(_switch, "switch", "--, then lowercase letters, digits and hyphens")
    )
    help: str


@frozen
class ToolOutput:
    """What one call of an MCP tool gives back.

    Attributes:
        text: what the model reads.
        structured: the same as JSON data (the tool result's structured content), or
            ``None``.
    """

    text: str
    structured: Mapping[str, Any] | None = None


@frozen
class McpTool:
    """A tool of ``stockade mcp`` offered by a plugin.

    Attributes:
        name: the tool's name; it may not be one of the server's own.
        title: a short title for a person.
        description: what the model reads about the tool.
        input_schema: the JSON schema of its arguments (``type: object``); an argument it
            does not name is refused before ``call`` is made, and a null one is left out.
        call: ``call(session, arguments, abort)`` runs on a worker thread and returns the
            output; when the client cancels, ``abort`` is set and the server waits for the
            call to return. A :class:`~stockade.errors.StockadeError` it raises becomes a
            tool error with the error's code, message and hint.
        output_schema: the JSON schema of ``ToolOutput.structured``, if it has one.
        read_only: the tool changes nothing (an MCP annotation, like the three below).
        destructive: it may change or delete what is there.
        idempotent: calling it twice with the same arguments does no more than once.
        open_world: it reaches beyond the workspace (a network, other systems).
        switches: options of ``stockade mcp`` the tool reads from its session.
    """

    name: str = field(validator=_matches(_tool, "tool", "1-128 letters, digits, _, . and -"))
    title: str
    description: str
    input_schema: Mapping[str, Any] = field(validator=_object_schema)
    call: Callable[[McpSession, Mapping[str, Any], AbortToken], ToolOutput]
    output_schema: Mapping[str, Any] | None = field(default=None, validator=_object_schema)
    read_only: bool = False
    destructive: bool = True
    idempotent: bool = False
    open_world: bool = True
    switches: tuple[ToolSwitch, ...] = ()


@frozen
class McpSession:
    """One MCP connection, as a tool's ``call`` sees it.

    Attributes:
        host: the host every command of the connection runs through (the server closes it).
        agent: the agent profile of every request.
        root: the workspace the server serves, resolved; a tool keeps its paths inside it.
        switches: every offered tool's switch by flag, and whether ``stockade mcp`` got it.
    """

    host: Host
    agent: str
    root: str
    switches: Mapping[str, bool]


@frozen
class CliContext:
    """What a plugin's command gets besides its arguments: the configuration, the plugins,
    and a host on demand.

    Attributes:
        config_path: ``--config`` as given (``None``: ``STOCKADE_CONFIG`` or the XDG file).
        environ: the environment the command runs in.
        config: the configuration read from there.
        hooks: the plugins of that configuration.
    """

    config_path: str | None
    environ: Mapping[str, str]
    config: Config
    hooks: Hooks

    @classmethod
    def load(cls, config_path: str | None, environ: Mapping[str, str]) -> CliContext:
        """Read the configuration and load the plugins it allows.

        Raises:
            ConfigError: the configuration cannot be read.
            PluginError: a plugin failed to load.
        """
        from .config.load import load_config
        from .plugin.manager import Hooks, get_plugin_manager

        env = dict(environ)
        config = load_config(config_path, environ=env)
        return cls(config_path, env, config, Hooks(get_plugin_manager(config, environ=env)))

    def host(self) -> Host:
        """A host of this configuration and environment; the caller closes it."""
        from .host import Host

        return Host(self.config, environ=self.environ)

    def report(self, error: StockadeError, *, as_json: bool) -> int:
        """Print ``error`` as the built-in commands do (JSON on stdout, or text on stderr);
        returns its exit status."""
        from .cli.common import report_error

        return report_error(error, as_json=as_json)
