"""Find, read, validate and cache ``launchers.yaml`` (docs/design/finder.md §4, §7).

``load_config(config=None)`` looks for the file (argument, ``$LAUNCHERS_CONFIG``,
``~/.config/launchers/launchers.yaml``, ``~/.config/experimaestro/launchers.yaml``), reads
``connectors.yaml`` and ``tokens.yaml`` beside it, validates everything at once and returns a
``LaunchersConfig``. Results are cached by (path, mtime_ns, size) of every file read, so an
unchanged file is never read twice and an edited one is read again (on the next call:
the files are stat'ed every time; absent sidecars through their directory's mtime). ``load_config_text`` checks
a text without touching the disk. Every problem is a ``ConfigurationError`` naming file, line,
column and key path.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path, PurePath
from typing import Any

import attrs

from launchers.config.keypath import join
from launchers.config.located import LDict, load_located, plain
from launchers.config.model import (
    BatchOptions,
    CPUConfig,
    FirecrestGroup,
    FirecrestSite,
    GPUConfig,
    Group,
    LaunchersConfig,
    LocalGPU,
    LocalGroup,
    NodeGroup,
    Partition,
    Position,
    QoS,
    ResourceConfig,
    SlurmGroup,
    SSHConnectorConfig,
    UnicoreGroup,
    UnicoreSite,
    regex_gpu,
)
from launchers.config.problems import Loc, describe, did_you_mean
from launchers.config.reader import Reader, Sec
from launchers.errors import ConfigurationError
from launchers.remote.environment import validate_environment

CONFIG_NAME = "launchers.yaml"
CONNECTORS_NAME = "connectors.yaml"
TOKENS_NAME = "tokens.yaml"
ENV_VAR = "LAUNCHERS_CONFIG"
_GROUP_KINDS = ("local", "slurm", "unicore", "firecrest")
_NO_CONFIGURATION = ResourceConfig()  # frozen: one shared value for "nothing set"


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
    result = _load(
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
    return _load(text, file if file is not None else "<config>")


def clear_cache() -> None:
    """Forget every cached configuration (tests; a long-running process after a move)."""
    with _CACHE_LOCK:
        _CACHE.clear()
        _RESOLVED.clear()
        for raw in list(_FAST):
            _forget_fast(raw)


# ------------------------------------------------------------------------------------------
# Building the model
# ------------------------------------------------------------------------------------------
def _load(
    text: str,
    file: str,
    connectors: tuple[str | None, str] = (None, ""),
    tokens: tuple[str | None, str] = (None, ""),
) -> LaunchersConfig:
    doc = load_located(text, file)
    reader = Reader(file)
    builder = _Builder(reader)
    if doc is not None and not isinstance(doc, dict):
        reader.problem(
            Position(file=file, line=1, column=1),
            "",
            "the top level must be a mapping of launcher kinds (local, slurm, unicore, "
            f"firecrest) and optionally connectors and tokens; found {describe(doc)}",
        )
        reader.raise_if_any()
    top = reader.section(doc, "top", "", Loc(_top_position(doc, file), ""))
    if not isinstance(top, Sec):  # pragma: no cover - a mapping always gives a Sec
        reader.raise_if_any()
        return LaunchersConfig()
    builder.read_tokens(top, tokens)
    builder.read_connectors(top, connectors)
    groups: list[Group] = []
    for kind in top.values:
        if kind not in _GROUP_KINDS:
            continue
        for kind_index, sec in enumerate(top.values[kind]):
            group = builder.group(kind, sec, len(groups), kind_index)
            if group is not None:
                groups.append(group)
    reader.raise_if_any()
    estimate = top.get("estimate")
    return LaunchersConfig(
        groups=tuple(groups),
        connectors=builder.connectors,
        tokens=builder.tokens,
        strategy=top.get("strategy", "order"),
        estimate_timeout=float(estimate.get("timeout", 5)) if isinstance(estimate, Sec) else 5.0,
        estimate_cache=float(estimate.get("cache", 30)) if isinstance(estimate, Sec) else 30.0,
    )


def _top_position(doc: Any, file: str) -> Position:
    if isinstance(doc, LDict) and doc.position.line is not None:
        return doc.position
    return Position(file=file, line=1, column=1)


class _Builder:
    """Turns checked sections into model values and runs the cross-key checks."""

    def __init__(self, reader: Reader) -> None:
        self.r = reader
        self.tokens: dict[str, int] = {}
        self.token_pos: dict[str, Position] = {}
        self.connectors: dict[str, SSHConnectorConfig] = {}
        self.ids: dict[str, str] = {}

    # -- top-level tokens and connectors ----------------------------------------------------
    def read_tokens(self, top: Sec, sidecar: tuple[str | None, str]) -> None:
        inline = top.get("tokens")
        if inline is not None:
            for name, count in inline.values.items():
                self.tokens[name] = count
                self.token_pos[name] = inline.locs[name].position
        text, file = sidecar
        if text is None:
            return
        doc = load_located(text, file)
        if doc is None:
            return
        sec = self.r.section(doc, "tokens_file", "", Loc(_top_position(doc, file), ""))
        if not isinstance(sec, Sec):
            return
        for name, tok in sec.get("countertoken", {}).items():
            if name in self.tokens:
                first = self.token_pos[name]
                self.r.problem(
                    tok.pos,
                    tok.path,
                    f"token {name!r} is also defined at {first.file}:{first.line}; keep one",
                )
                continue
            self.token_pos[name] = tok.pos  # known even when its count was wrong
            if "tokens" in tok:
                self.tokens[name] = tok.get("tokens")

    def read_connectors(self, top: Sec, sidecar: tuple[str | None, str]) -> None:
        sections: list[Sec] = []
        inline = top.get("connectors")
        if inline is not None:
            sections.append(inline)
        text, file = sidecar
        if text is not None:
            doc = load_located(text, file)
            if doc is not None:
                sec = self.r.section(doc, "connectors", "", Loc(_top_position(doc, file), ""))
                if isinstance(sec, Sec):
                    sections.append(sec)
        first_pos: dict[str, Position] = {}
        for sec in sections:
            for name, ssh in sec.get("ssh", {}).items():
                if name == "local":
                    self.r.problem(ssh.pos, ssh.path, "'local' is reserved for the local connector")
                    continue
                if name in first_pos:
                    p = first_pos[name]
                    self.r.problem(
                        ssh.pos,
                        ssh.path,
                        f"connector {name!r} is also defined at {p.file}:{p.line}; keep one",
                    )
                    continue
                first_pos[name] = ssh.pos
                port = ssh.get("port", 22)
                if port > 65535:
                    self.r.problem(
                        ssh.at("port"),
                        join(ssh.path, "port"),
                        f"a port is at most 65535, not {port}",
                    )
                if "hostname" not in ssh:
                    continue  # already reported
                self.connectors[name] = SSHConnectorConfig(name=name, **ssh.values)

    # -- groups --------------------------------------------------------------------------
    def group(self, kind: str, sec: Sec, index: int, kind_index: int = 0) -> Group | None:
        gid = sec.get("id")
        if gid is not None:
            if gid in self.ids:
                self.r.problem(
                    sec.at("id"),
                    join(sec.path, "id"),
                    f"id {gid!r} is already used by {self.ids[gid]}",
                )
            else:
                self.ids[gid] = sec.path
        connector = sec.get("connector", "local")
        if connector != "local" and connector not in self.connectors:
            known = ", ".join(sorted(self.connectors)) or "none"
            self.r.problem(
                sec.at("connector"),
                join(sec.path, "connector"),
                f"unknown connector {connector!r}: use local or an SSH connector declared "
                f"under connectors: ssh: or in connectors.yaml (declared: {known})"
                f"{did_you_mean(connector, ['local', *self.connectors])} (experimaestro 1.5.7 "
                f'loaded the file, then failed with "No connector with identifier {connector}" '
                "when it chose this group)",
            )
        common: dict[str, Any] = {
            "id": gid,
            "weight": sec.get("weight", 0),
            "tags": sec.get("tags", ()),
            "batch": self.batch(sec.get("batch")),
            "index": index,
            "kind_index": kind_index,
            "position": sec.pos,
        }
        if kind == "local":
            return self.local(sec, common, connector)
        matching = self.matching(sec)
        if kind == "slurm":
            return SlurmGroup(
                connector=connector,
                **common,
                **matching,
                use_hosts=sec.get("use_hosts", True),
                query_slurm=sec.get("query_slurm", False),
                path=sec.get("path"),
                gpu_option=sec.get("gpu_option", "gpus-per-node"),
                sbatch_options=sec.get("sbatch_options", ()),
                export=sec.get("export", "ALL"),
                env=tuple(sec.get("env", {}).items()),
                python=sec.get("python"),
                status_source=sec.get("status_source", "auto"),
                fatal_pending=sec.get("fatal_pending", "cancel"),
                fatal_reasons_add=self._fatal(sec, "add"),
                fatal_reasons_remove=self._fatal(sec, "remove"),
                max_requeues=sec.get("max_requeues"),
                resume_signal=sec.get("resume_signal"),
                resume_grace=sec.get("resume_grace"),
                lost_after=sec.get("lost_after"),
                poll_max=sec.get("poll_max"),
            )
        environment = self.environment(sec, kind)
        site = sec.get("site")
        if kind == "unicore":
            return UnicoreGroup(
                **common,
                **matching,
                site=self.unicore_site(site) if isinstance(site, Sec) else None,
                environment=environment,
            )
        return FirecrestGroup(
            **common,
            **matching,
            use_hosts=sec.get("use_hosts", True),
            gpu_option=sec.get("gpu_option", "gpus-per-node"),
            site=self.firecrest_site(site) if isinstance(site, Sec) else None,
            environment=environment,
        )

    @staticmethod
    def _fatal(sec: Sec, which: str) -> tuple[str, ...]:
        fr = sec.get("fatal_reasons")
        return tuple(fr.get(which, ())) if isinstance(fr, Sec) else ()

    def batch(self, sec: Sec | None) -> BatchOptions | None:
        if not isinstance(sec, Sec):
            return None
        values = dict(sec.values)
        if values.get("slots") == "auto":
            values["slots"] = None
        return BatchOptions(**values)

    def local(self, sec: Sec, common: dict[str, Any], connector: str) -> LocalGroup:
        cpu = sec.get("cpu")
        gpus = tuple(
            LocalGPU(
                model=g.get("model"),
                count=g.get("count", 1),
                memory=g.get("memory", 0),
                min_memory=g.get("min_memory"),
                kind=g.get("kind", "cuda"),
            )
            for g in sec.get("gpus", [])
        )
        kinds = {g.kind for g in gpus}
        if "mps" in kinds and len(kinds) > 1:
            self.r.problem(
                sec.at("gpus"),
                join(sec.path, "gpus"),
                "an Apple GPU (kind: mps) shares the machine's memory and is its only GPU: "
                "declare it alone, or describe the other GPUs in another local group",
            )
        tokens = sec.get("tokens")
        token_items: tuple[tuple[str, int], ...] = ()
        if isinstance(tokens, Sec):
            token_items = tuple(tokens.values.items())
            if connector != "local" and token_items:
                self.r.problem(
                    sec.at("tokens"),
                    join(sec.path, "tokens"),
                    f"counter tokens work only with the local connector, not with SSH connector "
                    f"{connector!r} (token state lives on this machine)",
                )
            for name in tokens.values:
                if name not in self.token_pos:
                    known = ", ".join(sorted(self.tokens)) or "none"
                    self.r.problem(
                        tokens.locs[name],
                        join(tokens.path, name),
                        f"unknown token {name!r}: declare it under the top-level tokens: or "
                        f"in tokens.yaml (declared: {known}){did_you_mean(name, self.tokens)} "
                        f'(experimaestro 1.5.7 loaded the file, then failed with "No token with '
                        f'identifier {name}" when it chose this group)',
                    )
                # n > N is refused at submission, not here: N is read at each acquire, so a total
                # raised in tokens.yaml later takes effect without reloading this file
        return LocalGroup(
            connector=connector,
            **common,
            cpu=CPUConfig(**cpu.values) if isinstance(cpu, Sec) else CPUConfig(),
            gpus=gpus,
            tokens=token_items,
            disabled=sec.get("disabled", False),
            max_jobs=sec.get("max_jobs"),
            kill_grace=sec.get("kill_grace"),
            export=sec.get("export", "ALL"),
            env=tuple(sec.get("env", {}).items()),
            python=sec.get("python"),
        )

    # -- slurm-like matching keys ---------------------------------------------------------
    def configuration(self, sec: Any) -> ResourceConfig:
        if not isinstance(sec, Sec):
            return _NO_CONFIGURATION
        cpu = sec.get("cpu")
        gpu = sec.get("gpu")
        return ResourceConfig(
            max_duration=sec.get("max_duration"),
            cpu=CPUConfig(**cpu.values) if isinstance(cpu, Sec) else CPUConfig(),
            gpu=GPUConfig(**gpu.values) if isinstance(gpu, Sec) else GPUConfig(),
        )

    def matching(self, sec: Sec) -> dict[str, Any]:
        qos = {
            name: QoS(
                name=name,
                max_duration=q.get("max_duration"),
                min_gpu=q.get("min_gpu", 0),
                priority=q.get("priority", 0),
                partition_time_limit=q.get("partition_time_limit", False),
                position=q.pos,
            )
            for name, q in sec.get("qos", {}).items()
        }
        configuration = self.configuration(sec.get("configuration"))
        features = {
            name: self.configuration(f.get("configuration"))
            for name, f in sec.get("features", {}).items()
        }
        mem_per_cpu = configuration.cpu.mem_per_cpu is not None or any(
            c.cpu.mem_per_cpu is not None for c in features.values()
        )
        regexes: tuple[re.Pattern[str], ...] = sec.get("features_regex", ())
        regex_problems: dict[str, str | None] = {}  # feature -> problem (features repeat)
        partitions = []
        for name, p in sec.get("partitions", {}).items():
            pconf = self.configuration(p.get("configuration"))
            mem_per_cpu = mem_per_cpu or pconf.cpu.mem_per_cpu is not None
            nodes = []
            for n in p.get("nodes", []):
                nconf = self.configuration(n.get("configuration"))
                # ``count`` is informative only: the older tool's files write ``count: 0``
                # beside a host list, and they must load unchanged.
                mem_per_cpu = mem_per_cpu or nconf.cpu.mem_per_cpu is not None
                if regexes:
                    self.regex_features(n, regexes, regex_problems)
                nodes.append(
                    NodeGroup(
                        hosts=n.get("hosts", ()),
                        features=n.get("features", ()),
                        count=n.get("count"),
                        configuration=nconf,
                        position=n.pos,
                    )
                )
            pqos = p.get("qos", ())
            for i, qname in enumerate(pqos):
                if qname not in qos:
                    known = ", ".join(qos) or "none"
                    self.r.problem(
                        p.item_at("qos", i),
                        f"{join(p.path, 'qos')}[{i}]",
                        f"unknown QoS {qname!r}: declare it in the group's qos: mapping "
                        f"(declared: {known}){did_you_mean(qname, qos)} (experimaestro 1.5.7 "
                        "loaded the file, then failed with an AttributeError at every search "
                        "reaching this partition)",
                    )
            partitions.append(
                Partition(
                    name=name,
                    nodes=tuple(nodes),
                    configuration=pconf,
                    priority=p.get("priority", 0),
                    disabled=p.get("disabled", False),
                    qos=pqos,
                    accounts=p.get("accounts", ()),
                    position=p.pos,
                )
            )
        use_mem = sec.get("use_memory_constraint", True)
        if not use_mem and not mem_per_cpu:
            self.r.problem(
                sec.at("use_memory_constraint"),
                sec.at("use_memory_constraint").key,  # as written (maybe the older spelling)
                "use_memory_constraint: false asks cores instead of memory, which needs "
                "cpu.mem_per_cpu in a configuration of this group (none is set)",
            )
        return {
            "partitions": tuple(partitions),
            "features_regex": regexes,
            "features": features,
            "configuration": configuration,
            "qos": qos,
            "use_features": sec.get("use_features", True),
            "use_memory_constraint": use_mem,
        }

    def regex_features(
        self, n: Sec, regexes: tuple[re.Pattern[str], ...], seen: dict[str, str | None]
    ) -> None:
        """docs/design/finder.md §4: the values ``features_regex`` reads from a node group's features
        (``cuda_count``, ``cuda_memory``) are checked at load, as the finder converts them
        (``model.regex_gpu``), each problem at the feature (``...nodes[0].features[1]``)."""
        for i, feature in enumerate(n.get("features", ())):
            if feature in seen:
                why = seen[feature]
            else:
                why = None
                for j, rx in enumerate(regexes):
                    m = rx.fullmatch(feature)
                    if m is None or not rx.groupindex:
                        continue
                    try:
                        regex_gpu(m.groupdict())
                    except ValueError as e:
                        why = f"feature {feature!r} matched by features_regex[{j}] {rx.pattern!r}: {e}"
                        break
                seen[feature] = why
            if why is not None:
                pos = n.item_at("features", i)
                self.r.problem(pos, pos.key, why)

    # -- remote sites ---------------------------------------------------------------------
    def _url(self, site: Sec, key: str) -> None:
        url = site.get(key)
        if isinstance(url, str) and not url.startswith(("http://", "https://")):
            self.r.problem(
                site.at(key),
                join(site.path, key),
                f"expected an http:// or https:// URL, found {url!r}",
            )

    def unicore_site(self, site: Sec) -> UnicoreSite | None:
        self._url(site, "url")
        if "url" not in site:
            return None
        return UnicoreSite(**site.values)

    def firecrest_site(self, site: Sec) -> FirecrestSite | None:
        self._url(site, "api_url")
        self._url(site, "token_url")
        version = site.get("api_version")
        if version is not None and version not in (1, 2):
            self.r.problem(
                site.at("api_version"),
                join(site.path, "api_version"),
                f"expected 1 or 2, found {version}",
            )
        if not all(k in site for k in ("api_url", "token_url", "machine")):
            return None
        return FirecrestSite(**site.values)

    def environment(self, sec: Sec, kind: str) -> dict[str, Any] | None:
        raw = sec.get("environment")
        if raw is None:
            return None
        path = join(sec.path, "environment")
        pos = sec.at("environment")
        if not isinstance(raw, dict):
            self.r.problem(
                pos,
                path,
                f"expected a mapping (the Environment of a Compute Backend Config), found {describe(raw)}",
            )
            return None
        try:
            validate_environment(
                raw, pos.file or self.r.file, path, site_kind=kind, problems=self.r.problems
            )
        except Exception as e:  # a validator bug must not hide the file's other problems
            self.r.problem(pos, path, f"cannot check environment: {type(e).__name__}: {e}")
        return plain(raw)


def summary(config: LaunchersConfig) -> str:
    """One line: groups by kind, partitions, node groups, connectors, tokens."""
    kinds: dict[str, int] = {}
    partitions = node_groups = 0
    for g in config.groups:
        kinds[g.kind] = kinds.get(g.kind, 0) + 1
        if isinstance(g, SlurmGroup):
            partitions += len(g.partitions)
            node_groups += sum(len(p.nodes) for p in g.partitions)
    by_kind = ", ".join(f"{n} {k}" for k, n in kinds.items())
    n = len(config.groups)
    text = f"{n} group{'s' if n != 1 else ''}"
    if by_kind:
        text += f" ({by_kind})"
    text += f", {partitions} partition{'s' if partitions != 1 else ''}"
    text += f", {node_groups} node group{'s' if node_groups != 1 else ''}"
    text += f", {len(config.connectors)} connector{'s' if len(config.connectors) != 1 else ''}"
    text += f", {len(config.tokens)} token{'s' if len(config.tokens) != 1 else ''}"
    return text


__all__ = [
    "CONFIG_NAME",
    "ENV_VAR",
    "clear_cache",
    "default_search_path",
    "find_config_file",
    "load_config",
    "load_config_text",
    "summary",
]
