"""What the ``test_docs_*.py`` files share: where the docs are, their examples as modules, and
the sections and tables of their pages."""

from __future__ import annotations

import importlib.util
import re
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).parents[2]
DOCS = ROOT / "docs"
EXAMPLES = DOCS / "examples"
FULL_ACCESS = "danger-full-access"


@cache
def example(name: str) -> ModuleType:
    """Import docs/examples/<name>.py once, as the module ``<name>``."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def section(path: Path, heading: str) -> str:
    """The body of ``heading`` (a whole line, such as ``## Settings``) up to the next
    heading of the same or a higher level."""
    text = path.read_text(encoding="utf-8")
    level = len(heading) - len(heading.lstrip("#"))
    match = re.search(rf"^{re.escape(heading)} *\n(.*?)(?=^#{{1,{level}}} |\Z)", text, re.M | re.S)
    assert match, f"{path.name} has no {heading!r} section"
    return match.group(1)


def table_keys(body: str) -> list[str]:
    """The backticked names in the first column of the Markdown table rows in ``body``."""
    return re.findall(r"^\| `([^`]+)` \|", body, flags=re.M)
