"""Job directories on the command line: every job under a work directory, and the one a
reference names (a path, a task id, a digest or a unique prefix, or a run id)."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import LaunchersError


def job_dirs(workdir: str | os.PathLike[str]) -> list[Path]:
    """Every ``WORKDIR/jobs/NAME/DIGEST`` holding a ``state.json``, sorted by path."""
    root = Path(workdir).expanduser() / "jobs"
    if not root.is_dir():
        if not Path(workdir).expanduser().is_dir():
            raise LaunchersError(f"{workdir}: no such directory")
        return []
    return sorted(p.parent for p in root.glob("*/*/state.json"))


def resolve_job(ref: str, workdir: str | os.PathLike[str]) -> Path:
    """The job directory named by ``ref`` (a path, task id, digest or unique prefix, or the run
    id ``NAME-DIGEST-PLACE`` that ``launchers run`` prints)."""
    path = Path(ref).expanduser()
    if (path / "state.json").is_file():
        return path.absolute()
    matches = []
    dirs = job_dirs(workdir)
    for d in dirs:
        task_id = f"{d.parent.name}-{d.name}"
        if task_id.startswith(ref) or d.name.startswith(ref):
            matches.append(d)
    if not matches:
        # lazy: the remote script module only for a run id (start-up time of the CLI)
        from ..remote.script import run_id_for

        matches = [
            d
            for d in dirs
            if ref.startswith(f"{d.parent.name}-{d.name}-")
            and run_id_for(f"{d.parent.name}-{d.name}", d.absolute()) == ref
        ]
    if not matches:
        raise LaunchersError(f"no job {ref!r} under {Path(workdir).expanduser() / 'jobs'}")
    if len(matches) > 1:
        names = ", ".join(f"{d.parent.name}-{d.name}" for d in matches[:5])
        raise LaunchersError(f"{ref!r} matches {len(matches)} jobs ({names}); give more of the id")
    return matches[0].absolute()


__all__ = ["job_dirs", "resolve_job"]
