"""Core tests judge the host alone: installed sandbox plugins are blocked for them.

The fixtures after those are the file tools' (``resolver``: each one this kernel has) and the
egress proxy tests' (``test_egress_{rules,connect,addresses,forward,faults}.py``): upstreams on
loopback and a proxy maker (``test_egress_tunnel.py`` has a ``make_proxy`` of its own).
"""

import ssl
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from egress_helpers import Recorder, _http_server
from files_helpers import RESOLVERS

from stockade.egress.proxy import Proxy, parse_hosts
from stockade.testing import listening, self_signed_cert


@pytest.fixture(autouse=True)
def _core_only(monkeypatch):
    monkeypatch.setenv("STOCKADE_DISABLE_PLUGINS", "bubblewrap,landlock")


@pytest.fixture(autouse=True)
def _private_state(monkeypatch, tmp_path_factory):
    # Held steps go to a store of the test's own, never the user's.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))


@pytest.fixture(autouse=True)
def _cli_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    # In-process, or through the warm server when the session has STOCKADE_TEST_SERVER=1.
    from stockade.testing import cli_mode

    cli_mode(monkeypatch)


# --- the file tools' tests ------------------------------------------------------------------


@pytest.fixture(params=RESOLVERS)
def resolver(request):
    return request.param


# --- the egress proxy's tests ---------------------------------------------------------------


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    return self_signed_cert(tmp_path_factory.mktemp("tls"), ("allowed.test", "sub.allowed.test"))


@pytest.fixture(scope="module")
def tls_server(cert):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*cert)
    server = _http_server("tls", context)
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def http_server():
    server = _http_server("http")
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def echo_port():

    def echo(conn):
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    listener = listening(echo)
    yield listener.getsockname()[1]
    listener.close()


@pytest.fixture
def _no_ambient_proxy(monkeypatch):
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


@pytest.fixture
def make_proxy():
    made = []

    def make(hosts, resolve=None, **kwargs):
        recorder = Recorder()
        resolve = {"allowed.test": "127.0.0.1"} if resolve is None else resolve
        proxy = Proxy(parse_hosts(hosts), resolve=resolve, on_connection=recorder, **kwargs)
        made.append(proxy)
        return proxy, recorder

    yield make
    for proxy in made:
        proxy.close()
