"""The built-in credential broker, and secret scrubbing in every form a secret may take."""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import stat
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from stockade.config.schema import Config, CredentialsConfig
from stockade.errors import CredentialUnavailable, UsageError
from stockade.record import broker as credentials
from stockade.record.redact import (
    MARKER,
    MIN_FORM,
    marker_for,
    refuse_in_argv,
    scrub,
    scrub_file,
    secret_forms,
)
from stockade.request.spec import ExecRequest

UNCONFINED = {"mode": "danger-full-access"}
PYTHON = "/usr/bin/python3"
PRINT_DIGEST = (
    "import hashlib, os, sys\nprint(hashlib.sha256(os.environb.get(b'TOKEN', b'')).hexdigest())\n"
)


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def token() -> str:
    return "ghp_" + secrets.token_hex(12)


def secrets_file(tmp_path, text: str, mode: int = 0o600):
    path = tmp_path / "secrets.toml"
    path.write_text(text)
    path.chmod(mode)
    return path


def broker(environ=None, **kw) -> credentials.CredentialBroker:
    return credentials.make_plugin(Config(credentials=CredentialsConfig(**kw)), environ or {})


def resolve(b: credentials.CredentialBroker, handle: str) -> str | None:
    return b.stockade_resolve_credential(handle, spec=None)


# --- the broker through a host ----------------------------------------------------------


def run_with(make_host, *, environ=None, handle="github", **kw):
    config = Config(credentials=CredentialsConfig(**kw))
    host = make_host(allow_all=True, config=config, environ={**os.environ, **(environ or {})})
    request = ExecRequest(
        [PYTHON, "-S", "-c", PRINT_DIGEST], credentials={"TOKEN": handle}, **UNCONFINED
    )
    return host.run(request)


def test_a_secret_from_the_host_environment_reaches_the_child(make_host):
    secret = token()
    result = run_with(make_host, environ={"STOCKADE_SECRET_GITHUB": secret})
    assert result.ok
    assert result.stdout.text.strip() == digest(secret)


@pytest.mark.parametrize(
    ("handle", "variable"),
    [
        ("github", "STOCKADE_SECRET_GITHUB"),
        ("npm-token", "STOCKADE_SECRET_NPM_TOKEN"),
        ("aws.prod_2", "STOCKADE_SECRET_AWS_PROD_2"),
        ("0day", "STOCKADE_SECRET_0DAY"),
    ],
)
def test_a_handle_names_its_variable_under_the_prefix(handle, variable):
    assert credentials.env_name("STOCKADE_SECRET_", handle) == variable
    assert resolve(broker({variable: "s3cret-value"}), handle) == "s3cret-value"


def test_the_prefix_is_configurable_and_empty_turns_the_environment_off(tmp_path):
    environ = {"VAULT_GITHUB": "from-env", "STOCKADE_SECRET_GITHUB": "default-prefix"}
    assert resolve(broker(environ, env_prefix="VAULT_"), "github") == "from-env"
    assert resolve(broker(environ, env_prefix=""), "github") is None
    file = secrets_file(tmp_path, 'github = "from-file"\n')
    assert resolve(broker(environ, env_prefix="", file=str(file)), "github") == "from-file"


def test_the_request_environment_is_not_a_source(make_host):
    """An agent that writes env entries cannot make the broker answer with its own value."""
    config = Config(credentials=CredentialsConfig())
    host = make_host(allow_all=True, config=config)
    request = ExecRequest(
        [PYTHON, "-S", "-c", PRINT_DIGEST],
        env={"STOCKADE_SECRET_GITHUB": "planted"},
        credentials={"TOKEN": "github"},
        **UNCONFINED,
    )
    with pytest.raises(CredentialUnavailable, match="no credential broker resolved 'github'"):
        host.run(request)


def test_an_empty_variable_counts_as_unset(tmp_path):
    file = secrets_file(tmp_path, 'github = "from-file"\n')
    b = broker({"STOCKADE_SECRET_GITHUB": ""}, file=str(file))
    assert resolve(b, "github") == "from-file"


def test_the_environment_wins_over_the_file_and_the_file_is_read_only_when_needed(tmp_path):
    file = secrets_file(tmp_path, "this is not toml, and the broker never reads it\n", 0o644)
    b = broker({"STOCKADE_SECRET_GITHUB": "from-env"}, file=str(file))
    assert resolve(b, "github") == "from-env"
    with pytest.raises(CredentialUnavailable):
        resolve(b, "npm")


def test_a_secret_from_the_file_reaches_the_child(make_host, tmp_path):
    secret = token()
    file = secrets_file(tmp_path, f'# my secrets\ngithub = "{secret}"\n"aws.prod" = "other"\n')
    result = run_with(make_host, file=str(file))
    assert result.ok
    assert result.stdout.text.strip() == digest(secret)
    result = run_with(make_host, file=str(file), handle="aws.prod")
    assert result.stdout.text.strip() == digest("other")


def test_the_file_is_not_read_when_the_host_starts(make_host, tmp_path):
    """Start-up stays cheap, and a broken file only stops the commands that need it."""
    missing = tmp_path / "nowhere.toml"
    host = make_host(
        allow_all=True, config=Config(credentials=CredentialsConfig(file=str(missing)))
    )
    assert host.run(ExecRequest(["true"], **UNCONFINED)).ok
    with pytest.raises(CredentialUnavailable, match="does not exist"):
        host.run(ExecRequest(["true"], credentials={"T": "github"}, **UNCONFINED))


def test_the_file_is_read_again_when_it_changes(tmp_path):
    file = secrets_file(tmp_path, 'github = "first"\n')
    b = broker(file=str(file))
    assert resolve(b, "github") == "first"
    file.write_text('github = "rotated-value"\n')
    assert resolve(b, "github") == "rotated-value"
    file.chmod(0o640)
    with pytest.raises(CredentialUnavailable, match="mode 0640"):
        resolve(b, "github")  # a cached copy is not a way around the check


def test_a_file_of_home_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    secrets_file(tmp_path, 'github = "at-home"\n')
    assert resolve(broker(file="~/secrets.toml"), "github") == "at-home"


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o602, 0o644, 0o700 | 0o020])
def test_a_file_others_may_read_or_write_is_refused_with_the_chmod_to_run(tmp_path, mode):
    file = secrets_file(tmp_path, 'github = "s3cret-value"\n', mode)
    with pytest.raises(CredentialUnavailable) as caught:
        resolve(broker(file=str(file)), "github")
    error = caught.value
    assert str(file) in error.message
    assert f"mode {stat.S_IMODE(mode):04o}" in error.message
    assert f"chmod 600 {file}" in (error.hint or "")
    assert error.details == {"file": str(file)}
    assert "s3cret-value" not in str(error.to_dict())


def test_a_file_owned_by_someone_else_is_refused(tmp_path, monkeypatch):
    file = secrets_file(tmp_path, 'github = "s3cret-value"\n')
    b = broker(file=str(file))
    me = os.getuid()
    monkeypatch.setattr(credentials.os, "getuid", lambda: me + 1)
    with pytest.raises(CredentialUnavailable, match=f"owned by uid {me}, not by the current"):
        resolve(b, "github")


def test_a_missing_file_is_a_clear_error(tmp_path):
    missing = tmp_path / "secrets.toml"
    with pytest.raises(CredentialUnavailable) as caught:
        resolve(broker(file=str(missing)), "github")
    assert caught.value.message == (f"the secrets file {missing} (credentials.file) does not exist")
    assert "install -m 600" in (caught.value.hint or "")


def test_a_fifo_does_not_hang_the_host(tmp_path):
    fifo = tmp_path / "secrets.toml"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(CredentialUnavailable, match="is not a regular file"):
        resolve(broker(file=str(fifo)), "github")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("github = ghp_s3cretvalue\n", "is not valid TOML: Invalid value (at line 1, column 10)"),
        ('github = "ghp_s3cretvalue\n', "is not valid TOML"),
        ("ghp_s3cretvalue\n", "is not valid TOML"),
        ("github = 12345678\n", "the value of 'github' in the secrets file"),
        ('[github]\ntoken = "ghp_s3cretvalue"\n', "is a TOML table, not a secret string"),
        ('github = ["ghp_s3cretvalue"]\n', "is a TOML array, not a secret string"),
        ('github = ""\n', "is an empty string, not a secret string"),
        ('"not a handle" = "ghp_s3cretvalue"\n', "has the key 'not a handle', which is not a"),
    ],
)
def test_a_malformed_file_is_a_clear_error_that_never_shows_a_secret(tmp_path, text, problem):
    file = secrets_file(tmp_path, text)
    with pytest.raises(CredentialUnavailable) as caught:
        resolve(broker(file=str(file)), "github")
    assert problem in caught.value.message
    assert str(file) in caught.value.message
    assert "s3cretvalue" not in str(caught.value.to_dict())


def test_a_file_that_is_not_utf8_is_a_clear_error(tmp_path):
    file = tmp_path / "secrets.toml"
    file.write_bytes(b'github = "\xff\xfe"\n')
    file.chmod(0o600)
    with pytest.raises(CredentialUnavailable, match="is not UTF-8 text"):
        resolve(broker(file=str(file)), "github")


@pytest.mark.parametrize(
    "handle", ["", "-github", ".github", "_github", "git hub", "../github", "github\n", "gh/x", "é"]
)
def test_a_malformed_handle_is_refused(make_host, handle):
    environ = {credentials.env_name("STOCKADE_SECRET_", handle): "s3cret-value"}
    with pytest.raises(CredentialUnavailable, match="not a handle the built-in broker accepts"):
        resolve(broker(environ), handle)
    host = make_host(allow_all=True, environ={**os.environ, **environ})
    with pytest.raises(CredentialUnavailable) as caught:
        host.run(ExecRequest(["true"], credentials={"T": handle}, **UNCONFINED))
    assert repr(handle) in caught.value.message
    assert "broker plugin" in (caught.value.hint or "")


def test_an_unknown_handle_makes_the_host_refuse_the_command(make_host, tmp_path):
    file = secrets_file(tmp_path, 'github = "s3cret-value"\n')
    assert resolve(broker(file=str(file)), "npm") is None
    assert resolve(broker(), "npm") is None
    with pytest.raises(
        CredentialUnavailable, match=r"no credential broker resolved 'npm' \(for TOKEN\)"
    ):
        run_with(make_host, file=str(file), handle="npm", environ={})


def test_an_installed_broker_answers_before_the_built_in_one(make_host):
    from stockade import hookimpl

    class Vault:
        @hookimpl
        def stockade_resolve_credential(self, handle, spec):
            return "from-vault" if handle == "github" else None

    host = make_host(
        plugins=[Vault()],
        allow_all=True,
        environ={**os.environ, "STOCKADE_SECRET_GITHUB": "from-env"},
    )
    request = ExecRequest(
        [PYTHON, "-S", "-c", PRINT_DIGEST], credentials={"TOKEN": "github"}, **UNCONFINED
    )
    assert host.run(request).stdout.text.strip() == digest("from-vault")


# --- the forms of a secret --------------------------------------------------------------


def test_secret_forms_lists_every_encoding():
    value = "ghp_abc/+ &é~?"
    raw = value.encode()
    forms = secret_forms(value)
    expected = {
        value,
        base64.b64encode(raw).decode(),
        base64.b64encode(raw).decode().rstrip("="),
        base64.urlsafe_b64encode(raw).decode(),
        base64.urlsafe_b64encode(raw).decode().rstrip("="),
        quote(value, safe=""),
        quote(value, safe="").lower(),  # the literal letters are lowercase already
        quote_plus(value),
        raw.hex(),
        raw.hex().upper(),
    }
    assert expected <= set(forms)
    assert len(forms) == len(set(forms))
    assert [len(f) for f in forms] == sorted((len(f) for f in forms), reverse=True)


def test_secret_forms_of_nothing_and_of_short_values():
    assert secret_forms("") == ()
    # The value itself is always sought; encodings too short to be telling are not.
    assert secret_forms("ab")[-1] == "ab"
    assert all(len(f) >= MIN_FORM for f in secret_forms("ab") if f != "ab")


@given(st.binary(max_size=7), st.binary(min_size=1, max_size=40), st.binary(max_size=7))
def test_an_aligned_base64_run_is_in_every_stream_that_holds_the_secret(before, raw, after):
    value = raw.decode("utf-8", "surrogateescape")
    forms = secret_forms(value)
    stream = before + raw + after
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        encoded = encode(stream).decode()
        if 8 * len(raw) >= 6 * (MIN_FORM + 2):  # long enough for a run of MIN_FORM
            assert any(form in encoded for form in forms), (before, raw, after)


# --- scrubbing --------------------------------------------------------------------------

SECRET_TEXT = st.one_of(
    st.text(min_size=8, max_size=40),
    st.text(alphabet="[redacted]xyz=+/%", min_size=8, max_size=24),  # pieces of the marker
)
NOISE = st.text(max_size=30)


@st.composite
def embedded(draw):
    """A secret, and a text that holds it raw, encoded, and inside base64 streams."""
    secret = draw(SECRET_TEXT)
    raw = secret.encode()
    forms = secret_forms(secret)
    pieces = []
    for _ in range(draw(st.integers(1, 6))):
        pieces.append(draw(NOISE))
        how = draw(st.sampled_from(["form", "b64-stream", "urlsafe-stream", "twice"]))
        if how == "form":
            pieces.append(draw(st.sampled_from(forms)))
        elif how == "twice":
            form = draw(st.sampled_from(forms))
            pieces.append(form + draw(st.sampled_from(["", "x", " ", MARKER[:3]])) + form)
        else:
            before, after = draw(st.binary(max_size=6)), draw(st.binary(max_size=6))
            encode = base64.b64encode if how == "b64-stream" else base64.urlsafe_b64encode
            pieces.append(encode(before + raw + after).decode())
    pieces.append(draw(NOISE))
    return secret, "".join(pieces)


@given(embedded())
@example(("ted]x[re", "ted]x[rexted]x[re"))  # marker + text would spell the secret again
@example(("redacted", "redacted"))  # the marker itself holds the secret
def test_scrubbed_text_holds_no_form_of_the_secret(case):
    secret, text = case
    out = scrub(text, [secret])
    for form in secret_forms(secret):
        assert form not in out
    assert out != text


def test_the_marker_is_inert_for_a_secret_that_could_be_spelled_across_it():
    assert marker_for(secret_forms("ghp_0123456789")) == MARKER.encode()
    for secret in ("ted]x[re", "redacted", "a[b]cdefgh"):
        marker = marker_for(secret_forms(secret)).decode()
        assert marker == "\u2588" * len(MARKER)
        assert scrub(f"<{secret}>", [secret]) == f"<{marker}>"
    assert marker_for(secret_forms("[\u2588]abcdefg")).decode() == "!" * len(MARKER)


@given(SECRET_TEXT, st.text(max_size=200))
def test_text_without_a_secret_is_unchanged(secret, text):
    assume(not any(form in text for form in secret_forms(secret)))
    assert scrub(text, [secret]) == text


@given(st.lists(SECRET_TEXT, min_size=1, max_size=3), st.text(max_size=40))
def test_every_secret_of_several_is_scrubbed(values, noise):
    text = noise.join(v for value in values for v in (value, secret_forms(value)[0]))
    out = scrub(text, values)
    for value in values:
        for form in secret_forms(value):
            assert form not in out


def test_scrub_keeps_the_text_around_the_secret():
    secret = "ghp_0123456789abcdef"
    b64 = base64.b64encode(secret.encode()).decode()
    text = f"token={secret}\nauth: {b64}\nurl=https://x/?t={quote(secret)}\n"
    assert scrub(text, [secret]) == (f"token={MARKER}\nauth: {MARKER}\nurl=https://x/?t={MARKER}\n")
    assert scrub(text, []) == text
    assert scrub(text, [""]) == text
    assert scrub("", [secret]) == ""


def test_overlapping_forms_become_one_marker():
    secret = "abcdabcd"
    assert scrub("xx abcdabcdabcd yy", [secret]) == f"xx {MARKER} yy"


def test_a_secret_inside_basic_auth_is_caught():
    secret = "ghp_" + "k" * 20
    header = base64.b64encode(f"octocat:{secret}".encode()).decode()
    out = scrub(f"Authorization: Basic {header}", [secret])
    assert MARKER in out
    assert not any(form in out for form in secret_forms(secret))


# --- a spilled stream on disk ----------------------------------------------------------


@given(embedded(), st.integers(1, 64))
def test_a_scrubbed_file_is_the_scrubbed_text_whatever_the_chunks(tmp_path_factory, case, size):
    secret, text = case
    path = tmp_path_factory.mktemp("spill") / "stdout"
    path.write_bytes(text.encode())
    assert scrub_file(str(path), [secret], chunk_size=size)
    assert path.read_bytes() == scrub(text, [secret]).encode()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(path.parent) == ["stdout"]


@given(SECRET_TEXT, st.binary(max_size=300), st.integers(1, 64))
def test_a_file_without_a_secret_is_left_alone(tmp_path_factory, secret, data, size):
    assume(not any(form.encode() in data for form in secret_forms(secret)))
    path = tmp_path_factory.mktemp("spill") / "stdout"
    path.write_bytes(data)
    before = path.stat()
    assert not scrub_file(str(path), [secret], chunk_size=size)
    assert path.read_bytes() == data
    assert path.stat().st_ino == before.st_ino  # not even rewritten


def test_a_large_file_is_scrubbed_across_its_chunks(tmp_path):
    secret = "ghp_" + secrets.token_hex(16)
    b64 = base64.b64encode(secret.encode()).decode()
    path = tmp_path / "stdout"
    line = f"{'.' * 1000}{secret}{'.' * 37}{b64}\n"
    path.write_text(line * 3000)  # ~3.3 MB: many forms on the 1 MiB boundaries
    assert scrub_file(str(path), [secret, ""])
    assert path.read_text() == f"{'.' * 1000}{MARKER}{'.' * 37}{MARKER}\n" * 3000
    assert not scrub_file(str(path), [secret])
    assert not scrub_file(str(path), [])


# --- argv -------------------------------------------------------------------------------


def test_a_secret_in_argv_is_refused_in_any_form_without_naming_it():
    secret = "ghp_" + secrets.token_hex(10)
    header = base64.b64encode(f"me:{secret}".encode()).decode()
    argvs = [
        ["curl", "-H", f"Authorization: token {secret}"],
        ["echo", base64.b64encode(secret.encode()).decode()],
        ["curl", f"https://example.com/?t={quote_plus(secret)}"],
        ["curl", "-H", f"Authorization: Basic {header}"],
        ["xxd", secret.encode().hex()],
    ]
    for argv in argvs:
        with pytest.raises(UsageError) as caught:
            refuse_in_argv(argv, ["other-value", secret])
        assert caught.value.details == {"argument": len(argv) - 1}
        shown = str(caught.value.to_dict())
        assert not any(form in shown for form in secret_forms(secret))
        assert "never accepted in argv" in caught.value.message


def test_the_host_refuses_a_secret_in_argv_before_recording_it(make_host, event_log):
    secret = "ghp_" + secrets.token_hex(10)
    host = make_host(
        plugins=[event_log],
        allow_all=True,
        environ={**os.environ, "STOCKADE_SECRET_GITHUB": secret},
    )
    request = ExecRequest(["echo", secret], credentials={"TOKEN": "github"}, **UNCONFINED)
    with pytest.raises(UsageError, match="argument 1 of the command holds the value"):
        host.run(request)
    assert event_log.events == []
    ok = ExecRequest(["echo", "hi"], credentials={"TOKEN": "github"}, **UNCONFINED)
    assert host.run(ok).stdout.text == "hi\n"


def test_argv_without_a_secret_passes():
    refuse_in_argv(["git", "push", "origin", "main"], ["ghp_" + secrets.token_hex(10)])
    refuse_in_argv(["git", "push"], [])
    refuse_in_argv(["git", "push"], [""])
