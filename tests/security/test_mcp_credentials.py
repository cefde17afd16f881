"""Credentials over MCP: a profile hands a bound credential to its commands by variable name.

An agent over MCP cannot name a credential (``run_command`` takes no ``env``), so the profile
names the variable (``env = "GH_TOKEN"`` in the binding). Through a real MCP client, against
a live HTTPS echo upstream on loopback: the agent reads its variable (a placeholder), sends it
with ``curl`` to the bound host, and the upstream receives the value; the value is never in
what the command held, in what the client got back, or in any file of the store. Sent over
plain HTTP (to the bound name on another port, or to another allowed host) the placeholder is
refused with a reason, and nothing holding it leaves. Both backends; root and unprivileged.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from helpers.echo_tls import EchoUpstream
from helpers.mcp_session import answering, connect, text_of
from stockade.record.redact import secret_forms

CURL = "/usr/bin/curl"


def _setup(box, bound: EchoUpstream, plain: EchoUpstream, secret: str) -> dict[str, Path]:
    secrets_file = box.root / "secrets.toml"
    secrets_file.write_text(f'github = "{secret}"\n')
    secrets_file.chmod(0o600)
    config = box.root / "stockade.toml"
    at, clear = f"bound.test:{bound.port}", f"bound.test:{plain.port}"
    config.write_text(
        f"""sandbox = "{box.sandbox}"

[network]
resolve = {{ "bound.test" = "127.0.0.1", "plain.test" = "127.0.0.1" }}
upstream_ca = "{bound.cafile}"

[credentials]
file = "{secrets_file}"

[agents.net]
workspace = "{box.ws}"
hosts = ["{at}", "{clear}", "plain.test:{plain.port}"]
ask = []

[agents.net.credentials]
github = {{ host = "{at}", format = "token {{}}", env = "GH_TOKEN" }}
""",
        encoding="utf-8",
    )
    return {"ws": box.ws, "config": config, "tmp": box.root}


def _store_files(state: Path) -> bytes:
    return b"".join(p.read_bytes() for p in state.rglob("*") if p.is_file())


@pytest.mark.asyncio
async def test_an_mcp_agent_uses_a_bound_credential_it_never_holds(box):
    secret = "ghp_" + secrets.token_urlsafe(27)
    bound = EchoUpstream(box.root / "bound", ("bound.test",))
    plain = EchoUpstream(box.root / "plain", tls=False)
    setup = _setup(box, bound, plain, secret)
    asked: list[str] = []  # the breaker asks a person before each network step: they approve
    try:
        async with connect(setup, "net", elicit=answering("accept", asked)) as session:
            held = await session.call_tool("run_command", {"argv": ["printenv", "GH_TOKEN"]})
            placeholder = held.structured_content["stdout"]["text"].strip()
            header = f"Authorization: token {placeholder}"
            fetched = await session.call_tool(
                "run_command",
                {"argv": [CURL, "-sS", "-H", header, f"https://bound.test:{bound.port}/echo"]},
            )
            refused = {}
            for name, port in (("bound.test", plain.port), ("plain.test", plain.port)):
                refused[name] = await session.call_tool(
                    "run_command",
                    {"argv": [CURL, "-sS", "-H", header, f"http://{name}:{port}/echo"]},
                )
    finally:
        bound.close()
        plain.close()
    # The command held a placeholder, never the value; the upstream got the value.
    assert placeholder.startswith("ghp_") and placeholder != secret, held
    assert len(placeholder) >= len(secret)
    assert not fetched.is_error, text_of(fetched)
    assert asked and "the breaker: this run holds private data (credential GH_TOKEN" in asked[0]
    assert [dict(r["headers"])["Authorization"] for r in bound.seen] == [f"token {secret}"]
    # Over plain HTTP: refused with the reason, and nothing reached the plain upstream.
    for answer in refused.values():
        text = answer.structured_content["stdout"]["text"]
        assert "over plain HTTP, where it is never put in (use https://)" in text, text
    assert plain.seen == []
    # The value is nowhere the agent or the record could see it.
    seen_by_agent = "".join(
        text_of(r) + str(r.structured_content) for r in (held, fetched, *refused.values())
    )
    state = Path(os.environ["XDG_STATE_HOME"])
    for form in secret_forms(secret):
        assert form not in seen_by_agent
        assert form.encode() not in _store_files(state)
    # The controls: the scan reads what it claims to (the placeholder is in the record).
    assert placeholder.encode() in _store_files(state) or placeholder in seen_by_agent
