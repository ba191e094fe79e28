"""The Slurm-like matching keys and the remote sites of a group, as model values.

A mixin of the loader's builder (``config.build``): partitions, node groups, features, QoS,
``features_regex`` (checked at load as the finder converts it) and the UNICORE/firecREST sites.
"""

from __future__ import annotations

import re
from typing import Any

from launchers.config.environment import EMPTY, Environment
from launchers.config.environment_read import from_section
from launchers.config.keypath import join
from launchers.config.model import (
    CPUConfig,
    FirecrestSite,
    GPUConfig,
    NodeGroup,
    Partition,
    QoS,
    ResourceConfig,
    UnicoreSite,
    regex_gpu,
)
from launchers.config.problems import did_you_mean
from launchers.config.reader import Reader, Sec

_NO_CONFIGURATION = ResourceConfig()  # frozen: one shared value for "nothing set"


class MatchingBuilder:
    """The part of the builder that reads matching keys and site mappings."""

    r: Reader

    def job_environment(self, sec: Sec) -> Environment:
        """The ``environment:`` of a group, partition or node group (``EMPTY`` when absent)."""
        env = sec.get("environment")
        return from_section(env, self.r) if isinstance(env, Sec) else EMPTY

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
                        job_environment=self.job_environment(n),
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
                    job_environment=self.job_environment(p),
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
        """docs/design/matching.md §4: the values ``features_regex`` reads from a node group's features
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
