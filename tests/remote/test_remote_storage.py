"""The remote-files layer (docs/remote-sites.md, "Remote files"): the UNICORE and firecREST
stores do every ``protocols.FileStore`` operation against the loopback sites, with the
semantics the interface promises (bytes as written, ``FileNotFoundError`` for what is not
there, no rename where the site has none)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from launchers.config.model import FirecrestSite, UnicoreSite
from launchers.errors import LaunchersError
from launchers.protocols import FileStore
from launchers.remote.firecrest_executor import FirecrestExecutor
from launchers.remote.unicore_executor import UnicoreExecutor
from remote_fixtures import (  # noqa: F401
    FIRECREST_USER,
    firecrest_server_fixture,
    unicore_server_fixture,
)
from servers.firecrest import FirecrestServer
from servers.unicore import UnicoreServer

pytestmark = pytest.mark.slurm  # the loopback sites' fixtures start with the cluster

DATA = "ünïcode ✓\n".encode() + b"\xff\x00 bytes\n"


async def common_operations(store: FileStore, base: str, *, tells_absent: bool) -> None:
    """What every store does: mkdir, write, read (whole, from an offset, past the end, at
    most ``size``), stat, list, remove; missing things raise ``FileNotFoundError`` (a removal
    says whether the file was there where the site tells it)."""
    await store.mkdir(f"{base}/d/e")
    await store.write(f"{base}/d/f.bin", DATA)
    assert await store.read(f"{base}/d/f.bin") == DATA
    assert await store.read(f"{base}/d/f.bin", 3) == DATA[3:]
    assert await store.read(f"{base}/d/f.bin", 0, 4) == DATA[:4]
    assert await store.read(f"{base}/d/f.bin", len(DATA)) == b""
    assert await store.stat_size(f"{base}/d/f.bin") == len(DATA)
    assert await store.stat_size(f"{base}/d/none") is None
    assert sorted(await store.listdir(f"{base}/d")) == ["e", "f.bin"]
    with pytest.raises(FileNotFoundError):
        await store.read(f"{base}/d/none")
    with pytest.raises(FileNotFoundError):
        await store.listdir(f"{base}/none")
    assert await store.remove(f"{base}/d/f.bin") is True
    assert await store.remove(f"{base}/d/f.bin") is not tells_absent
    assert await store.stat_size(f"{base}/d/f.bin") is None


def test_unicore_storage(unicore_server: UnicoreServer) -> None:
    """A user's HOME storage: paths relative to it, the ``rename`` action, names as written."""
    ex = UnicoreExecutor(UnicoreSite(url=unicore_server.base_url))
    props: Any = ex._get(f"{unicore_server.base_url}/storages/HOME")
    store = ex.storage(props["_links"]["files"]["href"], props["_links"]["action:rename"]["href"])
    root = Path(props["mountPoint"])

    async def run() -> None:
        await common_operations(store, "t", tells_absent=False)
        await store.write("t/x%41 #?.txt", b"odd")
        assert (root / "t" / "x%41 #?.txt").read_bytes() == b"odd"
        assert store.can_rename
        await store.rename("t/x%41 #?.txt", "t/d/y.txt")
        assert await store.read("t/d/y.txt") == b"odd"
        with pytest.raises(FileNotFoundError):
            await store.rename("t/x%41 #?.txt", "t/z.txt")

    asyncio.run(run())
    shifts: dict[str, int] = {}
    (root / "t" / "out").write_bytes(b"0123456789")
    assert store.read_after("t/out", 4, shifts) == b"456789"
    (root / "t" / "out").write_bytes(b"ab")  # truncated by a requeue: read again from 0
    assert store.read_after("t/out", 10, shifts) == b"ab" and shifts == {"t/out": 10}
    assert store.read_after("t/out", 12, shifts) == b""
    assert store.read_after("t/none", 0, shifts) is None


def test_firecrest_storage(firecrest_server: FirecrestServer) -> None:
    """A firecREST v2 machine's files: absolute paths, no rename, no empty upload."""
    server = firecrest_server
    ex = FirecrestExecutor(
        FirecrestSite(api_url=server.api_url, token_url=server.token_url, machine=server.machine)
    )
    store = ex.files
    base = str(server.scratch / FIRECREST_USER / "store")

    async def run() -> None:
        await common_operations(store, base, tells_absent=True)
        assert not store.can_rename
        with pytest.raises(LaunchersError, match="no cheap rename"):
            await store.rename(f"{base}/d/e", f"{base}/d/g")
        with pytest.raises(LaunchersError, match="an empty file cannot be uploaded"):
            await store.write(f"{base}/empty", b"")

    asyncio.run(run())
