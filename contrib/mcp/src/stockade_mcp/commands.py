"""The command tools: ``run_command``, ``start_command``, ``read_output``, ``kill_command``
and ``list_commands``, and the request a call names.

Containment: a call's ``cwd`` is resolved against the workspace the server was started for
(the agent's, or the server's own directory for ``default``), symlinks followed, and must
stay inside it; the request then names that workspace, so the command's writable root is the
workspace and never the folder a model picked.
"""

from __future__ import annotations

import asyncio
import codecs
import os
import stat
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from stockade import resolved
from stockade.confine.protected import inside
from stockade.errors import BadCwd, PolicyHeld, UsageError
from stockade.request.spec import ExecRequest

from . import render
from .results import Outcome, integer, ok, string, success, task_id
from .running import settle_task, with_progress
from .tools import OUTPUT_LIMIT

if TYPE_CHECKING:
    from mcp import types

    from stockade.request.result import CollectedOutput, RunResult

    from .running import Context
    from .server import Service

ARG_LIMIT = 128 * 1024 - 1
"""Bytes of one argument the kernel takes (``MAX_ARG_STRLEN``, its terminating NUL aside)."""
ARGV_LIMIT = 1024 * 1024
"""Bytes of the whole argv taken: the kernel's limit, shared with the environment, is a
quarter of the stack limit (2 MiB by default)."""
STREAMS = ("stdout", "stderr")


def cwd_inside(service: Service, cwd: object) -> str:
    """The real path of ``cwd`` (relative to the workspace), which must lie inside it.

    Raises:
        BadCwd: ``cwd`` is outside the workspace (by ``..``, an absolute path or a symlink),
            or is not an existing folder; the error names the workspace.
    """
    root = service.root()
    if cwd is None:
        return root
    if not isinstance(cwd, str) or "\0" in cwd:
        raise UsageError("cwd must be a string (a folder inside the workspace)")
    real = resolved.realpath(os.path.join(root, cwd))
    details = {"cwd": cwd, "resolved": real, "workspace": root}
    if not inside(real, (root,)):
        raise BadCwd(
            f"cwd {cwd!r} is outside the workspace {root} (it resolves to {real})",
            hint=f'pass a folder inside {root}, relative to it (like "src"), or leave cwd out',
            details=details,
        )
    if not os.path.isdir(real):
        raise BadCwd(
            f"cwd {cwd!r} is not a folder in the workspace {root}",
            hint="pass an existing folder, relative to the workspace, or leave cwd out",
            details=details,
        )
    return real


def argv_of(arguments: Mapping[str, Any]) -> list[str]:
    """The ``argv`` argument, within what the kernel takes.

    Raises:
        UsageError: not a non-empty list of strings, or an argument (or the whole) too big
            to pass to a program.
    """
    argv = arguments.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise UsageError(
            "argv must be a non-empty list of strings",
            hint='pass the program and each argument separately: ["git", "status"]',
        )
    sizes = [len(a.encode("utf-8", "surrogatepass")) for a in argv]
    big = max(sizes)
    if big > ARG_LIMIT or sum(sizes) > ARGV_LIMIT:
        where = f"argument {sizes.index(big)} has {big} bytes" if big > ARG_LIMIT else ""
        raise UsageError(
            f"argv is too big to pass to a program ({where or f'{sum(sizes)} bytes in all'}; "
            f"the limits are {ARG_LIMIT} bytes per argument and {ARGV_LIMIT} in all)",
            hint="write the data to a file in the workspace with file_write and pass the "
            "file's path (or have the program read it from the file)",
            details={"largest": big, "total": sum(sizes), "per_argument": ARG_LIMIT},
        )
    return argv


def request(service: Service, arguments: Mapping[str, Any]) -> ExecRequest:
    """The request a tool call names: argv, cwd and timeout, with this agent's profile,
    bounded by the workspace."""
    argv = argv_of(arguments)
    cwd = cwd_inside(service, arguments.get("cwd"))
    timeout = arguments.get("timeout")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
    ):
        raise UsageError("timeout must be a positive number of seconds")
    try:
        return ExecRequest(
            argv,
            cwd=cwd,
            timeout=None if timeout is None else float(timeout),
            origin="mcp",
            profile=service.agent,
            workspace=service.root(),
            read_private=arguments.get("read_private") is True,
        )
    except (TypeError, ValueError) as error:
        raise UsageError(f"the request is malformed: {error}") from None


async def run_command(service: Service, ctx: Context, arguments: Mapping[str, Any]) -> Outcome:
    """Run one command and wait; a cancelled call kills it."""
    req = request(service, arguments)
    try:
        result = await with_progress(ctx, settle_task(service.host.run_async(req)))
    except PolicyHeld as held:
        return await service.approve(ctx, held, ("run_command", dict(arguments)))
    service.keep(result)
    return success(result)


async def start_command(service: Service, ctx: Context, arguments: Mapping[str, Any]) -> Outcome:
    """Start a command in the background as a task of this connection."""
    req = request(service, arguments)
    try:
        info = await asyncio.to_thread(service.host.start, req, owner=service.owner)
    except PolicyHeld as held:
        return await service.approve(ctx, held, ("start_command", dict(arguments)))
    return ok(f"started {render.task_line(info)}\nread it with read_output", info)


async def read_output(
    service: Service, _ctx: Context, arguments: Mapping[str, Any]
) -> types.CallToolResult:
    """What a task printed since the previous read; or a window of a whole stream."""
    if "task_id" in arguments and not {"action_id", "stream", "offset", "limit"} & set(arguments):
        output = await asyncio.to_thread(
            service.host.read_output, task_id(arguments), owner=service.owner
        )
        return ok(render.output_text(output), output)
    return await asyncio.to_thread(window, service, arguments)


def window(service: Service, arguments: Mapping[str, Any]) -> types.CallToolResult:
    """Up to ``limit`` bytes of a command's whole stream from ``offset``, cut at a character.

    Raises:
        UsageError: neither or both of task_id and action_id; a task still running; a
            stream no longer kept.
    """
    stream = string(arguments, "stream", default="stdout")
    if stream not in STREAMS:
        raise UsageError("stream must be stdout or stderr")
    offset = integer(arguments, "offset", 0)
    limit = min(integer(arguments, "limit", OUTPUT_LIMIT, least=1), OUTPUT_LIMIT)
    result, names = find(service, arguments)
    output: CollectedOutput = getattr(result, stream)
    data, source = stream_bytes(service, output, offset, limit)
    pending = codecs.getincrementaldecoder("utf-8")("replace")
    shown = pending.decode(data, final=False)
    returned = len(data) - len(pending.getstate()[0])
    if returned == 0 and data:  # a window narrower than one character
        shown, returned = data.decode("utf-8", "replace"), len(data)
    end = offset + returned
    more = end < output.total_bytes
    note = (
        f"[{stream} bytes {offset}-{end} of {output.total_bytes}; read on with offset {end}]"
        if more
        else f"[end of {stream}: {output.total_bytes} bytes]"
    )
    data_out = {
        **names,
        "stream": stream,
        "offset": offset,
        "returned": returned,
        "next_offset": end if more else None,
        "total_bytes": output.total_bytes,
        "source": source,
        "text": shown,
    }
    return ok(f"{shown}\n{note}" if shown else note, data_out)


def stream_bytes(
    service: Service, output: CollectedOutput, offset: int, limit: int
) -> tuple[bytes, str]:
    """``limit`` bytes of the whole stream from ``offset``, and where they were read: the
    spill file, the result itself (a stream that was not cut) or the record's copy."""
    path = output.spill_path
    if path is not None and os.path.exists(path):
        # Not through a symlink: the executor made a regular file, and only that is read.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise UsageError("the spill file is not a regular file; it is not read")
            handle.seek(offset)
            return handle.read(limit), "spill"
    if not output.truncated:
        return output.text.encode("utf-8", "surrogateescape")[offset : offset + limit], "result"
    from stockade.record.blobs import get_blob
    from stockade.record.store import StoreError

    try:
        whole = get_blob(service.host.store, output.sha256)
    except StoreError as error:
        raise UsageError(
            f"the whole stream is no longer kept: {error.message}",
            hint="run the command again, or read the part the result shows",
        ) from None
    return whole[offset : offset + limit], "record"


def find(service: Service, arguments: Mapping[str, Any]) -> tuple[RunResult, dict[str, str]]:
    """The ended command ``task_id`` or ``action_id`` names and its names."""
    from stockade.run.tasks import UnknownTask

    names = {k: arguments[k] for k in ("task_id", "action_id") if k in arguments}
    if len(names) != 1 or not all(isinstance(v, str) for v in names.values()):
        raise UsageError(
            "read_output needs task_id (a background task) or action_id (a command's result)",
            hint="pass one of them, as a string",
        )
    tasks = service.host.list_tasks(owner=service.owner)
    if "task_id" in names:
        info = next((t for t in tasks if t.task_id == names["task_id"]), None)
        if info is None:
            raise UnknownTask(f"there is no task {names['task_id']!r} in this session")
        if info.result is None:
            if info.status == "running":
                raise UsageError(
                    f"{info.task_id} is still running: its whole output is there once it ends",
                    hint="read what is new with read_output and task_id alone, or wait",
                )
            raise UsageError(f"{info.task_id} {info.status} before it ran: it has no output")
        return info.result, names
    wanted = names["action_id"]
    found = service.kept(wanted) or next(
        (t.result for t in tasks if t.result is not None and t.result.action_id == wanted), None
    )
    if found is None:
        raise UsageError(
            f"no result of this session has action_id {wanted!r}",
            hint="pass the action_id of a run_command result of this session",
        )
    return found, names


async def kill_command(
    service: Service, _ctx: Context, arguments: Mapping[str, Any]
) -> types.CallToolResult:
    """Kill a task; returns once it ended."""
    info = await asyncio.to_thread(service.host.kill, task_id(arguments), owner=service.owner)
    return ok(render.task_line(info), info)


async def list_commands(
    service: Service, _ctx: Context, _arguments: Mapping[str, Any]
) -> types.CallToolResult:
    """This connection's tasks."""
    tasks = await asyncio.to_thread(service.host.list_tasks, owner=service.owner)
    lines = [render.task_line(info) for info in tasks] or ["no tasks"]
    return ok("\n".join(lines), {"tasks": tasks})
