"""Shared pieces of the UNICORE and firecREST executors (remote-sites.md §2, §3, §5).

What a remote job sends (``RemotePayload``: files, ``job.sh``, UNICORE description), where its
credentials come from (environment variables only; secrets never appear in messages), which
HTTP failures are transient, and a retry loop with exponential backoff honouring ``Retry-After``.
"""

from __future__ import annotations

import email.utils
import logging
import random
import re
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

import attrs

from ..errors import AuthenticationError, ConnectorError, LaunchersError, TaskError
from ..jobs.task import KIND_COMMAND
from ..runtime.core import current
from ..slurm.script import sh_quote
from .backend_config import resolve_account
from .environment import Environment, validate_environment
from .resources import resources_from_options
from .script import (
    JobScriptSpec,
    attempt_job_name,
    finder_pairs,
    job_name,
    render_job_script,
    run_id_for,
    sbatch_pairs,
    unicore_bss_file,
    unicore_description,
)

if TYPE_CHECKING:
    from ..protocols import JobHandle

log = logging.getLogger("launchers.remote")
#: retry jitter from a generator of our own: the global one is the user's (seeded runs)
_JITTER = random.Random()
T = TypeVar("T")

#: HTTP statuses worth retrying: the request was not processed (rate limit, proxy, overload).
TRANSIENT_STATUS = frozenset({408, 429, 502, 503, 504})
#: How many times a transient failure is retried (then the error surfaces).
MAX_TRIES = 8


class ScriptFor(Protocol):
    """``job.sh`` for a run directory (None on UNICORE) and the attempt's job name (None: the
    first attempt's)."""

    def __call__(self, run_dir: str | None, job_name: str | None = None) -> str: ...


@attrs.frozen
class RemotePayload:
    """What one remote job sends: files (local path, relative destination; never an empty file:
    ``job.sh`` creates those), the script (``script(run_dir, job_name)``), the UNICORE
    description and the ``#SBATCH`` pairs of its ``BSS file`` (a ``raw`` job), the run
    directory's name, and ``job_name``, the base of the site's job name (``name_for(attempt)``
    adds ``-aN``)."""

    uploads: tuple[tuple[Path, str], ...]
    script: ScriptFor = attrs.field(eq=False)
    run_id: str
    job_name: str
    description: Mapping[str, Any] | None = attrs.field(default=None, eq=False)
    bss_sbatch: tuple[tuple[str, str | bool], ...] | None = None

    def bss_file(self, name: str) -> str | None:
        """UNICORE's ``BSS file`` for the job name ``name`` (None: not a UNICORE job)."""
        if self.bss_sbatch is None:
            return None

        return unicore_bss_file(name, self.bss_sbatch)

    def name_for(self, attempt: int) -> str:
        """The job name of ``attempt`` at the site (``BASE-aN``)."""
        return attempt_job_name(self.job_name, attempt)


def attach_payload(directory: Path, payload: RemotePayload) -> None:
    """Make ``payload`` what the job of ``directory`` sends (``run_project`` sets it before submit)."""
    runtime = current()
    with runtime.payloads_lock:
        runtime.payloads[Path(directory).absolute()] = payload


def attached_payload(directory: Path) -> RemotePayload | None:
    runtime = current()
    with runtime.payloads_lock:
        return cast("RemotePayload | None", runtime.payloads.get(Path(directory).absolute()))


def remote_job_name(job: JobHandle) -> str:
    """``NAME-DIGEST12-aN``: unique per task and attempt, as for Slurm jobs; a long name is
    shortened, never the suffix (a site allows 64 characters)."""
    place = f"-{job.directory.name[:12]}"
    return attempt_job_name(
        job_name(job.name, 64 - len(place) - len(f"-a{job.attempt}")) + job_name(place), job.attempt
    )


def oldest_in(
    rows: Sequence[Mapping[str, Any]], name: str, run_dir: str | None, *, id_key: str, dir_key: str
) -> str | None:
    """The oldest job id among site rows named ``name``. Rows that tell a working directory
    count only in ``run_dir`` (the same task of another experiment directory is not ours); rows
    that tell none count by name alone."""
    want = run_dir.rstrip("/") if run_dir else None
    ids = []
    for row in rows:
        if row.get("name") != name:
            continue
        where = row.get(dir_key)
        if want and isinstance(where, str) and where and where.rstrip("/") != want:
            continue
        ids.append(str(row.get(id_key)))
    return min(ids, key=lambda i: (len(i), i)) if ids else None


def check_task(task: Any, kind: str) -> None:
    """Only commands run on a remote site (a callable would need this package there)."""
    if task is not None and getattr(task, "kind", KIND_COMMAND) != KIND_COMMAND:
        raise TaskError(
            f"task {task.task_id}: a {kind} launcher runs commands only (command([...])); "
            "a @task function needs launchers installed at the site"
        )


def task_payload(job: JobHandle, kind: str) -> RemotePayload:
    """The payload of an experiment's command task: ``job.sh`` runs its argv in the run directory
    with the group's ``environment`` and the task's ``env``; nothing else is uploaded."""

    task = job.task
    launcher: Any = job.launcher
    if task is None or launcher is None:
        raise LaunchersError(
            f"job {job.task_id}: nothing to submit (no task or launcher in this process)"
        )
    check_task(task, kind)
    group = getattr(launcher, "group", None)
    site = getattr(group, "site", None)
    env = Environment()
    if group is not None and getattr(group, "environment", None):
        env = validate_environment(
            group.environment, None, f"{kind}.{group.label}.environment", site_kind=kind
        )
    command = " ".join(sh_quote(str(a), what="an argument") for a in task.target)
    if task.cwd:
        command = f"cd {sh_quote(task.cwd, what='cwd')} && {command}"
    exports = tuple(sorted(dict(task.env).items()))
    options = getattr(launcher, "options", None)
    account = resolve_account(getattr(options, "account", None), site)  # §1.2, as `launchers run`
    name = remote_job_name(job)
    base = name[: -len(f"-a{job.attempt}")]
    run_id = run_id_for(job.task_id, job.directory)
    written = getattr(launcher, "resources", None)  # a Compute Backend Config's, sent as written
    resources = written if written is not None else resources_from_options(options)
    sbatch: tuple[tuple[str, str | bool], ...] = ()
    if written is not None:
        gpu_option = str(getattr(group, "gpu_option", "gpus-per-node") or "gpus-per-node")
        sbatch = sbatch_pairs(written, account, gpu_option) + tuple(launcher.extra_options)
    else:
        sbatch = finder_pairs(launcher.sbatch_args(), account)

    def script(run_dir: str | None, job_name: str | None = None) -> str:
        return render_job_script(
            JobScriptSpec(
                environment=env,
                command=command,
                transport=kind,
                run_dir=run_dir,
                job_name=job_name or name,
                sbatch=sbatch if kind == "firecrest" else (),
                exports=exports,
                cpus_per_node=resources.cpus_per_node,
                run_id=run_id,
            )
        )

    description = bss = None
    if kind == "unicore":
        description = unicore_description(name=name, environment=env, task_id=job.task_id)
        bss = sbatch
    return RemotePayload(
        uploads=(),
        script=script,
        run_id=run_id,
        job_name=base,
        description=description,
        bss_sbatch=bss,
    )


# -- credentials ------------------------------------------------------------------------------


def env_value(names: Sequence[str], environ: Mapping[str, str]) -> tuple[str, str] | None:
    """The first set variable among ``names``: (name, value)."""
    for n in names:
        value = environ.get(n)
        if value:
            return n, value
    return None


def require_env(names: Sequence[str], what: str, environ: Mapping[str, str]) -> str:
    """The value of the first set variable among ``names``; an ``AuthenticationError`` naming
    them all (never a value) when none is set."""
    found = env_value(names, environ)
    if found is None:
        raise AuthenticationError(f"{what}: set the environment variable {' or '.join(names)}")
    return found[1]


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every secret replaced by ``***``."""
    for s in secrets:
        if s and len(s) >= 3:
            text = text.replace(s, "***")
    return text


# -- transient failures and retries ----------------------------------------------------------

_STATUS_RE = re.compile(r"^(\d{3}) ")
_LAST_STATUS_RE = re.compile(r"last request: (\d{3}) ")


def status_of(error: BaseException) -> int | None:
    """The HTTP status behind a pyunicore or pyfirecrest error, if it names one."""
    responses = getattr(error, "responses", None)
    if responses:
        code = getattr(responses[-1], "status_code", None)
        if isinstance(code, int):
            return code
    response = getattr(error, "response", None)
    code = getattr(response, "status_code", None)
    if isinstance(code, int):
        return code
    text = str(error)
    m = _STATUS_RE.match(text) or _LAST_STATUS_RE.search(text)
    return int(m.group(1)) if m else None


def retry_after_of(error: BaseException) -> float | None:
    """``Retry-After`` (seconds or an HTTP date) of the response behind ``error``, if any."""
    responses = getattr(error, "responses", None) or [getattr(error, "response", None)]
    headers = getattr(responses[-1], "headers", None)
    value = headers.get("Retry-After") if headers is not None else None
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def is_transient(error: BaseException) -> bool:
    """A failure worth retrying: a transient HTTP status, or no answer at all."""
    # lazy: httpx and requests (the two REST clients' transports) only to classify an error
    import httpx
    import requests

    if isinstance(
        error,
        (
            httpx.TransportError,
            requests.ConnectionError,
            requests.Timeout,
            TimeoutError,
            ConnectionError,
        ),
    ):
        return True
    code = status_of(error)
    return code is not None and code in TRANSIENT_STATUS


def backoff(attempt: int, *, first: float = 0.5, cap: float = 10.0) -> float:
    """Delay before retry ``attempt`` (0-based): ``first`` doubling to ``cap``, ±20 % jitter."""
    return min(cap, first * (2**attempt)) * _JITTER.uniform(0.8, 1.2)


def with_retries(
    call: Callable[[], T],
    what: str,
    *,
    tries: int = MAX_TRIES,
    transient: Callable[[BaseException], bool] = is_transient,
    secrets: Sequence[str] = (),
) -> T:
    """``call()``, retried on transient failures with backoff (``Retry-After`` honoured);
    after ``tries`` attempts, or on another failure, a ``ConnectorError``/the error itself."""
    for attempt in range(tries):
        try:
            return call()
        except LaunchersError:
            raise
        except Exception as e:
            if not transient(e):
                raise
            if attempt == tries - 1:
                raise ConnectorError(
                    f"{what}: {redact(str(e), secrets)} (gave up after {tries} tries)"
                ) from None
            delay = retry_after_of(e)
            delay = backoff(attempt) if delay is None else min(delay, 60.0)
            log.info(
                "%s: %s; retrying in %.1f s",
                what,
                redact(str(e), secrets).splitlines()[0][:200],
                delay,
            )
            time.sleep(delay)
    raise AssertionError("unreachable")


def shell_words(argv: Sequence[str]) -> str:
    """argv as one shell line (for messages)."""
    return " ".join(shlex.quote(a) for a in argv)


__all__ = [
    "RemotePayload",
    "attach_payload",
    "attached_payload",
    "backoff",
    "check_task",
    "env_value",
    "is_transient",
    "oldest_in",
    "redact",
    "remote_job_name",
    "require_env",
    "retry_after_of",
    "status_of",
    "task_payload",
    "with_retries",
]
