"""A loopback UNICORE REST core (docs/design/sites.md §4.1) running its jobs on the real local Slurm.

Like UNICORE's Slurm adapter it writes ``UNICORE_Job_ID`` (exports, ``cd``, ``chmod u+x``, the
executable line, ``echo $? > UNICORE_SCRIPT_EXIT_CODE``) and ``bss_submit_ID`` (``#SBATCH``
lines, then a call of the first file) into the working directory and sbatches the latter.
States are read from Slurm when a job is asked for. Knobs: ``faults`` (503 bursts, 429),
``session_lifetime_ms`` (an expired security session gets 432), failing uploads.
"""

from __future__ import annotations

import base64
import math
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
from urllib.parse import unquote

from .common import (
    DROP,
    LoopbackServer,
    Request,
    Response,
    SlurmQueryFailed,
    query_jobs,
    run_slurm,
    slurm_final,
)

# -- UNICORE/X: the job description as the ``#TSI_`` lines of a submit command ---------------
# (JSONParser.parseResourceRequest, UnitParser, TSIMessages.makeSubmitCommand and
# appendTSIResourceSpec of UNICORE/X 2.7.0 to 3.0.0 and its HEAD; docs/remote-sites.md, "UNICORE: server
# behaviours we rely on and work around")

CAPACITY_UNITS = (
    ("", "bytes"),
    ("K", "kilobytes", "kb"),
    ("M", "megabytes", "mb"),
    ("G", "gigabytes", "gb"),
    ("T", "terabytes", "tb"),
)
TIME_UNITS = (("sec", "seconds"), ("min", "minutes"), ("h", "hours"), ("d", "days"))
CAPACITY_FACTORS = (1024, 1024, 1024, 1024)
TIME_FACTORS = (60, 60, 24)
MEGABYTE = 1024 * 1024
#: characters the server refuses in any value it writes into the TSI message
ILLEGAL = ("\n", "\r", "`", "$(")


def java_int(value: int) -> int:
    """A Java ``(int)`` cast of a long: the low 32 bits, two's complement."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def unit_value(text: str, units: tuple[tuple[str, ...], ...], factors: tuple[int, ...]) -> int:
    """UNICORE's ``UnitParser``: a number and a unit whose name *starts with* what is written
    (``m`` is ``min``/``megabytes``); factors multiplied in a Java int (``T`` overflows to 0)."""
    m = re.fullmatch(r"\s*(\d*[.,]?\d*)\s*(\w*)\s*", text)
    if not m:
        raise ValueError(f"not a parsable value: {text}")
    number, unit = m.groups()
    row = next((i for i, names in enumerate(units) if any(n.startswith(unit) for n in names)), None)
    if row is None:
        raise ValueError(f"No conversion for unit '{unit}'")
    factor = 1
    for f in factors[:row]:
        factor = java_int(factor * f)
    return int(float(number) * factor)  # Double.parseDouble refuses "1,5" as float() does


def to_int(value: str) -> int:
    """``ResourceRequest.toInt``: ``(int) Math.round(Double.parseDouble(v))``."""
    return java_int(math.floor(float(value) + 0.5))


def parse_resources(desc: dict[str, Any]) -> dict[str, str]:
    """The job's resource requests (values as UNICORE stores them: memory in bytes, runtime in
    seconds); ``Memory`` is ``MemoryPerNode``, the top-level ``Project`` one more request.
    Raises ValueError (the POST fails) for a value that does not parse."""
    out: dict[str, str] = {}
    for name, value in (desc.get("Resources") or {}).items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        try:
            if name in ("MemoryPerNode", "Memory"):
                text = str(unit_value(text, CAPACITY_UNITS, CAPACITY_FACTORS))
            elif name == "Runtime":
                text = str(unit_value(text, TIME_UNITS, TIME_FACTORS))
        except ValueError as e:
            raise ValueError(f"Could not parse requested resource <{name}>: {e}") from None
        out["MemoryPerNode" if name == "Memory" else name] = text
    if desc.get("Project"):
        out["Project"] = str(desc["Project"])
    return out


def _legal(value: str, what: str) -> str:
    if any(x in value for x in ILLEGAL):
        raise ValueError(f"{what} contains illegal characters")
    return value


def tsi_submit_lines(desc: dict[str, Any], workdir: Path) -> list[str]:
    """The ``#TSI_`` lines UNICORE/X sends the TSI for a batch job (bugs included: memory in
    bytes squeezed into an int, ``#TSI_GPUS_PER_NODE`` written from the memory variable)."""
    res = parse_resources(desc)
    wd = f"{workdir}/"
    lines = ["#TSI_SUBMIT"]
    if "Reservation" in res:
        lines.append(
            f"#TSI_RESERVATION_REFERENCE {_legal(res.pop('Reservation'), 'Reservation reference')}"
        )
    lines += [
        f"#TSI_OUTCOME_DIR {wd}",
        f"#TSI_USPACE_DIR {wd}",
        f"#TSI_STDOUT {_legal(str(desc.get('Stdout') or 'stdout'), 'Stdout')}",
        f"#TSI_STDERR {_legal(str(desc.get('Stderr') or 'stderr'), 'Stderr')}",
        f"#TSI_JOBNAME {_legal(str(desc.get('Name') or 'UNICORE_Job'), 'Job name')}",
        "#TSI_EMAIL NONE",
    ]
    if str(desc.get("Job type", "BATCH")).upper() == "RAW":
        return [*lines, "#TSI_JOB_MODE raw", f"#TSI_JOB_FILE {desc.get('BSS file')}"]
    queue = _legal(res["Queue"], "Queue") if "Queue" in res else "NONE"
    for key, tsi in (
        ("Project", "PROJECT"),
        ("QoS", "QOS"),
        ("NodeConstraints", "BSS_NODES_FILTER"),
    ):
        if key in res:
            lines.append(f"#TSI_{tsi} {_legal(res[key], key)}")

    def number(key: str) -> int:
        try:
            return to_int(res[key]) if key in res else -1
        except ValueError:
            return -1

    total, per_node, nodes, gpus = (
        number("TotalCPUs"),
        number("CPUsPerNode"),
        number("Nodes"),
        number("GPUsPerNode"),
    )
    memory = -1
    if "MemoryPerNode" in res:
        try:
            memory = int(to_int(res["MemoryPerNode"]) / MEGABYTE)  # Java int division
        except ValueError:
            pass
    run_time = -1
    try:
        run_time = int(res["Runtime"]) if "Runtime" in res else -1
    except ValueError:
        pass
    if run_time > 0:
        lines.append(f"#TSI_TIME {run_time}")
    if memory > 0:
        lines.append(f"#TSI_MEMORY {memory}")
    if gpus > 0:
        lines.append(f"#TSI_GPUS_PER_NODE {memory}")
    lines += [
        f"#TSI_NODES {nodes}",
        f"#TSI_PROCESSORS_PER_NODE {per_node}",
        f"#TSI_TOTAL_PROCESSORS {total}",
        f"#TSI_QUEUE {queue}",
    ]
    return lines


# -- the Slurm TSI (tsi slurm/BSS.py): ``#TSI_`` lines -> ``#SBATCH`` lines ------------------------


def _tsi_param(message: list[str], name: str, default: str | None = None) -> str | None:
    prefix = f"#TSI_{name} "
    for line in message:
        if line.startswith(prefix) and line[len(prefix) :]:
            return line[len(prefix) :]
    return default


def _tsi_number(message: list[str], name: str) -> int:
    try:
        return int(float(_tsi_param(message, name) or ""))
    except ValueError:
        return -1


def tsi_sbatch_lines(message: list[str], default_job_name: str = "UNICORE_Job") -> list[str]:
    """The ``#SBATCH`` lines the stock Slurm TSI writes for a ``normal`` job: CPUs only with
    ``Nodes`` (else ``--ntasks`` from the total), never ``--cpus-per-task``; a job name outside
    ``[0-9a-zA-Z.:=~/]`` becomes ``UNICORE_job``; the runtime in whole minutes, rounded down."""
    p = lambda name, default=None: _tsi_param(message, name, default)  # noqa: E731
    n = lambda name: _tsi_number(message, name)  # noqa: E731
    name = p("JOBNAME", default_job_name) or default_job_name
    if re.search(r"[^0-9a-zA-Z\.:.=~/]", name):
        name = "UNICORE_job"
    opts = [f"--job-name={name}"]
    if p("QUEUE", "NONE") != "NONE":
        opts.append(f"--partition={p('QUEUE')}")
    if p("PROJECT", "NONE") != "NONE":
        opts.append(f"--account={p('PROJECT')}")
    if n("NODES") > 0:
        opts.append(f"--nodes={n('NODES')}")
        if n("PROCESSORS_PER_NODE") > 0:
            opts.append(f"--ntasks-per-node={n('PROCESSORS_PER_NODE')}")
    elif n("TOTAL_PROCESSORS") > 0:
        opts.append(f"--ntasks={n('TOTAL_PROCESSORS')}")
    if n("GPUS_PER_NODE") > 0:
        opts.append(f"--gpus-per-node={n('GPUS_PER_NODE')}")
    if p("BSS_NODES_FILTER", "NONE") != "NONE":
        opts.append(f"--constraint={p('BSS_NODES_FILTER')}")
    if p("QOS", "NONE") != "NONE":
        opts.append(f"--qos={p('QOS')}")
    if n("MEMORY") >= 0:
        opts.append(f"--mem={n('MEMORY')}")
    if n("TIME") > 0:
        opts.append(f"--time={max(int(n('TIME') / 60), 1)}")
    if p("RESERVATION_REFERENCE", "NONE") != "NONE":
        opts.append(f"--reservation={p('RESERVATION_REFERENCE')}")
    outcome = p("OUTCOME_DIR", "") or ""
    opts += [
        f"--output={outcome}{p('STDOUT', 'stdout')}",
        f"--error={outcome}{p('STDERR', 'stderr')}",
        f"--chdir={p('USPACE_DIR')}",
    ]
    return ["#SBATCH " + o for o in opts]


def sbatch_lines(desc: dict[str, Any], workdir: Path) -> list[str]:
    """What a stock site (UNICORE/X + Slurm TSI) puts in ``bss_submit_ID`` for a batch job."""
    return tsi_sbatch_lines(tsi_submit_lines(desc, workdir))


#: the error of a stock site's abort, of a job found without exit code file, of a failed application
ABORTED = "Job aborted."
NO_EXIT_CODE = (
    "Job did not complete normally on BSS, please check standard error file and job log for "
    "more information."
)


def nonzero_message(code: str, workdir: Path) -> str:
    return (
        f"User application exited with non-zero exit code: <{code}>. More information might be "
        f"available in the job's working directory '{workdir}/'"
    )


def java_url_decode(text: str) -> str:
    """``SMSUtils.urlDecode``: ``+`` kept, ``%XX`` decoded as UTF-8; a malformed escape leaves
    the whole text as it was (Java's URLDecoder throws, UNICORE keeps the input)."""
    if re.search(r"%(?![0-9A-Fa-f]{2})", text):
        return text
    return unquote(text, errors="replace")


def storage_path(raw: str) -> str:
    """A file path as a UNICORE storage sees it: decoded by JAX-RS, then again by ``makeSMSLocal``."""
    return java_url_decode(unquote(raw, errors="replace"))


class UJob:
    """One UNICORE job on the server."""

    def __init__(
        self, jid: str, desc: dict[str, Any], workdir: Path, owner: str, lifetime: float
    ) -> None:
        self.id = jid
        self.desc = desc
        self.workdir = workdir
        self.owner = owner
        self.status = "READY"
        self.status_message = ""
        self.exit_code: str | None = None
        self.bss_id = "N/A"
        self.log: list[str] = ["Created with ID " + jid]
        self.created = time.time()
        self.submitted = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.termination = self.created + lifetime
        self.aborted = False
        self.lock = threading.Lock()
        self.final: tuple[str, str | None, str] | None = None  # decided while STAGINGOUT shows
        #: when the batch job was first seen gone without an exit code file (grace period)
        self.no_exit_code_since: float | None = None
        self.bss_checked = float("-inf")


class UnicoreServer(LoopbackServer):
    """``BASE = http://127.0.0.1:PORT/SITE/rest/core``; users are ``{name: password}``;
    ``tokens`` maps bearer tokens to user names."""

    def __init__(
        self,
        root: Path,
        users: dict[str, str],
        site: str = "TEST-SITE",
        tokens: dict[str, str] | None = None,
    ) -> None:
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
        # -- delays of the real server, short by default so that tests stay quick -------------
        #: how long STAGINGIN (no imports here) and STAGINGOUT (no exports) show
        self.stage_in_seconds = 0.2
        self.stage_out_seconds = 0.2
        #: how long a job whose batch job ended without exit code file stays RUNNING before
        #: FAILED "Job did not complete normally on BSS" (about 2 minutes at a real site)
        self.exit_code_grace = 120.0
        #: a job's lifetime (termination time); 10 days in UNICORE's shipped configuration
        self.job_lifetime = 864000.0
        #: a Range starting past the end makes UNICORE loop forever; here the request hangs this
        #: long, then the connection is dropped without an answer (never stalls the suite)
        self.range_hang_seconds = 3.0
        #: Range requests that started past the end of the file (for the tests)
        self.range_past_end = 0
        #: UNICORE learns batch states from periodic queue listings: a state is at most this old
        #: (0: read on every request; a test raises it to freeze what the site knows)
        self.bss_update_interval = 0.0

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
        counted = (
            req.method == "GET"
            and re.fullmatch(self.prefix + r"/jobs/[\w-]+", req.path) is not None
        )
        if counted:
            with self.lock:
                self._job_gets_in_flight += 1
                self.max_job_gets_in_flight = max(
                    self.max_job_gets_in_flight, self._job_gets_in_flight
                )
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
        rest = req.path[len(self.prefix) :].rstrip("/") if req.path != self.prefix + "/" else ""
        if user is None and req.headers.get("Authorization"):
            # credentials that cannot be verified: 403 on every path, with no body (AuthNHandler)
            return Response(403, b"")
        if user is None:
            if rest == "" and req.method == "GET":
                return Response(200, self.site_info(None))
            return self.error(401, "authentication required")
        self.expire_jobs()
        resp = self.route(req, rest, user)
        sid = uuid.uuid4().hex
        self.sessions[sid] = (user, time.time() + self.session_lifetime_ms / 1000)
        resp.headers["X-UNICORE-SecuritySession"] = sid
        resp.headers["X-UNICORE-SecuritySession-Lifetime"] = str(self.session_lifetime_ms)
        return resp

    def expire_jobs(self) -> None:
        """Jobs past their termination time are destroyed, as UNICORE's lifetime manager does:
        aborted, their working directory deleted; their URL then answers 404."""
        now = time.time()
        for job in [j for j in list(self.jobs.values()) if j.termination <= now]:
            self.destroy(job)

    def expire_sessions(self) -> None:
        """Make every security session issued so far expired (next use: 432)."""
        self.sessions = {k: (u, 0.0) for k, (u, _) in self.sessions.items()}

    # -- routes --------------------------------------------------------------------------------

    def site_info(self, user: str | None) -> dict[str, Any]:
        role = "user" if user else "anonymous"
        return {
            "client": {
                "dn": f"CN={user or 'anonymous'}",
                "xlogin": {
                    "UID": user or "",
                    "availableUIDs": [user] if user else [],
                    "group": "users",
                    "availableGroups": ["users"],
                },
                "role": {"selected": role, "availableRoles": [role]},
                "queues": {"selected": "debug", "availableQueues": ["debug", "gpu", "long"]},
            },
            "server": {
                "version": "10.1.0",
                "siteName": self.site,
                "jobSubmission": {"enabled": True},
            },
            "_links": {
                "jobs": self.link("/jobs"),
                "storages": self.link("/storages"),
                "factories": self.link("/factories"),
                "transfers": self.link("/transfers"),
            },
        }

    def route(self, req: Request, rest: str, user: str) -> Response:
        if rest == "" and req.method == "GET":
            return Response(200, self.site_info(user))
        if rest == "/jobs" and req.method == "POST":
            return self.submit(req, user)
        if rest == "/jobs" and req.method == "GET":
            tags = [t for t in req.query.get("tags", "").split(",") if t]
            jobs = [
                j
                for j in self.jobs.values()
                if j.owner == user and all(t in j.desc.get("Tags", []) for t in tags)
            ]
            return Response(200, {"jobs": [self.base_url + "/jobs/" + j.id for j in jobs]})
        m = re.fullmatch(r"/jobs/([\w-]+)(/actions/(start|abort|restart))?", rest)
        if m:
            job = self.jobs.get(m.group(1))
            if job is None:
                return self.error(404, f"job {m.group(1)} not found")
            if job.owner != user:
                return self.error(403, "Access denied.")
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
            if job is None:
                return self.error(404, "storage not found")
            if job.owner != user:
                return self.error(403, "Access denied.")
            return self.storage(
                req, f"{job.id}-uspace", job.workdir, m.group(2), m.group(3), m.group(4)
            )
        if rest == "/storages" and req.method == "GET":
            return Response(
                200, {"storages": [self.base_url + "/storages/" + n for n in self.user_storages]}
            )
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

    def storage(
        self,
        req: Request,
        sid: str,
        root: Path,
        sub: str | None,
        rel: str | None,
        action: str | None,
    ) -> Response:
        """A storage resource: its properties, ``/files/...`` or an action (rename, copy)."""
        if not sub:
            s = f"/storages/{sid}"
            return Response(
                200,
                {
                    "resourceStatus": "READY",
                    "mountPoint": str(root),
                    "protocols": ["BFT"],
                    "description": f"storage {sid}",
                    "filesystemDescription": "",
                    "_links": {
                        "self": self.link(s),
                        "files": self.link(s + "/files"),
                        "action:rename": self.link(s + "/actions/rename"),
                        "action:copy": self.link(s + "/actions/copy"),
                    },
                },
            )
        if action:
            if req.method != "POST":
                return self.error(405, "POST an action")
            return self.storage_action(root, action, req.json() or {})
        return self.files(req, root, storage_path(rel or "/").lstrip("/"))

    def storage_action(self, root: Path, action: str, body: dict[str, Any]) -> Response:
        """``rename``/``copy`` with ``{"from": P, "to": Q}`` (paths relative to the storage root),
        as UNICORE's storage does through its TSI: a rename is one ``rename(2)``, a missing source
        an error (500, its message)."""
        src, dst = (
            (root / java_url_decode(str(body.get("from", ""))).lstrip("/")).resolve(),
            (root / java_url_decode(str(body.get("to", ""))).lstrip("/")).resolve(),
        )
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
            return self.error(
                500, f"Could not {action} {body.get('from')} to {body.get('to')}: {e.strerror}"
            )
        return Response(204)  # an action without a reply

    def submit(self, req: Request, user: str) -> Response:
        desc = req.json()
        if not isinstance(desc, dict):
            return self.error(400, "a job description must be a JSON object")
        try:  # what the job description parser refuses fails the POST; resource limits do not
            parse_resources(desc)
            if str(desc.get("Job type", "BATCH")).upper() == "RAW" and not desc.get("BSS file"):
                raise ValueError("Job type 'raw' requires 'BSS file'")
        except ValueError as e:
            return self.error(500, f"Could not submit job: {e}")
        jid = str(uuid.uuid4())
        workdir = self.root / jid
        workdir.mkdir(parents=True)
        job = UJob(jid, desc, workdir, user, self.job_lifetime)
        with self.lock:
            self.jobs[jid] = job
        if str(desc.get("haveClientStageIn", "false")).lower() != "true":
            self.start_job(job)
        return Response(201, b"", {"Location": self.base_url + "/jobs/" + jid})

    def action(self, job: UJob, name: str) -> Response:
        """``start`` and ``abort`` answer 204 (no reply). Abort is immediate, as UNICORE's: the
        job is FAILED "Job aborted." right after scancel, with no exit code and no STAGINGOUT,
        while the batch job may still be running its traps; a finished job is left alone."""
        if name == "start":
            if job.status == "READY":
                self.start_job(job)
            return Response(204)
        if name == "abort":
            with job.lock:
                if job.status not in ("SUCCESSFUL", "FAILED"):
                    if job.bss_id != "N/A":
                        run_slurm(["scancel", job.bss_id])
                    job.aborted = True
                    job.final = None
                    job.status, job.status_message, job.exit_code = "FAILED", ABORTED, None
                    job.log.append("Got 'abort' request.")
            return Response(204)
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
        timer = threading.Timer(self.stage_in_seconds, self._submit_to_batch, (job,))
        timer.daemon = True
        timer.start()

    def _submit_to_batch(self, job: UJob) -> None:
        """QUEUED (UNICORE's PENDING): the login-node precommand runs first, writing into
        ``.UNICORE_PRE_0/``; then the two scripts are written and sbatched. Nothing is submitted
        for a job aborted or destroyed meanwhile."""
        with self.lock:
            alive = self.jobs.get(job.id) is job
        with job.lock:
            if not alive or job.status != "STAGINGIN":
                return
            job.status = "QUEUED"
        failed = self._login_command(job, "precommand")
        with job.lock:
            if job.status != "QUEUED" or self.jobs.get(job.id) is not job:
                return
            if failed:
                job.status, job.status_message = "FAILED", failed
                return
            desc = job.desc
            try:
                message = tsi_submit_lines(desc, job.workdir)
            except ValueError as e:
                job.status, job.status_message = (
                    "FAILED",
                    f"Submission to the batch system failed: {e}",
                )
                return
            exe = str(desc.get("Executable", "/bin/true"))
            args = " ".join(str(a) for a in desc.get("Arguments", []))
            lines = [
                "#!/bin/bash",
                *message,
                "#TSI_SCRIPT",
                f"export UC_WORKING_DIRECTORY={shlex.quote(str(job.workdir))}",
                f"export UC_OUTPUT_DIRECTORY={shlex.quote(str(job.workdir) + '/')}",
            ]
            for item in (
                desc.get("Environment", []) if isinstance(desc.get("Environment"), list) else []
            ):
                name, _, value = str(item).partition("=")
                lines.append(f'export {name}="{value}"')
            for name, value in (
                (desc.get("Environment") or {}).items()
                if isinstance(desc.get("Environment"), dict)
                else []
            ):
                lines.append(f'export {name}="{value}"')
            first = exe.split()[0] if exe.split() else exe
            lines += [
                "cd $UC_WORKING_DIRECTORY",
                f"chmod u+x {first} 2>/dev/null",
                "rm -f ${UC_OUTPUT_DIRECTORY}/UNICORE_SCRIPT_EXIT_CODE",
                f"{exe} {args}".rstrip(),
                "echo $? > ${UC_OUTPUT_DIRECTORY}/UNICORE_SCRIPT_EXIT_CODE",
            ]
            (job.workdir / "UNICORE_Job_ID").write_text("\n".join(lines) + "\n")
            (job.workdir / "UNICORE_Job_ID").chmod(0o770)  # the TSI's addperms; called by its path
            if _tsi_param(message, "JOB_MODE") == "raw":
                # the TSI submits the BSS file as it is, followed by a call of the job script
                try:
                    head = [(job.workdir / str(_tsi_param(message, "JOB_FILE"))).read_text()]
                except OSError as e:
                    job.status, job.status_message = (
                        "FAILED",
                        f"Submission to the batch system failed: {e}",
                    )
                    return
            else:
                head = ["#!/bin/bash", *tsi_sbatch_lines(message)]
            bss = [*head, f"{job.workdir}/UNICORE_Job_ID"]
            (job.workdir / "bss_submit_ID").write_text("".join(line + "\n" for line in bss))
            r = run_slurm(
                ["sbatch", "--parsable", str(job.workdir / "bss_submit_ID")], cwd=job.workdir
            )
            if r.returncode != 0:
                job.status, job.status_message = (
                    "FAILED",
                    "Submission to the batch system failed: " + r.stderr.strip(),
                )
                return
            job.bss_id = r.stdout.strip().splitlines()[-1].split(";")[0]
            job.log.append(f"Submitted to batch system as {job.bss_id}")

    def refresh(self, job: UJob) -> None:
        if job.bss_id == "N/A" or job.status in ("SUCCESSFUL", "FAILED", "STAGINGOUT"):
            return
        now = time.monotonic()
        if now - job.bss_checked < self.bss_update_interval:
            return
        job.bss_checked = now
        try:
            row = query_jobs([job.bss_id]).get(job.bss_id)
        except SlurmQueryFailed:
            return  # as UNICORE's batch adapter: keep the last known status, ask again later
        if row is None:
            return
        state = str(row["state"])
        with job.lock:
            if job.status in ("SUCCESSFUL", "FAILED", "STAGINGOUT"):
                return  # aborted meanwhile
            if not slurm_final(state):
                # never back from RUNNING to QUEUED, as UNICORE: slurmdbd may record the start
                # after squeue (asked while sacct did not list the job yet) reported it
                if state.startswith(("RUNNING", "COMPLETING")) or job.status != "RUNNING":
                    job.status = (
                        "RUNNING" if state.startswith(("RUNNING", "COMPLETING")) else "QUEUED"
                    )
                return
            code_file = job.workdir / "UNICORE_SCRIPT_EXIT_CODE"
            code = code_file.read_text().strip() if code_file.exists() else ""
            if not code:
                # as UNICORE: the job stays RUNNING for a grace period, waiting for the file
                # (a slow shared file system), then fails without an exit code
                now = time.time()
                if job.no_exit_code_since is None:
                    job.no_exit_code_since = now
                if now - job.no_exit_code_since < self.exit_code_grace:
                    job.status = "RUNNING"
                    return
                job.status, job.status_message = "FAILED", NO_EXIT_CODE
                job.log.append(f"Batch system state {state}; no exit code file")
                return
            failed = self._login_command(job, "postcommand") if code == "0" else ""
            if code == "0" and not failed:
                job.final = ("SUCCESSFUL", "0", "")
            elif failed:
                job.final = ("FAILED", code, failed)
            else:
                job.final = ("FAILED", code, nonzero_message(code, job.workdir))
            # as UNICORE: the batch job's end is followed by STAGINGOUT (exports; none here, so
            # brief), then the final status, whether or not anybody asks in between
            job.status = "STAGINGOUT"
            timer = threading.Timer(self.stage_out_seconds, self._finish, (job,))
            timer.daemon = True
            timer.start()

    @staticmethod
    def _login_command(job: UJob, which: str) -> str:
        """Run the description's ``User precommand``/``User postcommand`` on the "login node"
        (here: this machine, in the job's working directory, output in ``.UNICORE_PRE_0/`` or
        ``.UNICORE_POST_0/``) unless ``RunUser...OnLoginNode`` is false (UNICORE's default is
        true). "" if fine, else UNICORE's reason for failing the job."""
        command = job.desc.get(f"User {which}")
        flag = f"RunUser{which.capitalize()}OnLoginNode"
        if not command or str(job.desc.get(flag, "true")).lower() != "true":
            return ""
        tag = "PRE" if which == "precommand" else "POST"
        outdir = job.workdir / f".UNICORE_{tag}_0"
        outdir.mkdir(exist_ok=True)
        env = dict(
            os.environ, UC_WORKING_DIRECTORY=str(job.workdir), UC_OUTPUT_DIRECTORY=f"{outdir}/"
        )
        with open(outdir / "stdout", "wb") as out, open(outdir / "stderr", "wb") as err:
            r = subprocess.run(["bash", "-c", str(command)], cwd=job.workdir, env=env, stdout=out, stderr=err,
                               timeout=120)  # fmt: skip
        job.log.append(f"Launched {tag.lower()} command <{command}>: exit code {r.returncode}")
        if r.returncode == 0:
            return ""
        what = "Pre-command(s)" if tag == "PRE" else "Post-command(s)"
        return (
            f"{what} failed: [Command exited with non-zero exit code: <{r.returncode}>. More information "
            f"might be available in the job's working directory '{job.workdir}/']"
        )

    @staticmethod
    def _finish(job: UJob) -> None:
        with job.lock:
            if job.final is not None and job.status == "STAGINGOUT":
                job.status, job.exit_code, job.status_message = job.final

    def job_properties(self, job: UJob) -> dict[str, Any]:
        self.refresh(job)
        j = f"/jobs/{job.id}"
        props: dict[str, Any] = {
            "status": job.status,
            "statusMessage": job.status_message,
            "queue": job.desc.get("Resources", {}).get("Queue", "N/A")
            if job.bss_id != "N/A"
            else "N/A",
            "batchSystemID": job.bss_id,
            "submissionTime": job.submitted,
            "name": job.desc.get("Name", ""),
            "owner": job.owner,
            "log": list(job.log),
            "jobType": "BATCH",
            "consumedTime": {"total": "0"},
            "currentTime": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "terminationTime": time.strftime(
                "%Y-%m-%dT%H:%M:%S%z", time.localtime(job.termination)
            ),
            "resourceStatus": "READY",
            "acl": [],
            "tags": job.desc.get("Tags", []),
            "_links": {
                "self": self.link(j),
                "workingDirectory": self.link(f"/storages/{job.id}-uspace"),
                "action:start": self.link(j + "/actions/start"),
                "action:abort": self.link(j + "/actions/abort"),
                "action:restart": self.link(j + "/actions/restart"),
                "details": self.link(j + "/details"),
                "submitted": self.link(j),
            },
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
        accept = req.headers.get("Accept") or "application/json"
        if not target.exists():
            if "application/octet-stream" in accept:
                return Response(404, b"")  # Files.download answers a bare 404
            return self.error(404, f"Error listing '/{rel}': file not found")
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
        return {
            "isDirectory": p.is_dir(),
            "size": st.st_size,
            "owner": "user",
            "group": "users",
            "permissions": "rw-r--r--",
            "lastAccessed": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "metadata": {},
        }

    def download(self, req: Request, target: Path) -> Response:
        """The file, or with ``Range`` a part of it as UNICORE's ``Files.download`` serves it:
        206 without ``Content-Range``; a start equal to the size gives 206 with no body; a start
        past the end makes the server skip bytes forever (here: a bounded hang, then no answer);
        an unparsable range, a suffix longer than the file or an end before the start: 416."""
        data = target.read_bytes()
        rng = req.headers.get("Range")
        if not rng:
            return Response(200, data)
        m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng.strip())
        if not m or (not m.group(1) and not m.group(2)):
            return self.error(416, f"Range header '{rng}' cannot be parsed")
        size = len(data)
        end: int | None = None
        if m.group(1):
            start = int(m.group(1))
            if m.group(2):
                end = int(m.group(2))
                if end < start:
                    return self.error(416, f"Range header '{rng}' cannot be parsed")
        else:
            start = size - int(m.group(2))
            if start < 0:
                return self.error(416, f"Range header '{rng}' cannot be parsed")
        if start > size:
            with self.lock:
                self.range_past_end += 1
            time.sleep(self.range_hang_seconds)
            return Response(DROP)
        return Response(206, data[start : None if end is None else end + 1])


def cleanup(server: UnicoreServer) -> None:
    """Cancel every Slurm job this server started (end of a test)."""
    ids = [j.bss_id for j in list(server.jobs.values()) if j.bss_id != "N/A"]
    if ids:
        run_slurm(["scancel", *ids])


__all__ = ["UnicoreServer", "cleanup"]
