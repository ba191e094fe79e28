"""Build the ``launchers.yaml`` model from checked sections (docs/design/matching.md §4, §7).

``load_text`` reads one text (and the texts of its sidecars) with the key tables, converts every
section into frozen model values and runs the cross-key checks; every problem of the file is
collected and raised at once as a ``ConfigurationError`` naming file, line, column and key path.
"""

from __future__ import annotations

from typing import Any

from launchers.config.environment import EMPTY, Environment
from launchers.config.environment_read import read_into
from launchers.config.keypath import join
from launchers.config.keys import SECTIONS
from launchers.config.located import LDict, load_located, plain
from launchers.config.matching import MatchingBuilder
from launchers.config.model import (
    BatchOptions,
    CPUConfig,
    FirecrestGroup,
    Group,
    LaunchersConfig,
    LocalGPU,
    LocalGroup,
    Position,
    SlurmGroup,
    SSHConnectorConfig,
    UnicoreGroup,
)
from launchers.config.problems import Loc, describe, did_you_mean
from launchers.config.reader import Reader, Sec
from launchers.remote.environment import validate_environment

_GROUP_KINDS = ("local", "slurm", "unicore", "firecrest")


def load_text(
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


class _Builder(MatchingBuilder):
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
                env=self.variables(sec),
                python=sec.get("python"),
                job_environment=self.job_environment(sec).without_variables(),
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
        environment, block = self.environment(sec, kind)
        if environment is not None:
            for part in matching["partitions"]:
                levels = [part, *part.nodes]
                if any(not level.job_environment.is_empty for level in levels):
                    self.r.problem(
                        part.position,
                        part.position.key,
                        "environment: on a partition or node group is launchers.yaml's form, but "
                        "the group's environment is a Compute Backend Config Environment; a job's "
                        "environment takes one form: write the group's in launchers.yaml's form",
                    )
        site = sec.get("site")
        if kind == "unicore":
            return UnicoreGroup(
                **common,
                **matching,
                site=self.unicore_site(site) if isinstance(site, Sec) else None,
                environment=environment,
                job_environment=block,
            )
        return FirecrestGroup(
            **common,
            **matching,
            use_hosts=sec.get("use_hosts", True),
            gpu_option=sec.get("gpu_option", "gpus-per-node"),
            site=self.firecrest_site(site) if isinstance(site, Sec) else None,
            environment=environment,
            job_environment=block,
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
            env=self.variables(sec),
            python=sec.get("python"),
            job_environment=self.job_environment(sec).without_variables(),
        )

    def variables(self, sec: Sec) -> tuple[tuple[str, str], ...]:
        """``env:``, or its other spelling ``environment: variables:`` (both at once: a problem)."""
        env = sec.get("environment")
        inner = env.get("variables") if isinstance(env, Sec) else None
        if inner is not None and "env" in sec:
            self.r.problem(
                env.at("variables"),
                env.at("variables").key,
                "env: and environment: variables: are the same setting; keep one",
            )
        return tuple((inner if inner is not None else sec.get("env", {})).items())

    def environment(self, sec: Sec, kind: str) -> tuple[dict[str, Any] | None, Environment]:
        """A unicore/firecrest group's ``environment:``: a Compute Backend Config
        ``Environment`` (the mapping, run as Mantik runs it), or launchers.yaml's block (written
        by the one renderer, docs/remote-sites.md); never both in one mapping."""
        raw = sec.get("environment")
        if raw is None:
            return None, EMPTY
        path = join(sec.path, "environment")
        pos = sec.at("environment")
        if not isinstance(raw, dict):
            self.r.problem(
                pos,
                path,
                f"expected a mapping (the Environment of a Compute Backend Config), found {describe(raw)}",
            )
            return None, EMPTY
        ours = [k for k in raw if k in SECTIONS["environment"] or k == "env"]
        if ours:  # launchers.yaml's own form: the one renderer writes it in the site's script
            theirs = [k for k in raw if k not in ours]
            if theirs:
                self.r.problem(
                    pos,
                    path,
                    f"write the environment in one form: launchers.yaml's ({', '.join(map(str, ours))}) "
                    f"or the Compute Backend Config's ({', '.join(map(str, theirs))}), not both",
                )
                return None, EMPTY
            loc = Loc(sec.locs["environment"].src, path, key="environment")
            return None, read_into(raw, self.r, path, loc)
        try:
            validate_environment(
                raw, pos.file or self.r.file, path, site_kind=kind, problems=self.r.problems
            )
        except Exception as e:  # a validator bug must not hide the file's other problems
            self.r.problem(pos, path, f"cannot check environment: {type(e).__name__}: {e}")
        return plain(raw), EMPTY
