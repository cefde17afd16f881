"""The file tools: ``file_list``, ``file_read`` and ``file_write``, on the workspace the
server was started for (:class:`stockade.workspace.files.Workspace` keeps every path inside it)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from stockade.errors import UsageError

from . import render
from .results import ok, string

if TYPE_CHECKING:
    from mcp import types

    from stockade.layers.view import View
    from stockade.workspace.file_types import ReadResult, WriteResult
    from stockade.workspace.files import Workspace

    from .running import Context
    from .server import Service


async def file_list(
    service: Service, _ctx: Context, arguments: Mapping[str, Any]
) -> types.CallToolResult:
    """A folder's entries."""
    path = string(arguments, "path", default=".")
    listing = await asyncio.to_thread(lambda: _reader(service, arguments).file_list(path))
    await _taint(service, "list", path)
    lines = [render.entry_line(entry) for entry in listing.entries]
    if listing.truncated:
        lines.append("[more entries than the limit; not all are listed]")
    return ok("\n".join(lines) or f"{listing.path} is empty", listing)


async def file_read(
    service: Service, _ctx: Context, arguments: Mapping[str, Any]
) -> types.CallToolResult:
    """Part of a text file, or a binary file described."""
    from stockade.workspace.file_types import READ_LIMIT

    path = string(arguments, "path")
    offset, limit = arguments.get("offset", 0), arguments.get("limit", READ_LIMIT)
    if not isinstance(offset, int) or not isinstance(limit, int):
        raise UsageError("offset and limit must be integers (bytes)")
    profile = service.host.config.profile(service.agent)
    granted = arguments.get("read_private") is True

    def private(opened: str) -> None:
        service.host.breaker.file_read(service.root(), opened, profile, granted=granted)

    await asyncio.to_thread(private, path)
    # Checked again as the file the descriptor opened: a symlink swapped after the check
    # above cannot lead the read to private data.
    read = await asyncio.to_thread(
        lambda: _read(service, arguments, path, offset=offset, limit=limit, check=private)
    )
    await _taint(service, "read", path)
    shown = read.text if read.text is not None else (read.description or "")
    if read.truncated:
        shown += f"\n[more follows: read on with offset {read.offset + read.returned}]"
    return ok(shown, read)


def _read(
    service: Service,
    arguments: Mapping[str, Any],
    path: str,
    *,
    offset: int,
    limit: int,
    check: Callable[[str], None],
) -> ReadResult:
    """Read through the workspace, checking the file it opened again; a task's view follows
    no symlink at all, so the path's check before is the whole of it there."""
    if arguments.get("task_id") is None:
        return service.workspace().file_read(path, offset=offset, limit=limit, check=check)
    return _reader(service, arguments).file_read(path, offset=offset, limit=limit)


def _reader(service: Service, arguments: Mapping[str, Any]) -> Workspace | View:
    """The workspace, or, given ``task_id``, that running task's view of it (its layer over
    the folder, :mod:`stockade.layers.view`)."""
    task = arguments.get("task_id")
    if task is None:
        return service.workspace()
    if not isinstance(task, str):
        raise UsageError("task_id must be a string (start_command's task id)")
    from stockade.layers.view import of_task

    return of_task(service.host, task, owner=service.owner, root=service.root())


async def file_write(
    service: Service, _ctx: Context, arguments: Mapping[str, Any]
) -> types.CallToolResult:
    """Replace a whole file, atomically."""
    path, content = string(arguments, "path"), string(arguments, "content")
    written = await asyncio.to_thread(lambda: service.workspace().file_write(path, content))
    await _taint(service, "write", path, written)
    what = "created" if written.created else ("changed" if written.changed else "unchanged")
    return ok(f"{what}: {written.path} ({written.new_size} bytes)", written)


async def _taint(
    service: Service,
    tool: Literal["list", "read", "write"],
    path: str,
    written: WriteResult | None = None,
) -> None:
    """What the tool did to the taint of the connection's run (the breaker's facts); a
    write's mark goes to the name the write itself gave (``written``)."""
    profile = service.host.config.profile(service.agent)
    await asyncio.to_thread(
        lambda: service.host.breaker.file_tool(tool, service.root(), path, profile, written=written)
    )
