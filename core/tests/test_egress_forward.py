"""The egress proxy's plain HTTP forward: the request relayed with its proxy headers
dropped, the default port checked, and curl through it."""

import subprocess
import urllib.error
import urllib.request

import pytest
from egress_helpers import CURL, _opener, _port, _raw

pytestmark = pytest.mark.usefixtures("_no_ambient_proxy")


# --- plain HTTP forward ------------------------------------------------------------------------


def test_plain_http_forward(make_proxy, http_server):
    port = _port(http_server)
    proxy, recorder = make_proxy([f"allowed.test:{port}"])
    proxy_port = proxy.serve_tcp()
    request = urllib.request.Request(
        f"http://allowed.test:{port}/p?q=1",
        headers={"Proxy-Authorization": "Basic c2VjcmV0", "X-Keep": "yes"},
    )
    with _opener(proxy_port).open(request, timeout=5) as reply:
        assert reply.read() == b"hello from http /p?q=1"
    path, headers = http_server.RequestHandlerClass.seen[-1]
    assert path == "/p?q=1"
    lowered = {k.lower(): v for k, v in headers.items()}
    assert lowered["connection"] == "close"
    assert lowered["host"] == f"allowed.test:{port}"
    assert lowered["x-keep"] == "yes"
    assert not any(k.startswith("proxy-") for k in lowered)
    seen = recorder.wait()
    assert (seen.host, seen.port, seen.allowed, seen.method) == ("allowed.test", port, True, "GET")
    assert seen.bytes_down > len(b"hello from http /p?q=1")


def test_plain_http_default_port_and_refusal(make_proxy):
    proxy, recorder = make_proxy(["allowed.test:8443"])
    reply = _raw(proxy.serve_tcp(), b"GET http://allowed.test/x HTTP/1.1\r\nHost: a\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 403")
    assert b"allowed.test:80 is not in the profile's hosts" in reply
    seen = recorder.wait()
    assert (seen.port, seen.method, seen.allowed) == (80, "GET", False)


@pytest.mark.skipif(CURL is None, reason="curl is not installed")
def test_curl_plain_http_forward(make_proxy, http_server):
    port = _port(http_server)
    proxy, _ = make_proxy([f"allowed.test:{port}"])
    out = subprocess.run(
        [
            CURL,
            "-sS",
            "-x",
            f"http://127.0.0.1:{proxy.serve_tcp()}",
            f"http://allowed.test:{port}/c",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == "hello from http /c"
