"""The monitor's HTTP application (Starlette, an ASGI framework; served by uvicorn in
``server``): the page, its JSON API, its server-sent event streams and the cancel actions.

Every request passes ``Guard`` first (``security``: the host, the token, POST rules) and every
response gets headers that keep the page to itself (a Content-Security-Policy allowing only its
own scripts, no framing, no referrer). The page builds its DOM with ``textContent`` only, so
names, reasons and log lines from job directories are shown as text, never as markup.
"""

from __future__ import annotations

import asyncio
import codecs
import html
import json
import os
import time
from collections.abc import AsyncIterator
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import LaunchersError
from ..jobs.record import StateRecord
from . import actions, security
from .index import KEEPALIVE, ExperimentState, Index, sse
from .model import phases, wait_run_summary
from .watch import describe as describe_watch

#: Largest file the job view shows whole (``job.sh``, ``params.json``, results), and the tail of
#: an output sent first; then at most ``FOLLOW_CHUNK`` bytes per update of a followed output.
SHOW_LIMIT = 256 * 1024
TAIL_BYTES = 64 * 1024
FOLLOW_CHUNK = 256 * 1024
#: How often a followed output is checked without an inotify event (other hosts' writes).
FOLLOW_POLL = 1.0

STATIC_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".html": "text/html; charset=utf-8",
}

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]

FORBIDDEN_PAGE = (
    "<!doctype html><meta charset=utf-8><title>launchers monitor</title>"
    "<p>This page needs the token that <code>launchers monitor</code> printed when it started: "
    "open the whole URL it printed (<code>http://…/?token=…</code>).</p>"
)


def load_static() -> dict[str, bytes]:
    """The page's files, shipped inside the package (``launchers/monitor/static``)."""
    folder = resources.files("launchers.monitor") / "static"
    return {f.name: f.read_bytes() for f in folder.iterdir() if f.is_file()}


class Guard:
    """ASGI middleware: the host and token rules of ``security`` on every request, POSTs with
    the token header from the page's own origin only, and the security headers."""

    def __init__(self, app: ASGIApp, token: str, *, bound_to_loopback: bool) -> None:
        self.app = app
        self.token = token
        self.bound_to_loopback = bound_to_loopback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "websocket":  # none served: refuse before anything
                await send({"type": "websocket.close", "code": 1008})
                return
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        method = scope["method"]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [
                    *[h for h in message["headers"] if h[0].lower() != b"cache-control"],
                    *SECURITY_HEADERS,
                ]
            await send(message)

        if not security.host_allowed(headers.get("host"), bound_to_loopback=self.bound_to_loopback):
            await _plain(send_with_headers, 403, "host not allowed (use 127.0.0.1 or localhost)")
            return
        query = dict(_query(scope))
        given = security.token_from(headers, query, method=method)
        if not security.token_matches(given, self.token):
            if method == "GET" and scope["path"] == "/":
                await _plain(send_with_headers, 403, FORBIDDEN_PAGE, "text/html; charset=utf-8")
            else:
                await _plain(send_with_headers, 403, "missing or wrong token")
            return
        if method not in ("GET", "HEAD") and not security.origin_allowed(
            headers.get("origin"), headers.get("host")
        ):
            await _plain(send_with_headers, 403, "cross-origin request refused")
            return
        await self.app(scope, receive, send_with_headers)


def _query(scope: Scope) -> list[tuple[str, str]]:
    raw = scope.get("query_string", b"").decode("latin-1")
    return parse_qsl(raw, keep_blank_values=True)


async def _plain(
    send: Send, status: int, text: str, ctype: str = "text/plain; charset=utf-8"
) -> None:
    body = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", ctype.encode()),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _read_text(path: Path, limit: int = SHOW_LIMIT) -> dict[str, Any] | None:
    """A file's text for the page (None when absent): the first ``limit`` bytes."""
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return None
    return {
        "text": data[:limit].decode("utf-8", errors="replace"),
        "size": size,
        "truncated": size > limit,
    }


def _read_json(path: Path) -> Any:
    shown = _read_text(path)
    if shown is None:
        return None
    if shown["truncated"]:
        return {"unreadable": f"{path.name} is {shown['size']} bytes: too large to show"}
    try:
        return json.loads(shown["text"])
    except ValueError as e:
        return {"unreadable": f"{path.name}: not valid JSON: {e}"}


def _size(path: Path) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None


def job_detail(state: ExperimentState, key: str, now: float) -> dict[str, Any] | None:
    """Everything the job view shows, read from its directory (None when it is gone)."""
    directory = state.exp.jobs / key
    try:
        data = json.loads((directory / "state.json").read_bytes())
        record = StateRecord.from_json(data, where=str(directory / "state.json"))
    except FileNotFoundError:
        return None
    except (ValueError, LaunchersError) as e:
        return {"key": key, "directory": str(directory), "error_reading": str(e)}
    row = state.rows.get(key) or {}
    result: dict[str, Any] | None = None
    if (directory / "result.json").exists():
        result = {"kind": "json", "value": _read_json(directory / "result.json")}
    elif (directory / "result.pickle").exists():
        result = {"kind": "pickle", "size": _size(directory / "result.pickle")}
    attempts = []
    for summary in record.attempts:
        n = summary.get("attempt")
        folder = directory / "attempts" / str(n)
        files = {f: _size(folder / f) for f in ("job.out", "job.err")}
        error = _read_json(folder / "error.json")
        attempts.append({**summary, "files": files, "error": error})
    before = sorted(k for k, r in state.rows.items() if key in (r.get("after") or ()))
    return {
        "key": key,
        "directory": str(directory),
        "record": record.to_json(),
        "row": row,
        "params": _read_json(directory / "params.json"),
        "script": _read_text(directory / "job.sh"),
        "options": list(record.launcher.get("options") or []),
        "result": result,
        "error": _read_json(directory / "error.json"),
        "rc": _read_json(directory / "job.rc"),
        "files": {f: _size(directory / f) for f in ("job.out", "job.err")},
        "attempts": attempts,
        "edges": {"after": list(row.get("after") or []), "before": before},
        "phases": [list(p) for p in phases(row, now)] if row else [],
    }


class Follower:
    """The state of one followed output file: where the page is, and a decoder that keeps a
    character split across two reads whole."""

    def __init__(self, path: Path, name: str) -> None:
        self.path = path
        self.name = name
        self.inode: int | None = None
        self.offset = 0
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def step(self) -> dict[str, Any] | None:
        """What changed since the last step: the tail on the first step and after the file was
        replaced (a new attempt), new bytes otherwise (the tail again when more than
        ``FOLLOW_CHUNK`` bytes came at once); None when nothing changed."""
        try:
            st = os.stat(self.path)
        except OSError:
            if self.inode is None:
                return None
            self.inode, self.offset = None, 0
            self.decoder.reset()
            return {"file": self.name, "reset": True, "text": "", "offset": 0, "skipped": 0}
        fresh = self.inode != st.st_ino or st.st_size < self.offset
        if not fresh and st.st_size == self.offset:
            return None
        base = 0 if fresh else self.offset
        start = base
        if fresh or st.st_size - base > FOLLOW_CHUNK:
            start = max(base, st.st_size - TAIL_BYTES)
        try:
            with open(self.path, "rb") as f:
                f.seek(start)
                data = f.read(st.st_size - start)
        except OSError:
            return None
        end = start + len(data)
        if start > base and b"\n" in data[:4096]:
            cut = data.index(b"\n") + 1  # begin a tail at a whole line
            data, start = data[cut:], start + cut
        reset = fresh or start > base
        if reset:
            self.decoder.reset()
        self.inode, self.offset = st.st_ino, end
        return {
            "file": self.name,
            "reset": reset,
            "text": self.decoder.decode(data),
            "offset": end,
            "skipped": start - base,
        }


def create_app(
    index: Index,
    token: str,
    *,
    bound_to_loopback: bool = True,
    tracking: actions.Tracking | None = None,
    stopping: asyncio.Event | None = None,
) -> ASGIApp:
    """The monitor's ASGI application over ``index``."""
    static = load_static()
    page = static.pop("index.html").decode()
    stop = stopping or asyncio.Event()

    def experiment(request: Request) -> ExperimentState | None:
        return index.experiments.get(request.path_params["exp"])

    async def job_key(request: Request, state: ExperimentState) -> str | None:
        """The request's ``NAME/DIGEST`` when it names a job of ``state``; a job written since
        the last change the watcher reported (a request can outrun inotify) is read now."""
        name, digest = request.path_params["name"], request.path_params["digest"]
        if not (security.job_part_ok(name) and security.job_part_ok(digest)):
            return None
        key = f"{name}/{digest}"
        if not security.inside(state.exp.jobs / key, state.exp.jobs):
            return None
        if key not in state.rows:
            await index.read_new(state, key)
        return key if key in state.rows else None

    async def home(request: Request) -> Response:
        body = page.replace("{{TOKEN}}", html.escape(token, quote=True))
        return Response(body, media_type="text/html; charset=utf-8")

    async def static_file(request: Request) -> Response:
        name = request.path_params["name"]
        data = static.get(name)
        if data is None or name.startswith("."):
            return _error(404, "no such file")
        ctype = STATIC_TYPES.get(os.path.splitext(name)[1], "application/octet-stream")
        return Response(data, media_type=ctype)

    async def experiments(request: Request) -> Response:
        now = index.clock()
        return JSONResponse(
            {
                "experiments": [s.describe(now) for s in index.experiments.values()],
                "now": now,
                "watch": describe_watch(index.watches),
                "track": tracking is not None,
            }
        )

    async def jobs(request: Request) -> Response:
        state = experiment(request)
        if state is None:
            return _error(404, "no such experiment")
        now = index.clock()
        rest = json.dumps(
            {"exp": state.exp.id, "version": state.version, "now": now, **state.describe(now)},
            separators=(",", ":"),
        ).encode()[1:-1]
        payload = state.payload()
        if "gzip" in request.headers.get("accept-encoding", ""):
            return Response(
                payload.gzipped(rest),
                media_type="application/json",
                headers={"content-encoding": "gzip", "vary": "accept-encoding"},
            )
        return Response(payload.body(rest), media_type="application/json")

    async def timeline(request: Request) -> Response:
        state = experiment(request)
        if state is None:
            return _error(404, "no such experiment")
        now = index.clock()
        rows = list(state.rows.values())
        summary = await asyncio.to_thread(wait_run_summary, rows, now)
        return JSONResponse({"exp": state.exp.id, "now": now, "groups": summary})

    async def job(request: Request) -> Response:
        state = experiment(request)
        key = None if state is None else await job_key(request, state)
        if state is None or key is None:
            return _error(404, "no such job")
        detail = await asyncio.to_thread(job_detail, state, key, index.clock())
        if detail is None:
            return _error(404, "no such job")
        return JSONResponse(detail)

    async def job_file(request: Request) -> Response:
        state = experiment(request)
        key = None if state is None else await job_key(request, state)
        if state is None or key is None:
            return _error(404, "no such job")
        attempt_text = request.query_params.get("attempt")
        attempt = None
        if attempt_text is not None:
            if not attempt_text.isdigit():
                return _error(400, "attempt must be a number")
            attempt = int(attempt_text)
        name, digest = key.split("/", 1)
        path = security.job_file(
            state.exp.jobs, name, digest, request.query_params.get("name", ""), attempt
        )
        if path is None:
            return _error(404, "no such file")
        shown = await asyncio.to_thread(_read_text, path, 8 * 1024 * 1024)
        if shown is None:
            return _error(404, "no such file")
        return Response(shown["text"], media_type="text/plain; charset=utf-8")

    async def follow(request: Request) -> Response:
        state = experiment(request)
        key = None if state is None else await job_key(request, state)
        if state is None or key is None:
            return _error(404, "no such job")
        directory = state.exp.jobs / key
        followers = [Follower(directory / n, n) for n in ("job.out", "job.err")]
        exp_id = state.exp.id

        async def stream() -> AsyncIterator[str]:
            event = index.output_event(exp_id, key)
            try:
                yield "retry: 2000\n\n"
                last = time.monotonic()
                while not stop.is_set() and not index.closed:
                    event.clear()
                    for f in followers:
                        change = await asyncio.to_thread(f.step)
                        if change is not None:
                            yield sse("output", change)
                            last = time.monotonic()
                    if time.monotonic() - last > KEEPALIVE:
                        yield ": keepalive\n\n"
                        last = time.monotonic()
                    try:
                        await asyncio.wait_for(event.wait(), FOLLOW_POLL)
                    except asyncio.TimeoutError:
                        pass
            finally:
                index.drop_output_event(exp_id, key, event)

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def events(request: Request) -> Response:
        sub = index.subscribe()

        async def stream() -> AsyncIterator[str]:
            try:
                yield "retry: 2000\n\n"
                now = index.clock()
                yield sse(
                    "hello",
                    {
                        "now": now,
                        "versions": {i: s.version for i, s in index.experiments.items()},
                    },
                )
                while not stop.is_set() and not index.closed:
                    try:
                        message = await asyncio.wait_for(sub.queue.get(), KEEPALIVE)
                    except asyncio.TimeoutError:
                        yield ": keepalive\n\n"
                        continue
                    if not message:
                        return  # the server is stopping
                    yield message
                    if sub.overflowed:
                        return  # the page reloads its rows and reconnects
            finally:
                index.unsubscribe(sub)

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def cancel_job(request: Request) -> Response:
        state = experiment(request)
        key = None if state is None else await job_key(request, state)
        if state is None or key is None:
            return _error(404, "no such job")
        done = await asyncio.to_thread(actions.cancel, [state.exp.jobs / key])
        return JSONResponse({"jobs": done})

    async def cancel_all(request: Request) -> Response:
        state = experiment(request)
        if state is None:
            return _error(404, "no such experiment")
        await index.catch_up(state)
        dirs = [state.exp.jobs / k for k in sorted(state.unfinished())]
        done = await asyncio.to_thread(actions.cancel, dirs)
        requested = sum(1 for d in done if d.get("requested"))
        return JSONResponse({"jobs": done, "requested": requested})

    job_path = "/api/x/{exp}/job/{name}/{digest}"
    routes = [
        Route("/", home, methods=["GET"]),
        Route("/static/{name}", static_file, methods=["GET"]),
        Route("/api/experiments", experiments, methods=["GET"]),
        Route("/api/events", events, methods=["GET"]),
        Route("/api/x/{exp}/jobs", jobs, methods=["GET"]),
        Route("/api/x/{exp}/timeline", timeline, methods=["GET"]),
        Route("/api/x/{exp}/cancel", cancel_all, methods=["POST"]),
        Route(job_path, job, methods=["GET"]),
        Route(job_path + "/file", job_file, methods=["GET"]),
        Route(job_path + "/follow", follow, methods=["GET"]),
        Route(job_path + "/cancel", cancel_job, methods=["POST"]),
    ]
    app = Starlette(routes=routes)
    return Guard(app, token, bound_to_loopback=bound_to_loopback)


__all__ = ["Follower", "Guard", "create_app", "job_detail", "load_static"]
