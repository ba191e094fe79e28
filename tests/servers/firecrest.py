"""A loopback firecREST v2 API and token endpoint (remote-sites.md §4.2) on the real local Slurm.

Tokens are RS256 JWTs (``kid``, ``sub``, ``preferred_username``, ``iat``, ``exp``) from
``POST /auth/token``; the API checks signature and expiry and refuses tokens with under 30 s left.
Jobs: ``sbatch --export=ALL[,K=V] --chdir=DIR`` with the script on stdin; status from sacct
(squeue while not yet in sacct). Knobs: ``token_lifetime``, ``faults`` (429/502/503),
``visibility_delay`` (a new job is ``404 Job not found.`` for that long), failing uploads.

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
import pwd
import shlex
import shutil
import stat as stat_mod
import subprocess
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from email.utils import formatdate
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

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
        self.multipart: dict[str, dict[str, Any]] = {}  # upload id -> {bucket, key, parts: {n: etag}}
        self.transfer_jobs: list[str] = []
        handler = self.httpd.RequestHandlerClass
        handler.do_HEAD = lambda h: h._serve("HEAD")  # type: ignore[attr-defined]  # S3 HEAD object

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
        if req.path.startswith("/s3/"):
            return self.s3(req)
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
        if parts[0] == "filesystem" and parts[2:] == ["transfer", "upload"] and req.method == "POST":
            return self.transfer_upload(req, user)
        if parts[0] == "compute" and parts[2] == "jobs":
            return self.compute(req, parts[3] if len(parts) > 3 else None, user)
        return self.error(404, f"no route {req.path}")

    def system(self) -> dict[str, Any]:
        return {"name": self.machine, "scheduler": {"type": "slurm", "version": "22.05.8"},
                "fileSystems": [{"path": str(self.root / "home"), "dataType": "users", "defaultWorkDir": False},
                                {"path": str(self.scratch), "dataType": "scratch", "defaultWorkDir": True}],
                "dataOperation": {"max_ops_file_size": self.max_ops_file_size, "data_transfer": self.data_transfer},
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
            if len(req.body) > self.max_ops_file_size + 64 * 1024:  # before parsing it at all
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
                    data = part.get_payload(decode=True) or b""
                    if len(data) > self.max_ops_file_size:  # the file itself, exactly
                        return self.error(413, "file too large for a direct upload")
                    (d / name).write_bytes(data)
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
            # without ``size`` firecREST reads 5 MiB, refused where max_ops_file_size is smaller
            size = int(req.query.get("size") or 5 * 1024 * 1024)
            if size > self.max_ops_file_size:
                return self.error(400, f"size {size} exceeds max_ops_file_size", kind="validation")
            with open(p, "rb") as f:
                f.seek(offset)
                data = f.read(size)
            return Response(200, {"output": data.decode("utf-8", errors="replace")})
        if op == "ls":
            # ``ls -l [-A] [-R] [-L] [--numeric-uid-gid]``, parsed as firecREST does: a directory's
            # entries (recursive: those of subdirectories named ``sub/inner``), a file's own entry
            hidden, recursive = _flag(req.query.get("showHidden")), _flag(req.query.get("recursive"))
            numeric, deref = _flag(req.query.get("numericUid")), _flag(req.query.get("dereference"))
            if not p.is_dir() or (p.is_symlink() and not deref and not req.query["path"].endswith("/")):
                return Response(200, {"output": [_ls_entry(p, req.query["path"], numeric, deref)]})
            return Response(200, {"output": _ls_dir(p, "", hidden, recursive, numeric, deref)})
        if op == "tail":
            return self.tail(req, p)
        if op == "download":
            if p.is_dir():
                return self.error(400, f"base64: {p}: Is a directory")
            if p.stat().st_size > self.max_ops_file_size:
                return self.error(413, f"{p}: file size {p.stat().st_size} exceeds max_ops_file_size "
                                       f"{self.max_ops_file_size}; use a transfer")
            return Response(200, p.read_bytes())
        return self.error(404, f"no operation {op}")

    def tail(self, req: Request, p: Path) -> Response:
        """``tail --lines=N`` / ``--bytes=N`` (``+N`` with ``skipHeading``), answered as firecREST v2."""
        lines, nbytes = req.query.get("lines"), req.query.get("bytes")
        skip = _flag(req.query.get("skipHeading"))
        for name, value in (("lines", lines), ("bytes", nbytes)):
            if value is not None and not value.lstrip("-").isdigit():
                return self.error(400, f"{name}: value is not a valid integer", kind="validation")
        if lines and nbytes:
            return self.error(400, "Only one of `bytes` or `lines` can be specified.")
        argv = ["tail"]
        if nbytes:
            argv.append(f"--bytes={'+' if skip else ''}{nbytes}")
        if lines:
            argv.append(f"--lines={'+' if skip else ''}{lines}")
        r = subprocess.run([*argv, "--", str(p)], capture_output=True, timeout=5)
        if r.returncode != 0:
            return self.error(400, r.stderr.decode(errors="replace").strip())
        start = 10
        if lines is not None:
            start = int(lines) if skip else -int(lines)
        elif nbytes is not None:
            start = int(nbytes) if skip else -int(nbytes)
        return Response(200, {"output": {"content": r.stdout.decode("utf-8", errors="replace"),
                                         "contentType": "bytes" if nbytes else "lines",
                                         "startPosition": start, "endPosition": -1}})

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
            return self.error(400, "transfer_directives.file_size: Input should be a valid integer",
                              kind="validation")
        target = self._path(body.get("path"))
        if isinstance(target, Response):
            return target
        work = self.scratch / user
        work.mkdir(parents=True, exist_ok=True)  # the user's directory of the default work file system
        bucket, key = user, f"{uuid.uuid4()}/{target.name}"
        upload_id = uuid.uuid4().hex
        with self.lock:
            self.multipart[upload_id] = {"bucket": bucket, "key": key, "parts": {}}
        obj = f"/s3/{quote(bucket)}/{quote(key)}"
        parts = [self.presign("PUT", obj, {"partNumber": str(n), "uploadId": upload_id})
                 for n in range(1, max(1, math.ceil(size / self.max_part_size)) + 1)]
        complete = self.presign("POST", obj, {"uploadId": upload_id})
        head, get = self.presign("HEAD", obj, {}), self.presign("GET", obj, {})
        unique = uuid.uuid4()
        out, err = f"{work}/.f7t_file_handling_job_{unique}.log", f"{work}/.f7t_file_handling_job_error_{unique}.log"
        job = {"name": "IngressFileTransfer", "working_directory": str(work), "standard_input": "/dev/null",
               "standard_output": out, "standard_error": err, "env": {"PATH": "/bin:/usr/bin/:/usr/local/bin/"}}
        if body.get("account"):
            job["account"] = body["account"]
        result = self.sbatch(job, str(work), self._ingress_script(head, get, str(target)))
        if isinstance(result, Response):
            return result
        with self.lock:
            self.transfer_jobs.append(result)
        return Response(201, {
            "transferJob": {"jobId": int(result), "system": self.machine, "workingDirectory": str(work),
                            "logs": {"outputLog": out, "errorLog": err}},
            "transferDirectives": {"transferMethod": method, "partsUploadUrls": parts,
                                   "completeUploadUrl": complete, "maxPartSize": self.max_part_size,
                                   "fileSize": size},
        })

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
        text = "\n".join([method, path, *(f"{k}={query[k]}" for k in sorted(query) if k != "Signature")])
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
            return self.s3_error(403, "SignatureDoesNotMatch", "The request signature does not match")
        if int(req.query.get("Expires") or 0) < time.time():
            return self.s3_error(403, "AccessDenied", "Request has expired")
        bucket, _, key = unquote(req.path[len("/s3/"):]).partition("/")
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
            return Response(200, data, {"ETag": '"' + hashlib.md5(data).hexdigest() + '"', "Accept-Ranges": "bytes"})
        spec = rng.removeprefix("bytes=")
        first_text, _, last_text = spec.partition("-")
        first = int(first_text) if first_text else max(0, len(data) - int(last_text))
        last = min(int(last_text), len(data) - 1) if first_text and last_text else len(data) - 1
        if first >= len(data) or first > last:
            return self.s3_error(416, "InvalidRange", "The requested range is not satisfiable")
        return Response(206, data[first:last + 1], {"Content-Range": f"bytes {first}-{last}/{len(data)}",
                                                     "Accept-Ranges": "bytes"})

    def _complete(self, upload_id: str, upload: dict[str, Any], staging: Path, body: bytes) -> Response:
        """CompleteMultipartUpload: the listed parts, in order, with their ETags, become the object."""
        try:
            root = ET.fromstring(body)
        except ET.ParseError:
            return self.s3_error(400, "MalformedXML", "The XML you provided was not well-formed")
        ns = {"s3": "http://s3.amazonaws.com/doc/2006-03-01/"}
        listed = [(int(p.findtext("s3:PartNumber", namespaces=ns) or p.findtext("PartNumber") or 0),
                   p.findtext("s3:ETag", namespaces=ns) or p.findtext("ETag") or "")
                  for p in root.findall("s3:Part", ns) + root.findall("Part")]
        if not listed:
            return self.s3_error(400, "MalformedXML", "The XML you provided was not well-formed")
        numbers = [n for n, _ in listed]
        if numbers != sorted(numbers) or len(set(numbers)) != len(numbers):
            return self.s3_error(400, "InvalidPartOrder", "The list of parts was not in ascending order.")
        for n, etag in listed:
            if upload["parts"].get(n) != etag:
                return self.s3_error(400, "InvalidPart", f"Part {n} was not uploaded or its ETag does not match")
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
        xml = ('<?xml version="1.0" encoding="UTF-8"?>\n<CompleteMultipartUploadResult '
               'xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
               f"<Bucket>{upload['bucket']}</Bucket><Key>{upload['key']}</Key><ETag>{etag}</ETag>"
               "</CompleteMultipartUploadResult>")
        return Response(200, xml, content_type="application/xml")

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
        script_path = job.get("scriptPath", job.get("script_path"))
        if script is None and script_path:
            sp = self._path(script_path)
            if isinstance(sp, Response):
                return sp
            if not sp.is_file():
                return self.error(400, f"{sp}: No such file or directory", kind="validation")
            script = sp.read_text()
        if not wd or not script:
            return self.error(400, "working_directory and script are required", kind="validation")
        result = self.sbatch(job, wd, script)
        if isinstance(result, Response):
            return result
        return Response(201, {"jobId": result})

    def sbatch(self, job: dict[str, Any], wd: str, script: str) -> str | Response:
        """``sbatch --export=ALL,K=V --chdir=WD [...]`` with the script on stdin; the job id."""
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
        return jid

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
    return {"name": name, "type": mode[0], "linkTarget": link, "user": user, "group": group,
            "permissions": mode[1:], "lastModified": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(st.st_mtime)),
            "size": str(st.st_size)}


def _ls_dir(d: Path, prefix: str, hidden: bool, recursive: bool, numeric: bool, deref: bool) -> list[dict[str, Any]]:
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


__all__ = ["FirecrestServer", "cleanup", "http_date"]
