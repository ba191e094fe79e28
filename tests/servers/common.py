"""Shared pieces of the loopback servers: the HTTP server thread, faults, and the Slurm bridge."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

SLURM_ENV_PREFIXES = ("SBATCH_", "SALLOC_", "SRUN_", "SLURM_")


def slurm_env() -> dict[str, str]:
    """The environment for Slurm commands: option variables removed, SLURM_CONF kept."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(SLURM_ENV_PREFIXES) or k == "SLURM_CONF"
    }
    env["SLURM_TIME_FORMAT"] = "%s"  # epoch seconds in sacct/squeue times
    return env


def run_slurm(
    argv: Sequence[str],
    stdin: str | None = None,
    timeout: float = 30.0,
    cwd: str | os.PathLike[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run one Slurm command (never raises for a non-zero exit)."""
    return subprocess.run(
        list(argv),
        input=stdin,
        capture_output=True,
        text=True,
        env=slurm_env(),
        timeout=timeout,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        cwd=cwd,
    )


class SlurmRow(dict):  # type: ignore[type-arg]
    """One job as seen by sacct or squeue (keys: id, state, exit, signal, start, end, elapsed,
    limit, partition, account, nodes, user, workdir, name, reason)."""


SACCT_FIELDS = "JobIDRaw,JobName,State,ExitCode,Start,End,ElapsedRaw,TimelimitRaw,Partition,Account,NodeList,User,WorkDir,Reason"


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


class SlurmQueryFailed(Exception):
    """sacct kept failing: the server answers 500 (Unexpected Slurm command response)."""

    def __init__(self, code: int, stderr: str) -> None:
        super().__init__(f"Unexpected Slurm command response. exit_status:{code} std_err:{stderr}")


def query_jobs(ids: Sequence[str]) -> dict[str, SlurmRow]:
    """State of Slurm jobs: sacct, with squeue for jobs sacct does not show yet."""
    out: dict[str, SlurmRow] = {}
    if not ids:
        return out
    argv = [
        "sacct",
        "--noheader",
        "--parsable2",
        "--allocations",
        f"--format={SACCT_FIELDS}",
        "--jobs=" + ",".join(ids),
    ]
    r = run_slurm(argv)
    for _ in range(3):  # slurmdbd busy (the shared CI cluster): a failed query is not "no such job"
        if r.returncode == 0:
            break
        time.sleep(0.3)
        r = run_slurm(argv)
    if r.returncode != 0:
        # as the real servers do: a failed Slurm query is an error, never "no such job"
        raise SlurmQueryFailed(r.returncode, r.stderr.strip())
    if r.returncode == 0:
        for line in r.stdout.splitlines():
            parts = line.split("|")
            if len(parts) < 14:
                continue
            jid, name, state, code = parts[0], parts[1], parts[2], parts[3]
            rc, _, sig = code.partition(":")
            out[jid] = SlurmRow(
                id=jid,
                name=name,
                state=state,
                exit=_int(rc) or 0,
                signal=_int(sig) or 0,
                start=_int(parts[4]),
                end=_int(parts[5]),
                elapsed=_int(parts[6]) or 0,
                limit=_int(parts[7]),
                partition=parts[8],
                account=parts[9],
                nodes=parts[10],
                user=parts[11],
                workdir=parts[12],
                reason="|".join(parts[13:]),
            )
    missing = [i for i in ids if i not in out]
    if missing:
        r = run_slurm(
            [
                "squeue",
                "--noheader",
                "--states=all",
                "--format=%A|%T|%r|%j|%P|%a|%N|%u|%Z|%l",
                "--jobs=" + ",".join(missing),
            ]
        )
        for line in r.stdout.splitlines():
            parts = line.split("|")
            if len(parts) < 10:
                continue
            out[parts[0]] = SlurmRow(
                id=parts[0],
                state=parts[1],
                reason=parts[2],
                name=parts[3],
                exit=0,
                signal=0,
                start=None,
                end=None,
                elapsed=0,
                limit=None,
                partition=parts[4],
                account=parts[5],
                nodes=parts[6],
                user=parts[7],
                workdir=parts[8],
            )
    return out


FINAL_SLURM = (
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "PREEMPTED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "REVOKED",
)


def slurm_final(state: str) -> bool:
    """Whether a Slurm state text (``CANCELLED by 0``) is final."""
    return state.split(" ")[0].rstrip("+") in FINAL_SLURM


class Faults:
    """Fault knobs shared by both servers; thread-safe counters."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        #: status codes answered, one per request, before anything else (e.g. [503, 503, 502])
        self.burst: list[int] = []
        #: 429 answers still to give, each with ``Retry-After: retry_after``
        self.rate_limited = 0
        self.retry_after = "1"
        #: the N-th upload (1-based, counted from when set) fails with 500; 0 = never
        self.fail_upload_at = 0
        self.uploads_seen = 0
        #: requests answered with each status code
        self.status_counts: dict[int, int] = {}
        #: paths that the burst/rate-limit faults apply to (prefix match; empty = all)
        self.only: tuple[str, ...] = ()

    def take(self, path: str) -> tuple[int, dict[str, str]] | None:
        """The injected failure for this request, if any."""
        if self.only and not path.startswith(self.only):
            return None
        with self.lock:
            if self.rate_limited > 0:
                self.rate_limited -= 1
                return 429, {"Retry-After": self.retry_after}
            if self.burst:
                return self.burst.pop(0), {}
        return None

    def upload_should_fail(self) -> bool:
        with self.lock:
            self.uploads_seen += 1
            return self.fail_upload_at > 0 and self.uploads_seen == self.fail_upload_at

    def count(self, status: int) -> None:
        with self.lock:
            self.status_counts[status] = self.status_counts.get(status, 0) + 1


class Request:
    """A parsed request handed to a server's route function."""

    def __init__(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        self.handler = handler
        self.method = method
        parts = urlsplit(handler.path)
        self.path = parts.path
        self.query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        self.headers = handler.headers
        length = int(handler.headers.get("Content-Length") or 0)
        self.body = handler.rfile.read(length) if length else b""

    def json(self) -> Any:
        try:
            return json.loads(self.body or b"{}")
        except ValueError:
            return None


#: a ``Response`` status meaning "no answer at all": the connection is closed
DROP = 0


class Response:
    """What a route returns: status, headers, body bytes (status ``DROP``: no answer)."""

    def __init__(
        self,
        status: int,
        body: bytes | str | Any = b"",
        headers: Mapping[str, str] | None = None,
        content_type: str | None = None,
    ) -> None:
        self.status = status
        self.headers = dict(headers or {})
        if isinstance(body, (bytes, bytearray)):
            self.body = bytes(body)
            ctype = content_type or "application/octet-stream"
        elif isinstance(body, str):
            self.body = body.encode()
            ctype = content_type or "text/plain"
        else:
            self.body = json.dumps(body).encode()
            ctype = content_type or "application/json"
        if self.body or status not in (204,):
            self.headers.setdefault("Content-Type", ctype)


Route = Callable[[Request], Response]


class LoopbackServer:
    """A ThreadingHTTPServer on 127.0.0.1 (free port) serving ``self.handle`` in a daemon thread."""

    def __init__(self) -> None:
        self.faults = Faults()
        self.requests: list[tuple[str, str, int]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self, method: str) -> None:
                req = Request(self, method)
                injected = server.faults.take(req.path)
                if injected is not None:
                    status, headers = injected
                    resp = server.error(status, f"injected {status}", headers)
                else:
                    try:
                        resp = server.handle(req)
                    except Exception as e:  # a server bug must show in the test, not hang it
                        resp = server.error(500, f"server error: {type(e).__name__}: {e}")
                if resp.status == DROP:  # the server never answers: close the connection
                    server.requests.append((method, req.path, DROP))
                    self.close_connection = True
                    return
                server.faults.count(resp.status)
                server.requests.append((method, req.path, resp.status))
                self.send_response(resp.status)
                for k, v in {**server.extra_headers(req), **resp.headers}.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(resp.body)))
                self.end_headers()
                if resp.body and method != "HEAD":
                    self.wfile.write(resp.body)

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def do_PUT(self) -> None:
                self._serve("PUT")

            def do_DELETE(self) -> None:
                self._serve("DELETE")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, name=type(self).__name__, daemon=True
        )

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def extra_headers(self, req: Request) -> dict[str, str]:
        return {}

    def error(
        self, status: int, message: str, headers: Mapping[str, str] | None = None
    ) -> Response:
        raise NotImplementedError

    def handle(self, req: Request) -> Response:
        raise NotImplementedError
