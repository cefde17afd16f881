"""A testing kit for plugin authors: fresh hosts with inline plugins, as pytest fixtures.

Installed as a pytest plugin (entry point ``pytest11``), so in any test session::

    from stockade.request.spec import ExecRequest

    def test_my_plugin(make_host, event_log, tmp_path):
        host = make_host(plugins=[MyPlugin(), event_log], allow_all=True)
        result = host.run(ExecRequest(["true"], str(tmp_path), mode="read-only"))
        assert result.exit_code == 0
        assert event_log.kinds()[-1] == "result"

``MyPlugin`` is your plugin object, registered inline (an installed plugin loads from its
entry point by itself: pass it again and pluggy refuses it). The example is run by the
project's tests (``tests/test_testing_kit.py``), so it stays right.

Every host is independent (its own plugin manager) and closed when the test ends.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from . import hookimpl
from .config.schema import Config
from .host import Host
from .record.events import Event
from .request.spec import ExecSpec, Profile
from .request.verdict import Classification, Decision
from .trees import remove_tree


class AllowAll:
    """A policy plugin that allows every command (tests only: it judges nothing)."""

    @hookimpl
    def stockade_decide(
        self, spec: ExecSpec, classification: Classification, profile: Profile
    ) -> Decision:
        """Allow."""
        return Decision("allow", "allowed by the test's AllowAll policy", by="testing.AllowAll")


class EventLog:
    """A recorder plugin that keeps every event in :attr:`events`, in order."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    @hookimpl
    def stockade_record(self, event: Event) -> None:
        """Keep the event."""
        self.events.append(event)

    def kinds(self, *, skip: Iterable[str] = ()) -> list[str]:
        """The ``kind`` of every event so far, but those in ``skip`` (``{"taint"}``: the
        breaker's facts, which come with every step that prints)."""
        return [event.kind for event in self.events if event.kind not in skip]


def listening(handle: Callable[[socket.socket], None], *, threaded: bool = True) -> socket.socket:
    """A loopback TCP listener whose every connection goes to ``handle`` (which closes it),
    each on a thread of its own or, with ``threaded=False``, one after another; it serves
    until it is closed."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            if threaded:
                threading.Thread(target=handle, args=(conn,), daemon=True).start()
            else:
                handle(conn)

    threading.Thread(target=serve, daemon=True).start()
    return server


def self_signed_cert(folder: Path, names: Sequence[str] = ("allowed.test",)) -> tuple[str, str]:
    """A throwaway TLS certificate for ``names`` (its own CA), valid for a day: for tests
    that stand up a local HTTPS upstream. Returns the paths of ``cert.pem`` and ``key.pem``.
    """
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_path), str(key_path)


HostFactory = Callable[..., Host]

FRONT_END_PROFILES = """\
[agents.tester]
workspace = "{ws}"
ask = []

[agents.careful]
workspace = "{ws}"
ask = ["writes"]

[agents.echoer]
workspace = "{ws}"
programs = ["echo"]
"""
"""Three agent profiles on one workspace for testing a front end (an MCP server, an agent
framework's client), as TOML to ``.format(ws=FOLDER)``: ``tester`` never asks, ``careful``
asks before a write, ``echoer`` may run ``echo`` only."""


PYTHON_CLI = (sys.executable, "-c", "from stockade.cli import entry; entry()")
"""The Python client (``stockade-py``), started by this interpreter."""


def native_client() -> str | None:
    """The native client installed beside this interpreter (``bin/stockade``, compiled from
    ``core/native/``), or ``None`` where the build found no C compiler (then ``bin/stockade``
    is the Python client)."""
    found = Path(sys.executable).parent / "stockade"
    try:
        with found.open("rb") as handle:
            return str(found) if handle.read(4) == b"\x7fELF" else None
    except OSError:
        return None


def cli_argv() -> tuple[str, ...]:
    """How the tests start ``stockade``: the native client when the session runs the command
    line through the warm server (``STOCKADE_TEST_SERVER=1``) and one is installed, as a user
    starts it; else the Python client (in-process, the native client would only hand over)."""
    native = native_client() if os.environ.get("STOCKADE_TEST_SERVER") == "1" else None
    return (native,) if native else PYTHON_CLI


CLI = cli_argv()
"""The argv that starts ``stockade`` in a test (:func:`cli_argv`, decided once a session)."""


def cli_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """Set how the ``stockade`` command line runs in a test's processes: in-process
    (``STOCKADE_NO_SERVER=1``), or, when the session has ``STOCKADE_TEST_SERVER=1``, through
    the warm server, which then exits 5 seconds after a test's last call. The project's own
    conftests call it for every test, so its command-line tests run both ways."""
    if os.environ.get("STOCKADE_TEST_SERVER") == "1":
        monkeypatch.delenv("STOCKADE_NO_SERVER", raising=False)
        monkeypatch.setenv("STOCKADE_SERVER_IDLE", "5")
    else:
        monkeypatch.setenv("STOCKADE_NO_SERVER", "1")


@pytest.fixture
def make_host() -> Iterator[HostFactory]:
    """A factory for fresh hosts; every host it made is closed after the test.

    Arguments (all keyword): ``plugins`` (extra plugin objects), ``config`` (a
    :class:`~stockade.config.schema.Config`), ``environ`` (the ambient environment, ``os.environ``
    by default), ``load_entry_points`` (default true), ``allow_all`` (register
    :class:`AllowAll`, default false).
    """
    made: list[Host] = []

    def factory(
        *,
        plugins: Sequence[object] = (),
        config: Config | None = None,
        environ: Mapping[str, str] | None = None,
        load_entry_points: bool = True,
        allow_all: bool = False,
    ) -> Host:
        extra = [*plugins, AllowAll()] if allow_all else list(plugins)
        host = Host(
            config,
            environ=dict(os.environ if environ is None else environ),
            plugins=extra,
            load_entry_points=load_entry_points,
        )
        made.append(host)
        return host

    yield factory
    for host in made:
        host.close()


@pytest.fixture
def event_log() -> EventLog:
    """A fresh :class:`EventLog` to pass in ``plugins``."""
    return EventLog()


def under_home(prefix: str = "") -> Path:
    """A new private (0700) folder under the user's home, in ``~/.stockade-tests``: a
    sandboxed command's ``/tmp`` is its own, so a canary under the host's ``/tmp`` would be
    out of its reach for the wrong reason and could not show a breach."""
    base = Path.home() / ".stockade-tests"
    base.mkdir(mode=0o700, exist_ok=True)
    return Path(tempfile.mkdtemp(dir=base, prefix=prefix))


@pytest.fixture
def home_tmp() -> Iterator[Path]:
    """A private folder under the home (:func:`under_home`), removed after the test: where
    an attack's canaries and a workspace the sandbox must see belong."""
    root = under_home()
    try:
        yield root
    finally:
        remove_tree(str(root))  # a command there may have made a tree of any depth
