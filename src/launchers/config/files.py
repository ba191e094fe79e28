"""Find, read and cache ``launchers.yaml`` and its sidecars (docs/design/matching.md §4, §7).

``load_config(config=None)`` looks for the file (argument, ``$LAUNCHERS_CONFIG``,
``~/.config/launchers/launchers.yaml``, ``~/.config/experimaestro/launchers.yaml``), reads
``connectors.yaml`` and ``tokens.yaml`` beside it and hands the texts to ``config.build``.
Results are cached by (path, mtime_ns, size) of every file read, so an unchanged file is never
read twice and an edited one is read again (on the next call: the files are stat'ed every time;
absent sidecars through their directory's mtime).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path, PurePath
from typing import Any

import attrs

from launchers.config.build import load_text
from launchers.config.model import LaunchersConfig
from launchers.errors import ConfigurationError

CONFIG_NAME = "launchers.yaml"
CONNECTORS_NAME = "connectors.yaml"
TOKENS_NAME = "tokens.yaml"
ENV_VAR = "LAUNCHERS_CONFIG"


# ------------------------------------------------------------------------------------------
# Search path
# ------------------------------------------------------------------------------------------
def default_search_path() -> list[Path]:
    """The per-user files tried when neither ``config=`` nor ``$LAUNCHERS_CONFIG`` is given."""
    home = Path.home()
    return [
        home / ".config" / "launchers" / CONFIG_NAME,
        home / ".config" / "experimaestro" / CONFIG_NAME,
    ]


def _explicit(path: Path, origin: str) -> Path:
    """An explicitly named file or directory (holding launchers.yaml); must exist."""
    path = path.expanduser()
    named = f" (named by {origin})" if origin else ""
    if path.is_dir():
        inner = path / CONFIG_NAME
        if not inner.is_file():
            raise ConfigurationError(f"directory {path}{named} holds no {CONFIG_NAME}")
        return inner
    if not path.exists():
        raise ConfigurationError(f"configuration file {path}{named} does not exist")
    return path


def find_config_file(config: str | os.PathLike[str] | None = None) -> Path | None:
    """The file ``load_config(config)`` reads, or ``None`` when there is no configuration."""
    if config is not None:
        return _explicit(Path(config), "")
    env = os.environ.get(ENV_VAR)
    if env:
        return _explicit(Path(env), f"${ENV_VAR}")
    for candidate in default_search_path():
        if candidate.is_file():
            return candidate
    return None


# ------------------------------------------------------------------------------------------
# Public entry points
# ------------------------------------------------------------------------------------------
_Signature = tuple[tuple[int, int, int, int] | None, ...]
_CACHE: dict[Path, tuple[_Signature, LaunchersConfig]] = {}
_CACHE_LOCK = threading.RLock()  # _remember_fast also runs under it
_RESOLVED: dict[str, tuple[Path, Path, Path]] = {}


@attrs.define(eq=False)
class _Watch:
    """The fast check of an unchanged configuration for one ``load_config`` argument: open
    descriptors of the present files and of their directory, with the (mtime_ns, size, inode)
    each must still show. ``fstat`` on a held descriptor costs less than half a path ``stat``:
    an in-place write changes the file's own numbers; a replacement by rename, a deletion or
    a created sidecar changes the directory's modification time."""

    fds: tuple[int, ...]
    expected: tuple[tuple[int, int, int], ...]
    config: LaunchersConfig

    def unchanged(self) -> LaunchersConfig | None:
        fstat = os.fstat
        try:
            for fd, (mtime, size, ino) in zip(self.fds, self.expected, strict=False):
                st = fstat(fd)
                if st.st_mtime_ns != mtime or st.st_size != size or st.st_ino != ino:
                    return None
        except OSError:
            return None
        return self.config

    def close(self) -> None:
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass


_FAST: dict[str, _Watch] = {}


#: A file modified less than this long ago is also compared by content: on kernels with
#: coarse timestamps two writes in one clock tick keep mtime (and often the size).
_RACY_NS = 2_000_000_000


def _stat(path: Path) -> tuple[int, int, int, int] | None:
    """(mtime_ns, size, content digest when modified within the racy window else 0, inode)."""
    try:
        st = path.stat()
    except OSError:
        return None
    digest = 0
    if time.time_ns() - st.st_mtime_ns < _RACY_NS:
        try:
            with open(path, "rb") as f:  # a check, not a read of the configuration
                digest = hash(f.read()) or 1
        except OSError:
            pass
    return (st.st_mtime_ns, st.st_size, digest, st.st_ino)  # a rename changes the inode


def _stat_folder(path: Path) -> tuple[int, int, int] | None:
    """(mtime_ns, size, 1 if modified within the racy window else 0) of a directory."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, int(time.time_ns() - st.st_mtime_ns < _RACY_NS))


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConfigurationError(f"cannot read: {e.strerror or e}", file=str(path))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigurationError(
            f"not UTF-8 text (byte {e.start} cannot be decoded)", file=str(path)
        )


def _unchanged(raw: str) -> LaunchersConfig | None:
    """The configuration cached for the argument ``raw`` if none of its files changed since."""
    watch = _FAST.get(raw)
    return None if watch is None else watch.unchanged()


def _forget_fast(key: str) -> bool:
    """Drop the fast check of ``key``; whether there was one."""
    watch = _FAST.pop(key, None)
    if watch is None:
        return False
    watch.close()
    return True


#: ``_FAST`` key of the default search path (with the value of ``$HOME``)
_SEARCH = "\0search path of "
#: the configuration of "no file found": one value, so that the finder's memos keep working
_EMPTY = LaunchersConfig()


def _search_key() -> str | None:
    """The fast-check key of the default search path (``None`` when ``$LAUNCHERS_CONFIG`` is set)."""
    env = os.environ
    if env.get(ENV_VAR):
        return None
    return _SEARCH + env.get("HOME", "")


def load_config(config: Any = None) -> LaunchersConfig:
    """Load the configuration named by ``config`` (file, directory, ``LaunchersConfig``) or
    found on the search path; an empty ``LaunchersConfig`` when there is none."""
    if config.__class__ is str or isinstance(config, PurePath):  # the call made in loops
        unchanged = _unchanged(os.fspath(config))
        if unchanged is not None:
            return unchanged
    elif config is None:  # find_launcher() without config=, the other call made in loops
        key = _search_key()
        if key is not None:
            unchanged = _unchanged(key)
            if unchanged is not None:
                return unchanged
    if isinstance(config, LaunchersConfig):
        return config
    if config is not None and not isinstance(config, (str, os.PathLike)):
        raise ConfigurationError(
            f"config must be a path or a LaunchersConfig, not {type(config).__name__}"
        )
    # Experiment scripts call find_launcher(config=PATH) in loops: resolve a given argument
    # (or $LAUNCHERS_CONFIG) once, then only fstat the files to see whether they changed.
    raw = os.fspath(config) if config is not None else os.environ.get(ENV_VAR) or None
    key = raw if raw is not None else _search_key()
    if key is not None:
        unchanged = _unchanged(key)
        if unchanged is not None:
            return unchanged
        if _forget_fast(key) and raw is not None:
            _RESOLVED.pop(raw, None)  # something changed: resolve again (a re-pointed symlink)
    files = _RESOLVED.get(raw) if raw is not None else None
    watched: list[Path] = []
    if files is None:
        found = find_config_file(config)
        if raw is None:  # creating an earlier file of the search path is a change too
            watched = _earlier_candidates(found)
        if found is None:
            if key is not None:
                _remember_fast(key, None, None, (), _EMPTY, watched)
            return _EMPTY
        path = found.resolve()
        if found.parent != path.parent:  # a symlink: re-pointing it changes its directory
            watched.append(found.parent)
        files = (path, path.parent / CONNECTORS_NAME, path.parent / TOKENS_NAME)
        if raw is not None:
            _RESOLVED[raw] = files
    path, sidecars = files[0], files[1:]
    folder = _stat_folder(path.parent)  # before the files: an entry created after is noticed
    signature = tuple(_stat(p) for p in files)
    if signature[0] is None:  # the file went away since it was resolved
        if raw is not None:
            _RESOLVED.pop(raw, None)
        find_config_file(config)  # raises the clear "does not exist" error
    with _CACHE_LOCK:
        hit = _CACHE.get(path)
        if hit is not None and hit[0] == signature:
            _remember_fast(key, files, folder, signature, hit[1], watched)
            return hit[1]
    text = _read_text(path)
    connectors_text, tokens_text = (
        _read_text(p) if stat is not None else None
        for p, stat in zip(sidecars, signature[1:], strict=True)
    )
    result = load_text(
        text,
        str(path),
        connectors=(connectors_text, str(sidecars[0])),
        tokens=(tokens_text, str(sidecars[1])),
    )
    result = attrs.evolve(result, path=path)
    with _CACHE_LOCK:
        _CACHE[path] = (signature, result)
    _remember_fast(key, files, folder, signature, result, watched)
    return result


def _earlier_candidates(found: Path | None) -> list[Path]:
    """The directories whose modification time changes when a search-path file that would
    come before ``found`` (every one, when nothing was found) is created: for each such
    candidate, its nearest existing ancestor."""
    out: list[Path] = []
    for candidate in default_search_path():
        if candidate == found:
            break
        parent = candidate.parent
        while not parent.is_dir() and parent != parent.parent:
            parent = parent.parent
        if parent not in out:
            out.append(parent)
    return out


def _remember_fast(
    key: str | None,
    files: tuple[Path, Path, Path] | None,
    folder: tuple[int, int, int] | None,
    signature: _Signature,
    result: LaunchersConfig,
    watched: list[Path],
) -> None:
    """Record the fast check of ``key``: descriptors of the present files, of their directory
    and of the ``watched`` directories, when every one is old enough to be trusted (a file
    or directory modified in the last 2 s keeps the slow, content-comparing check)."""
    if key is None:
        return
    if any(sig is not None and sig[2] for sig in signature):
        return  # modified within the racy window
    targets: list[tuple[Path, tuple[int, ...] | None]] = [(d, None) for d in watched]
    if files is not None:
        if folder is None or folder[2]:
            return
        targets.append((files[0].parent, folder))
        targets.extend((p, sig) for p, sig in zip(files, signature, strict=True) if sig is not None)
    fds: list[int] = []
    expected: list[tuple[int, int, int]] = []
    now = time.time_ns()
    try:
        for p, sig in targets:
            fd = os.open(p, os.O_RDONLY)
            fds.append(fd)
            st = os.fstat(fd)
            if sig is not None and (st.st_mtime_ns, st.st_size) != (sig[0], sig[1]):
                raise OSError("changed while being loaded")
            if now - st.st_mtime_ns < _RACY_NS:
                raise OSError("modified within the racy window")
            expected.append((st.st_mtime_ns, st.st_size, st.st_ino))
    except OSError:
        for fd in fds:
            os.close(fd)
        return
    with _CACHE_LOCK:
        _forget_fast(key)
        _FAST[key] = _Watch(tuple(fds), tuple(expected), result)


def load_config_text(text: str, file: str | None = None) -> LaunchersConfig:
    """Validate and convert the text of a ``launchers.yaml`` (no other file is read)."""
    return load_text(text, file if file is not None else "<config>")


def clear_cache() -> None:
    """Forget every cached configuration (tests; a long-running process after a move)."""
    with _CACHE_LOCK:
        _CACHE.clear()
        _RESOLVED.clear()
        for raw in list(_FAST):
            _forget_fast(raw)


__all__ = [
    "CONFIG_NAME",
    "CONNECTORS_NAME",
    "ENV_VAR",
    "TOKENS_NAME",
    "clear_cache",
    "default_search_path",
    "find_config_file",
    "load_config",
    "load_config_text",
]
