"""``run_project``: submit a planned ``launchers run`` and follow it (docs/remote-sites.md,
"`launchers run`: MLproject entry points", "Following a run").

The run is a job of the job model under ``--workdir``: its files (project minus ``Exclude``, plus
a local Apptainer image) and ``job.sh`` go to the site through the UNICORE, firecREST or SSH
site executor;
``job.out`` and ``job.err`` are printed as they grow; the exit status is the job's code (1 and
the final state when there is none). Ctrl-C detaches (printing the two commands to follow or
cancel the run), or cancels with ``cancel_on_interrupt``.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

from ..config.model import FirecrestGroup, FirecrestSite, Position, UnicoreGroup, UnicoreSite
from ..errors import LaunchersError
from ..jobs.experiment import Experiment
from ..jobs.record import job_directory, read_record
from ..jobs.state import JobState
from ..runtime.loop import run_sync
from .firecrest import FirecrestLauncher
from .outputs import attach_payload
from .payload import RemotePayload
from .unicore import UnicoreLauncher

log = logging.getLogger("launchers.remote")

#: seconds between two reads of the outputs while following (growing to FOLLOW_MAX)
FOLLOW_MIN = 1.0
FOLLOW_MAX = 5.0
OUTPUT_TIMEOUT = 120.0


def plan_launcher(plan: Any) -> Any:
    """The launcher a plan runs with: the finder's (``-r``), else one for the plan's site."""
    if plan.launcher is not None:
        return plan.launcher
    site = plan.site
    label = plan.backend.group if plan.backend is not None and plan.backend.group else None
    # a group from launchers.yaml has a position; a standalone config has none (Mantik fallbacks)
    position = Position(file="launchers.yaml", line=0) if not plan.standalone else Position()
    if isinstance(site, UnicoreSite):
        return UnicoreLauncher(
            group=UnicoreGroup(id=label or "backend-config", site=site, position=position)
        )
    if isinstance(site, FirecrestSite):
        return FirecrestLauncher(
            group=FirecrestGroup(id=label or "backend-config", site=site, position=position)
        )
    raise LaunchersError(f"the run has no site to submit to (kind {plan.kind})")


def plan_payload(plan: Any) -> RemotePayload:
    """What the run sends: every upload, ``job.sh`` for the run directory, the description."""
    unicore = plan.kind == "unicore"
    return RemotePayload(
        uploads=tuple((Path(u.local), u.relpath) for u in plan.all_uploads),
        script=plan.script,
        run_id=plan.run_id,
        job_name=plan.job_name,
        description=plan.description() if unicore else None,
        bss_sbatch=plan.sbatch if unicore else None,
    )


def run_project(plan: Any, *, follow: bool = True, cancel_on_interrupt: bool = False) -> int:
    """Submit ``plan`` (a ``RunPlan``), follow its output unless ``follow`` is false; the exit status."""
    launcher = plan_launcher(plan)
    xp = Experiment(plan.workdir, launcher, progress=False)
    directory = job_directory(xp.workdir, plan.task.name, plan.task.digest).absolute()
    if plan.kind in ("unicore", "firecrest", "ssh"):
        attach_payload(directory, plan_payload(plan))
    previous = read_record(directory) if (directory / "state.json").exists() else None
    force = previous is not None and previous.state.is_final
    xp.__enter__()  # not ``with``: leaving must not wait for the job (we follow it ourselves)
    try:
        job = plan.task.submit(force=force)
    finally:
        xp.leave()
    try:
        if previous is not None and not force:
            print(
                f"launchers: run {plan.run_id} is already {previous.state.value}: following it; its record: "
                f"{job.directory}",
                file=sys.stderr,
            )
        elif not _wait_submitted(job):
            return 1  # refused: said why, nothing to follow
        else:
            print(
                f"launchers: run {plan.run_id} submitted ({plan.kind}, job {job.native_id}); its record: "
                f"{job.directory}",
                file=sys.stderr,
            )
        if not follow:
            print(
                f"launchers: follow it with `launchers logs --follow {job.directory}`; "
                f"cancel it with `launchers cancel {job.directory}`",
                file=sys.stderr,
            )
            return 1 if job.state.is_final and job.state is not JobState.COMPLETED else 0
        return follow_job(job, sys.stdout.buffer, sys.stderr.buffer)
    except KeyboardInterrupt:
        if cancel_on_interrupt:
            print(f"\nlaunchers: cancelling run {plan.run_id}", file=sys.stderr)
            job.cancel()
            try:
                job.wait(60)
            except TimeoutError:
                print(
                    "launchers: the job is not final yet; check it with "
                    f"`launchers status {job.directory}`",
                    file=sys.stderr,
                )
            return 130
        if job.native_id is None and not job.state.is_final:
            print(
                f"\nlaunchers: interrupted while submitting run {plan.run_id}; the same `launchers run` "
                "finishes the submission, or adopts the job it reached",
                file=sys.stderr,
            )
            return 130
        print(
            f"\nlaunchers: detached; run {plan.run_id} keeps running. To follow or cancel it:\n"
            f"  launchers logs --follow {job.directory}\n  launchers status {job.directory}\n"
            f"  launchers cancel {job.directory}",
            file=sys.stderr,
        )
        return 130


def _wait_submitted(job: Any) -> bool:
    """Wait until the job left WAITING/SUBMITTING (uploads included, however long they take);
    False, after saying why, when the site did not take it."""
    while job.state in (JobState.WAITING, JobState.SUBMITTING):
        time.sleep(0.1)
    if job.native_id is None and job.state.is_final:
        detail = f": {job.reason}" if job.reason else ""
        print(
            f"launchers: run {job.task_id} was not submitted ({job.state.value}{detail})",
            file=sys.stderr,
        )
        return False
    return True


def follow_job(job: Any, out: BinaryIO, err: BinaryIO) -> int:
    """Print ``job.out``/``job.err`` as they grow until the job is final; its exit status."""
    executor = job.executor
    sync = getattr(executor, "sync_outputs", None)
    offsets = {job.paths.stdout: 0, job.paths.stderr: 0}
    streams = {job.paths.stdout: out, job.paths.stderr: err}
    delay = FOLLOW_MIN
    warned = False
    while True:
        final = job.state.is_final
        if sync is not None and job.native_id and not final:
            try:
                run_sync(sync(job), timeout=OUTPUT_TIMEOUT)
            except Exception as e:  # reading output is best effort; the job itself is unaffected
                if not warned:
                    log.warning("cannot read the run's output yet: %s", e)
                    warned = True
        grew = False
        for path, stream in streams.items():
            grew |= _print_new(path, offsets, stream)
        if final:
            break
        delay = FOLLOW_MIN if grew else min(FOLLOW_MAX, delay * 1.5)
        end = time.monotonic() + delay
        while time.monotonic() < end and not job.state.is_final:
            time.sleep(0.1)
    state = job.state
    if state is JobState.COMPLETED:
        return 0
    detail = f": {job.reason}" if job.reason else ""
    print(f"launchers: run {job.task_id} ended {state.value}{detail}", file=sys.stderr)
    code = job.exit_code
    return code if isinstance(code, int) and 0 < code < 256 else 1


def _print_new(path: Path, offsets: dict[Path, int], stream: BinaryIO) -> bool:
    try:
        with open(path, "rb") as f:
            f.seek(offsets[path])
            data = f.read()
    except OSError:
        return False
    if not data:
        return False
    offsets[path] += len(data)
    stream.write(data)
    stream.flush()
    return True


__all__ = ["follow_job", "plan_launcher", "plan_payload", "run_project"]
