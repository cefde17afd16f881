"""Spill files outlive their command for the caller, but not for ever: the local executor
sweeps this user's spill directories left untouched for ``spill_keep_hours`` (24 by default)."""

from __future__ import annotations

import os
import time

import pytest

from stockade.config.schema import Config, OutputConfig, PluginsConfig
from stockade.errors import ConfigError
from stockade.request.spec import ExecRequest

DAY = 24 * 3600


def planted(parent, name, *, age, mode=0o700, file_age=None):
    folder = parent / name
    folder.mkdir(mode=mode)
    os.chmod(folder, mode)
    spilled = folder / "stdout-x.out"
    spilled.write_text("old output")
    then = time.time() - (age if file_age is None else file_age)
    os.utime(spilled, (then, then))
    old = time.time() - age
    os.utime(folder, (old, old))
    return folder


def spill_once(host_with, parent, **settings):
    config = Config(
        output=OutputConfig(limit=1024, spill_dir=str(parent)),
        plugins=PluginsConfig(settings={"local": settings} if settings else {}),
    )
    host = host_with(config)
    result = host.run(
        ExecRequest(["python3", "-c", "print('x' * 10000)"], mode="danger-full-access")
    )
    assert result.stdout.spill_path is not None  # a new spill directory was made
    return result


def test_old_spill_directories_are_swept_and_nothing_else(host_with, tmp_path):
    old = planted(tmp_path, "stockade-spill-old", age=DAY + 3600)
    young = planted(tmp_path, "stockade-spill-young", age=3600)
    in_use = planted(tmp_path, "stockade-spill-busy", age=DAY + 3600, file_age=60)
    shared = planted(tmp_path, "stockade-spill-open", age=DAY + 3600, mode=0o755)
    other = planted(tmp_path, "not-a-spill", age=DAY + 3600)
    target = planted(tmp_path, "target", age=DAY + 3600)
    (tmp_path / "stockade-spill-link").symlink_to(target)
    result = spill_once(host_with, tmp_path)
    assert not old.exists()
    for kept in (young, in_use, shared, other, target, tmp_path / "stockade-spill-link"):
        assert kept.exists(), kept
    assert os.path.isfile(result.stdout.spill_path)


def test_the_time_kept_is_a_setting_and_zero_keeps_all(host_with, tmp_path):
    hours = planted(tmp_path, "stockade-spill-hours", age=3 * 3600)
    spill_once(host_with, tmp_path, spill_keep_hours=2)
    assert not hours.exists()
    ancient = planted(tmp_path, "stockade-spill-ancient", age=100 * DAY)
    spill_once(host_with, tmp_path, spill_keep_hours=0)
    assert ancient.exists()


@pytest.mark.parametrize("value", [-1, "24", True])
def test_a_bad_setting_names_its_key(host_with, tmp_path, value):
    with pytest.raises(ConfigError, match=r"plugins\.settings\.local\.spill_keep_hours"):
        spill_once(host_with, tmp_path, spill_keep_hours=value)


def test_an_unknown_setting_of_the_local_executor_is_refused(host_with, tmp_path):
    with pytest.raises(ConfigError, match="unknown setting"):
        spill_once(host_with, tmp_path, reaper=False)
