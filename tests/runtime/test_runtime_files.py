"""The remote-files layer (``launchers.runtime.files``): the remote job directory of each kind
(docs/design/runtime.md §2), the output fetch, the outputs followed and the local job.rc."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from launchers.connectors.local import LocalConnector
from launchers.errors import ConnectorError
from launchers.jobs.record import JobPaths
from launchers.runtime import files as F


def test_one_layout_function_keeps_each_kinds_directory_names() -> None:
    """Slurm over SSH (and SSH sites) name the experiment before its hash; the direct launcher
    over SSH uses the hash alone; both end in jobs/<task name>/<digest>."""
    local = Path("/home/u/exp/jobs/train/0123abcd")
    tag = hashlib.sha256(b"/home/u/exp").hexdigest()[:12]
    assert F.remote_job_dir("/scratch/", local, named=True) == (
        f"/scratch/exp-{tag}/jobs/train/0123abcd"
    )
    assert F.remote_job_dir("/scratch", local, named=False) == f"/scratch/{tag}/jobs/train/0123abcd"


class _Connector:
    def __init__(self, workdir: str | None) -> None:
        self.config = type("C", (), {"workdir": workdir})()

    async def home(self) -> str:
        return "/home/u/"


def test_the_base_is_the_connectors_workdir_with_home_expanded() -> None:
    assert F.DEFAULT_BASE == "~/.local/share/launchers"
    assert F.configured_base(object()) == F.DEFAULT_BASE
    assert F.configured_base(_Connector("/w/")) == "/w"
    base = asyncio.run(F.connector_base(_Connector(None)))  # type: ignore[arg-type]
    assert base == "/home/u/.local/share/launchers"
    assert asyncio.run(F.connector_base(_Connector("~"))) == "/home/u"  # type: ignore[arg-type]
    assert asyncio.run(F.connector_base(_Connector("/abs/"))) == "/abs"  # type: ignore[arg-type]
    assert F.expand_home("~x/y", "/h") == "~x/y"


def test_fetch_outputs_copies_the_one_list_of_result_files(tmp_path: Path) -> None:
    """Every result file present is copied (atomically, parents created), a missing one is
    skipped, ``present`` spares the reads of the others, ``max_bytes`` bounds each file."""
    remote, local = tmp_path / "remote", tmp_path / "local" / "d"
    remote.mkdir()
    assert F.RESULT_FILES == (
        "job.out", "job.err", "job.rc", "result.json", "result.pickle", "error.json"
    )  # fmt: skip
    (remote / "job.out").write_bytes(b"\xff\x00out")
    (remote / "result.json").write_bytes(b"[1]")
    (remote / "other").write_bytes(b"x")
    store = LocalConnector()
    assert asyncio.run(F.fetch_outputs(store, str(remote), local)) == ["job.out", "result.json"]
    assert (local / "job.out").read_bytes() == b"\xff\x00out"
    assert sorted(p.name for p in local.iterdir()) == ["job.out", "result.json"]
    again = F.fetch_outputs(store, str(remote), local, present={"result.json"}, max_bytes=1)
    assert asyncio.run(again) == ["result.json"]
    assert (local / "result.json").read_bytes() == b"["


class _Failing:
    async def read(self, path: str, offset: int = 0, size: int | None = None) -> bytes:
        raise ConnectorError(f"cannot read {path}")


def test_a_failed_read_is_skipped_and_logged_or_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = logging.getLogger("launchers.test")
    with caplog.at_level(logging.WARNING, "launchers.test"):
        assert (
            asyncio.run(F.fetch_outputs(_Failing(), "/r", tmp_path, names=["job.out"], log=log))
            == []
        )
    assert "cannot copy job.out back" in caplog.text
    with pytest.raises(ConnectorError):
        asyncio.run(F.fetch_outputs(_Failing(), "/r", tmp_path, skip_failures=False))


class _Job:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.paths = JobPaths(directory)
        self.runtime: dict[str, object] = {}
        self.attempt = 3


def test_follow_outputs_appends_what_is_new_and_store_rc_writes_the_local_copy(
    tmp_path: Path,
) -> None:
    remote = {"job.out": b"hello\n", "job.err": b""}
    job: Any = _Job(tmp_path)

    async def read(name: str, offset: int) -> bytes | None:
        return remote[name][offset:]

    assert asyncio.run(F.follow_outputs(job, read)) == 6
    remote["job.out"] += b"world\n"
    remote["job.err"] = b"e"
    assert asyncio.run(F.follow_outputs(job, read)) == 7
    assert (tmp_path / "job.out").read_bytes() == b"hello\nworld\n"
    assert (tmp_path / "job.err").read_bytes() == b"e"
    rc = F.store_rc(job, b'{"rc": 2, "signal": null}')
    assert rc is not None and rc.rc == 2
    assert json.loads((tmp_path / "job.rc").read_text()) == {"rc": 2, "signal": None, "attempt": 3}
    assert F.store_rc(job, b"garbage") is None
