"""``stockade ui``'s door: the token, the cookie, the Host, CSRF and the origin, the security
headers, and loopback only.

Each test starts the real server with the real CLI (the ``ui`` fixture, :mod:`helpers.ui`)
and speaks to it over real sockets."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import subprocess
from urllib.parse import urlencode

import pytest

from helpers.ui import CLI

CSP = (
    "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; "
    "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


# --- the door: token, cookie, host, CSRF, origin, loopback ----------------------------------


def test_every_path_refuses_a_request_without_the_token(ui):
    for path in ("/", "/pending", "/live/runs", "/static/style.css", "/static/live.js", "/runs/r1"):
        status, headers, body = ui.get(path, cookie=False)
        assert status == 403, path
        assert "access token" in body
        assert headers["content-security-policy"] == CSP


def test_a_wrong_token_is_refused_in_the_url_and_in_the_cookie(ui):
    wrong = ui.token[:-2] + ("AA" if not ui.token.endswith("AA") else "BB")
    assert ui.get(f"/?token={wrong}", cookie=False)[0] == 403
    assert ui.get("/", headers={"Cookie": f"stockade-ui-{ui.port}={wrong}"})[0] == 403
    assert ui.get("/", headers={"Cookie": f"other={ui.token}"})[0] == 403  # the name counts
    assert ui.get(f"/?token={wrong}")[0] == 403  # a bad token is not excused by the cookie


def test_the_token_sets_a_strict_cookie_and_leaves_the_url(ui):
    status, headers, _ = ui.get(f"/pending?token={ui.token}", cookie=False)
    assert status == 303
    assert headers["location"] == "/pending"
    cookie = headers["set-cookie"]
    assert cookie.startswith(f"stockade-ui-{ui.port}={ui.token};")
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    status, headers, body = ui.get("/pending", headers={"Cookie": cookie.split(";")[0]})
    assert status == 200
    assert "Waiting for you" in body


def test_every_response_carries_the_security_headers_and_no_cors(ui):
    for method, path in (("GET", "/"), ("GET", "/static/live.js"), ("OPTIONS", "/answer")):
        status, headers, _ = ui.request(
            method,
            path,
            headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
        )
        assert headers["content-security-policy"] == CSP
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["referrer-policy"] == "no-referrer"
        assert headers["cache-control"] == "no-store"
        assert headers["x-frame-options"] == "DENY"
        assert not [name for name in headers if name.startswith("access-control-")]
        if method == "OPTIONS":
            assert status in (403, 405)  # no preflight is ever answered
    assert "server" not in ui.get("/")[1]


def test_another_host_name_is_refused_even_with_the_token(ui):
    # DNS rebinding: a page on evil.example, resolved to 127.0.0.1, reaches this port with
    # its own name in Host (and the browser would not send the cookie; here it even has it).
    for host in (
        f"evil.example:{ui.port}",
        "127.0.0.1",
        f"127.0.0.1:{ui.port + 1}",
        f"[::1]:{ui.port}",
    ):
        status, _, body = ui.get("/", headers={"Host": host})
        assert status == 403, host
        assert "own address" in body
    assert ui.get("/", headers={"Host": f"localhost:{ui.port}"})[0] == 200


def test_a_cross_site_post_is_refused_and_the_step_stays_held(ui):
    run, step = ui.hold(["touch", "made.txt"])
    fields = {**ui.form(ui.page(f"/runs/{run}"), step), "answer": "approve"}
    without = {k: v for k, v in fields.items() if k != "csrf"}
    attempts = [
        ({}, without),  # no CSRF field
        ({}, {**fields, "csrf": "x" * 43}),  # a wrong one
        ({"Origin": "http://evil.example"}, fields),  # the right one, from another origin
        ({"Origin": f"http://127.0.0.1:{ui.port + 1}"}, fields),  # another port is another origin
        ({"Origin": "null"}, fields),  # an opaque origin (a sandboxed frame, a data: page)
        ({"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}, fields),
        ({"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "cors"}, fields),
    ]
    for headers, form in attempts:
        status, _, _ = ui.request("POST", "/answer", body=urlencode(form), headers=headers)
        assert status == 403, (headers, sorted(form))
    # A form that is not urlencoded is not read at all.
    status, _, _ = ui.request(
        "POST", "/answer", body=json.dumps(fields), headers={"Content-Type": "application/json"}
    )
    assert status == 403
    assert ui.state(run, step) == "held"
    assert not (ui.ws / "made.txt").exists()
    # The page's own form, from the page's own origin, is answered.
    status, headers, _ = ui.request(
        "POST",
        "/answer",
        body=urlencode(fields),
        headers={"Origin": f"http://{ui.host}", "Sec-Fetch-Site": "same-origin"},
    )
    assert status == 303
    ui.wait_for(lambda: ui.state(run, step) == "done")


def non_loopback_addresses() -> list[str]:
    """This machine's IPv4 addresses other than 127.0.0.0/8."""
    found = set()
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        listing = subprocess.run(
            ["ip", "-o", "-4", "addr", "show"],
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        )
        found.update(re.findall(r"inet (\d+\.\d+\.\d+\.\d+)/", listing.stdout))
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the route's source
        found.add(probe.getsockname()[0])
    with contextlib.suppress(OSError):
        found.add(socket.gethostbyname(socket.gethostname()))
    return sorted(address for address in found if not address.startswith("127."))


def listening_addresses(port: int) -> set[str]:
    """The local addresses with a socket listening on ``port`` (IPv4 and IPv6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as handle:
            for line in list(handle)[1:]:
                local, _remote, state = line.split()[1:4]
                address, hex_port = local.split(":")
                if int(hex_port, 16) == port and state == "0A":  # LISTEN
                    found.add(address)
    return found


def test_only_loopback_is_listened_on(ui):
    # The kernel's own table: one listening socket, on 127.0.0.1 (0100007F), none on IPv6.
    assert listening_addresses(ui.port) == {"0100007F"}
    addresses = non_loopback_addresses()
    for address in addresses:
        with socket.socket() as sock:
            sock.settimeout(5)
            with pytest.raises(OSError):  # refused: nothing listens there
                sock.connect((address, ui.port))
    with socket.socket(socket.AF_INET6) as sock, pytest.raises(OSError):
        sock.connect(("::1", ui.port))
    # The same connection to loopback works: the refusals above are not an accident.
    with socket.create_connection(("127.0.0.1", ui.port), timeout=5):
        pass


def test_there_is_no_way_to_ask_for_another_address(tmp_path):
    for option in ("--host", "--bind", "--ip"):
        proc = subprocess.run(
            [*CLI, "ui", option, "0.0.0.0", "--no-open"],  # noqa: S104 - it must be refused
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
        assert proc.returncode != 0
        assert "unrecognized arguments" in proc.stderr or "usage" in proc.stderr.lower()
