"""A check that the tests of the local and the SSH connector share: the connector's
``protocols.FileStore`` side (docs/remote-sites.md, "Remote files")."""

from __future__ import annotations

from typing import Any

import pytest


async def check_file_store(c: Any, base: str) -> None:
    """The ``protocols.FileStore`` side of a connector (also run on the local one)."""
    store = c.files
    assert store is c and c.runner is c and store.can_rename
    await store.mkdir(f"{base}/q/sub")
    await store.write(f"{base}/q/a.json", b"{}")
    assert await store.read(f"{base}/q/a.json") == b"{}"
    assert await store.read(f"{base}/q/a.json", 1, 5) == b"}"
    assert await store.stat_size(f"{base}/q/a.json") == 2
    assert await store.stat_size(f"{base}/q/none") is None
    assert sorted(await store.listdir(f"{base}/q")) == ["a.json", "sub"]
    await store.rename(f"{base}/q/a.json", f"{base}/q/sub/b.json")
    assert await store.listdir(f"{base}/q/sub") == ["b.json"]
    with pytest.raises(FileNotFoundError):
        await store.rename(f"{base}/q/a.json", f"{base}/q/c.json")
    with pytest.raises(FileNotFoundError):
        await store.listdir(f"{base}/none")
    assert await store.remove(f"{base}/q/sub/b.json")
    assert not await store.remove(f"{base}/q/sub/b.json")
    await store.write(f"{base}/q/sub/c", b"x")
    assert await store.remove(f"{base}/q")  # a directory with what it holds
    assert await store.stat_size(f"{base}/q") is None
