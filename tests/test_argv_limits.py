"""An argv the kernel or bubblewrap would not start is a usage error with a hint, before
anything runs, for every front end (the Python API here; MCP and the CLI share the path)."""

from __future__ import annotations

import pytest

from stockade.errors import UsageError
from stockade.request.spec import ExecRequest


@pytest.mark.parametrize("sandbox", ["bubblewrap", "landlock"])
def test_an_argument_the_kernel_would_refuse_is_a_usage_error(make_host, tmp_path, sandbox):
    host = make_host(allow_all=True)
    for argv, said in (
        (["echo", "a" * 140_000], "the kernel starts no program with an argument longer"),
        (["echo", *(["abcdefgh"] * 200_000)], "the kernel starts programs with at most"),
    ):
        with pytest.raises(UsageError, match=said) as refused:
            host.run(ExecRequest(argv, str(tmp_path), sandbox=sandbox))
        assert refused.value.code == "usage" and "file" in (refused.value.hint or "")


def test_more_arguments_than_bubblewrap_takes_is_a_usage_error(make_host, tmp_path):
    host = make_host(allow_all=True)
    request = ExecRequest(["true", *(["a"] * 9_500)], str(tmp_path), sandbox="bubblewrap")
    with pytest.raises(UsageError, match="bubblewrap takes at most 9000 in all") as refused:
        host.run(request)
    assert "xargs -a FILE" in (refused.value.hint or "")
    # The control: as many as it takes still run, there and under Landlock.
    fits = ExecRequest(["true", *(["a"] * 8_800)], str(tmp_path), sandbox="bubblewrap")
    assert host.run(fits).exit_code == 0
    landlock = ExecRequest(["true", *(["a"] * 9_500)], str(tmp_path), sandbox="landlock")
    assert host.run(landlock).exit_code == 0
