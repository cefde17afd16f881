"""The door: who may reach the run page at all, and what every response carries.

A page that lets commands go ahead is itself a way to run them, so everything it serves,
static files included, sits behind this one ASGI middleware:

- **Host**: the ``Host`` header must name this server (``127.0.0.1:PORT`` or
  ``localhost:PORT``), so a page on another name that resolves to loopback (DNS
  rebinding) is refused before anything else is read.
- **Token**: a random value made at each start. The printed URL carries it once; the
  first visit with it sets an HttpOnly, SameSite=Strict cookie and redirects to the same
  page without it, so it leaves the address bar and the history. Any request without the
  token in its cookie (or its query) is refused with 403. Values are compared with
  :func:`hmac.compare_digest`.
- **Fetch metadata**: a browser that says a request comes from another site (or another
  port of the same host, which counts as the same *site*) may only navigate to a page;
  it cannot fetch one, embed it, or post to it.
- **Origin**: a POST whose ``Origin`` is present and not this server's is refused
  (``null``, which browsers send under ``no-referrer``, only with ``Sec-Fetch-Site:
  same-origin``); the CSRF field itself is checked by :func:`stockade_ui.app.checked_form`.
- **Headers**: a strict content security policy (no inline script or style, no frames,
  forms post only here), ``nosniff``, no referrer, no caching, and never a CORS header.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl, urlencode

from attrs import frozen

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CSP = (
    "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; "
    "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)


@frozen
class Secrets:
    """What one start of the server knows and the browser must show it.

    Attributes:
        port: the port it listens on (127.0.0.1 only).
        token: the access token of this start (in the printed URL, then the cookie).
        csrf: the value every form carries in its ``csrf`` field.
    """

    port: int
    token: str
    csrf: str

    @classmethod
    def new(cls, port: int) -> Secrets:
        """Fresh random values for a server on ``port``."""
        return cls(port, secrets.token_urlsafe(32), secrets.token_urlsafe(32))

    @property
    def cookie(self) -> str:
        """The cookie's name: one per port, so two servers do not overwrite each other."""
        return f"stockade-ui-{self.port}"

    @property
    def url(self) -> str:
        """The URL to open: it carries the token once."""
        return f"http://127.0.0.1:{self.port}/?token={self.token}"

    @property
    def hosts(self) -> frozenset[str]:
        """The ``Host`` headers that name this server."""
        return frozenset({f"127.0.0.1:{self.port}", f"localhost:{self.port}"})

    @property
    def origins(self) -> frozenset[str]:
        """The origins of this server's own pages."""
        return frozenset(f"http://{host}" for host in self.hosts)


def same(given: str | None, expected: str) -> bool:
    """Whether ``given`` is ``expected``, in constant time."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


class Guard:
    """ASGI middleware that refuses every request not from this server's own page."""

    def __init__(self, app: ASGIApp, secrets: Secrets) -> None:
        self.app = app
        self.secrets = secrets

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self.app(scope, receive, send)
            return  # no websockets: nothing here speaks them
        headers = _headers(scope)
        problem = self._refusal(scope, headers)
        if problem is not None:
            await _plain(send, 403, problem)
            return
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if "token" in query:  # a valid one, or _refusal had refused: set the cookie, drop it
            del query["token"]
            path = scope.get("raw_path") or scope.get("path", "/").encode()
            if not path.startswith(b"/") or path.startswith(b"//"):
                path = b"/"  # never a redirect to another host (``//host/...``)
            location = path.decode("latin-1") + (f"?{urlencode(query)}" if query else "")
            cookie = (
                f"{self.secrets.cookie}={self.secrets.token}; Path=/; HttpOnly; SameSite=Strict"
            )
            await _plain(
                send, 303, "", [(b"location", location.encode()), (b"set-cookie", cookie.encode())]
            )
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _refusal(self, scope: Scope, headers: dict[str, str]) -> str | None:
        """Why this request is refused, or ``None`` when it may go on."""
        if headers.get("host") not in self.secrets.hosts:
            return "this server answers only to its own address (127.0.0.1 or localhost)"
        if not self._authorized(scope, headers):
            return "no valid access token: open the URL `stockade ui` printed"
        site = headers.get("sec-fetch-site")
        method = scope.get("method", "GET")
        if site not in (None, "same-origin", "none") and not (
            method == "GET" and headers.get("sec-fetch-mode") == "navigate"
        ):
            return "requests from other sites are refused"
        origin = headers.get("origin")
        # With no referrer, a browser sends ``Origin: null`` even from this very page; it
        # is let through only when the browser also says the post is same-origin.
        own = origin is None or origin in self.secrets.origins
        if (
            method not in ("GET", "HEAD")
            and not own
            and (origin != "null" or site != "same-origin")
        ):
            return "a form on another origin cannot post here"
        return None

    def _authorized(self, scope: Scope, headers: dict[str, str]) -> bool:
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if "token" in query:
            return same(query["token"], self.secrets.token)
        return same(
            _cookies(headers.get("cookie", "")).get(self.secrets.cookie), self.secrets.token
        )


def _headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name; a repeated one keeps its first value,
    except ``cookie``, whose values are joined."""
    found: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers", []):
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        if name == "cookie" and name in found:
            found[name] += "; " + value
        else:
            found.setdefault(name, value)
    return found


def _cookies(header: str) -> dict[str, str]:
    """A ``Cookie`` header's values by name (the first of a repeated name wins)."""
    found: dict[str, str] = {}
    for part in header.split(";"):
        name, _, value = part.strip().partition("=")
        found.setdefault(name, value)
    return found


async def _plain(
    send: Send, status: int, text: str, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                *(extra or []),
                *HEADERS,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
