"""hpc_batch compatibility (docs/design/pilots.md §4): serve a dropbox of ``*.job`` YAML descriptions,
run each through a batch launcher, answer with ``X.job.finished``.

Life of a description: taken once it parses as a mapping with ``script`` and its size and mtime
were stable for 2 s; claimed by renaming ``X.job`` -> ``X.job.submitted`` (then rewritten with a
``launchers:`` block); its template rendered into its workspace (inputs copied to
``input/``); submitted as a command task; when final, outputs copied from ``output/`` to their
destinations (all or none), the result written atomically and ``X.job.submitted`` removed.
Any error for one job becomes that job's ``status: error`` result and never stops the others.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import yaml

from ..errors import ExperimentFailed, LaunchersError
from ..fsutil import atomic_write_text
from ..jobs.experiment import experiment
from ..jobs.state import JobState
from ..jobs.task import command
from .templates import SCRIPT_NAME, TemplateError, render

log = logging.getLogger("launchers.batch")

STABLE_FOR = 2.0
INLINE_LIMIT = 64 * 1024
TRUNCATED_MARKER = "[launchers: output truncated; the last 64 KiB follow]"
RESERVED = ("workspace", "scripts", "containers")


class DescriptionError(LaunchersError):
    """A ``.job`` description that cannot be run (answered with ``status: error``)."""


#: the lines launchers' own wrapper adds to a job's output (one per attempt, requeues)
_OWN_LINES = re.compile(r"^==== launchers: [^\n]* ====(?:\n|$)", re.MULTILINE)


def inline(path: Path) -> str:
    """A log file inlined into a result: what the command wrote (launchers' attempt banners
    left out), at most 64 KiB (the end, after a marker), UTF-8 replaced."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - INLINE_LIMIT))
            data = f.read()
    except OSError:
        return ""
    text = _OWN_LINES.sub("", data.decode("utf-8", errors="replace"))
    if size > INLINE_LIMIT:
        text = TRUNCATED_MARKER + "\n" + text
    return text


def check_description(data: Any, name: str) -> dict[str, Any]:
    """Validate a parsed description; ``DescriptionError`` naming the key at fault."""
    if not isinstance(data, dict) or "script" not in data:
        raise DescriptionError(f"{name}: not a YAML mapping with a 'script' key")
    script = data["script"]
    if not isinstance(script, str) or not SCRIPT_NAME.match(script):
        raise DescriptionError(
            f"{name}: script {script!r} must match [A-Za-z0-9_-]+ (a template name, no path)"
        )
    args = data.get("args") or {}
    if not isinstance(args, dict):
        raise DescriptionError(f"{name}: args must be a mapping, not {type(args).__name__}")
    for key in ("input_map", "output_map"):
        value = data.get(key) or {}
        if not isinstance(value, dict):
            raise DescriptionError(f"{name}: {key} must be a mapping of key -> absolute path")
        bases: dict[str, str] = {}
        for k, path in value.items():
            if not isinstance(path, str) or not os.path.isabs(path):
                raise DescriptionError(f"{name}: {key}.{k}: {path!r} is not an absolute path")
            base = os.path.basename(path)
            if not base:
                raise DescriptionError(f"{name}: {key}.{k}: {path!r} has no file name")
            if base in bases:
                raise DescriptionError(
                    f"{name}: {key}.{k} and {key}.{bases[base]} have the same base name {base!r}"
                )
            bases[base] = str(k)
    return data


@attrs.define(eq=False)
class InFlight:
    """A claimed description and its job."""

    submitted: Path
    data: dict[str, Any]
    workspace: Path
    job: Any


class HpcBatchServer:
    """Serves one dropbox (see the module docstring); ``tick()`` does one pass."""

    def __init__(
        self,
        dropbox: str | os.PathLike[str],
        templates: str | os.PathLike[str],
        launcher: Any,
        *,
        workdir: str | os.PathLike[str],
        variables: Mapping[str, str] | None = None,
        cleanup: bool = False,
    ) -> None:
        self.dropbox = Path(dropbox).absolute()
        self.templates = Path(templates).absolute()
        self.launcher = launcher
        self.workdir = Path(workdir).absolute()
        self.variables = dict(variables or {})
        self.variables.setdefault("scripts", str(self.templates))
        self.variables.setdefault("containers", str(self.templates))
        self.cleanup = cleanup
        self.seen: dict[Path, tuple[int, int, float]] = {}
        self.inflight: dict[Path, InFlight] = {}
        #: descriptions that parse but were not stable yet at the last scan
        self.waiting = 0

    # -- reading --------------------------------------------------------------------------------

    def ready(self, path: Path, now: float) -> bool:
        """Size and mtime unchanged for ``STABLE_FOR`` seconds: the mtime itself that old (a file
        found stable at start-up is taken at once), else as watched from the first sight."""
        try:
            st = path.stat()
        except FileNotFoundError:
            self.seen.pop(path, None)
            return False
        if time.time() - st.st_mtime >= STABLE_FOR:
            return True
        key = (st.st_size, st.st_mtime_ns)
        prev = self.seen.get(path)
        if prev is None or prev[:2] != key:
            self.seen[path] = (*key, now)
            return False
        return now - prev[2] >= STABLE_FOR

    def scan(self) -> list[Path]:
        """The ``*.job`` files ready to be taken."""
        now = time.monotonic()
        out = []
        self.waiting = 0
        for path in sorted(self.dropbox.glob("*.job")):
            stable = self.ready(path, now)
            try:
                data = yaml.safe_load(path.read_text(encoding="utf-8", errors="replace"))
            except (yaml.YAMLError, OSError):
                continue  # still being written: wait for a complete file
            if isinstance(data, dict) and "script" in data:
                if stable:
                    out.append(path)
                else:
                    self.waiting += 1
        return out

    # -- claim and submit ------------------------------------------------------------------------

    def claim(self, path: Path) -> Path | None:
        """Rename ``X.job`` -> ``X.job.submitted`` (hpc_batch's own next name)."""
        target = path.with_name(path.name + ".submitted")
        try:
            os.rename(path, target)
        except FileNotFoundError:
            return None
        self.seen.pop(path, None)
        return target

    def take(self, path: Path) -> None:
        submitted = self.claim(path)
        if submitted is None:
            return
        data: dict[str, Any] = {}
        try:
            data = yaml.safe_load(submitted.read_text(encoding="utf-8", errors="replace"))
            data = check_description(data, path.name)
            self.start(submitted, data)
        except (LaunchersError, OSError, yaml.YAMLError) as e:
            self.finish(submitted, data if isinstance(data, dict) else {}, "error", str(e))

    def values(self, data: Mapping[str, Any], workspace: Path) -> dict[str, Any]:
        values: dict[str, Any] = dict(self.variables)
        values["workspace"] = str(workspace)
        for key, value in (data.get("args") or {}).items():
            if isinstance(value, (list, dict)):
                raise TemplateError(
                    f"args.{key}: a {type(value).__name__} cannot be substituted into a script"
                )
            values[str(key)] = value
        for key in ("input_map", "output_map"):
            for k, path in (data.get(key) or {}).items():
                values[str(k)] = os.path.basename(path)
        return values

    def start(self, submitted: Path, data: dict[str, Any]) -> None:
        stem = submitted.name[: -len(".job.submitted")]
        workspace = (
            self.workdir / "hpc_batch" / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', stem)}-{time.time_ns()}"
        )
        template_path = self.templates / f"{data['script']}.template"
        try:
            template = template_path.read_text(encoding="utf-8")
        except OSError as e:
            raise DescriptionError(f"template {template_path}: {e.strerror or e}") from None
        script = render(template, self.values(data, workspace), where=str(template_path))
        (workspace / "input").mkdir(parents=True, exist_ok=True)
        (workspace / "output").mkdir(exist_ok=True)
        for key, src in (data.get("input_map") or {}).items():
            try:
                shutil.copyfile(src, workspace / "input" / os.path.basename(src))
            except OSError as e:
                shutil.rmtree(workspace, ignore_errors=True)
                raise DescriptionError(
                    f"input {key}: cannot copy {src}: {e.strerror or e}"
                ) from None
        atomic_write_text(workspace / "job.sh", script, mode=0o755)
        self.submit(submitted, data, workspace)

    def submit(self, submitted: Path, data: dict[str, Any], workspace: Path) -> None:
        stem = submitted.name[: -len(".job.submitted")]
        task = command(["bash", str(workspace / "job.sh")], name=f"hpc-{stem}", cwd=str(workspace))
        job = task.submit(self.launcher)
        block = {
            "task_id": job.task_id,
            "job_directory": str(job.directory),
            "workspace": str(workspace),
        }
        queue = (job.record.extra.get("batch") or {}).get("queue")
        if queue:
            block["queue"] = queue
        self.write_yaml(submitted, {**data, "launchers": block})
        self.inflight[submitted] = InFlight(submitted, data, workspace, job)

    def resume(self) -> None:
        """After a restart: re-attach to the ``.submitted`` descriptions with a ``launchers:`` block."""
        for submitted in sorted(self.dropbox.glob("*.job.submitted")):
            if submitted in self.inflight:
                continue
            try:
                data = yaml.safe_load(submitted.read_text(encoding="utf-8"))
            except (OSError, yaml.YAMLError):
                continue
            if not isinstance(data, dict):
                continue
            block = data.pop("launchers", None)
            if not isinstance(block, dict) or "workspace" not in block:
                self.finish(
                    submitted,
                    data,
                    "error",
                    "claimed by a server that stopped before submitting it",
                )
                continue
            try:
                self.submit(submitted, data, Path(block["workspace"]))
            except LaunchersError as e:
                self.finish(submitted, data, "error", str(e))

    # -- results --------------------------------------------------------------------------------

    @staticmethod
    def write_yaml(path: Path, data: Mapping[str, Any]) -> None:
        atomic_write_text(path, yaml.safe_dump(dict(data), sort_keys=False, allow_unicode=True))

    def place_outputs(self, item: InFlight) -> str | None:
        """Copy every output to its destination (temporary name, rename); on any failure remove
        those already placed and return the error."""
        placed: list[Path] = []
        for k, dest in (item.data.get("output_map") or {}).items():
            src = item.workspace / "output" / os.path.basename(dest)
            target = Path(dest)
            tmp = target.with_name(f".{target.name}.launchers-tmp")
            try:
                if not src.is_file():
                    raise OSError(f"output {k}: {src} was not produced")
                shutil.copyfile(src, tmp)
                os.replace(tmp, target)
                placed.append(target)
            except OSError as e:
                with contextlib.suppress(OSError):
                    tmp.unlink()
                for p in placed:
                    with contextlib.suppress(OSError):
                        p.unlink()
                return (
                    str(e) if not e.strerror else f"output {k}: cannot copy to {dest}: {e.strerror}"
                )
        return None

    def collect(self, item: InFlight) -> None:
        job = item.job
        state = job.state
        rec = job.record
        logs = f"full logs: {job.stdout_path} and {job.stderr_path}"
        if state is JobState.COMPLETED:
            problem = self.place_outputs(item)
            status, message = (
                ("ok", f"completed; {logs}") if problem is None else ("error", f"{problem}; {logs}")
            )
        elif state is JobState.FAILED and rec.exit_code not in (None, 0) and not rec.signal:
            status, message = (
                "error",
                f"remote command failed with exit code {rec.exit_code}; {logs}",
            )
        elif state is JobState.TIMEOUT:
            status, message = "error", f"timed out ({rec.reason or 'task timeout'}); {logs}"
        else:
            status, message = (
                "error",
                f"job ended {state.value}: {rec.reason or 'no reason given'}; {logs}",
            )
        extra = {
            "stdout": inline(job.stdout_path),
            "stderr": inline(job.stderr_path),
            "rc": rec.exit_code,
            "start": rec.started_at,
            "end": rec.ended_at,
        }
        self.finish(item.submitted, item.data, status, message, **extra)
        if self.cleanup:
            shutil.rmtree(item.workspace, ignore_errors=True)

    def finish(
        self, submitted: Path, data: Mapping[str, Any], status: str, message: str, **more: Any
    ) -> None:
        """Write ``X.job.finished`` atomically, then remove ``X.job.submitted``."""
        result = {k: v for k, v in dict(data).items() if k != "launchers"}
        job = {"status": status, "message": message, "stderr": more.get("stderr", ""),
               "stdout": more.get("stdout", ""), "rc": more.get("rc"), "start": more.get("start"),
               "end": more.get("end")}  # fmt: skip
        result["job"] = job
        name = (
            submitted.name[: -len(".submitted")]
            if submitted.name.endswith(".submitted")
            else submitted.name
        )
        self.write_yaml(submitted.with_name(name + ".finished"), result)
        with contextlib.suppress(FileNotFoundError):
            submitted.unlink()
        self.inflight.pop(submitted, None)
        if status != "ok":
            log.warning("%s: %s", name, message)

    # -- loop -----------------------------------------------------------------------------------

    def tick(self) -> None:
        """One pass: take ready descriptions, collect finished jobs."""
        for path in self.scan():
            self.take(path)
        for item in list(self.inflight.values()):
            if item.job.state.is_final:
                self.collect(item)

    def serve(
        self, *, once: bool = False, interval: float = 1.0, stop_when_idle: float | None = None
    ) -> None:
        """Run until interrupted (``once``: until the dropbox is empty and nothing runs)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        idle_since = time.monotonic()
        with (
            contextlib.suppress(ExperimentFailed),
            experiment(self.workdir, self.launcher, progress=False),
        ):
            self.resume()
            while True:
                self.tick()
                busy = bool(self.inflight) or self.waiting > 0
                if busy:
                    idle_since = time.monotonic()
                elif once or (
                    stop_when_idle is not None and time.monotonic() - idle_since >= stop_when_idle
                ):
                    return
                time.sleep(interval)


__all__ = ["DescriptionError", "HpcBatchServer", "check_description", "inline"]
