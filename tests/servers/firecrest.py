"""A loopback firecREST v2 API and token endpoint (remote-sites.md §4.2) on the real local Slurm.

Tokens are RS256 JWTs (``kid``, ``sub``, ``preferred_username``, ``iat``, ``exp``) from
``POST /auth/token``; the API checks signature and expiry and refuses tokens with under 30 s left.
Jobs: ``sbatch --export=ALL[,K=V] --chdir=DIR`` with the script on stdin; status from sacct
(squeue while not yet in sacct). Knobs: ``token_lifetime``, ``faults`` (429/502/503),
``visibility_delay`` (a new job is ``404 Job not found.`` for that long), failing uploads.
"""

from __future__ import annotations

import base64
import email.parser
import email.policy
import shutil
import threading
import time
import uuid
from email.utils import formatdate
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from .common import (
    LoopbackServer,
    Request,
    Response,
    SlurmQueryFailed,
    query_jobs,
    run_slurm,
    slurm_final,
)

APP_VERSION = "2.6.0"
KID = "launchers-test-key"


class FirecrestServer(LoopbackServer):
    """``/auth/token`` + the v2 API for one system ``machine`` whose file system is ``root``."""

    def __init__(self, root: Path, clients: dict[str, tuple[str, str]], machine: str = "cluster",
                 max_ops_file_size: int = 5 * 1024 * 1024) -> None:
        super().__init__()
        self.root = Path(root)
        self.scratch = self.root / "scratch"
        self.scratch.mkdir(parents=True, exist_ok=True)
        #: client id -> (secret, user name)
        self.clients = dict(clients)
        self.machine = machine
        self.max_ops_file_size = max_ops_file_size
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.token_lifetime = 300
        self.tokens_issued = 0
        self.visibility_delay = 0.0
        self.jobs: dict[str, float] = {}  # id -> submission time
        self.lock = threading.Lock()
        self.auth_failures: list[str] = []
        self.submitted_bodies: list[dict[str, Any]] = []

    @property
    def token_url(self) -> str:
        return self.root_url + "/auth/token"

    @property
    def api_url(self) -> str:
        return self.root_url

    def extra_headers(self, req: Request) -> dict[str, str]:
        out = {"f7t-appversion": APP_VERSION, "f7t-timestamp": str(int(time.time()))}
        rid = req.headers.get("X-Request-ID")
        if rid:
            out["x-request-id"] = rid
        return out

    def error(self, status: int, message: str, headers: dict[str, str] | None = None,
              kind: str = "error") -> Response:
        return Response(status, {"errorType": kind, "message": message, "causedBy": None, "data": None,
                                 "user": None}, headers)

    # -- tokens --------------------------------------------------------------------------------

    def issue(self, req: Request) -> Response:
        form = {k: v for k, v in (p.split("=", 1) for p in req.body.decode().split("&") if "=" in p)}
        from urllib.parse import unquote_plus

        form = {k: unquote_plus(v) for k, v in form.items()}
        cid, secret = form.get("client_id"), form.get("client_secret")
        auth = req.headers.get("Authorization") or ""
        if auth.startswith("Basic "):
            cid, _, secret = base64.b64decode(auth[6:]).decode().partition(":")
        if form.get("grant_type") != "client_credentials" or cid not in self.clients or self.clients[cid][0] != secret:
            return Response(401, {"error": "invalid_client"})
        now = int(time.time())
        user = self.clients[cid][1]
        claims = {"sub": str(uuid.uuid4()), "preferred_username": user, "iat": now, "exp": now + self.token_lifetime}
        token = jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": KID})
        with self.lock:
            self.tokens_issued += 1
        return Response(200, {"access_token": token, "expires_in": self.token_lifetime, "token_type": "Bearer"})

    def user_of(self, req: Request) -> tuple[str | None, str]:
        auth = req.headers.get("Authorization") or ""
        if not auth.startswith("Bearer "):
            return None, "Not authenticated"
        try:
            claims = jwt.decode(auth[7:], self.key.public_key(), algorithms=["RS256"],
                                options={"verify_aud": False})
        except jwt.ExpiredSignatureError:
            return None, "Access token expired"
        except jwt.InvalidTokenError:
            return None, "Access token is invalid."
        if claims["exp"] - time.time() < 30:
            return None, "Access token expires too soon (less than 30s remaining)."
        return str(claims.get("preferred_username")), ""

    # -- routes --------------------------------------------------------------------------------

    def handle(self, req: Request) -> Response:
        if req.path == "/auth/token" and req.method == "POST":
            return self.issue(req)
        user, why = self.user_of(req)
        if user is None:
            self.auth_failures.append(why)
            return self.error(401, why)
        parts = req.path.strip("/").split("/")
        if parts == ["status", "systems"]:
            return Response(200, {"systems": [self.system()]})
        if len(parts) < 3 or (parts[1] != self.machine and parts[0] in ("filesystem", "compute", "status")):
            return self.error(404, "System not found")
        if parts[0] == "status" and parts[2:] == ["userinfo"]:
            return Response(200, {"user": {"id": "0", "name": user}, "group": {"id": "0", "name": "users"},
                                  "groups": [{"id": "0", "name": "users"}],
                                  "accounts": [{"name": "root", "default": True}]})
        if parts[0] == "filesystem" and len(parts) == 4 and parts[2] == "ops":
            return self.filesystem(req, parts[3])
        if parts[0] == "compute" and parts[2] == "jobs":
            return self.compute(req, parts[3] if len(parts) > 3 else None, user)
        return self.error(404, f"no route {req.path}")

    def system(self) -> dict[str, Any]:
        return {"name": self.machine, "scheduler": {"type": "slurm", "version": "22.05.8"},
                "fileSystems": [{"path": str(self.root / "home"), "dataType": "users", "defaultWorkDir": False},
                                {"path": str(self.scratch), "dataType": "scratch", "defaultWorkDir": True}],
                "dataOperation": {"max_ops_file_size": self.max_ops_file_size, "data_transfer": None},
                "servicesHealth": [{"serviceType": "scheduler", "healthy": True}]}

    def _path(self, text: str | None) -> Path | Response:
        if not text or not text.startswith("/"):
            return self.error(400, f"path {text!r} is not absolute", kind="validation")
        p = Path(text)
        if self.root.resolve() not in (p.resolve(), *p.resolve().parents):
            return self.error(400, f"{text} is outside the file systems", kind="validation")
        return p

    def filesystem(self, req: Request, op: str) -> Response:
        if op == "mkdir" and req.method == "POST":
            body = req.json() or {}
            p = self._path(body.get("sourcePath") or body.get("source_path"))
            if isinstance(p, Response):
                return p
            try:
                p.mkdir(parents=bool(body.get("parent")), exist_ok=bool(body.get("parent")))
            except FileExistsError:
                return self.error(400, f"mkdir: cannot create directory '{p}': File exists")
            except FileNotFoundError:
                return self.error(400, f"mkdir: cannot create directory '{p}': No such file or directory")
            return Response(201, {"output": {"name": str(p), "type": "d", "user": "root", "group": "root",
                                             "permissions": "rwxr-xr-x", "lastModified": "", "size": "4096"}})
        if op == "upload" and req.method == "POST":
            d = self._path(req.query.get("path"))
            if isinstance(d, Response):
                return d
            if not d.is_dir():
                return self.error(404, f"{d}: No such file or directory")
            if len(req.body) > self.max_ops_file_size + 64 * 1024:
                return self.error(413, "file too large for a direct upload")
            if self.faults.upload_should_fail():
                return self.error(500, "injected upload failure")
            msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
                b"Content-Type: " + (req.headers.get("Content-Type") or "").encode() + b"\r\n\r\n" + req.body)
            for part in msg.iter_parts():
                if part.get_param("name", header="content-disposition") == "file":
                    name = part.get_filename() or "upload"
                    if "/" in name:
                        return self.error(400, "a file name may not contain '/'", kind="validation")
                    (d / name).write_bytes(part.get_payload(decode=True) or b"")
                    return Response(204)
            return self.error(400, "missing multipart field 'file'", kind="validation")
        p = self._path(req.query.get("path"))
        if isinstance(p, Response):
            return p
        if not p.exists():
            return self.error(404, f"{p}: No such file or directory")
        if op == "rm" and req.method == "DELETE":
            # ``rm -R`` of a file or a directory tree (firecREST v2 answers 204)
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
            return Response(204)
        if op == "stat":
            st = p.stat()
            return Response(200, {"output": {"mode": st.st_mode, "ino": st.st_ino, "dev": st.st_dev,
                                             "nlink": st.st_nlink, "uid": st.st_uid, "gid": st.st_gid,
                                             "size": st.st_size, "atime": int(st.st_atime),
                                             "ctime": int(st.st_ctime), "mtime": int(st.st_mtime)}})
        if op == "view":
            offset = int(req.query.get("offset") or 0)
            size = int(req.query.get("size") or p.stat().st_size)
            if size > self.max_ops_file_size:
                return self.error(400, f"size {size} exceeds max_ops_file_size", kind="validation")
            with open(p, "rb") as f:
                f.seek(offset)
                data = f.read(size)
            return Response(200, {"output": data.decode("utf-8", errors="replace")})
        if op == "ls":
            return Response(200, {"output": [{"name": c.name, "type": "d" if c.is_dir() else "-",
                                              "size": str(c.stat().st_size)} for c in sorted(p.iterdir())]})
        if op == "download":
            return Response(200, p.read_bytes())
        return self.error(404, f"no operation {op}")

    # -- compute -------------------------------------------------------------------------------

    def compute(self, req: Request, jid: str | None, user: str) -> Response:
        try:
            return self._compute(req, jid, user)
        except SlurmQueryFailed as e:
            return self.error(500, str(e))

    def _compute(self, req: Request, jid: str | None, user: str) -> Response:
        if jid is None and req.method == "POST":
            return self.submit(req)
        if jid is None and req.method == "GET":
            now = time.time()
            with self.lock:
                ids = [i for i, t in self.jobs.items() if now - t >= self.visibility_delay]
            rows = query_jobs(ids)
            jobs = [self.job_json(rows[i], user) for i in ids if i in rows]
            if req.query.get("name"):
                jobs = [j for j in jobs if j["name"] == req.query["name"]]
            return Response(200, {"jobs": jobs})
        with self.lock:
            submitted = self.jobs.get(str(jid))
        visible = submitted is not None and time.time() - submitted >= self.visibility_delay
        if req.method == "GET":
            row = query_jobs([str(jid)]).get(str(jid)) if visible else None
            if row is None:
                return self.error(404, "Job not found.")
            return Response(200, {"jobs": [self.job_json(row, user)]})
        if req.method == "DELETE":
            if submitted is None:
                return self.error(404, "Job not found.")
            row = query_jobs([str(jid)]).get(str(jid))
            if row is not None and slurm_final(str(row["state"])):
                return self.error(500, "Unexpected Slurm command response. exit_status:1 std_err:scancel: error: "
                                       f"Kill job error on job id {jid}: Job/step already completing or completed")
            r = run_slurm(["scancel", str(jid)])
            if r.returncode != 0:
                return self.error(500, f"Unexpected Slurm command response. exit_status:{r.returncode} "
                                       f"std_err:{r.stderr.strip()}")
            return Response(204)
        return self.error(405, "method not allowed")

    def submit(self, req: Request) -> Response:
        body = req.json() or {}
        job = body.get("job") if isinstance(body, dict) else None
        if not isinstance(job, dict):
            return self.error(400, "body must be {\"job\": {...}}", kind="validation")
        self.submitted_bodies.append(job)
        wd = job.get("working_directory", job.get("workingDirectory"))
        script = job.get("script")
        if script is None and job.get("scriptPath"):
            script = Path(job["scriptPath"]).read_text()
        if not wd or not script:
            return self.error(400, "working_directory and script are required", kind="validation")
        export = "ALL"
        env = job.get("env") or {}
        if env:
            export += "," + ",".join(f"{k}={v}" for k, v in env.items())
        argv = ["sbatch", "--parsable", f"--export={export}", f"--chdir={wd}"]
        for key, opt in (("name", "job-name"), ("account", "account"), ("partition", "partition"),
                         ("reservation", "reservation"), ("constraints", "constraint")):
            if job.get(key):
                argv.append(f"--{opt}={job[key]}")
        for key, alt, opt in (("standardOutput", "standard_output", "output"),
                              ("standardError", "standard_error", "error"),
                              ("standardInput", "standard_input", "input")):
            if job.get(key) or job.get(alt):
                argv.append(f"--{opt}={job.get(key) or job.get(alt)}")
        r = run_slurm(argv, stdin=script)
        if r.returncode != 0:
            text = r.stderr.strip()
            if "QOSMax" in text or "AssocMax" in text or "Invalid account" in text:
                return self.error(403, text)
            return self.error(500, f"Unexpected Slurm command response. exit_status:{r.returncode} std_err:{text}")
        jid = r.stdout.strip().splitlines()[-1].split(";")[0]
        with self.lock:
            self.jobs[jid] = time.time()
        return Response(201, {"jobId": jid})

    def job_json(self, row: dict[str, Any], user: str) -> dict[str, Any]:
        return {
            "jobId": row["id"], "name": row.get("name", ""),
            "status": {"state": row["state"], "stateReason": row.get("reason") or "None",
                       "exitCode": row.get("exit", 0), "interruptSignal": row.get("signal", 0)},
            "tasks": [{"id": f"{row['id']}.batch"}],
            "time": {"elapsed": row.get("elapsed", 0), "start": row.get("start"), "end": row.get("end"),
                     "suspended": 0, "limit": row.get("limit")},
            "account": row.get("account", ""), "allocationNodes": 1, "cluster": "sandbox", "group": "users",
            "nodes": row.get("nodes", ""), "partition": row.get("partition", ""), "priority": 1,
            "user": user, "workingDirectory": row.get("workdir", ""),
        }


def cleanup(server: FirecrestServer) -> None:
    """Cancel every Slurm job this server submitted."""
    ids = list(server.jobs)
    if ids:
        run_slurm(["scancel", *ids])


def http_date(seconds_from_now: float) -> str:
    """An HTTP date ``seconds_from_now`` in the future (for ``Retry-After``)."""
    return formatdate(time.time() + seconds_from_now, usegmt=True)


__all__ = ["FirecrestServer", "cleanup", "http_date"]
