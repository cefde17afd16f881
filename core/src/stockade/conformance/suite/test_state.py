"""Stockade's own state (the record, its signing key, the held steps) is out of reach."""

from __future__ import annotations

import pytest

from stockade.config.schema import Config, StoreConfig
from stockade.confine.promises import Promise
from stockade.conformance.ground import PYTHON


@pytest.mark.promise(Promise.STORE_HIDDEN)
def test_a_command_cannot_read_or_change_the_record_or_its_key(box, make_host, mode):
    state = box.home / ".local" / "state" / "stockade"
    config = Config(sandbox=box.sandbox, store=StoreConfig(str(state / "store.db")))
    host = make_host(allow_all=True, config=config)
    # The control: the first command made the store, and the host can read its key.
    assert host.run(box.request(["true"], mode=mode)).ok
    key = (state / "signing.key").read_bytes()
    assert len(key) == 32
    attack = (
        "import os, sys\n"
        "for name in sys.argv[1:]:\n"
        "    try:\n"
        "        print(name, open(name, 'rb').read().hex())\n"
        "    except OSError as e:\n"
        "        print(name, 'refused', e.errno)\n"
        "try:\n"
        "    open(sys.argv[2], 'ab').write(b'x')\n"
        "    print('WROTE')\n"
        "except OSError as e:\n"
        "    print('write refused', e.errno)\n"
    )
    targets = [str(state / "signing.key"), str(state / "store.db"), str(state / "store.db.head")]
    result = host.run(box.request([PYTHON, "-S", "-c", attack, *targets], mode=mode))
    out = result.stdout.text
    assert key.hex() not in out
    assert "SQLite format" not in out and "53514c69746520666f726d6174" not in out
    assert "WROTE" not in out
    assert out.count("refused") == 4, out
    store_bytes = (state / "store.db").read_bytes()
    assert store_bytes.startswith(b"SQLite format 3")


@pytest.mark.promise(Promise.STORE_HIDDEN)
def test_an_agents_own_workspace_shows_through_the_hidden_store_and_nothing_else(
    box, make_host, mode
):
    """An agent's folder lives in the hidden store: it is seen (and, to write, writable);
    the store's other files around it are still not."""
    from stockade.request.spec import Profile

    state = box.home / ".local" / "state" / "stockade"
    config = Config(
        sandbox=box.sandbox,
        store=StoreConfig(str(state / "store.db")),
        agents={"bot": Profile(name="bot")},
    )
    host = make_host(allow_all=True, config=config)
    probe = (
        "import os, sys\n"
        "print('CWD', os.getcwd())\n"
        "try:\n"
        "    open('made.txt', 'w').write('ok')\n"
        "    print('WROTE')\n"
        "except OSError as e:\n"
        "    print('write refused', e.errno)\n"
        "for name in sys.argv[1:]:\n"
        "    try:\n"
        "        print(name, open(name, 'rb').read().hex())\n"
        "    except OSError as e:\n"
        "        print(name, 'refused', e.errno)\n"
    )
    assert host.run(attrs_evolve_cwd(box.request(["true"], mode=mode, profile="bot"), None)).ok
    key = (state / "signing.key").read_bytes()
    request = box.request(
        [PYTHON, "-S", "-c", probe, str(state / "signing.key"), str(state / "store.db")],
        mode=mode,
        profile="bot",
    )
    result = host.run(attrs_evolve_cwd(request, None))
    out = result.stdout.text
    own = state / "workspaces" / "bot"
    assert f"CWD {own}" in out, out + result.stderr.text
    assert ("WROTE" in out) == (mode == "workspace-write"), out
    assert (own / "made.txt").exists() == (mode == "workspace-write")
    assert key.hex() not in out
    assert out.count("refused") == 2 + (mode != "workspace-write"), out


def attrs_evolve_cwd(request, cwd):
    import attrs

    return attrs.evolve(request, cwd=cwd)
