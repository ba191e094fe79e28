"""Experiments and job directories on disk, as the monitor reads them.

An experiment is a directory with ``jobs/NAME/DIGEST/state.json`` below it (docs/jobs.md); a
job is keyed ``NAME/DIGEST`` within its experiment. Reading never writes: the monitor may look at
directories that another process is filling.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

from ..errors import LaunchersError
from ..jobs.record import STATE, StateRecord
from .model import job_row, unreadable_row

#: How deep below a directory experiments are looked for, and how many directories at most.
SEARCH_DEPTH = 4
SEARCH_LIMIT = 20_000

#: ``(inode, mtime in ns, size)`` of a ``state.json``: a rename over it changes the inode.
Stamp = tuple[int, int, int]


@attrs.frozen
class ExperimentDir:
    """One experiment: its id in URLs (a digest of the path), its path and the ``jobs`` folder."""

    id: str
    path: Path

    @property
    def jobs(self) -> Path:
        return self.path / "jobs"

    @classmethod
    def of(cls, path: Path) -> ExperimentDir:
        absolute = Path(os.path.abspath(path))
        digest = hashlib.sha256(str(absolute).encode("utf-8", "surrogateescape")).hexdigest()
        return cls(id=digest[:12], path=absolute)


def _has_jobs(directory: Path) -> bool:
    """Whether ``directory/jobs`` holds at least one ``NAME/DIGEST/state.json``."""
    try:
        with os.scandir(directory / "jobs") as names:
            for name in names:
                if not name.is_dir(follow_symlinks=False):
                    continue
                with os.scandir(name.path) as digests:
                    for digest in digests:
                        if os.path.exists(os.path.join(digest.path, STATE)):
                            return True
    except OSError:
        return False
    return False


def _search(root: Path) -> list[Path]:
    """Experiments below ``root`` (itself included), at most ``SEARCH_DEPTH`` levels down,
    hidden directories and symbolic links skipped, at most ``SEARCH_LIMIT`` directories read."""
    found: list[Path] = []
    queue: list[tuple[Path, int]] = [(root, 0)]
    seen = 0
    while queue and seen < SEARCH_LIMIT:
        directory, depth = queue.pop(0)
        seen += 1
        if _has_jobs(directory):
            found.append(directory)
            continue  # an experiment's own folders hold no further experiment
        if depth >= SEARCH_DEPTH:
            continue
        try:
            with os.scandir(directory) as entries:
                subdirs = sorted(
                    Path(e.path)
                    for e in entries
                    if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)
                )
        except OSError:
            continue
        queue.extend((d, depth + 1) for d in subdirs)
    return sorted(found)


def find_experiments(roots: Sequence[str | os.PathLike[str]], cwd: Path) -> list[ExperimentDir]:
    """The experiments to show: each directory given that is one (or has experiments below it;
    a directory with neither is shown empty, to follow an experiment that has not started yet);
    with none given, those found under ``cwd``. ``LaunchersError`` for a path that does not
    exist, or when nothing is found under ``cwd``."""
    paths: list[Path] = []
    if roots:
        for root in roots:
            path = Path(root).expanduser()
            if not path.is_dir():
                raise LaunchersError(f"{root}: no such directory")
            below = [] if (path / "jobs").is_dir() else _search(path)
            paths.extend(below or [path])
    else:
        paths = _search(cwd)
        if not paths:
            raise LaunchersError(
                f"no experiment under {cwd} (a directory with jobs/NAME/DIGEST/state.json); "
                "give the experiment's WORKDIR"
            )
    out: dict[str, ExperimentDir] = {}
    for p in paths:
        exp = ExperimentDir.of(p)
        out.setdefault(exp.id, exp)
    return list(out.values())


def job_keys(jobs: Path) -> Iterator[tuple[str, Path]]:
    """``(NAME/DIGEST, directory)`` of every job directory under ``jobs`` (with or without its
    ``state.json`` yet); nothing when ``jobs`` does not exist."""
    try:
        names = sorted(os.scandir(jobs), key=lambda e: e.name)
    except OSError:
        return
    for name in names:
        if name.name.startswith(".") or not name.is_dir(follow_symlinks=False):
            continue
        try:
            digests = sorted(os.scandir(name.path), key=lambda e: e.name)
        except OSError:
            continue
        for digest in digests:
            if not digest.name.startswith(".") and digest.is_dir(follow_symlinks=False):
                yield f"{name.name}/{digest.name}", Path(digest.path)


def stamp_of(directory: str | Path) -> Stamp | None:
    """The stamp of ``directory/state.json``, None when there is none."""
    try:
        st = os.stat(os.path.join(directory, STATE))
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


@attrs.frozen
class Reading:
    """What one read of a job directory gave: its row, the stamp of the ``state.json`` read,
    and the record's ``owner`` (the process that recorded the job, for ``--track``)."""

    row: dict[str, Any]
    stamp: Stamp
    owner: Any = None


def read_job(key: str, directory: Path) -> Reading | None:
    """Read ``state.json`` of one job directory; None when it has none (yet). A record that
    cannot be read gives an ``UNREADABLE`` row with the reason, never an exception."""
    path = os.path.join(directory, STATE)
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        return Reading(unreadable_row(key, f"{path}: {e.strerror or e}"), (0, 0, 0))
    stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
    try:
        record = StateRecord.from_json(json.loads(data), where=path)
    except ValueError as e:
        return Reading(unreadable_row(key, f"{path}: not valid JSON: {e}"), stamp)
    except LaunchersError as e:
        return Reading(unreadable_row(key, str(e)), stamp)
    owner = None if record.state.is_final else record.extra.get("owner")
    return Reading(job_row(key, record), stamp, owner)


__all__ = [
    "ExperimentDir",
    "Reading",
    "Stamp",
    "find_experiments",
    "job_keys",
    "read_job",
    "stamp_of",
]
