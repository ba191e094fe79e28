"""Fixtures for the remote tests: the loopback UNICORE and firecREST servers on the real Slurm.

Credentials go through environment variables only (docs/design/sites.md §2); the secrets below are
looked for afterwards in every written file and log line.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from servers.firecrest import FirecrestServer
from servers.firecrest import cleanup as firecrest_cleanup
from servers.unicore import UnicoreServer
from servers.unicore import cleanup as unicore_cleanup

UNICORE_USER = "alice"
UNICORE_PASSWORD = "uc-Pa55word-7f3e9"
FIRECREST_ID = "launchers-test-client"
FIRECREST_SECRET = "fc-Secret-91d2c0a7"
FIRECREST_USER = "bob"
SECRETS = (UNICORE_PASSWORD, FIRECREST_SECRET)


@pytest.fixture(name="unicore_server")
def unicore_server_fixture(
    slurm_cluster: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[UnicoreServer]:
    """A UNICORE site with user alice; LAUNCHERS_UNICORE_USERNAME/_PASSWORD set; polls every 1 s."""
    from launchers.remote.unicore_executor import UnicoreExecutor

    server = UnicoreServer(tmp_path / "unicore-site", {UNICORE_USER: UNICORE_PASSWORD})
    server.exit_code_grace = 3.0  # about 2 minutes at a real site
    server.start()
    monkeypatch.setenv("LAUNCHERS_UNICORE_USERNAME", UNICORE_USER)
    monkeypatch.setenv("LAUNCHERS_UNICORE_PASSWORD", UNICORE_PASSWORD)
    monkeypatch.setattr(UnicoreExecutor, "poll_min", 1.0)
    monkeypatch.setattr(UnicoreExecutor, "poll_max", 3.0)
    try:
        yield server
    finally:
        unicore_cleanup(server)
        server.stop()


@pytest.fixture(name="firecrest_server")
def firecrest_server_fixture(
    slurm_cluster: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FirecrestServer]:
    """A firecREST system ``cluster`` with one client (user bob); tokens live 62 s, so with the
    60 s renewal margin every token is renewed after about 2 s."""
    from launchers.remote.firecrest_executor import FirecrestExecutor

    server = FirecrestServer(
        tmp_path / "firecrest-fs", {FIRECREST_ID: (FIRECREST_SECRET, FIRECREST_USER)}
    )
    server.token_lifetime = 62
    server.start()
    monkeypatch.setenv("LAUNCHERS_FIRECREST_CLIENT_ID", FIRECREST_ID)
    monkeypatch.setenv("LAUNCHERS_FIRECREST_CLIENT_SECRET", FIRECREST_SECRET)
    monkeypatch.setattr(FirecrestExecutor, "poll_min", 1.0)
    monkeypatch.setattr(FirecrestExecutor, "poll_max", 3.0)
    try:
        yield server
    finally:
        firecrest_cleanup(server)
        server.stop()


MLPROJECT = """\
name: demo
entry_points:
  main:
    parameters:
      lr: {type: float, default: 0.1}
      data: {type: path, default: data/input.txt}
    command: "python3 train.py --lr {lr} --data {data}"
  fail:
    command: "echo going to fail >&2; exit 3"
"""

TRAIN = """\
import argparse, os, sys, time
p = argparse.ArgumentParser()
p.add_argument("--lr")
p.add_argument("--data")
a = p.parse_args()
print("lr=" + a.lr, "data=" + open(a.data).read().strip(), "cwd=" + os.getcwd(), flush=True)
time.sleep(float(os.environ.get("TRAIN_SLEEP", "0")))  # tests make runs last (token renewal, Ctrl-C)
print("helper:", open("pkg/helper.txt").read().strip())
print("warning on stderr", file=sys.stderr)
"""


def make_project(root: Path) -> Path:
    """An MLproject with nested files, an excluded directory and a big excluded file."""
    proj = root / "project"
    (proj / "data").mkdir(parents=True)
    (proj / "pkg").mkdir()
    (proj / "logs").mkdir()
    (proj / "MLproject").write_text(MLPROJECT)
    (proj / "train.py").write_text(TRAIN)
    (proj / "data" / "input.txt").write_text("hello-data\n")
    (proj / "pkg" / "helper.txt").write_text("nested-ok\n")
    (proj / "logs" / "old.log").write_text("must not be uploaded\n")
    return proj


def all_text(root: Path) -> str:
    """Every file under ``root`` as text (for secret checks)."""
    out = []
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out.append(p.read_bytes().decode("utf-8", errors="replace"))
    return "\n".join(out)
