"""A loopback firecREST v2 API and token endpoint on the real local Slurm, behaving as the real
server does where a client can tell (docs/design/sites.md §4.2; docs/remote-sites.md, "firecREST:
server behaviours we rely on and work around").

Tokens are RS256 JWTs (``kid``, ``sub``, ``preferred_username``, ``iat``, ``exp``) from
``POST /auth/token``; the API checks signature and expiry and refuses tokens with under 30 s left.

File operations run the shell commands firecREST runs over SSH, with ``bash -c`` on this machine:
``timeout T base64 -d > 'DIR/NAME'`` for an upload (the script arrives base64-encoded on stdin; an
empty file sends nothing and never closes stdin, so it ends in **408** after the command timeout,
the file created empty), ``dd if='P' bs=SIZE skip=OFFSET//SIZE count=2`` for ``ops/view`` (the
output decoded as UTF-8 with replacement, then sliced in *characters*), ``tail``, ``base64
--wrap=0`` for ``ops/download``, ``stat``, ``rm -r``, ``mkdir``, ``ls``. Paths sit in single quotes,
so a ``'`` in a name is a shell syntax error: **500**. Errors are mapped as firecREST maps them
(exit 124 or our own timeout: 408; ``No such file or directory``: 404; ``Permission denied``: 403;
``File exists``: 400; other: 500), and any command output of ``max_ops_file_size`` bytes or more is
**413** ``Command output exceeded buffer limit.`` (``download``'s base64 and ``view``'s two ``dd``
blocks count).

Jobs: ``sbatch --export='ALL,F7T_version=v2.0.0' --chdir=DIR`` with the script on stdin; a job is
read from ``sacct --jobs`` and ``squeue --jobs`` (a PENDING squeue row wins: ``exitCode`` and
``interruptSignal`` null, ``tasks: []``); ``GET jobs`` lists **every job of the Unix user** (the
server runs Slurm as itself) from ``sacct --starttime=now-7days`` on 2.5.6, ``now-24hours`` (or
``time_window``) with a ``name`` filter from 2.5.7 on, plus ``squeue``; ``DELETE`` runs ``scancel
--verbose`` and answers 500 ``exit_status:0`` when it printed an error (an unknown or finished job);
sbatch's accounting/QOS limits are 403, any other refusal (an invalid account) 500.

Knobs: ``app_version`` (``f7t-appversion``, 2.5.6 as released; pyfirecrest gates on it),
``command_timeout`` (firecREST: 5 s), ``health_interval`` (firecREST: 120 s; None: checks only on
``health_check()``), ``set_ssh(up)`` (the site's sshd down: 500 ``Connect call failed`` until a
health check, then 503 until the first check after it is back), ``token_lifetime``, ``faults``
(429/502/503), ``visibility_delay`` (a new job is ``404 Job not found.`` for that long), failing
uploads.

Staged uploads (pyfirecrest ``upload()`` above its direct size): with ``data_transfer`` set
(``{"service_type": "s3", ...}``, shown in ``/status/systems``), ``POST
/filesystem/{sys}/transfer/upload`` answers 201 ``{transferJob: {jobId, system, workingDirectory,
logs: {outputLog, errorLog}}, transferDirectives: {transferMethod, partsUploadUrls,
completeUploadUrl, maxPartSize, fileSize}}`` as firecREST v2's S3 data transfer does. The URLs are
presigned (query-string ``Expires`` + ``Signature``, no bearer token) and served by this server
under ``/s3/BUCKET/KEY``, a small S3 emulation: ``PUT ?partNumber=N&uploadId=U`` stores a part
(``ETag``), ``POST ?uploadId=U`` with ``<CompleteMultipartUpload>`` assembles the object, ``HEAD``
and ``GET`` (``Range``) read it. The transfer job is a real Slurm job (``IngressFileTransfer``) that
waits for the object with ``curl --head``, fetches it in ranges of ``maxPartSize``, moves it to the
target path and prints ``File was successfully downloaded`` to its output log, which pyfirecrest
reads with ``ops/view``. Without ``data_transfer`` the call fails with 500, as on firecREST.
"""

from __future__ import annotations

import base64
import email.parser
import email.policy
import grp
import hashlib
import hmac
import math
import os
import posixpath
import pwd
import re
import shlex
import shutil
import stat as stat_mod
import subprocess
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from email.utils import formatdate
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from .common import LoopbackServer, Request, Response, run_slurm, slurm_env

#: the latest release; the tests also run 2.6.0
APP_VERSION = "2.5.6"
KID = "launchers-test-key"
#: ``time_window`` values of ``GET jobs`` (from 2.5.7 on) and their ``sacct --starttime``
TIME_WINDOWS = {
    "1h": "now-1hour",
    "8h": "now-8hours",
    "24h": "now-24hours",
    "3d": "now-3days",
    "7d": "now-7days",
}
#: what firecREST answers when its SSH connection is refused (the repr of the OSError's args)
SSH_REFUSED = "(111, \"Connect call failed ('127.0.0.1', 22)\")"
#: sbatch refusals firecREST answers with 403 (accounting/QOS limits), as its QUOTA_ERROR_PATTERN
QUOTA_ERROR = re.compile(r"\b(?:QOS|Assoc)(?:Max|Min)\w*Limit\b", re.IGNORECASE)
SACCT_FORMAT = (
    "JobID,AllocNodes,Cluster,ExitCode,Group,Account,JobName,NodeList,Partition,Priority,State,"
    "Reason,ElapsedRaw,Submit,Start,End,Suspended,TimelimitRaw,User,WorkDir"
)
SQUEUE_FORMAT = (
    "JobID:|,NumNodes:|,Cluster:||,GroupName:|,Account:|,Name:|,NodeList:|,Partition:|,"
    "PriorityLong:|,State:|,Reason:|,TimeUsed:|,SubmitTime:|,StartTime:|,EndTime:||,TimeLimit:|,"
    "UserName:|,WorkDir:"
)


def version_tuple(text: str) -> tuple[int, ...]:
    """``2.5.6`` -> (2, 5, 6); a development version (``2.x.x``) counts as the newest."""
    parts = []
    for p in text.split("."):
        parts.append(int(p) if p.isdigit() else 10**6)
    return tuple(parts)


class Failed(Exception):
    """An answer other than success, raised by the firecREST emulation (status, message)."""

    def __init__(self, status: int, message: str, kind: str = "error") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind


class FirecrestServer(LoopbackServer):
    """``/auth/token`` + the v2 API for one system ``machine`` whose file system is ``root``."""

    def __init__(
        self,
        root: Path,
        clients: dict[str, tuple[str, str]],
        machine: str = "cluster",
        max_ops_file_size: int = 5 * 1024 * 1024,
    ) -> None:
        super().__init__()
        self.root = Path(root)
        self.home = self.root / "home"
        self.scratch = self.root / "scratch"
        self.home.mkdir(parents=True, exist_ok=True)
        self.scratch.mkdir(parents=True, exist_ok=True)
        #: client id -> (secret, user name)
        self.clients = dict(clients)
        self.machine = machine
        self.max_ops_file_size = max_ops_file_size
        #: ``f7t-appversion``; features follow it (``name``/``time_window`` filters, the jobs window)
        self.app_version = APP_VERSION
        #: seconds a command may run (``ssh.timeout.command_execution``, 5 on firecREST)
        self.command_timeout = 5.0
        #: seconds between health checks (``probing.interval``, 120 on firecREST); None: only
        #: when ``health_check()`` is called
        self.health_interval: float | None = 120.0
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.token_lifetime = 300
        self.tokens_issued = 0
        self.visibility_delay = 0.0
        self.jobs: dict[str, float] = {}  # id -> submission time, of the jobs this server submitted
        self.lock = threading.Lock()
        self.auth_failures: list[str] = []
        self.submitted_bodies: list[dict[str, Any]] = []
        #: every shell command run for a file operation, every sacct/squeue argv (tests look at them)
        self.commands: list[str] = []
        self.slurm_calls: list[list[str]] = []
        #: seconds sbatch takes on top of its own time (a slow controller; beyond
        #: ``command_timeout`` the answer is 408 while the job is submitted all the same)
        self.slow_sbatch = 0.0
        self.unix_user = pwd.getpwuid(os.getuid()).pw_name
        self._ssh_up = True
        self._ssh_log: list[tuple[float, bool]] = [(time.time(), True)]
        self._healthy = True
        self._checked_at = time.time()
        #: the system's transfer backend (``dataOperation.data_transfer``); None: direct uploads only
        self.data_transfer: dict[str, Any] | None = None
        #: S3 part size of a staged upload (``maxPartSize``)
        self.max_part_size = 1024 * 1024
        #: seconds between the transfer job's checks for the staged object (firecREST: 60)
        self.transfer_poll = 1
        #: checks before a transfer job gives up
        self.transfer_tries = 600
        #: presigned URLs live this long (seconds)
        self.s3_ttl = 3600
        self.s3_root = self.root.with_name(self.root.name + "-s3")
        self._s3_key = os.urandom(32)
        self.multipart: dict[
            str, dict[str, Any]
        ] = {}  # upload id -> {bucket, key, parts: {n: etag}}
        self.transfer_jobs: list[str] = []
        handler = self.httpd.RequestHandlerClass
        handler.do_HEAD = lambda h: h._serve("HEAD")  # type: ignore[attr-defined]  # S3 HEAD object

    @property
    def token_url(self) -> str:
        return self.root_url + "/auth/token"

    @property
    def api_url(self) -> str:
        return self.root_url

    @property
    def newer_than_256(self) -> bool:
        """The ``name`` and ``time_window`` filters and the 24 h jobs window (2.5.7 and later)."""
        return version_tuple(self.app_version) > (2, 5, 6)

    def extra_headers(self, req: Request) -> dict[str, str]:
        out = {"f7t-appversion": self.app_version, "f7t-timestamp": str(time.time())}
        rid = req.headers.get("X-Request-ID")
        if rid:
            out["x-request-id"] = rid
        return out

    def error(
        self,
        status: int,
        message: str,
        headers: Mapping[str, str] | None = None,
        kind: str = "error",
    ) -> Response:
        return Response(
            status,
            {"errorType": kind, "message": message, "causedBy": None, "data": None, "user": None},
            headers,
        )

    # -- the site's SSH and the health checks ----------------------------------------------------

    def set_ssh(self, up: bool) -> None:
        """Take the site's sshd down (False) or bring it back (True)."""
        with self.lock:
            self._ssh_up = up
            self._ssh_log.append((time.time(), up))

    def _ssh_at(self, when: float) -> bool:
        state = True
        for t, up in self._ssh_log:
            if t > when:
                break
            state = up
        return state

    def health_check(self) -> None:
        """Run a health check now: the services are healthy exactly when SSH answers."""
        with self.lock:
            self._healthy, self._checked_at = self._ssh_up, time.time()

    def healthy(self) -> bool:
        """The health of the last check (checks run every ``health_interval`` seconds)."""
        with self.lock:
            if self.health_interval:
                now = time.time()
                while self._checked_at + self.health_interval <= now:
                    self._checked_at += self.health_interval
                    self._healthy = self._ssh_at(self._checked_at)
            return self._healthy

    def gate(self, service: str) -> None:
        """What a request that needs SSH meets first: 503 while the last health check failed,
        500 while SSH refuses connections."""
        if not self.healthy():
            if service == "scheduler":
                raise Failed(
                    503,
                    f"The scheduler service for the requested system ({self.machine}) is unhealthy.",
                )
            raise Failed(
                503, f"The ssh service for the requested system ({self.machine}) is unhealthy."
            )
        with self.lock:
            up = self._ssh_up
        if not up:
            raise Failed(500, SSH_REFUSED)

    # -- tokens --------------------------------------------------------------------------------

    def issue(self, req: Request) -> Response:
        form = {
            k: v for k, v in (p.split("=", 1) for p in req.body.decode().split("&") if "=" in p)
        }
        from urllib.parse import unquote_plus

        form = {k: unquote_plus(v) for k, v in form.items()}
        cid, secret = form.get("client_id"), form.get("client_secret")
        auth = req.headers.get("Authorization") or ""
        if auth.startswith("Basic "):
            cid, _, secret = base64.b64decode(auth[6:]).decode().partition(":")
        if (
            form.get("grant_type") != "client_credentials"
            or cid not in self.clients
            or self.clients[cid][0] != secret
        ):
            return Response(401, {"error": "invalid_client"})
        now = int(time.time())
        user = self.clients[cid][1]
        claims = {
            "sub": str(uuid.uuid4()),
            "preferred_username": user,
            "iat": now,
            "exp": now + self.token_lifetime,
        }
        token = jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": KID})
        with self.lock:
            self.tokens_issued += 1
        return Response(
            200, {"access_token": token, "expires_in": self.token_lifetime, "token_type": "Bearer"}
        )

    def user_of(self, req: Request) -> tuple[str | None, str]:
        auth = req.headers.get("Authorization") or ""
        if not auth.startswith("Bearer "):
            return None, "Not authenticated"
        try:
            claims = jwt.decode(
                auth[7:], self.key.public_key(), algorithms=["RS256"], options={"verify_aud": False}
            )
        except jwt.ExpiredSignatureError:
            return None, "Access token expired"
        except jwt.InvalidTokenError:
            return None, "Access token is invalid."
        if claims["exp"] - time.time() < 30:
            return None, "Access token expires too soon (less than 30s remaining)."
        return str(claims.get("preferred_username")), ""

    # -- routes --------------------------------------------------------------------------------

    def handle(self, req: Request) -> Response:
        try:
            return self._handle(req)
        except Failed as f:
            return self.error(f.status, f.message, kind=f.kind)

    def _handle(self, req: Request) -> Response:
        if req.path == "/auth/token" and req.method == "POST":
            return self.issue(req)
        if req.path.startswith("/s3/"):
            return self.s3(req)
        user, why = self.user_of(req)
        if user is None:
            self.auth_failures.append(why)
            return self.error(401, why)
        parts = req.path.strip("/").split("/")
        if parts == ["status", "systems"]:
            return Response(200, {"systems": [self.system()]})
        if len(parts) < 3 or (
            parts[1] != self.machine and parts[0] in ("filesystem", "compute", "status")
        ):
            return self.error(404, "System not found")
        if parts[0] == "status" and parts[2:] == ["userinfo"]:
            self.gate("ssh")
            return Response(
                200,
                {
                    "user": {"id": "0", "name": user},
                    "group": {"id": "0", "name": "users"},
                    "groups": [{"id": "0", "name": "users"}],
                    "accounts": [{"name": "root", "default": True}],
                },
            )
        if parts[0] == "filesystem" and len(parts) == 4 and parts[2] == "ops":
            self.gate("ssh")
            return self.filesystem(req, parts[3])
        if (
            parts[0] == "filesystem"
            and parts[2:] == ["transfer", "upload"]
            and req.method == "POST"
        ):
            self.gate("scheduler")
            return self.transfer_upload(req, user)
        if parts[0] == "compute" and parts[2] == "jobs":
            self.gate("scheduler")
            return self.compute(req, parts[3] if len(parts) > 3 else None, user)
        return self.error(404, f"no route {req.path}")

    def system(self) -> dict[str, Any]:
        healthy = self.healthy()
        checked = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._checked_at))
        health = [
            {"serviceType": "scheduler", "healthy": healthy, "lastChecked": checked},
            {"serviceType": "ssh", "healthy": healthy, "lastChecked": checked},
        ]
        health += [
            {
                "serviceType": "filesystem",
                "healthy": healthy,
                "lastChecked": checked,
                "path": str(p),
            }
            for p in (self.home, self.scratch)
        ]
        return {
            "name": self.machine,
            "scheduler": {"type": "slurm", "version": "22.05.8"},
            "fileSystems": [
                {"path": str(self.home), "dataType": "users", "defaultWorkDir": False},
                {"path": str(self.scratch), "dataType": "scratch", "defaultWorkDir": True},
            ],
            "dataOperation": {
                "max_ops_file_size": self.max_ops_file_size,
                "data_transfer": self.data_transfer,
            },
            "probing": {"interval": self.health_interval},
            "servicesHealth": health,
        }

    # -- commands over "SSH" ---------------------------------------------------------------------

    def remote(self, command: str, stdin: bytes | None = None) -> tuple[str, str, int]:
        """Run ``command`` as firecREST's SSH client does: stdin written and closed only when
        there is some (else left open), ``command_timeout`` for the whole call (408), outputs of
        ``max_ops_file_size`` bytes or more refused (413), decoded as UTF-8 with replacement."""
        with self.lock:
            self.commands.append(command)
        proc = subprocess.Popen(
            ["bash", "-c", command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=slurm_env(),
            start_new_session=True,
        )
        assert proc.stdin is not None
        # firecREST's own timeout runs from before the SSH channel opens: it fires just before the
        # command's ``timeout`` (whose 124 would be 408 as well, with another message)
        limit = max(0.05, self.command_timeout - 0.1)
        try:
            if stdin:
                out, err = proc.communicate(stdin, timeout=limit)
            else:  # nothing written, stdin never closed: a reader waits until the timeout
                out, err = _communicate_open_stdin(proc, limit)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise Failed(408, "Command execution timeout limit exceeded.") from None
        finally:
            if proc.stdin and not proc.stdin.closed:
                proc.stdin.close()
        if len(out) >= self.max_ops_file_size or len(err) >= self.max_ops_file_size:
            raise Failed(413, "Command output exceeded buffer limit.")
        return (
            out.decode("utf-8", errors="replace"),
            err.decode("utf-8", errors="replace"),
            proc.returncode,
        )

    def checked(self, command: str, stdin: bytes | None = None) -> str:
        """``remote(command)``'s stdout, or its failure mapped as firecREST's error handling."""
        out, err, rc = self.remote(command, stdin)
        if rc != 0:
            message = f"Remote process failed with exit status:{rc}"
            if err:
                message += f" and error message:{err.strip()}"
            if rc == 124:
                raise Failed(408, message)
            if "No such file or directory" in err:
                raise Failed(404, message)
            if "Permission denied" in err or "Operation not permitted" in err:
                raise Failed(403, message)
            if "File exists" in err or "invalid user" in err:
                raise Failed(400, message)
            raise Failed(500, message)
        return out

    def timeout_prefix(self) -> str:
        return f"timeout {_seconds(self.command_timeout)}"

    # -- file operations -------------------------------------------------------------------------

    def file_systems(self) -> list[Path]:
        return [self.home, self.scratch]

    def fs_path(self, text: str | None) -> str:
        """The ``path`` of a file operation, checked as firecREST checks it (400)."""
        if text is None:
            raise Failed(400, "All filesystem requests require a path or source_path parameter.")
        if not posixpath.isabs(text):
            raise Failed(400, f"The provided path ({text}) is not an absolute path.")
        norm = posixpath.normpath(text)
        if not any(
            norm == str(fs) or norm.startswith(str(fs).rstrip("/") + "/")
            for fs in self.file_systems()
        ):
            raise Failed(
                400,
                f"The provided path ({norm}) does not match any of the defined filesystem paths "
                f"for the requested system ({self.machine}).",
            )
        return text

    def _path(self, text: str | None) -> Path | Response:
        """An absolute path under ``root`` (the v1 server's check), else a 400 answer."""
        if not text or not text.startswith("/"):
            return self.error(400, f"path {text!r} is not absolute", kind="validation")
        p = Path(text)
        if self.root.resolve() not in (p.resolve(), *p.resolve().parents):
            return self.error(400, f"{text} is outside the file systems", kind="validation")
        return p

    def filesystem(self, req: Request, op: str) -> Response:
        t = self.timeout_prefix()
        if op == "mkdir" and req.method == "POST":
            body = req.json() or {}
            p = self.fs_path(body.get("sourcePath") or body.get("source_path"))
            parent = "-p " if body.get("parent") else ""
            self.checked(
                f"{t} mkdir {parent} -- '{p}' && {t} ls -l --quoting-style=c "
                f"--time-style='+%Y-%m-%dT%H:%M:%S' -d -- '{p}'"
            )
            return Response(201, {"output": _ls_entry(Path(p), p, False, False)})
        if op == "upload" and req.method == "POST":
            return self.upload(req)
        p = self.fs_path(req.query.get("path"))
        if op == "rm" and req.method == "DELETE":
            self.checked(f"{t} rm -r --interactive=never -- '{p}'")
            return Response(204)
        if op == "stat":
            follow = "--dereference" if _flag(req.query.get("dereference")) else ""
            out = self.checked(f"{t} stat {follow} -c '%f %i %d %h %u %g %s %X %Y %Z' -- '{p}'")
            keys = ("mode", "ino", "dev", "nlink", "uid", "gid", "size", "atime", "mtime", "ctime")
            values = dict(zip(keys, out.split(), strict=True))
            return Response(
                200,
                {"output": {k: int(v, 16) if k == "mode" else int(v) for k, v in values.items()}},
            )
        if op == "view":
            return self.view(req, p)
        if op == "ls":
            # ``ls -l [-A] [-R] [-L] [--numeric-uid-gid]``, parsed as firecREST does: a directory's
            # entries (recursive: those of subdirectories named ``sub/inner``), a file's own entry
            hidden, recursive = (
                _flag(req.query.get("showHidden")),
                _flag(req.query.get("recursive")),
            )
            numeric, deref = _flag(req.query.get("numericUid")), _flag(req.query.get("dereference"))
            options = "-l --quoting-style=c --time-style='+%Y-%m-%dT%H:%M:%S' "
            options += ("-A " if hidden else "") + ("--numeric-uid-gid " if numeric else "")
            options += ("-R " if recursive else "") + ("-L " if deref else "")
            self.checked(f"{t} ls {options}-- '{p}'")
            path = Path(p)
            if not path.is_dir() or (path.is_symlink() and not deref and not p.endswith("/")):
                return Response(200, {"output": [_ls_entry(path, p, numeric, deref)]})
            return Response(200, {"output": _ls_dir(path, "", hidden, recursive, numeric, deref)})
        if op == "tail":
            return self.tail(req, p)
        if op == "download":
            data = base64.b64decode(self.checked(f"{t} base64 --wrap=0 -- '{p}'"))
            if len(data) > self.max_ops_file_size:
                raise Failed(413, "File to download is too large.")
            return Response(200, data)
        return self.error(404, f"no operation {op}")

    def upload(self, req: Request) -> Response:
        """``POST ops/upload?path=DIR``, multipart ``file``: ``base64 -d > 'DIR/NAME'``, the
        content base64-encoded on stdin, none at all for an empty file (see ``remote``)."""
        d = self.fs_path(req.query.get("path"))
        if len(req.body) > self.max_ops_file_size + 64 * 1024:  # before parsing it at all
            raise Failed(413, "File to upload is too large.")
        if self.faults.upload_should_fail():
            raise Failed(500, "injected upload failure")
        msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: "
            + (req.headers.get("Content-Type") or "").encode()
            + b"\r\n\r\n"
            + req.body
        )
        for part in msg.iter_parts():
            if part.get_param("name", header="content-disposition") == "file":
                name = part.get_filename() or "upload"
                payload = part.get_payload(decode=True)
                data = payload if isinstance(payload, bytes) else b""
                if len(data) > self.max_ops_file_size:  # the file itself, exactly
                    raise Failed(413, "File to upload is too large.")
                self.checked(
                    f"{self.timeout_prefix()} base64 -d > '{d}/{name}'", base64.b64encode(data)
                )
                return Response(204)
        raise Failed(400, "1 validation error/s occurred: Field required", kind="validation")

    def view(self, req: Request, p: str) -> Response:
        """``ops/view``: ``dd`` of two blocks of ``size`` bytes from the block holding ``offset``,
        decoded, then ``size`` *characters* from ``offset % size`` (firecREST's DdCommand)."""
        offset = _int_param(req.query.get("offset"), "offset", 0)
        size = _int_param(
            req.query.get("size"), "size", 5 * 1024 * 1024
        )  # firecREST's default: 5 MiB
        if offset < 0:
            raise Failed(400, "`offset` value must be an integer value equal or greater than 0")
        if size <= 0:
            raise Failed(400, "`size` value must be an integer value greater than 0")
        if size > self.max_ops_file_size:
            raise Failed(400, f"`size` value must be less than {self.max_ops_file_size} bytes")
        out = self.checked(
            f"{self.timeout_prefix()} dd if='{p}' bs={size} skip={offset // size} count=2"
        )
        i = offset % size
        return Response(200, {"output": out[i : i + size]})

    def tail(self, req: Request, p: str) -> Response:
        """``tail --lines=N`` / ``--bytes=N`` (``+N`` with ``skipHeading``), answered as firecREST v2."""
        lines, nbytes = req.query.get("lines"), req.query.get("bytes")
        skip = _flag(req.query.get("skipHeading"))
        for name, value in (("lines", lines), ("bytes", nbytes)):
            if value is not None and not value.lstrip("-").isdigit():
                raise Failed(400, f"{name}: value is not a valid integer", kind="validation")
        if lines and nbytes:
            raise Failed(400, "Only one of `bytes` or `lines` can be specified.")
        options = ""
        if nbytes:
            options += f"--bytes='{'+' if skip else ''}{nbytes}' "
        if lines:
            options += f"--lines='{'+' if skip else ''}{lines}' "
        out = self.checked(f"{self.timeout_prefix()} tail {options}-- '{p}'")
        start = 10
        if lines is not None:
            start = int(lines) if skip else -int(lines)
        elif nbytes is not None:
            start = int(nbytes) if skip else -int(nbytes)
        return Response(
            200,
            {
                "output": {
                    "content": out,
                    "contentType": "bytes" if nbytes else "lines",
                    "startPosition": start,
                    "endPosition": -1,
                }
            },
        )

    # -- staged transfers (S3 multipart, firecREST v2's ``s3`` data transfer) ---------------------

    def transfer_upload(self, req: Request, user: str) -> Response:
        """``POST /filesystem/{sys}/transfer/upload``: a multipart upload to the user's bucket, its
        presigned part and completion URLs, and the Slurm job that moves the object into place."""
        body = req.json()
        if not isinstance(body, dict):
            return self.error(400, "body must be a JSON object", kind="validation")
        directives = body.get("transfer_directives", body.get("transferDirectives"))
        if not isinstance(directives, dict):
            return self.error(400, "transfer_directives: Field required", kind="validation")
        method = directives.get("transfer_method", directives.get("transferMethod"))
        size = directives.get("file_size", directives.get("fileSize"))
        if self.data_transfer is None:
            # firecREST reads data_transfer.service_type of a system that has none
            return self.error(500, "'NoneType' object has no attribute 'service_type'")
        if method != self.data_transfer.get("service_type"):
            return self.error(400, "Requested transfer method is not available.")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            return self.error(
                400,
                "transfer_directives.file_size: Input should be a valid integer",
                kind="validation",
            )
        target = Path(self.fs_path(body.get("path")))
        work = self.scratch / user
        work.mkdir(
            parents=True, exist_ok=True
        )  # the user's directory of the default work file system
        bucket, key = user, f"{uuid.uuid4()}/{target.name}"
        upload_id = uuid.uuid4().hex
        with self.lock:
            self.multipart[upload_id] = {"bucket": bucket, "key": key, "parts": {}}
        obj = f"/s3/{quote(bucket)}/{quote(key)}"
        parts = [
            self.presign("PUT", obj, {"partNumber": str(n), "uploadId": upload_id})
            for n in range(1, max(1, math.ceil(size / self.max_part_size)) + 1)
        ]
        complete = self.presign("POST", obj, {"uploadId": upload_id})
        head, get = self.presign("HEAD", obj, {}), self.presign("GET", obj, {})
        unique = uuid.uuid4()
        out, err = (
            f"{work}/.f7t_file_handling_job_{unique}.log",
            f"{work}/.f7t_file_handling_job_error_{unique}.log",
        )
        job = {
            "name": "IngressFileTransfer",
            "working_directory": str(work),
            "standard_input": "/dev/null",
            "standard_output": out,
            "standard_error": err,
            "env": {"PATH": "/bin:/usr/bin/:/usr/local/bin/"},
        }
        if body.get("account"):
            job["account"] = body["account"]
        result = self.sbatch(job, str(work), self._ingress_script(head, get, str(target)))
        if isinstance(result, Response):
            return result
        with self.lock:
            self.transfer_jobs.append(result)
        return Response(
            201,
            {
                "transferJob": {
                    "jobId": int(result),
                    "system": self.machine,
                    "workingDirectory": str(work),
                    "logs": {"outputLog": out, "errorLog": err},
                },
                "transferDirectives": {
                    "transferMethod": method,
                    "partsUploadUrls": parts,
                    "completeUploadUrl": complete,
                    "maxPartSize": self.max_part_size,
                    "fileSize": size,
                },
            },
        )

    def _ingress_script(self, head_url: str, get_url: str, target: str) -> str:
        """The transfer job: wait for the object, fetch it in ranges, move it to ``target``."""
        q = shlex.quote
        return f"""#!/bin/bash
echo "$(date -u) Ingress File Transfer Job (id:${{SLURM_JOB_ID}})"
echo "$(date -u) Waiting till file to transfer is available..."
target={q(target)}
for i in $(seq {int(self.transfer_tries)}); do
    status=$(curl --silent --head -o /dev/null -w '%{{http_code}}' {q(head_url)})
    if [[ "$status" == 200 ]]; then
        echo "$(date -u) File to transfer found in S3 bucket"
        if [[ -d "$target" ]]; then
            echo "$(date -u) targetPath must point to a file path: $target is a directory." >&2
            exit 3
        fi
        partial="$target.f7t-ingress.$SLURM_JOB_ID"
        : > "$partial"
        from=0; received=0; headers=$(mktemp)
        while true; do
            to=$(( from + {int(self.max_part_size)} - 1 ))
            code=$(curl --silent -D "$headers" -o "$partial.chunk" --range "$from-$to" -w '%{{http_code}}' {q(get_url)})
            if [[ "$code" != 200 && "$code" != 206 ]]; then
                echo "$(date -u) Download failed: bytes $from-$to (HTTP $code)" >&2
                rm -f "$headers" "$partial" "$partial.chunk"; exit 1
            fi
            total=$(grep -i '^Content-Range:' "$headers" | sed 's|.*/||' | tr -cd '0-9')
            length=$(stat -c %s "$partial.chunk")
            cat "$partial.chunk" >> "$partial"
            received=$(( received + length )); from=$(( to + 1 ))
            if [[ -z "$total" || "$received" -ge "$total" ]]; then break; fi
        done
        rm -f "$headers" "$partial.chunk"
        mv -f "$partial" "$target"
        echo "$(date -u) Received $received bytes"
        echo "$(date -u) File was successfully downloaded (size: $(awk -v b=$received 'BEGIN {{printf "%0.3f", b/1024/1024}}')MB)"
        exit 0
    fi
    sleep {self.transfer_poll}
done
echo "$(date -u) The file to transfer never became available" >&2
exit 1
"""

    def presign(self, method: str, path: str, params: dict[str, str]) -> str:
        """A presigned URL (query-string authentication: ``Expires`` and ``Signature``)."""
        query = {**params, "Expires": str(int(time.time()) + self.s3_ttl)}
        query["Signature"] = self._signature(method, path, query)
        return f"{self.root_url}{path}?{urlencode(query)}"

    def _signature(self, method: str, path: str, query: dict[str, str]) -> str:
        text = "\n".join(
            [method, path, *(f"{k}={query[k]}" for k in sorted(query) if k != "Signature")]
        )
        return hmac.new(self._s3_key, text.encode(), hashlib.sha256).hexdigest()

    @staticmethod
    def s3_error(status: int, code: str, message: str) -> Response:
        body = f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message></Error>'
        return Response(status, body, content_type="application/xml")

    def s3(self, req: Request) -> Response:
        """The object store behind the presigned URLs (no bearer token: the signature is the key)."""
        from urllib.parse import unquote

        method = "GET" if req.method == "HEAD" else req.method
        signed_as = "HEAD" if req.method == "HEAD" else method
        sig = req.query.get("Signature", "")
        if not hmac.compare_digest(sig, self._signature(signed_as, req.path, req.query)):
            return self.s3_error(
                403, "SignatureDoesNotMatch", "The request signature does not match"
            )
        if int(req.query.get("Expires") or 0) < time.time():
            return self.s3_error(403, "AccessDenied", "Request has expired")
        bucket, _, key = unquote(req.path[len("/s3/") :]).partition("/")
        upload_id = req.query.get("uploadId")
        if upload_id is not None:
            with self.lock:
                upload = self.multipart.get(upload_id)
            if upload is None or (upload["bucket"], upload["key"]) != (bucket, key):
                return self.s3_error(404, "NoSuchUpload", "The specified upload does not exist")
            staging = self.s3_root / "uploads" / upload_id
            if method == "PUT" and "partNumber" in req.query:
                n = int(req.query["partNumber"])
                staging.mkdir(parents=True, exist_ok=True)
                (staging / str(n)).write_bytes(req.body)
                etag = '"' + hashlib.md5(req.body).hexdigest() + '"'
                with self.lock:
                    upload["parts"][n] = etag
                return Response(200, b"", {"ETag": etag})
            if method == "POST":
                return self._complete(upload_id, upload, staging, req.body)
            return self.s3_error(405, "MethodNotAllowed", "The specified method is not allowed")
        if method != "GET":
            return self.s3_error(405, "MethodNotAllowed", "The specified method is not allowed")
        obj = self.s3_root / "objects" / bucket / key
        if not obj.is_file():
            return self.s3_error(404, "NoSuchKey", "The specified key does not exist.")
        data = obj.read_bytes()
        rng = req.headers.get("Range")
        if not rng:
            return Response(
                200,
                data,
                {"ETag": '"' + hashlib.md5(data).hexdigest() + '"', "Accept-Ranges": "bytes"},
            )
        spec = rng.removeprefix("bytes=")
        first_text, _, last_text = spec.partition("-")
        first = int(first_text) if first_text else max(0, len(data) - int(last_text))
        last = min(int(last_text), len(data) - 1) if first_text and last_text else len(data) - 1
        if first >= len(data) or first > last:
            return self.s3_error(416, "InvalidRange", "The requested range is not satisfiable")
        return Response(
            206,
            data[first : last + 1],
            {"Content-Range": f"bytes {first}-{last}/{len(data)}", "Accept-Ranges": "bytes"},
        )

    def _complete(
        self, upload_id: str, upload: dict[str, Any], staging: Path, body: bytes
    ) -> Response:
        """CompleteMultipartUpload: the listed parts, in order, with their ETags, become the object."""
        try:
            root = ET.fromstring(body)
        except ET.ParseError:
            return self.s3_error(400, "MalformedXML", "The XML you provided was not well-formed")
        ns = {"s3": "http://s3.amazonaws.com/doc/2006-03-01/"}
        listed = [
            (
                int(p.findtext("s3:PartNumber", namespaces=ns) or p.findtext("PartNumber") or 0),
                p.findtext("s3:ETag", namespaces=ns) or p.findtext("ETag") or "",
            )
            for p in root.findall("s3:Part", ns) + root.findall("Part")
        ]
        if not listed:
            return self.s3_error(400, "MalformedXML", "The XML you provided was not well-formed")
        numbers = [n for n, _ in listed]
        if numbers != sorted(numbers) or len(set(numbers)) != len(numbers):
            return self.s3_error(
                400, "InvalidPartOrder", "The list of parts was not in ascending order."
            )
        for n, etag in listed:
            if upload["parts"].get(n) != etag:
                return self.s3_error(
                    400, "InvalidPart", f"Part {n} was not uploaded or its ETag does not match"
                )
        obj = self.s3_root / "objects" / upload["bucket"] / upload["key"]
        obj.parent.mkdir(parents=True, exist_ok=True)
        tmp = obj.with_name(obj.name + ".assembling")
        with open(tmp, "wb") as f:
            for n in numbers:
                f.write((staging / str(n)).read_bytes())
        tmp.replace(obj)
        shutil.rmtree(staging, ignore_errors=True)
        with self.lock:
            self.multipart.pop(upload_id, None)
        etag = '"' + hashlib.md5(obj.read_bytes()).hexdigest() + f'-{len(numbers)}"'
        xml = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<CompleteMultipartUploadResult '
            'xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f"<Bucket>{upload['bucket']}</Bucket><Key>{upload['key']}</Key><ETag>{etag}</ETag>"
            "</CompleteMultipartUploadResult>"
        )
        return Response(200, xml, content_type="application/xml")

    # -- compute -------------------------------------------------------------------------------

    def compute(self, req: Request, jid: str | None, user: str) -> Response:
        if jid is None and req.method == "POST":
            return self.submit(req)
        if jid is None and req.method == "GET":
            return Response(200, {"jobs": self.list_jobs(req)})
        if not re.fullmatch(r"[a-zA-Z0-9]+", jid or ""):
            raise Failed(
                400,
                f"1 validation error/s occurred: job_id {jid!r} should match pattern '^[a-zA-Z0-9]+$'",
                kind="validation",
            )
        assert jid is not None
        if req.method == "GET":
            with self.lock:
                submitted = self.jobs.get(jid)
            if submitted is not None and time.time() - submitted < self.visibility_delay:
                raise Failed(404, "Job not found.")
            jobs = self.slurm_jobs(ids=[jid])
            if not jobs:
                raise Failed(404, "Job not found.")
            return Response(200, {"jobs": jobs})
        if req.method == "DELETE":
            r = run_slurm(["scancel", "--verbose", jid], timeout=self.command_timeout + 30)
            if r.returncode != 0 or re.search(".+error:.*", r.stderr, re.IGNORECASE):
                raise Failed(
                    500,
                    f"Unexpected Slurm command response. exit_status:{r.returncode} std_err:{r.stderr}",
                )
            return Response(204)
        return self.error(405, "Method Not Allowed")

    def list_jobs(self, req: Request) -> list[dict[str, Any]]:
        """``GET jobs``: every job of the user in the window (7 days on 2.5.6; 24 h or
        ``time_window`` later, with ``name``), plus what squeue shows."""
        name = None
        window = "now-7days"
        if self.newer_than_256:
            name = req.query.get("name") or None
            text = req.query.get("time_window") or "24h"
            if text not in TIME_WINDOWS:
                raise Failed(
                    400,
                    f"1 validation error/s occurred: time_window: Input should be "
                    f"{', '.join(repr(k) for k in TIME_WINDOWS)}",
                    kind="validation",
                )
            window = TIME_WINDOWS[text]
        allusers = _flag(req.query.get("allusers"))
        jobs = self.slurm_jobs(
            name=name, window=window, allusers=allusers, account=req.query.get("account") or None
        )
        now = time.time()
        with self.lock:
            hidden = {i for i, t in self.jobs.items() if now - t < self.visibility_delay}
        return [j for j in jobs if j["jobId"] not in hidden]

    def slurm_jobs(
        self,
        *,
        ids: Sequence[str] = (),
        name: str | None = None,
        window: str | None = None,
        allusers: bool = False,
        account: str | None = None,
    ) -> list[dict[str, Any]]:
        """sacct then squeue as firecREST's Slurm CLI client runs them; a PENDING squeue row
        replaces sacct's. A failed command is 500 ``Error executing Slurm command.``"""
        sacct = (
            ["sacct"]
            + (["--allusers"] if allusers else [])
            + ([f"--account={account}"] if account else [])
        )
        sacct += [f"--name={name}"] if name else []
        sacct += [f"--jobs={','.join(ids)}"] if ids else [f"--starttime={window or 'now-7days'}"]
        sacct += ["--parsable2", "--noheader", f"--format={SACCT_FORMAT}"]
        squeue = ["squeue"] + ([] if allusers else [f"--user={self.unix_user}"])
        squeue += ([f"--account={account}"] if account else []) + (
            [f"--name={name}"] if name else []
        )
        squeue += ([f"--jobs={','.join(ids)}"] if ids else []) + [
            "--noheader",
            f"--Format={SQUEUE_FORMAT}",
        ]
        jobs: dict[str, dict[str, Any]] = {}
        for argv in (sacct, squeue):
            with self.lock:
                self.slurm_calls.append(argv)
            r = run_slurm(argv)
            if r.returncode == 1 and "Invalid job id specified" in r.stderr:
                continue
            if r.returncode != 0:
                raise Failed(500, "Error executing Slurm command.")
            for job in parse_slurm_rows(r.stdout):
                if job["jobId"] not in jobs or job["status"]["state"] == "PENDING":
                    jobs[job["jobId"]] = job
        return list(jobs.values())

    def submit(self, req: Request) -> Response:
        body = req.json() or {}
        job = body.get("job") if isinstance(body, dict) else None
        if not isinstance(job, dict):
            raise Failed(
                400, "1 validation error/s occurred: job: Field required", kind="validation"
            )
        self.submitted_bodies.append(job)
        wd = job.get("working_directory", job.get("workingDirectory"))
        script = job.get("script")
        script_path = job.get("scriptPath", job.get("script_path"))
        if not wd or (script is None and not script_path):
            raise Failed(
                400,
                "1 validation error/s occurred: working_directory and script are required",
                kind="validation",
            )
        result = self.sbatch(job, str(wd), script)
        if isinstance(result, Response):
            return result
        return Response(201, {"jobId": result})

    def sbatch(self, job: dict[str, Any], wd: str, script: str | None) -> str | Response:
        """``sbatch --export='ALL,K=V' --chdir=WD [...]`` with the script on stdin (or its path);
        the job id. Slower than ``command_timeout``: 408, while sbatch goes on (the job may exist)."""
        env = job.get("env")
        env = {"F7T_version": "v2.0.0"} if env is None else env
        export = ",".join(f"{k}={v}" for k, v in env.items())
        argv = ["sbatch", f"--export=ALL,{export}", f"--chdir={wd}"]
        for key, opt in (
            ("partition", "partition"),
            ("reservation", "reservation"),
            ("account", "account"),
            ("name", "job-name"),
        ):
            if job.get(key):
                argv.append(f"--{opt}={job[key]}")
        for key, alt, opt in (
            ("standardError", "standard_error", "error"),
            ("standardOutput", "standard_output", "output"),
            ("standardInput", "standard_input", "input"),
        ):
            if job.get(key) or job.get(alt):
                argv.append(f"--{opt}={job.get(key) or job.get(alt)}")
        if job.get("constraints"):
            argv.append(f"--constraint={job['constraints']}")
        script_path = job.get("scriptPath", job.get("script_path"))
        if script is None and script_path:
            argv += ["--", str(script_path)]
        if self.slow_sbatch:
            argv = ["bash", "-c", f'sleep {self.slow_sbatch:g}; exec "$0" "$@"', *argv]
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=slurm_env(),
            text=True,
        )
        try:
            out, err = proc.communicate(script or "", timeout=self.command_timeout)
        except subprocess.TimeoutExpired:
            threading.Thread(target=self._late_sbatch, args=(proc,), daemon=True).start()
            raise Failed(408, "Command execution timeout limit exceeded.") from None
        if proc.returncode != 0:
            if QUOTA_ERROR.search(err):
                raise Failed(
                    403,
                    f"Job submission rejected: accounting/QOS policy limit exceeded. {err.strip()}",
                )
            raise Failed(
                500,
                f"Unexpected Slurm command response. exit_status:{proc.returncode} std_err:{err}",
            )
        found = re.search("Submitted batch job ([0-9]+)", out, re.IGNORECASE)
        if not found:
            raise Failed(500, "Unable to submit new job")
        jid = found.group(1)
        with self.lock:
            self.jobs[jid] = time.time()
        return jid

    def _late_sbatch(self, proc: subprocess.Popen[str]) -> None:
        """An sbatch that outlived the command timeout still submits: remember its job."""
        out, _ = proc.communicate()
        found = re.search("Submitted batch job ([0-9]+)", out or "")
        if found:
            with self.lock:
                self.jobs[found.group(1)] = time.time()


# -- firecREST's parsing of sacct and squeue rows ------------------------------------------------------


def _timestr_seconds(text: str, minutes: bool = False) -> int | None:
    """A Slurm duration as firecREST reads it: a number (minutes when ``minutes``), H:MM:SS,
    D-HH:MM:SS or M:SS; None otherwise."""
    try:
        return int(text) * 60 if minutes else int(text)
    except ValueError:
        pass
    for pattern, scale in (
        (r"(\d+):(\d{2}):(\d{2})", (3600, 60, 1)),
        (r"(\d+)-(\d{2}):(\d{2}):(\d{2})", (86400, 3600, 60, 1)),
        (r"(\d+):(\d{2})", (60, 1)),
    ):
        m = re.fullmatch(pattern, text)
        if m:
            return sum(int(g) * s for g, s in zip(m.groups(), scale, strict=True))
    return None


def _timestamp(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _exit_status(text: str) -> tuple[int | None, int | None]:
    if not text:
        return None, None
    rc, _, sig = text.partition(":")
    return int(rc), int(sig)


def parse_slurm_rows(stdout: str) -> list[dict[str, Any]]:
    """Job records (firecREST's JSON) from sacct/squeue rows of 20 ``|``-separated fields; step
    rows (``ID.batch``) become the job's ``tasks``."""
    jobs: dict[str, dict[str, Any]] = {}
    for line in stdout.split("\n"):
        f = line.split("|")
        if len(f) != 20:
            continue
        code, signal = _exit_status(f[3])
        if "." in f[0]:
            main, _ = f[0].split(".", 1)
            if main in jobs:
                jobs[main]["tasks"].append(
                    {
                        "id": f[0],
                        "name": f[6],
                        "status": {
                            "state": f[10],
                            "stateReason": None,
                            "exitCode": code,
                            "interruptSignal": signal,
                        },
                        "time": {
                            "elapsed": int(f[12]) if f[12] else None,
                            "start": _timestamp(f[14]),
                            "end": _timestamp(f[15]),
                            "suspended": _timestr_seconds(f[16]),
                            "limit": int(f[17]) if f[17] else None,
                        },
                    }
                )
            continue
        jobs[f[0]] = {
            "jobId": f[0],
            "name": f[6],
            "status": {
                "state": f[10],
                "stateReason": f[11],
                "exitCode": code,
                "interruptSignal": signal,
            },
            "tasks": [],
            "time": {
                "elapsed": _timestr_seconds(f[12]) if f[12] else None,
                "start": _timestamp(f[14]),
                "end": _timestamp(f[15]),
                "suspended": _timestr_seconds(f[16]),
                "limit": _timestr_seconds(f[17], minutes=True) if f[17] else None,
            },
            "account": f[5],
            "allocationNodes": int(f[1]) if f[1].isdigit() else 0,
            "cluster": f[2],
            "group": f[4],
            "nodes": f[7],
            "partition": f[8],
            "killRequestUser": None,
            "user": f[18],
            "workingDirectory": f[19],
            "priority": int(f[9]) if f[9].lstrip("-").isdigit() else None,
        }
    return list(jobs.values())


def _communicate_open_stdin(proc: subprocess.Popen[bytes], timeout: float) -> tuple[bytes, bytes]:
    """stdout and stderr of ``proc`` while its stdin stays open (as firecREST leaves it when it
    has nothing to send); TimeoutExpired after ``timeout``."""
    chunks: dict[str, bytes] = {}

    def read(name: str, stream: Any) -> None:
        chunks[name] = stream.read()

    readers = [
        threading.Thread(target=read, args=(n, s), daemon=True)
        for n, s in (("out", proc.stdout), ("err", proc.stderr))
    ]
    for t in readers:
        t.start()
    proc.wait(timeout=timeout)
    for t in readers:
        t.join()
    return chunks.get("out", b""), chunks.get("err", b"")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, 9)
    except ProcessLookupError:
        pass
    proc.wait()


def _seconds(value: float) -> str:
    """A ``timeout`` duration: ``5`` or ``0.5``."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _int_param(text: str | None, name: str, default: int) -> int:
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise Failed(
            400,
            f"1 validation error/s occurred: {name}: Input should be a valid integer",
            kind="validation",
        ) from None


def _flag(text: str | None) -> bool:
    """A boolean query parameter (``true``/``false``, as FastAPI reads them)."""
    return (text or "").strip().lower() in ("true", "1", "yes", "on")


def _ls_entry(p: Path, name: str, numeric: bool, deref: bool) -> dict[str, Any]:
    """One ``ls -l`` line as firecREST v2 parses it: name, type, linkTarget, user, group,
    permissions, lastModified, size (a string)."""
    st = os.stat(p) if deref else os.lstat(p)
    mode = stat_mod.filemode(st.st_mode)
    if numeric:
        user, group = str(st.st_uid), str(st.st_gid)
    else:
        try:
            user = pwd.getpwuid(st.st_uid).pw_name
        except KeyError:
            user = str(st.st_uid)
        try:
            group = grp.getgrgid(st.st_gid).gr_name
        except KeyError:
            group = str(st.st_gid)
    link = os.readlink(p) if stat_mod.S_ISLNK(st.st_mode) else None
    return {
        "name": name,
        "type": mode[0],
        "linkTarget": link,
        "user": user,
        "group": group,
        "permissions": mode[1:],
        "lastModified": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(st.st_mtime)),
        "size": str(st.st_size),
    }


def _ls_dir(
    d: Path, prefix: str, hidden: bool, recursive: bool, numeric: bool, deref: bool
) -> list[dict[str, Any]]:
    """``ls -l [-A] [-R]`` of a directory: its entries, then (recursive) each subdirectory's, named
    relative to the listed directory (``sub/inner``); dotfiles only with ``-A``."""
    children = sorted(c for c in d.iterdir() if hidden or not c.name.startswith("."))
    out = [_ls_entry(c, prefix + c.name, numeric, deref) for c in children]
    if recursive:
        for c in children:
            if c.is_dir() and (deref or not c.is_symlink()):
                out += _ls_dir(c, prefix + c.name + "/", hidden, recursive, numeric, deref)
    return out


def cleanup(server: FirecrestServer) -> None:
    """Cancel every Slurm job this server submitted."""
    ids = list(server.jobs)
    if ids:
        run_slurm(["scancel", *ids])


def http_date(seconds_from_now: float) -> str:
    """An HTTP date ``seconds_from_now`` in the future (for ``Retry-After``)."""
    return formatdate(time.time() + seconds_from_now, usegmt=True)


__all__ = ["APP_VERSION", "FirecrestServer", "cleanup", "http_date", "parse_slurm_rows"]
