"""``stockade skill list|show|run``: the skill tool at the command line.

``run`` prints the ``[SKILL_SCRIPT_EXECUTED]`` envelope and exits 0, or reports an
``execution_error`` (exit status 1) whose hint says what to change; with ``--json`` both are
JSON on stdout.
"""

from __future__ import annotations

import argparse
import sys

from stockade.errors import StockadeError
from stockade.frontends import CliContext
from stockade.request.wire import to_json

from .tool import SkillTool


def main(args: argparse.Namespace, cli: CliContext) -> int:
    """Run the ``skill`` command group; returns the exit status."""
    try:
        with cli.host() as host:
            tool = SkillTool(
                host,
                profile=args.profile,
                unsafe=getattr(args, "unsafe", False),
                origin="cli",
                preapproved=getattr(args, "yes", False),
            )
            return {"list": _list, "show": _show, "run": _run}[args.tool](tool, args)
    except StockadeError as error:
        if args.json:
            return cli.report(error, as_json=True)
        status = cli.report(error, as_json=False)
        result = error.details.get("result")
        if isinstance(result, str):
            print(result)
        return status


def _list(tool: SkillTool, args: argparse.Namespace) -> int:
    catalog = tool.catalog()
    if args.json:
        print(
            to_json(
                {
                    "skills": [
                        {
                            "name": s.name,
                            "description": s.description,
                            "level": s.level,
                            "root": s.root,
                            "safe_mode": s.safe_mode,
                        }
                        for s in catalog.skills.values()
                    ],
                    "problems": list(catalog.problems),
                    "folders": list(catalog.folders),
                },
                indent=2,
            )
        )
        return 0
    for skill in catalog.skills.values():
        scripts = "scripts may run" if skill.safe_mode is False else "safe mode"
        print(f"{skill.name}  ({skill.level}, {scripts})  {skill.description}")
    for problem in catalog.problems:
        print(f"stockade: {problem}", file=sys.stderr)
    if not catalog.skills:
        print(f"stockade: no skills in {', '.join(catalog.folders)}", file=sys.stderr)
    return 0


def _show(tool: SkillTool, args: argparse.Namespace) -> int:
    out = tool(args.name, args.resource, offset=args.offset, max_chars=args.max_chars)
    if args.json:
        print(to_json(out, indent=2))
        return 0
    print(out.text)
    if out.next_offset is not None:
        print(
            f"stockade: {out.total_chars} characters; more from --offset {out.next_offset}",
            file=sys.stderr,
        )
    return 0


def _run(tool: SkillTool, args: argparse.Namespace) -> int:
    argv = list(args.args)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    out = tool(args.name, args.resource, execute=True, args=argv, timeout=args.timeout)
    if args.json:
        print(to_json(out, indent=2))
    else:
        print(out.text)
        for entry in out.left_out:
            print(f"stockade: left out of the copy: {entry}", file=sys.stderr)
    return 0
