"""``python -m stockade.conformance --sandbox NAME [pytest arguments]``: run the attack suite.

The arguments go to pytest as they are, after the suite's package; the table of promises is
printed last. The exit status is pytest's (0 only when every promise held or failed as pinned).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run the suite with ``argv`` (default: the command line); pytest's exit status."""
    args = sys.argv[1:] if argv is None else argv
    try:
        import pytest
    except ImportError:
        print(
            "the conformance kit needs pytest: pip install 'stockade[conformance]'",
            file=sys.stderr,
        )
        return 2
    if "--sandbox" not in args and not any(a.startswith("--sandbox=") for a in args):
        print(
            "usage: python -m stockade.conformance --sandbox NAME [pytest arguments]",
            file=sys.stderr,
        )
        return 2
    # ``stockade`` itself is imported already (this module is in it), so pytest warns that it
    # cannot rewrite its asserts; the suite's modules, imported later, are rewritten.
    quiet = ["-W", "ignore::pytest.PytestAssertRewriteWarning"]
    suite = [*quiet, "-p", "no:cacheprovider", "--pyargs", "stockade.conformance.suite"]
    return int(pytest.main([*suite, *args]))


if __name__ == "__main__":
    sys.exit(main())
