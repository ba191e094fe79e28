"""A loopback UNICORE REST core (remote-sites.md §4.1) running its jobs on the real local Slurm.

Like UNICORE's Slurm adapter it writes ``UNICORE_Job_ID`` (exports, ``cd``, ``chmod u+x``, the
executable line, ``echo $? > UNICORE_SCRIPT_EXIT_CODE``) and ``bss_submit_ID`` (``#SBATCH``
lines, then a call of the first file) into the working directory and sbatches the latter.
States are read from Slurm when a job is asked for. Knobs: ``faults`` (503 bursts, 429),
``session_lifetime_ms`` (an expired security session gets 432), failing uploads.
"""

from __future__ import annotations

import base64
import os
import re
import shlex
import shutil
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from .common import (
    LoopbackServer,
    Request,
    Response,
    SlurmQueryFailed,
    query_jobs,
    run_slurm,
    slurm_final,
)

SIZE_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
TIME_UNITS = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def _minutes(text: Any) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", str(text))
    if not m:
        raise ValueError(f"bad Runtime {text!r}")
    seconds = int(m.group(1)) * TIME_UNITS.get(m.group(2) or "s", 1)
    return max(1, (seconds + 59) // 60)


def _mib(text: Any) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)B?\s*", str(text), re.IGNORECASE)
    if not m:
        raise ValueError(f"bad memory {text!r}")
    value = int(m.group(1)) * SIZE_UNITS.get((m.group(2) or "M").upper(), 1)
    return max(1, int(value + 0.999))


def sbatch_lines(desc: dict[str, Any], workdir: Path) -> list[str]:
    """UNICORE's Resources (and Name, Project) as ``#SBATCH`` lines, as UNICORE maps them."""
    res = desc.get("Resources") or {}
    out = [f"--job-name={desc.get('Name', 'UNICORE_Job')}", f"--chdir={workdir}",
           f"--output={workdir}/{desc.get('Stdout', 'stdout')}", f"--error={workdir}/{desc.get('Stderr', 'stderr')}"]
    if "Queue" in res:
        out.append(f"--partition={res['Queue']}")
    if desc.get("Project"):
        out.append(f"--account={desc['Project']}")
    if "Nodes" in res:
        out.append(f"--nodes={res['Nodes']}")
        if "CPUsPerNode" in res:
            out.append(f"--ntasks-per-node={res['CPUsPerNode']}")
    if "TotalCPUs" in res and "CPUsPerNode" not in res:
        out.append(f"--ntasks={res['TotalCPUs']}")
    elif "CPUsPerNode" in res and "Nodes" not in res:
        out.append(f"--ntasks-per-node={res['CPUsPerNode']}")
    if "GPUsPerNode" in res:
        out.append(f"--gpus-per-node={res['GPUsPerNode']}")
    mem = res.get("MemoryPerNode", res.get("Memory"))
    if mem is not None:
        out.append(f"--mem={_mib(mem)}M")
    if "Runtime" in res:
        out.append(f"--time={_minutes(res['Runtime'])}")
    for key, opt in (("NodeConstraints", "constraint"), ("QoS", "qos"), ("Reservation", "reservation")):
        if key in res:
            out.append(f"--{opt}={res[key]}")
    return ["#SBATCH " + o for o in out]


#: How long a job shows STAGINGOUT after its batch job ended (no exports to stage out here).
STAGE_OUT_SECONDS = 0.2
STAGE_IN_SECONDS = 0.2


class UJob:
    """One UNICORE job on the server."""

    def __init__(self, jid: str, desc: dict[str, Any], workdir: Path, owner: str) -> None:
        self.id = jid
        self.desc = desc
        self.workdir = workdir
        self.owner = owner
        self.status = "READY"
        self.status_message = ""
        self.exit_code: str | None = None
        self.bss_id = "N/A"
        self.log: list[str] = ["Created with ID " + jid]
        self.submitted = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.aborted = False
        self.lock = threading.Lock()
        self.final: tuple[str, str | None, str] | None = None  # decided while STAGINGOUT shows


class UnicoreServer(LoopbackServer):
    """``BASE = http://127.0.0.1:PORT/SITE/rest/core``; users are ``{name: password}``;
    ``tokens`` maps bearer tokens to user names."""

    def __init__(self, root: Path, users: dict[str, str], site: str = "TEST-SITE",
                 tokens: dict[str, str] | None = None) -> None:
        super().__init__()
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.users = dict(users)
        self.tokens = dict(tokens or {})
        self.site = site
        self.prefix = f"/{site}/rest/core"
        self.jobs: dict[str, UJob] = {}
        self.lock = threading.Lock()
        #: lifetime of security sessions (ms); a request with an older session gets 432
        self.session_lifetime_ms = 300_000
        self.sessions: dict[str, tuple[str, float]] = {}
        self.sessions_expired = 0
        #: requests that carried an Authorization header (any) / job GETs (for tests)
        self.job_gets = 0
        self.max_job_gets_in_flight = 0
        self._job_gets_in_flight = 0
        #: shared storages every user has (``/storages/NAME``), as a site's ``HOME``
        self.user_storages = ["HOME"]

    @property
    def base_url(self) -> str:
        return self.root_url + self.prefix

    def error(self, status: int, message: str, headers: dict[str, str] | None = None) -> Response:
        return Response(status, {"errorMessage": message, "status": status}, headers)

    def link(self, path: str, description: str = "") -> dict[str, str]:
        return {"href": self.base_url + path, "description": description}

    # -- auth ----------------------------------------------------------------------------------

    def user_of(self, req: Request) -> str | None:
        auth = req.headers.get("Authorization") or ""
        if auth.startswith("Basic "):
            try:
                user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
            except ValueError:
                return None
            return user if self.users.get(user) == password and user else None
        if auth.startswith("Bearer "):
            return self.tokens.get(auth[7:])
        return None

    def extra_headers(self, req: Request) -> dict[str, str]:
        return {}

    def handle(self, req: Request) -> Response:
        """Route a request (counting concurrent job status GETs for the tests)."""
        counted = req.method == "GET" and re.fullmatch(self.prefix + r"/jobs/[\w-]+", req.path) is not None
        if counted:
            with self.lock:
                self._job_gets_in_flight += 1
                self.max_job_gets_in_flight = max(self.max_job_gets_in_flight, self._job_gets_in_flight)
        try:
            return self._handle(req)
        finally:
            if counted:
                with self.lock:
                    self._job_gets_in_flight -= 1

    def _handle(self, req: Request) -> Response:
        if not req.path.startswith(self.prefix):
            return self.error(404, "not found")
        session = req.headers.get("X-UNICORE-SecuritySession")
        if session is not None:
            entry = self.sessions.get(session)
            if entry is None or entry[1] < time.time():
                self.sessions_expired += 1
                return self.error(432, "security session expired")
        user = self.user_of(req)
        rest = req.path[len(self.prefix):].rstrip("/") if req.path != self.prefix + "/" else ""
        if user is None:
            if rest == "" and req.method == "GET":
                return Response(200, self.site_info(None))
            return self.error(401, "authentication required")
        resp = self.route(req, rest, user)
        sid = uuid.uuid4().hex
        self.sessions[sid] = (user, time.time() + self.session_lifetime_ms / 1000)
        resp.headers["X-UNICORE-SecuritySession"] = sid
        resp.headers["X-UNICORE-SecuritySession-Lifetime"] = str(self.session_lifetime_ms)
        return resp

    def expire_sessions(self) -> None:
        """Make every security session issued so far expired (next use: 432)."""
        self.sessions = {k: (u, 0.0) for k, (u, _) in self.sessions.items()}

    # -- routes --------------------------------------------------------------------------------

    def site_info(self, user: str | None) -> dict[str, Any]:
        role = "user" if user else "anonymous"
        return {
            "client": {
                "dn": f"CN={user or 'anonymous'}",
                "xlogin": {"UID": user or "", "availableUIDs": [user] if user else [], "group": "users",
                           "availableGroups": ["users"]},
                "role": {"selected": role, "availableRoles": [role]},
                "queues": {"selected": "debug", "availableQueues": ["debug", "gpu", "long"]},
            },
            "server": {"version": "10.1.0", "siteName": self.site, "jobSubmission": {"enabled": True}},
            "_links": {"jobs": self.link("/jobs"), "storages": self.link("/storages"),
                       "factories": self.link("/factories"), "transfers": self.link("/transfers")},
        }

    def route(self, req: Request, rest: str, user: str) -> Response:
        if rest == "" and req.method == "GET":
            return Response(200, self.site_info(user))
        if rest == "/jobs" and req.method == "POST":
            return self.submit(req, user)
        if rest == "/jobs" and req.method == "GET":
            tags = [t for t in req.query.get("tags", "").split(",") if t]
            jobs = [j for j in self.jobs.values() if j.owner == user and all(t in j.desc.get("Tags", []) for t in tags)]
            return Response(200, {"jobs": [self.base_url + "/jobs/" + j.id for j in jobs]})
        m = re.fullmatch(r"/jobs/([\w-]+)(/actions/(start|abort|restart))?", rest)
        if m:
            job = self.jobs.get(m.group(1))
            if job is None or job.owner != user:
                return self.error(404, f"job {m.group(1)} not found")
            if m.group(3):
                if req.method != "POST":
                    return self.error(405, "POST an action")
                return self.action(job, m.group(3))
            if req.method == "GET":
                self.job_gets += 1
                return Response(200, self.job_properties(job))
            if req.method == "DELETE":
                self.destroy(job)
                return Response(204)
            return self.error(405, "method not allowed")
        m = re.fullmatch(r"/storages/([\w-]+)-uspace(/files(/.*)?|/actions/(rename|copy))?", rest)
        if m:
            job = self.jobs.get(m.group(1))
            if job is None or job.owner != user:
                return self.error(404, "storage not found")
            return self.storage(req, f"{job.id}-uspace", job.workdir, m.group(2), m.group(3), m.group(4))
        if rest == "/storages" and req.method == "GET":
            return Response(200, {"storages": [self.base_url + "/storages/" + n for n in self.user_storages]})
        m = re.fullmatch(r"/storages/([\w-]+)(/files(/.*)?|/actions/(rename|copy))?", rest)
        if m and m.group(1) in self.user_storages:
            root = self.storage_root(m.group(1), user)
            return self.storage(req, m.group(1), root, m.group(2), m.group(3), m.group(4))
        return self.error(404, f"no resource {rest}")

    def storage_root(self, name: str, user: str) -> Path:
        """Where a user's shared storage (``HOME``, ...) lives on the "site" file system."""
        root = self.root / "storages" / user / name
        root.mkdir(parents=True, exist_ok=True)
        return root

    def storage(self, req: Request, sid: str, root: Path, sub: str | None, rel: str | None,
                action: str | None) -> Response:
        """A storage resource: its properties, ``/files/...`` or an action (rename, copy)."""
        if not sub:
            s = f"/storages/{sid}"
            return Response(200, {"resourceStatus": "READY", "mountPoint": str(root), "protocols": ["BFT"],
                                  "description": f"storage {sid}", "filesystemDescription": "",
                                  "_links": {"self": self.link(s), "files": self.link(s + "/files"),
                                             "action:rename": self.link(s + "/actions/rename"),
                                             "action:copy": self.link(s + "/actions/copy")}})
        if action:
            if req.method != "POST":
                return self.error(405, "POST an action")
            return self.storage_action(root, action, req.json() or {})
        return self.files(req, root, (rel or "/").lstrip("/"))

    def storage_action(self, root: Path, action: str, body: dict[str, Any]) -> Response:
        """``rename``/``copy`` with ``{"from": P, "to": Q}`` (paths relative to the storage root),
        as UNICORE's storage does through its TSI: a rename is one ``rename(2)``, a missing source
        an error (500, its message)."""
        src, dst = (root / str(body.get("from", "")).lstrip("/")).resolve(), \
            (root / str(body.get("to", "")).lstrip("/")).resolve()
        for p in (src, dst):
            if root.resolve() not in (p, *p.parents):
                return self.error(400, "path outside the storage")
        try:
            if action == "rename":
                dst.parent.mkdir(parents=True, exist_ok=True)
                src.rename(dst)
            else:
                shutil.copyfile(src, dst)
        except OSError as e:
            return self.error(500, f"Could not {action} {body.get('from')} to {body.get('to')}: {e.strerror}")
        return Response(200, {})

    def submit(self, req: Request, user: str) -> Response:
        desc = req.json()
        if not isinstance(desc, dict):
            return self.error(400, "a job description must be a JSON object")
        jid = str(uuid.uuid4())
        workdir = self.root / jid
        workdir.mkdir(parents=True)
        job = UJob(jid, desc, workdir, user)
        with self.lock:
            self.jobs[jid] = job
        if str(desc.get("haveClientStageIn", "false")).lower() != "true":
            self.start_job(job)
        return Response(201, b"", {"Location": self.base_url + "/jobs/" + jid})

    def action(self, job: UJob, name: str) -> Response:
        if name == "start":
            if job.status == "READY":
                self.start_job(job)
            return Response(200, {})
        if name == "abort":
            with job.lock:
                if job.bss_id != "N/A" and job.status not in ("SUCCESSFUL", "FAILED"):
                    run_slurm(["scancel", job.bss_id])
                    job.aborted = True
                elif job.status in ("READY", "STAGINGIN"):
                    job.status, job.status_message = "FAILED", "Job was aborted by the user"
            return Response(200, {})
        return self.error(400, f"action {name} is not supported here")

    def destroy(self, job: UJob) -> None:
        if job.bss_id != "N/A" and job.status not in ("SUCCESSFUL", "FAILED"):
            run_slurm(["scancel", job.bss_id])
        with self.lock:
            self.jobs.pop(job.id, None)
        shutil.rmtree(job.workdir, ignore_errors=True)

    def start_job(self, job: UJob) -> None:
        """STAGINGIN (imports; none here, so brief, but visible to a poll as on a real site),
        then the batch submission."""
        with job.lock:
            job.status = "STAGINGIN"
        timer = threading.Timer(STAGE_IN_SECONDS, self._submit_to_batch, (job,))
        timer.daemon = True
        timer.start()

    def _submit_to_batch(self, job: UJob) -> None:
        """Write the two scripts and sbatch them (QUEUED), unless the job was aborted or destroyed
        while staging in."""
        with self.lock:
            alive = self.jobs.get(job.id) is job
        with job.lock:
            if not alive or job.status != "STAGINGIN":
                return
            failed = self._login_command(job, "precommand")
            if failed:
                job.status, job.status_message = "FAILED", failed
                return
            desc = job.desc
            exe = str(desc.get("Executable", "/bin/true"))
            args = " ".join(str(a) for a in desc.get("Arguments", []))
            lines = ["#!/bin/bash", f"export UC_WORKING_DIRECTORY={shlex.quote(str(job.workdir))}"]
            for item in desc.get("Environment", []) if isinstance(desc.get("Environment"), list) else []:
                name, _, value = str(item).partition("=")
                lines.append(f'export {name}="{value}"')
            for name, value in (desc.get("Environment") or {}).items() if isinstance(desc.get("Environment"), dict) else []:
                lines.append(f'export {name}="{value}"')
            first = exe.split()[0] if exe.split() else exe
            lines += ["cd $UC_WORKING_DIRECTORY", f"chmod u+x {first} 2>/dev/null", f"{exe} {args}".rstrip(),
                      "echo $? > $UC_WORKING_DIRECTORY/UNICORE_SCRIPT_EXIT_CODE"]
            (job.workdir / "UNICORE_Job_ID").write_text("\n".join(lines) + "\n")
            try:
                directives = sbatch_lines(desc, job.workdir)
            except ValueError as e:
                job.status, job.status_message = "FAILED", str(e)
                return
            bss = ["#!/bin/bash", *directives, f"/bin/bash {job.workdir}/UNICORE_Job_ID"]
            (job.workdir / "bss_submit_ID").write_text("\n".join(bss) + "\n")
            r = run_slurm(["sbatch", "--parsable", str(job.workdir / "bss_submit_ID")])
            if r.returncode != 0:
                job.status, job.status_message = "FAILED", "Submission to the batch system failed: " + r.stderr.strip()
                return
            job.bss_id = r.stdout.strip().splitlines()[-1].split(";")[0]
            job.status = "QUEUED"
            job.log.append(f"Submitted to batch system as {job.bss_id}")

    def refresh(self, job: UJob) -> None:
        if job.bss_id == "N/A" or job.status in ("SUCCESSFUL", "FAILED", "STAGINGOUT"):
            return
        try:
            row = query_jobs([job.bss_id]).get(job.bss_id)
        except SlurmQueryFailed:
            return  # as UNICORE's batch adapter: keep the last known status, ask again later
        if row is None:
            return
        state = str(row["state"])
        with job.lock:
            if not slurm_final(state):
                # never back from RUNNING to QUEUED, as UNICORE: slurmdbd may record the start
                # after squeue (asked while sacct did not list the job yet) reported it
                if state.startswith(("RUNNING", "COMPLETING")) or job.status != "RUNNING":
                    job.status = "RUNNING" if state.startswith(("RUNNING", "COMPLETING")) else "QUEUED"
                return
            code_file = job.workdir / "UNICORE_SCRIPT_EXIT_CODE"
            code = code_file.read_text().strip() if code_file.exists() else ""
            failed = self._login_command(job, "postcommand") if code == "0" else ""
            if code == "0" and not failed:
                job.final = ("SUCCESSFUL", "0", "")
            elif failed:
                job.final = ("FAILED", code, failed)
            else:
                job.final = ("FAILED", code or None, "Job was aborted by the user" if job.aborted else (
                    f"Job failed: batch system state {state}" + (f", exit code {code}" if code else "")))
            # as UNICORE: the batch job's end is followed by STAGINGOUT (exports; none here, so
            # brief), then the final status, whether or not anybody asks in between
            job.status = "STAGINGOUT"
            timer = threading.Timer(STAGE_OUT_SECONDS, self._finish, (job,))
            timer.daemon = True
            timer.start()

    @staticmethod
    def _login_command(job: UJob, which: str) -> str:
        """Run the description's ``User precommand``/``User postcommand`` on the "login node"
        (here: this machine, in the job's working directory) when ``RunUser...OnLoginNode`` is
        true, as UNICORE does; its output goes to the job's log. "" if fine, else why it failed."""
        command = job.desc.get(f"User {which}")
        flag = f"RunUser{which.capitalize()}OnLoginNode"
        if not command or str(job.desc.get(flag, "false")).lower() != "true":
            return ""
        env = dict(os.environ, UC_WORKING_DIRECTORY=str(job.workdir))
        r = subprocess.run(["bash", "-c", str(command)], cwd=job.workdir, env=env, capture_output=True,
                           text=True, timeout=120)  # fmt: skip
        job.log.append(f"User {which}: exit code {r.returncode}; output: {(r.stdout + r.stderr).strip()[:500]}")
        return "" if r.returncode == 0 else f"User {which} failed with exit code {r.returncode}"

    @staticmethod
    def _finish(job: UJob) -> None:
        with job.lock:
            if job.final is not None:
                job.status, job.exit_code, job.status_message = job.final

    def job_properties(self, job: UJob) -> dict[str, Any]:
        self.refresh(job)
        j = f"/jobs/{job.id}"
        props: dict[str, Any] = {
            "status": job.status, "statusMessage": job.status_message, "queue": job.desc.get("Resources", {}).get("Queue", "N/A")
            if job.bss_id != "N/A" else "N/A", "batchSystemID": job.bss_id, "submissionTime": job.submitted,
            "name": job.desc.get("Name", ""), "owner": job.owner, "log": list(job.log), "jobType": "BATCH",
            "consumedTime": {"total": "0"}, "currentTime": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "terminationTime": "", "resourceStatus": "READY", "acl": [], "tags": job.desc.get("Tags", []),
            "_links": {"self": self.link(j), "workingDirectory": self.link(f"/storages/{job.id}-uspace"),
                       "action:start": self.link(j + "/actions/start"), "action:abort": self.link(j + "/actions/abort"),
                       "action:restart": self.link(j + "/actions/restart"), "details": self.link(j + "/details"),
                       "submitted": self.link(j)},
        }
        if job.exit_code is not None:
            props["exitCode"] = job.exit_code
        return props

    def files(self, req: Request, root: Path, rel: str) -> Response:
        target = (root / rel).resolve()
        if root.resolve() not in (target, *target.parents):
            return self.error(400, "path outside the storage")
        if req.method == "PUT":
            if self.faults.upload_should_fail():
                return self.error(500, f"injected upload failure for {rel}")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(req.body)
            return Response(204)
        if req.method == "POST":
            target.mkdir(parents=True, exist_ok=True)
            return Response(201, {})
        if req.method == "DELETE":
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
            return Response(204)
        if not target.exists():
            return self.error(404, f"file {rel} not found")
        accept = req.headers.get("Accept") or "application/json"
        if "application/octet-stream" in accept and target.is_file():
            return self.download(req, target)
        if target.is_dir():
            content = {}
            for child in sorted(target.iterdir()):
                path = "/" + child.relative_to(root).as_posix() + ("/" if child.is_dir() else "")
                content[path] = self.stat(child)
            return Response(200, {"isDirectory": True, "content": content})
        return Response(200, self.stat(target))

    def stat(self, p: Path) -> dict[str, Any]:
        st = p.stat()
        return {"isDirectory": p.is_dir(), "size": st.st_size, "owner": "user", "group": "users",
                "permissions": "rw-r--r--", "lastAccessed": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "metadata": {}}

    def download(self, req: Request, target: Path) -> Response:
        data = target.read_bytes()
        rng = req.headers.get("Range")
        if not rng:
            return Response(200, data)
        m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng.strip())
        if not m or (not m.group(1) and not m.group(2)):
            return self.error(416, "bad range")
        size = len(data)
        if m.group(1):
            start = int(m.group(1))
            end = int(m.group(2)) if m.group(2) else size - 1
        else:
            start, end = max(0, size - int(m.group(2))), size - 1
        if start >= size or start > end:
            return Response(416, b"", {"Content-Range": f"bytes */{size}"})
        end = min(end, size - 1)
        return Response(206, data[start:end + 1], {"Content-Range": f"bytes {start}-{end}/{size}"})


def cleanup(server: UnicoreServer) -> None:
    """Cancel every Slurm job this server started (end of a test)."""
    ids = [j.bss_id for j in list(server.jobs.values()) if j.bss_id != "N/A"]
    if ids:
        run_slurm(["scancel", *ids])


__all__ = ["UnicoreServer", "cleanup"]
