"""configuration.md and limits.md tell the truth: the example file holds the defaults,
every key has a row, every limit is named, and the limits example (included from this file)
sets every limit and runs."""

from __future__ import annotations

import attrs
import pytest

from helpers.docs import DOCS, EXAMPLES, FULL_ACCESS, section, table_keys
from stockade.config.load import parse_config
from stockade.config.schema import Config
from stockade.errors import StockadeError
from stockade.request.spec import ExecRequest, Limits

# --- configuration ------------------------------------------------------------------------


def test_config_example_lists_the_defaults():
    config = parse_config((EXAMPLES / "config.toml").read_bytes())
    assert attrs.evolve(config, source=None) == Config()


# Keys of work in progress (the recorder and the credential broker), documented when it lands.
# Remove a name here once its row is written.
KEYS_NOT_DOCUMENTED_YET: frozenset[str] = frozenset()


def test_every_config_key_has_a_row():
    rows = table_keys(section(DOCS / "configuration.md", "## Every key"))
    missing = []
    for field in attrs.fields(attrs.resolve_types(Config)):
        if field.name == "source":  # not a key in the file
            continue
        if attrs.has(field.type):  # a table: a row for each of its keys
            table = attrs.resolve_types(field.type)
            names = [f"{field.name}.{sub.name}" for sub in attrs.fields(table)]
        else:  # agents: a row for agents.NAME
            names = [field.name]
        missing += [
            name
            for name in names
            if name not in KEYS_NOT_DOCUMENTED_YET
            and not any(row == name or row.startswith(name + ".") for row in rows)
        ]
    assert not missing, f"docs/configuration.md '## Every key' lacks rows for {missing}"


def test_config_error_names_the_key():
    with pytest.raises(StockadeError, match=r"unknown key 'timout' @ \$"):
        parse_config("timout = 3\n")


LIMITS_PAGE = DOCS / "limits.md"


# --- the resource limits page --------------------------------------------------------------


@pytest.mark.parametrize("name", [field.name for field in attrs.fields(Limits)])
def test_the_limits_page_names_every_limit(name):
    assert f"| `{name}` |" in section(LIMITS_PAGE, "## The four limits")
    assert f"| `limits.{name}` |" in section(DOCS / "configuration.md", "## Every key")


@pytest.mark.parametrize("name", ["memory", "processes", "file_size", "cpu"])
def test_the_limits_page_names_every_limit_hit(name):
    assert f"`{name}`" in section(LIMITS_PAGE, "## What the result says")


# The example in docs/limits.md and docs/configuration.md, included from between the markers.
LIMITS_TOML = """
# --8<-- [start:limits-toml]
[limits]
memory_mb = 2048       # RLIMIT_AS: address space per process, in MiB
processes = 256        # RLIMIT_NPROC (a pids cgroup for a root host)
file_size_mb = 1024    # RLIMIT_FSIZE: the largest file written, in MiB
cpu_seconds = 600      # RLIMIT_CPU: CPU time per process, in seconds
# --8<-- [end:limits-toml]
"""


def test_the_limits_config_example_sets_every_limit_and_runs(make_host, tmp_path):
    config = parse_config(LIMITS_TOML)
    expected = Limits(memory_mb=2048, processes=256, file_size_mb=1024, cpu_seconds=600)
    assert config.limits == expected
    host = make_host(allow_all=True, config=config)
    script = "ulimit -v; ulimit -f; ulimit -t; ulimit -c"
    result = host.run(ExecRequest(["sh", "-c", script], str(tmp_path), mode=FULL_ACCESS))
    assert result.ok, result.stderr.text
    assert result.limits == expected
    # KiB of address space, 512-byte blocks of file size, seconds of CPU, and no core dumps.
    assert result.stdout.text.split() == [str(2048 * 1024), str(1024 * 2048), "600", "0"]
