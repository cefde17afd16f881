"""A secret resolved through the broker reaches the child and nothing that comes back.

Through a real host: the built-in broker resolves ``github`` from the host's environment,
the child proves it received the value (its sha256 is checked here) and prints it raw,
base64'd, URL-encoded and hex'd on both streams, split across writes, and inside a basic
auth header. Neither the returned result, nor any event, nor any file of the store holds
the secret in any of those forms, while the rest of the output is kept.

Run unconfined (core only) and confined by each sandbox provider; the workspace lies under
the home directory (as in the attack suite), since a sandbox replaces /tmp with its own.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import quote, quote_plus

import attrs
import pytest

from stockade.config.schema import Config, OutputConfig
from stockade.record.redact import MARKER, secret_forms
from stockade.request.spec import ExecRequest
from stockade.request.wire import to_json

PYTHON = "/usr/bin/python3"  # the system interpreter: visible inside every sandbox
RUNS = [
    pytest.param("none", "danger-full-access", id="unconfined"),
    pytest.param("bubblewrap", "workspace-write", id="bubblewrap"),
    pytest.param("landlock", "workspace-write", id="landlock"),
]
FORMS_PRINTED = 9

CHILD = r"""
import base64, hashlib, os, sys, time
from urllib.parse import quote, quote_plus
s = os.environb[b"TOKEN"]
forms = [
    s,
    base64.b64encode(s),
    base64.b64encode(s).rstrip(b"="),
    base64.urlsafe_b64encode(s),
    quote(s, safe="").encode(),
    quote_plus(s).encode(),
    s.hex().encode(),
    base64.b64encode(b"octocat:" + s),
    b"https://x.test/?token=" + quote(s, safe="").encode() + b"&page=2",
]
sys.stdout.buffer.write(b"sha256 " + hashlib.sha256(s).hexdigest().encode() + b"\n")
for stream in (sys.stdout.buffer, sys.stderr.buffer):
    for form in forms:
        stream.write(b"form: " + form + b"\n")
    # The secret split across two writes, the second after the first was read.
    stream.write(b"split: " + s[:5])
    stream.flush()
    time.sleep(0.05)
    stream.write(s[5:] + b"\n")
    stream.write(b"the end\n")
    stream.flush()
"""


def make_secret() -> str:
    # '+' and '/' in its base64, a space, '&' and non-ASCII in its URL forms.
    return "ghp_" + secrets.token_urlsafe(18) + " &?/~\u00fe\u00ff>"


def printed_forms(secret: str) -> list[str]:
    """The forms the child prints, computed here on their own (not by stockade.record.redact)."""
    raw = secret.encode()
    return [
        secret,
        base64.b64encode(raw).decode(),
        base64.b64encode(raw).decode().rstrip("="),
        base64.urlsafe_b64encode(raw).decode(),
        quote(raw, safe=""),
        quote_plus(raw),
        raw.hex(),
        base64.b64encode(b"octocat:" + raw).decode(),
    ]


def assert_no_form(where: str, text: str | bytes, secret: str) -> None:
    for form in {*secret_forms(secret), *printed_forms(secret)}:
        found = form.encode() in text if isinstance(text, bytes) else form in text
        assert not found, f"{where} holds a form of the secret: {form!r}"


@pytest.fixture
def workspace():
    base = Path.home() / ".stockade-tests"
    base.mkdir(mode=0o700, exist_ok=True)
    root = Path(tempfile.mkdtemp(dir=base))
    # The command's HOME beside its workspace: a home is never a writable root.
    (root / "ws").mkdir()
    (root / "home").mkdir()
    try:
        yield root / "ws"
    finally:
        subprocess.run(["chmod", "-R", "u+rwX", str(root)], check=False)
        shutil.rmtree(root, ignore_errors=True)


def secret_host(make_host, event_log, sandbox: str, secret: str, **config):
    host = make_host(
        allow_all=True,
        plugins=[event_log],
        config=Config(sandbox=sandbox, **config),
        environ={**os.environ, "STOCKADE_SECRET_GITHUB": secret},
    )
    if sandbox != "none":
        probe = host.doer.providers.probe(host.sandboxes.get(sandbox))
        if not probe.usable:
            pytest.skip(f"{sandbox} is not usable here: {probe.detail}")
    return host


def request(workspace: Path, mode: str) -> ExecRequest:
    return ExecRequest(
        [PYTHON, "-S", "-c", CHILD],
        str(workspace),
        mode=mode,
        env={"HOME": str(workspace.parent / "home")},
        credentials={"TOKEN": "github"},
        timeout=60,
    )


def test_the_forms_differ_so_each_is_tested():
    """The control: the secret's encodings are all distinct, so no form hides another."""
    secret = make_secret()
    forms = printed_forms(secret)
    assert len(set(forms)) == len(forms)
    assert base64.b64encode(secret.encode()) != base64.urlsafe_b64encode(secret.encode())


@pytest.mark.parametrize(("sandbox", "mode"), RUNS)
def test_the_child_gets_the_secret_and_the_result_holds_no_form_of_it(
    make_host, event_log, workspace, sandbox, mode
):
    secret = make_secret()
    host = secret_host(make_host, event_log, sandbox, secret)
    result = host.run(request(workspace, mode))
    assert result.ok, result.stderr.text
    out, err = result.stdout.text, result.stderr.text
    # The child received exactly the secret ...
    assert out.splitlines()[0] == "sha256 " + hashlib.sha256(secret.encode()).hexdigest()
    # ... and what it printed is kept, every form of the secret replaced.
    octocat = base64.b64encode(b"octocat:").decode()[:10]  # the characters of octocat: alone
    for text in (out, err):
        assert text.count(f"form: {MARKER}\n") == FORMS_PRINTED - 2, text
        assert f"form: https://x.test/?token={MARKER}&page=2\n" in text
        assert f"form: {octocat}" in text  # the basic auth header, its secret part scrubbed
        assert f"split: {MARKER}\n" in text
        assert text.endswith("the end\n")
    assert_no_form("stdout", out, secret)
    assert_no_form("stderr", err, secret)
    assert_no_form("the result", to_json(result), secret)
    # The record names the handle only.
    assert event_log.kinds(skip={"taint"}) == ["action", "permission", "result"]
    assert event_log.events[0].credentials == {"TOKEN": "github"}
    for event in event_log.events:
        assert_no_form(f"the {event.kind} event", to_json(event), secret)


@pytest.mark.parametrize(("sandbox", "mode"), RUNS)
def test_no_file_of_the_store_holds_the_secret(make_host, event_log, workspace, sandbox, mode):
    secret = make_secret()
    host = secret_host(make_host, event_log, sandbox, secret)
    assert host.run(request(workspace, mode)).ok
    host.close()
    state = Path(os.environ["XDG_STATE_HOME"])
    files = [p for p in state.rglob("*") if p.is_file()]
    assert any(p.name.startswith("store.db") for p in files), files  # the control
    blobs = [p for p in files if "blobs" in p.parts]
    assert blobs, "the output was recorded as blobs"
    for path in files:
        assert_no_form(str(path), path.read_bytes(), secret)


def test_a_truncated_stream_leaves_no_secret_in_the_spill_or_the_store(
    make_host, event_log, workspace
):
    secret = make_secret()
    host = secret_host(make_host, event_log, "none", secret, output=OutputConfig(limit=1024))
    noisy = CHILD + "\nsys.stdout.write('.' * 20000)\n"
    req = request(workspace, "danger-full-access")
    result = host.run(attrs.evolve(req, argv=(PYTHON, "-S", "-c", noisy)))
    assert result.stdout.truncated
    assert result.stdout.spill_path is not None
    assert result.stdout.text.startswith("sha256 ")  # the head is kept ...
    assert f"form: {MARKER}\n" in result.stdout.text  # ... and scrubbed
    spill = Path(result.stdout.spill_path).read_bytes()
    assert spill.count(f"form: {MARKER}\n".encode()) == FORMS_PRINTED - 2  # the whole stream
    assert spill.endswith(b"." * 20000)
    host.close()
    state = Path(os.environ["XDG_STATE_HOME"])
    files = [p for p in state.rglob("*") if p.is_file()]
    assert any("blobs" in p.parts for p in files)
    assert_no_form("the spill file", spill, secret)
    for path in files:
        assert_no_form(str(path), path.read_bytes(), secret)
