"""The remote-files layer (``launchers.runtime.files``): the remote job directory of each kind
(docs/design/runtime.md §2), the output fetch, the outputs followed and the local job.rc."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

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
