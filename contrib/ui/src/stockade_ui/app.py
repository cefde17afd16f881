"""The page's routes: runs, one run, what waits, whole outputs, answers, live updates.

Server-rendered HTML from Starlette and Jinja2: every page is complete without script;
``live.js`` only polls the ``/live/...`` twin of the page it is on and swaps in the parts
that changed. A live endpoint answers 204 when the version the page shows (the last event
and the held steps' states, :func:`~stockade_ui.reading.version`) is still current, so
polling costs two small queries; a run's live update draws only the steps that changed.

Reading endpoints are plain functions (Starlette runs them on its thread pool, off the
event loop); the store's connection is shared under its own lock.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, BinaryIO
from urllib.parse import parse_qs, quote

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

from stockade.config.schema import Config
from stockade.record.blobs import BlobError, open_blob
from stockade.record.store import Store
from stockade.record.verify import Checked, Verdict, verify

from . import reading
from .answers import Answers, Notice
from .cards import network_of
from .guard import Guard, Secrets, same
from .render import HERE, Pages
from .timeline import build, shown_digest

FORM_LIMIT = 4096
NOTICES_KEPT = 64
VERDICT_FRESH_S = 5.0  # a live update reuses a verdict this recent
VERDICTS_KEPT = 64  # runs whose verdicts are kept for live updates
STATIC = {
    "style.css": "text/css; charset=utf-8",
    "live.js": "text/javascript; charset=utf-8",
    "icon.svg": "image/svg+xml",
}
VERSION_HEADER = "x-stockade-version"


class Page:
    """What the routes share: the store, the config, the answers and the templates."""

    def __init__(self, store: Store, config: Config, answers: Answers, secrets: Secrets) -> None:
        self.store = store
        self.config = config
        self.answers = answers
        self.secrets = secrets
        self.pages = Pages(
            {"csrf": secrets.csrf, "digest": shown_digest, "network": partial(network_of, config)}
        )
        self.notices: dict[str, Notice] = {}
        self._verdicts: dict[str, tuple[float, int, Verdict]] = {}
        self.checked = Checked()
        """What this page checked (blob files, leading signatures): drawn again, checked again
        only where something changed or was added."""
        self._lock = threading.Lock()
        self.static = {}
        for name in STATIC:
            with open(os.path.join(HERE, "static", name), "rb") as handle:
                self.static[name] = handle.read()

    # --- shared pieces ---------------------------------------------------------------------

    def verdict(self, run_id: str, *, fresh: bool) -> Verdict:
        """``stockade verify``'s verdict for a run's page: the whole chain (every event
        vouches for the ones before it) and the run's own output blobs, re-hashed (reused by
        live updates for a few seconds while no event is added)."""
        seq = reading.seq_of(reading.version(self.store))
        with self._lock:
            cached = self._verdicts.get(run_id)
        if cached is not None and not fresh:
            at, cached_seq, found = cached
            if cached_seq == seq and time.monotonic() - at < VERDICT_FRESH_S:
                return found
        found = verify(self.store, run=run_id, checked=self.checked)
        with self._lock:
            self._verdicts[run_id] = (time.monotonic(), seq, found)
            while len(self._verdicts) > VERDICTS_KEPT:
                del self._verdicts[next(iter(self._verdicts))]
        return found

    def waiting(self) -> int:
        """How many steps wait for a person, across runs."""
        with self.store.locked():
            (count,) = self.store.connection.execute(
                "SELECT count(*) FROM held WHERE state = 'held'"
            ).fetchone()
        return int(count)

    def notice(self, request: Request) -> Notice | None:
        """The notice the redirect after an answer named."""
        return self.notices.get(request.query_params.get("notice", ""))

    def keep(self, notice: Notice) -> str:
        """Keep ``notice`` for the page the answer redirects to; its id."""
        key = secrets.token_urlsafe(9)
        self.notices[key] = notice
        while len(self.notices) > NOTICES_KEPT:
            del self.notices[next(iter(self.notices))]
        return key

    def html(self, name: str, version: str, status: int = 200, **context: object) -> HTMLResponse:
        """The template ``name`` as a response carrying ``version``."""
        body = self.pages.render(name, waiting=self.waiting(), version=version, **context)
        return HTMLResponse(body, status_code=status, headers={VERSION_HEADER: version})

    def missing(self, what: str) -> HTMLResponse:
        """A 404 page with the page's header, saying what is not there, and a way back."""
        return self.html("missing.html", "", status=404, what=what, notice=None)

    def not_found(self, request: Request, _error: Exception) -> Response:
        """Any path no route answers (Starlette's 404), as the same page."""
        return self.missing(f"nothing is at {request.url.path}")

    # --- the runs list -----------------------------------------------------------------------

    def runs_page(self, request: Request) -> Response:
        """Every run, newest first: status, counts, budget used."""
        version = reading.version(self.store)
        return self.html(
            "runs.html",
            version,
            runs=reading.runs(self.store, self.config),
            notice=self.notice(request),
        )

    def runs_live(self, request: Request) -> Response:
        """The runs list again, when it changed."""
        version = reading.version(self.store)
        if request.query_params.get("since") == version:
            return Response(status_code=204)
        return self.html("live_runs.html", version, runs=reading.runs(self.store, self.config))

    # --- what waits --------------------------------------------------------------------------

    def pending_page(self, request: Request) -> Response:
        """Every step waiting for a person, oldest first, with its answers."""
        version = reading.version(self.store)
        return self.html(
            "pending.html", version, held=self.store.waiting(), notice=self.notice(request)
        )

    def pending_live(self, request: Request) -> Response:
        """What waits, again, when it changed."""
        version = reading.version(self.store)
        if request.query_params.get("since") == version:
            return Response(status_code=204)
        return self.html("live_pending.html", version, held=self.store.waiting())

    # --- one run -----------------------------------------------------------------------------

    def run_version(self, run_id: str) -> str:
        """The run's version, with the problems this page met running its steps."""
        problems = sorted(self.answers.problems_of(run_id).items())
        digest = hashlib.sha256(repr(problems).encode()).hexdigest()[:8]
        return f"{reading.version(self.store, run_id)}.{digest}"

    def run_context(self, run_id: str, *, after: int = 0, fresh: bool) -> dict[str, Any]:
        """What the run's page, or a live update of it, draws."""
        summary = reading.runs(self.store, self.config, run_id)
        held = reading.held_of(self.store, run_id)
        rows = reading.events_of(self.store, run_id, after=after, steps=held if after else ())
        return {
            "run_id": run_id,
            "summary": summary[0] if summary else None,
            "steps": build(self.store, rows, held, self.checked.blobs),
            "problems": self.answers.problems_of(run_id),
            "verdict": self.verdict(run_id, fresh=fresh),
        }

    def run_page(self, request: Request) -> Response:
        """One run's timeline."""
        run_id = request.path_params["run_id"]
        if not reading.run_exists(self.store, run_id):
            return self.missing(f"no run {run_id} in the record")
        version = self.run_version(run_id)
        context = self.run_context(run_id, fresh=True)
        return self.html("run.html", version, notice=self.notice(request), **context)

    def run_live(self, request: Request) -> Response:
        """The steps of one run that changed since the version the page shows."""
        run_id = request.path_params["run_id"]
        since = request.query_params.get("since", "")
        if not reading.run_exists(self.store, run_id):
            return self.missing(f"no run {run_id} in the record")
        version = self.run_version(run_id)
        if since == version:
            return Response(status_code=204)
        after = reading.seq_of(since)
        return self.html(
            "live_run.html", version, **self.run_context(run_id, after=after or -1, fresh=False)
        )

    def output(self, request: Request) -> Response:
        """The whole of one step's stdout or stderr, as plain text, checked first."""
        run_id, step = request.path_params["run_id"], request.path_params["step"]
        stream = request.path_params["stream"]
        if stream not in ("stdout", "stderr"):
            return self.missing(f"no stream {stream}: a step has stdout and stderr")
        result = reading.result_of(self.store, run_id, step)
        if result is None:
            return self.missing(f"step {step} of run {run_id} has no result")
        digest = result[stream]["blob"]
        if not digest:
            return PlainTextResponse("")
        try:
            # A checked private copy: what is sent is exactly what was hashed.
            handle = open_blob(self.store, digest, f"{stream} of step {step} of run {run_id}")
        except BlobError as error:
            return refused(error)
        return StreamingResponse(
            _chunks(handle), media_type="text/plain; charset=utf-8", headers=_length(handle)
        )

    # --- answers -----------------------------------------------------------------------------

    async def answer(self, request: Request) -> Response:
        """Let a held step go ahead, decline it, or run an approved one: the form must carry
        this start's CSRF value."""
        form = await checked_form(request, self.secrets)
        if form is None:
            return PlainTextResponse(
                "the form is not this page's (no valid CSRF field)", status_code=403
            )
        run_id, action = form.get("run", ""), form.get("answer", "")
        try:
            step = int(form.get("step", ""))
        except ValueError:
            step = -1
        if not 0 <= step <= reading.LARGEST:
            return PlainTextResponse("no step", status_code=400)
        if action in ("approve", "decline"):
            notice = await run_in_threadpool(
                self.answers.answer,
                run_id,
                step,
                approve=action == "approve",
                shown=form.get("shown", ""),
            )
        elif action == "run":
            notice = await run_in_threadpool(self.answers.resume, run_id, step)
        else:
            return PlainTextResponse("no such answer", status_code=400)
        key = self.keep(notice)
        exists = await run_in_threadpool(reading.run_exists, self.store, run_id)
        target = (
            f"/runs/{quote(run_id, safe='')}?notice={key}#step-{step}"
            if exists
            else f"/pending?notice={key}"
        )
        return RedirectResponse(target, status_code=303)

    def favicon(self, _request: Request) -> Response:
        """The icon, where browsers look for it by default."""
        return Response(self.static["icon.svg"], media_type=STATIC["icon.svg"])

    def static_file(self, request: Request) -> Response:
        """The stylesheet, the live-update script and the icon."""
        name = request.path_params["name"]
        if name not in self.static:
            return self.missing(f"no file {name}")
        return Response(self.static[name], media_type=STATIC[name])


def refused(error: BlobError) -> Response:
    """A blob that is missing or was changed: what, where, and what to do; never its text."""
    return PlainTextResponse(
        f"the output cannot be shown: {error.message}\nhint: {error.hint}",
        status_code=500,
    )


def _chunks(handle: BinaryIO) -> Iterator[bytes]:
    """A checked copy in pieces, closed at the end."""
    with handle:
        yield from iter(lambda: handle.read(1 << 16), b"")


def _length(handle: BinaryIO) -> dict[str, str]:
    """The length of a checked copy, as a header."""
    size = handle.seek(0, os.SEEK_END)
    handle.seek(0)
    return {"content-length": str(size)}


async def checked_form(request: Request, secrets: Secrets) -> dict[str, str] | None:
    """A urlencoded form's fields, when its ``csrf`` field is this start's; else ``None``."""
    if (
        request.headers.get("content-type", "").split(";")[0].strip()
        != "application/x-www-form-urlencoded"
    ):
        return None
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > FORM_LIMIT:
            return None
    fields = {name: values[0] for name, values in parse_qs(body.decode("utf-8", "replace")).items()}
    return fields if same(fields.get("csrf"), secrets.csrf) else None


def build_app(store: Store, config: Config, answers: Answers, secrets: Secrets) -> Guard:
    """The whole application, behind its guard."""
    page = Page(store, config, answers, secrets)
    get: Callable[[str, Callable[..., Any]], Route] = lambda path, endpoint: Route(  # noqa: E731
        path, endpoint, methods=["GET", "HEAD"]
    )
    app = Starlette(
        routes=[
            get("/", page.runs_page),
            get("/live/runs", page.runs_live),
            get("/pending", page.pending_page),
            get("/live/pending", page.pending_live),
            get("/runs/{run_id}", page.run_page),
            get("/live/runs/{run_id}", page.run_live),
            get("/runs/{run_id}/steps/{step:int}/{stream}", page.output),
            Route("/answer", page.answer, methods=["POST"]),
            get("/static/{name}", page.static_file),
            get("/favicon.ico", page.favicon),  # asked for by a browser on the plain-text pages
        ],
        exception_handlers={404: page.not_found},
    )
    app.state.page = page
    return Guard(app, secrets)
