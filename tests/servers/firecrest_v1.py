"""A loopback firecREST v1 API (docs/design/sites.md §4.3) on the real local Slurm, driven by
``firecrest.v1.Firecrest``.

Same token endpoint and JWT checks as the v2 server. ``Authorization: Bearer``, the machine in
``X-Machine-Name``, form bodies. Utilities are synchronous (201); compute calls create a task
(201 ``{"success": "Task created", "task_id", "task_url"}``, 200 for ``acct`` and ``DELETE`` as
pyfirecrest 3 expects) read with ``GET /tasks?tasks=ID``. Like the real v1, a submitted script
runs from a directory of its own (``--chdir`` there), so ``job.sh`` must ``cd`` to the run
directory itself.
"""

from __future__ import annotations

import email.parser
import email.policy
import itertools
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from .common import Request, Response, SlurmQueryFailed, query_jobs, run_slurm, slurm_final
from .firecrest import FirecrestServer


class FirecrestV1Server(FirecrestServer):
    """``/auth/token`` + the v1 API for one system ``machine`` whose file system is ``root``."""

    def __init__(
        self,
        root: Path,
        clients: dict[str, tuple[str, str]],
        machine: str = "cluster",
        max_file_size: int = 5 * 1024 * 1024,
    ) -> None:
        super().__init__(root, clients, machine, max_file_size)
        self.tasks: dict[str, dict[str, Any]] = {}
        self._ids = itertools.count(1)
        self.submitted_scripts: list[str] = []

    def extra_headers(self, req: Request) -> dict[str, str]:
        return {}

    def error(
        self,
        status: int,
        message: str,
        headers: dict[str, str] | None = None,  # type: ignore[override]
        kind: str = "error",
    ) -> Response:
        return Response(status, {"description": message, "error": message}, headers)

    # -- helpers -----------------------------------------------------------------------------------

    def form(self, req: Request) -> tuple[dict[str, str], dict[str, tuple[str, bytes]]]:
        """Fields and files of a urlencoded or multipart body."""
        ctype = req.headers.get("Content-Type") or ""
        if ctype.startswith("multipart/"):
            msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
                b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + req.body
            )
            fields: dict[str, str] = {}
            files: dict[str, tuple[str, bytes]] = {}
            for part in msg.iter_parts():
                name = part.get_param("name", header="content-disposition")
                data = part.get_payload(decode=True) or b""
                if part.get_filename() is not None:
                    files[str(name)] = (str(part.get_filename()), data)
                else:
                    fields[str(name)] = data.decode()
            return fields, files
        return {
            k: v[-1] for k, v in parse_qs(req.body.decode(), keep_blank_values=True).items()
        }, {}

    def task(
        self,
        user: str,
        data: Any,
        status: str = "200",
        description: str = "Finished successfully",
        code: int = 201,
    ) -> Response:
        tid = uuid.uuid4().hex
        with self.lock:
            self.tasks[tid] = {
                "hash_id": tid,
                "status": status,
                "data": data,
                "description": description,
                "user": user,
                "service": "compute",
                "last_modify": time.strftime("%Y-%m-%dT%H:%M:%S"),
            }
        return Response(
            code, {"success": "Task created", "task_id": tid, "task_url": f"/tasks/{tid}"}
        )

    def path_arg(self, text: str | None) -> Path | Response:
        p = self._path(text)
        if isinstance(p, Response):
            return self.error(
                400, f"invalid path {text!r}", {"X-Invalid-Path": f"{text} is an invalid path"}
            )
        return p

    # -- routes ------------------------------------------------------------------------------------

    def handle(self, req: Request) -> Response:
        if req.path == "/auth/token" and req.method == "POST":
            return self.issue(req)
        user, why = self.user_of(req)
        if user is None:
            self.auth_failures.append(why)
            return self.error(401, why)
        if req.path == "/tasks" and req.method == "GET":
            ids = [t for t in (req.query.get("tasks") or "").split(",") if t]
            with self.lock:
                found = {
                    t: self.tasks[t]
                    for t in ids
                    if t in self.tasks and self.tasks[t]["user"] == user
                }
            return Response(200, {"tasks": found})
        if req.path == "/status/systems":
            return Response(
                200,
                {
                    "description": "List of systems with status and description.",
                    "out": [
                        {
                            "system": self.machine,
                            "status": "available",
                            "description": "System ready",
                        }
                    ],
                },
            )
        if req.headers.get("X-Machine-Name") != self.machine:
            return self.error(
                400,
                "Error: machine does not exist",
                {"X-Machine-Does-Not-Exist": "Machine does not exist"},
            )
        if req.path == "/utilities/whoami":
            return Response(200, {"description": "User name", "output": user})
        if req.path.startswith("/utilities/"):
            return self.utilities(req, req.path.split("/")[2])
        if req.path == "/compute/jobs/upload" and req.method == "POST":
            return self.submit_v1(req, user)
        if req.path == "/compute/acct" and req.method == "GET":
            ids = [i for i in (req.query.get("jobs") or "").split(",") if i]
            with self.lock:
                ids = [i for i in (ids or list(self.jobs)) if i in self.jobs]
            try:
                rows = query_jobs(ids)
            except SlurmQueryFailed as e:
                return self.error(500, str(e))
            data = [
                {
                    "jobid": r["id"],
                    "name": r.get("name", ""),
                    "state": r["state"],
                    "nodelist": r.get("nodes", ""),
                    "partition": r.get("partition", ""),
                    "start_time": str(r.get("start") or ""),
                    "time": str(r.get("elapsed") or 0),
                    "time_left": "",
                    "user": user,
                }
                for i in ids
                if (r := rows.get(i)) is not None
            ]
            return self.task(user, data, code=200)
        if req.path.startswith("/compute/jobs/") and req.method == "DELETE":
            jid = req.path.rsplit("/", 1)[-1]
            try:
                row = query_jobs([jid]).get(jid)
            except SlurmQueryFailed as e:
                return self.error(500, str(e))
            if jid not in self.jobs or row is None or slurm_final(str(row["state"])):
                return self.task(
                    user,
                    f"scancel: error: Kill job error on job id {jid}: Job/step already "
                    "completing or completed",
                    status="400",
                    description="Failed",
                    code=200,
                )
            run_slurm(["scancel", jid])
            return self.task(user, "", code=200)
        return self.error(404, f"no route {req.method} {req.path}")

    def utilities(self, req: Request, op: str) -> Response:
        if op == "mkdir" and req.method == "POST":
            fields, _ = self.form(req)
            p = self.path_arg(fields.get("targetPath"))
            if isinstance(p, Response):
                return p
            parents = fields.get("p", "").lower() in ("true", "1")
            try:
                p.mkdir(parents=parents, exist_ok=parents)
            except (FileExistsError, FileNotFoundError) as e:
                return self.error(400, f"mkdir: {e}", {"X-Invalid-Path": str(p)})
            return Response(201, {"description": "Success create directory", "output": ""})
        if op == "upload" and req.method == "POST":
            fields, files = self.form(req)
            d = self.path_arg(fields.get("targetPath"))
            if isinstance(d, Response):
                return d
            if not d.is_dir():
                return self.error(400, f"{d} is not a directory", {"X-Invalid-Path": str(d)})
            if "file" not in files:
                return self.error(400, "missing field 'file'")
            name, data = files["file"]
            if len(data) > self.max_ops_file_size:
                return self.error(413, "file too large for a direct upload")
            (d / Path(name).name).write_bytes(data)
            return Response(201, {"description": "File upload successful", "output": ""})
        if op == "view" and req.method == "GET":
            p = self.path_arg(req.query.get("targetPath"))
            if isinstance(p, Response):
                return p
            if not p.is_file():
                return self.error(400, f"{p}: no such file", {"X-Invalid-Path": str(p)})
            if p.stat().st_size > self.max_ops_file_size:
                return self.error(
                    400, "file too big to view", {"X-Size-Limit": "File exceeds size limit"}
                )
            return Response(
                200,
                {
                    "description": "File content successfully returned",
                    "output": p.read_bytes().decode("utf-8", errors="replace"),
                },
            )
        return self.error(404, f"no utility {op}")

    def submit_v1(self, req: Request, user: str) -> Response:
        fields, files = self.form(req)
        if "file" not in files:
            return self.error(400, "No batch file sent")
        script = files["file"][1].decode()
        self.submitted_scripts.append(script)
        self.submitted_bodies.append(dict(fields))
        own = self.root / "firecrest-v1" / uuid.uuid4().hex
        own.mkdir(parents=True)
        (own / "script.batch").write_text(script)
        argv = ["sbatch", "--parsable", f"--chdir={own}"]
        if fields.get("account"):
            argv.append(f"--account={fields['account']}")
        r = run_slurm([*argv, str(own / "script.batch")])
        if r.returncode != 0:
            return self.task(
                user, r.stderr.strip(), status="400", description="Failed to submit job"
            )
        jid = r.stdout.strip().splitlines()[-1].split(";")[0]
        with self.lock:
            self.jobs[jid] = time.time()
        return self.task(
            user,
            {
                "jobid": int(jid),
                "result": "Job submitted",
                "job_file": str(own / "script.batch"),
                "job_file_out": "",
                "job_file_err": "",
            },
        )


__all__ = ["FirecrestV1Server"]
