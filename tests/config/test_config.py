"""launchers.yaml: loading, every validation rule with its position, search path, cache."""

from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path

import pytest

from launchers.config.implicit import implicit_local_group, parse_meminfo, parse_nvidia_smi
from launchers.config.loader import clear_cache, find_config_file, load_config, load_config_text
from launchers.config.located import LDict, LList, load_located
from launchers.config.model import FirecrestGroup, LocalGroup, SlurmGroup, UnicoreGroup
from launchers.errors import ConfigurationError, LaunchersError
from paths import ROOT

EXAMPLE = ROOT / "configs" / "launchers.yaml"


def error_of(text: str, file: str = "f.yaml") -> ConfigurationError:
    with pytest.raises(ConfigurationError) as info:
        load_config_text(text, file)
    return info.value


def check(text: str, line: int, column: int, key: str, words: str) -> ConfigurationError:
    """The first problem is at line:column, under key, and its message contains words."""
    e = error_of(text)
    assert (e.file, e.line, e.column, e.key) == ("f.yaml", line, column, key), str(e)
    assert words in str(e), str(e)
    assert str(e).startswith(f"f.yaml:{line}:{column}: {key}: ")
    return e


# -- located YAML -------------------------------------------------------------------------
def test_located_positions() -> None:
    d = load_located("a: 1\nb:\n  - x\n  - {y: 2}\n", "p.yaml")
    assert isinstance(d, LDict) and isinstance(d["b"], LList)
    assert (d.position.line, d.position.column) == (1, 1)
    assert (d.key_position("b").line, d.key_position("b").column) == (2, 1)
    assert (d.value_position("a").line, d.value_position("a").column) == (1, 4)
    assert (d["b"].item_position(1).line, d["b"].item_position(1).column) == (4, 5)
    assert d["b"][1].key_position("y").column == 6
    assert d.key_position("b").file == "p.yaml"


def test_located_errors_and_aliases() -> None:
    with pytest.raises(ConfigurationError) as info:
        load_located("a: 1\nb: 2\na: 3\n", "d.yaml")
    assert (info.value.line, info.value.column) == (3, 1)
    assert "duplicate key 'a'" in str(info.value)
    with pytest.raises(ConfigurationError) as info:
        load_located("a: [1,\n", "s.yaml")
    assert info.value.file == "s.yaml" and info.value.line is not None
    assert "YAML syntax error" in str(info.value)
    rec = load_located("a: &x [*x]\nb: &y {k: 1}\nc: {<<: *y, z: 2}\n", "r.yaml")
    assert rec["a"][0] is rec["a"]
    assert rec["c"] == {"z": 2, "k": 1}
    assert load_located("", "e.yaml") is None
    assert load_located('{"a": [1, 2]}', "j.json") == {"a": [1, 2]}
    tabbed = load_located('{"a":\t1,\n\t"b": [1,\t2]}', "t.json")  # JSON allows tabs
    assert tabbed == {"a": 1, "b": [1, 2]} and tabbed.value_position("b").column == 7
    with pytest.raises(ConfigurationError) as info:
        load_located('{"a":\t1, "a": 2}', "t.json")
    assert (info.value.line, info.value.column) == (1, 10)


# -- loading -----------------------------------------------------------------------------
def test_example_covers_and_loads() -> None:
    cfg = load_config(EXAMPLE)
    kinds = [g.kind for g in cfg.groups]
    assert kinds == ["local", "slurm", "slurm", "unicore", "firecrest"]
    assert [g.index for g in cfg.groups] == [0, 1, 2, 3, 4]
    local, cluster, old, juwels, daint = cfg.groups
    assert isinstance(local, LocalGroup) and local.cpu.memory == 64 * 2**30
    assert local.tokens == (("gpu_slots", 1),) and local.max_jobs == 4
    assert local.env == (("OMP_NUM_THREADS", "4"), ("HF_HOME", "/data/hf"))
    assert local.batch is not None and local.batch.slots is None and local.batch.linger == 120
    assert isinstance(cluster, SlurmGroup) and cluster.connector == "cluster-front"
    assert cluster.configuration.gpu.min_mem_ratio == Fraction(1, 4)
    assert cluster.configuration.max_duration == 2 * 86400
    assert [p.name for p in cluster.partitions] == ["gpu", "cpu"]
    gpu = cluster.partitions[0]
    assert gpu.qos == ("normal", "long", "gpu-only") and gpu.priority == 10
    assert gpu.nodes[1].count == 8 and gpu.nodes[1].hosts == ()
    assert gpu.nodes[0].position.key == "slurm[0].partitions.gpu.nodes[0]"
    assert cluster.qos["long"].partition_time_limit is True
    assert cluster.features["A100"].gpu.memory == 80 * 2**30
    assert cluster.features_regex[0].pattern == r"GPU(?P<cuda_count>\d+)"
    assert cluster.sbatch_options[0] == ("mail-type", "END")
    assert cluster.export == "NONE" and cluster.fatal_reasons_add == ("ReqNodeNotAvail",)
    assert old.use_memory_constraint is False  # the misspelled alias
    assert isinstance(juwels, UnicoreGroup) and juwels.site is not None
    assert juwels.site.account == "myproject" and juwels.environment is not None
    assert isinstance(daint, FirecrestGroup) and daint.site is not None
    assert daint.site.machine == "daint" and daint.gpu_option == "gres"
    ssh = cfg.connectors["cluster-front"]
    assert ssh.identity_file == ("~/.ssh/id_ed25519",) and ssh.reconnect_timeout == 600
    assert ssh.strict_host_key_checking == "accept-new"
    assert dict(cfg.tokens) == {"gpu_slots": 2, "heavy_io": 1}


def test_empty_files_mean_no_configuration() -> None:
    for text in ("", "# nothing\n", "local: []\nslurm: []\n", "slurm:\n", "{}"):
        assert load_config_text(text).is_empty


def test_experimaestro_style_file_loads_unchanged() -> None:
    text = """\
local:
  - connector: local
    weight: 5
    cpu: { cores: 40, memory: 1G }
  - weight: 4
    tokens:
      localtoken: 1
    cpu: { cores: 40, memory: 8G }
    gpus:
      - model: GTX1080
        count: 1
        memory: 8116MiB
tokens:
  localtoken: 1
slurm:
  - id: manual
    connector: local
    use_features: true
    use_hosts: true
    use_memory_contraint: true
    query_slurm: false
    configuration:
      cpu:
        mem_per_cpu: 2G
      gpu:
        min_mem_ratio: 0.8
    features_regex:
      - GPU(?P<cuda_count>\\d+)
      - GPUM(?P<cuda_memory>\\d+G)
    partitions:
      big_gpus:
        priority: 2
        nodes:
          - hosts: [host1, host2]
            features: [A6000, GPU3, GPUM48G]
            count: 2
"""
    cfg = load_config_text(text, "xpm.yaml")
    assert len(cfg.groups) == 3
    assert cfg.groups[1].gpus[0].memory == 8116 * 2**20  # type: ignore[union-attr]


# -- every validation rule, with its position ---------------------------------------------
def test_unknown_key_with_suggestion_and_path() -> None:
    text = (
        "slurm:\n  - id: a\n    partitions:\n      hard:\n        nodes:\n"
        "          - {hosts: [a]}\n          - {hosts: [b], featurs: [x]}\n"
    )
    check(text, 7, 26, "slurm[0].partitions.hard.nodes[1].featurs", "did you mean 'features'")


def test_wrong_type_in_list_item() -> None:
    text = "slurm:\n  - id: a\n    partitions:\n      hard:\n        nodes:\n          - features: [x, {a: 1}]\n"
    check(text, 6, 27, "slurm[0].partitions.hard.nodes[0].features[1]", "expected a string")


def test_wrong_types() -> None:
    check("local:\n  - weight: '3'\n", 2, 13, "local[0].weight", "write 3 without quotes")
    check("local:\n  - tags: gpu\n", 2, 11, "local[0].tags", "write [gpu]")
    check("local:\n  - disabled: 1\n", 2, 15, "local[0].disabled", "expected true or false")
    check("slurm:\n  id: a\n", 2, 3, "slurm", "expected a list")
    check("local:\n  - cpu: 4\n", 2, 10, "local[0].cpu", "expected a mapping")


def test_missing_required_id() -> None:
    check("slurm:\n  - partitions: {}\n", 2, 5, "slurm[0]", "missing required key 'id'")
    check("unicore:\n  - site: {url: 'https://h/s/rest/core'}\n", 2, 5, "unicore[0]", "'id'")


def test_sizes_need_units() -> None:
    e = check(
        "local:\n  - cpu: {cores: 4, memory: 4000}\n", 2, 29, "local[0].cpu.memory", "has no unit"
    )
    assert "write a size such as" in str(e)
    check("slurm:\n  - id: a\n    configuration: {gpu: {memory: '16'}}\n", 3, 35,
          "slurm[0].configuration.gpu.memory", "has no unit")  # fmt: skip


def test_bad_durations() -> None:
    check("slurm:\n  - id: a\n    configuration: {max_duration: 4}\n", 3, 35,
          "slurm[0].configuration.max_duration", "needs a unit")  # fmt: skip
    check("slurm:\n  - id: a\n    qos: {q: {max_duration: 4 fortnights}}\n", 3, 29,
          "slurm[0].qos.q.max_duration", "unknown duration unit")  # fmt: skip
    check("local:\n  - batch: {linger: soon}\n", 2, 21, "local[0].batch.linger", "not a duration")


def test_ratio_bounds() -> None:
    check("slurm:\n  - id: a\n    configuration: {gpu: {min_mem_ratio: 1.5}}\n", 3, 42,
          "slurm[0].configuration.gpu.min_mem_ratio", "between 0 and 1")  # fmt: skip


def test_invalid_regexes() -> None:
    text = "slurm:\n  - id: a\n    features_regex: ['GPU(?P<count>\\d+)', '(']\n"
    e = check(text, 3, 22, "slurm[0].features_regex[0]", "unknown named group 'count'")
    assert "cuda_count" in str(e)
    assert "f.yaml:3:43: slurm[0].features_regex[1]: invalid regular expression" in str(e)


def test_unknown_qos_in_partition() -> None:
    text = (
        "slurm:\n  - id: a\n    qos: {normal: {}}\n    partitions: {p: {qos: [normal, nromal]}}\n"
    )
    check(text, 4, 36, "slurm[0].partitions.p.qos[1]", "unknown QoS 'nromal'")


def test_memory_constraint_needs_mem_per_cpu() -> None:
    text = "slurm:\n  - id: a\n    use_memory_constraint: false\n"
    check(text, 3, 28, "slurm[0].use_memory_constraint", "mem_per_cpu")
    ok = "slurm:\n  - id: a\n    use_memory_contraint: false\n    partitions: {p: {nodes: [{configuration: {cpu: {mem_per_cpu: 1G}}}]}}\n"
    assert load_config_text(ok).groups[0].use_memory_constraint is False  # type: ignore[union-attr]


def test_alias_and_key_together() -> None:
    text = "slurm:\n  - id: a\n    use_memory_contraint: true\n    use_memory_constraint: true\n"
    check(text, 4, 5, "slurm[0].use_memory_constraint", "same key")


def test_unknown_top_level_kind() -> None:
    check("slrum: []\n", 1, 1, "slrum", "did you mean 'slurm'")
    e = error_of("- a\n")
    assert e.line == 1 and "top level must be a mapping" in str(e)


def test_unknown_token_and_connector() -> None:
    check("tokens: {gpu: 1}\nlocal:\n  - tokens: {gpus: 1}\n", 3, 20, "local[0].tokens.gpus",
          "did you mean 'gpu'")  # fmt: skip
    check(
        "slurm:\n  - id: a\n    connector: frnt\n", 3, 16, "slurm[0].connector", "unknown connector"
    )
    e = check("connectors: {ssh: {front: {hostname: h}}}\nslurm:\n  - id: a\n    connector: frnt\n",
              4, 16, "slurm[0].connector", "did you mean 'front'")  # fmt: skip
    assert "front" in str(e)


def test_refusals_say_what_experimaestro_1_5_7_did() -> None:
    """Each refusal of a file experimaestro 1.5.7 also read says, in one line, what that tool
    did with it (observed by running it on the same minimal files)."""
    text = (
        "local:\n"
        "  - connector: local\n"
        "    tokens: {mytoken: 1}\n"
        "    cpu: {cores: 4, memory: 8G}\n"
        "    gpu:\n"
        "      - {model: GTX1080, count: 1, memory: 8116MiB}\n"
    )
    with pytest.raises(ConfigurationError) as info:
        load_config_text(text, "l.yaml")
    assert str(info.value).splitlines() == [
        "l.yaml:3:23: local[0].tokens.mytoken: unknown token 'mytoken': declare it under the "
        "top-level tokens: or in tokens.yaml (declared: none) (experimaestro 1.5.7 loaded the "
        'file, then failed with "No token with identifier mytoken" when it chose this group)',
        "l.yaml:5:5: local[0].gpu: unknown key 'gpu'; did you mean 'gpus'? (experimaestro 1.5.7 "
        'refused the whole file too: "gpu is not a valid field for DirectLauncherConfiguration")',
    ]
    cases = {
        "local:\n  - cpu: {memory: 4000}\n": 'refused the whole file too: "expected string or bytes-like object"',
        "local:\n  - cpu: {memory: '4000'}\n": "experimaestro 1.5.7 read it as 4000 bytes",
        "slurm:\n  - id: a\n    configuration: {max_duration: '3600'}\n": "read it as 3600 seconds",
        "slurm:\n  - id: a\n    weight: '3'\n": "experimaestro 1.5.7 converted it to 3",
        "slrum:\n  - id: a\n": "experimaestro 1.5.7 could not load such a file either",
        "local:\n  - connector: front\n": 'failed with "No connector with identifier front"',
        "slurm:\n  - id: a\n    partitions: {p: {qos: [q]}}\n": "failed with an AttributeError at every search",
    }
    for bad, note in cases.items():
        with pytest.raises(ConfigurationError) as info:
            load_config_text(bad, "x.yaml")
        assert note in str(info.value) and len(str(info.value).splitlines()) == 1, str(info.value)
    with pytest.raises(ConfigurationError) as info:  # a key experimaestro never had a section for
        load_config_text("unicore:\n  - id: u\n    site: {url: 'https://x', bogus: 1}\n", "u.yaml")
    assert "experimaestro" not in str(info.value)


def test_tokens_with_ssh_connector() -> None:
    text = "connectors: {ssh: {f: {hostname: h}}}\ntokens: {x: 2}\nlocal:\n  - connector: f\n    tokens: {x: 1}\n"
    check(text, 5, 13, "local[0].tokens", "only with the local connector")


def test_connector_keys() -> None:
    text = "connectors:\n  ssh:\n    f: {port: 22, strict_host_key_checking: maybe}\n"
    e = check(text, 3, 8, "connectors.ssh.f", "missing required key 'hostname'")
    assert (
        "3:45: connectors.ssh.f.strict_host_key_checking: expected one of yes, accept-new, no"
        in str(e)
    )
    cfg = load_config_text(
        "connectors:\n  ssh:\n    f: {hostname: h, strict_host_key_checking: no}\n"
    )
    assert cfg.connectors["f"].strict_host_key_checking == "no"  # YAML's boolean no


def test_remote_group_rules() -> None:
    text = "unicore:\n  - id: u\n    site: {url: 'https://x/y/rest/core', password: abc}\n    connector: x\n"
    e = check(text, 3, 42, "unicore[0].site.password", "password_env")
    assert "f.yaml:4:5: unicore[0].connector: is not allowed in a unicore group" in str(e)
    check("firecrest:\n  - id: d\n    site: {api_url: 'https://a', token_url: 'https://t', machine: m, client_secret: s}\n    query_slurm: true\n",
          3, 70, "firecrest[0].site.client_secret", "client_secret_env")  # fmt: skip
    check(
        "unicore:\n  - id: u\n    site: {url: 'ftp://x'}\n",
        3,
        17,
        "unicore[0].site.url",
        "https://",
    )
    check("unicore:\n  - id: u\n    site: {url: 'https://x'}\n    use_hosts: false\n", 4, 5,
          "unicore[0].use_hosts", "unknown key")  # fmt: skip


def test_environment_is_validated_and_kept() -> None:
    text = "unicore:\n  - id: u\n    site: {url: 'https://x/y/rest/core'}\n    environment: {Modules: [CUDA], Variables: {A: 1}}\n"
    group = load_config_text(text).groups[0]
    assert isinstance(group, UnicoreGroup)
    assert group.environment == {"Modules": ["CUDA"], "Variables": {"A": 1}}
    pytest.importorskip("launchers.remote.environment")
    bad = "unicore:\n  - id: u\n    site: {url: 'https://x/y/rest/core'}\n    environment: {Pyton: x}\n"
    e = error_of(bad)
    assert "4:19" in str(e) and "unicore[0].environment.Pyton" in str(e)


def test_runtime_keys() -> None:
    text = (
        "slurm:\n  - id: a\n    export: none\n    status_source: sacct\n    fatal_pending: report\n"
        "    env: {A: x, B: 2}\n    sbatch_options: {mail-type: END, exclusive: true}\n"
    )
    g = load_config_text(text).groups[0]
    assert isinstance(g, SlurmGroup)
    assert (g.export, g.status_source, g.fatal_pending) == ("NONE", "sacct", "report")
    assert g.env == (("A", "x"), ("B", "2"))
    assert ("exclusive", True) in g.sbatch_options
    check(
        "slurm:\n  - id: a\n    export: SOME\n",
        3,
        13,
        "slurm[0].export",
        "expected one of ALL, NONE",
    )
    check("slurm:\n  - id: a\n    env: {1A: x}\n", 3, 11, "slurm[0].env.1A", "not a variable name")
    check("slurm:\n  - id: a\n    env: {A: yes}\n", 3, 14, "slurm[0].env.A", "quote it")
    e = error_of("slurm:\n  - id: a\n    sbatch_options: {output: x, bogus: 1}\n")
    assert "slurm[0].sbatch_options.output" in str(e) and "slurm[0].sbatch_options.bogus" in str(e)
    check("local:\n  - batch: {slots: 0}\n", 2, 20, "local[0].batch.slots", "auto or an integer")


def test_duplicate_ids_and_yaml_errors() -> None:
    check("slurm:\n  - id: a\n  - id: a\n", 3, 9, "slurm[1].id", "already used by slurm[0]")
    e = error_of("local:\n  - cpu: {cores: 4\n")
    assert e.file == "f.yaml" and e.line == 3 and "YAML syntax error" in str(e)
    e = error_of("local: []\nlocal: []\n")
    assert (e.line, e.column) == (2, 1) and "duplicate key" in str(e)


def test_every_problem_is_reported_in_file_order() -> None:
    text = "local:\n  - weight: x\n    tags: y\nslurm:\n  - partitions: {}\n"
    e = error_of(text)
    lines = str(e).splitlines()
    assert [ln.split(":")[1] for ln in lines] == ["2", "3", "5"]
    assert e.line == 2


def test_group_index_follows_file_order_across_kinds() -> None:
    text = "slurm:\n  - id: s\nlocal:\n  - id: l\n  - id: m\nfirecrest:\n  - id: f\n    site: {api_url: 'https://a', token_url: 'https://t', machine: m}\n"
    cfg = load_config_text(text)
    assert [(g.label, g.index) for g in cfg.groups] == [("s", 0), ("l", 1), ("m", 2), ("f", 3)]


# -- files: search path, sidecars, cache ---------------------------------------------------
def test_search_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("LAUNCHERS_CONFIG", raising=False)
    assert find_config_file() is None and load_config().is_empty
    xpm = tmp_path / ".config" / "experimaestro" / "launchers.yaml"
    xpm.parent.mkdir(parents=True)
    xpm.write_text("local: [{id: xpm}]\n")
    assert find_config_file() == xpm
    own = tmp_path / ".config" / "launchers" / "launchers.yaml"
    own.parent.mkdir(parents=True)
    own.write_text("local: [{id: own}]\n")
    assert load_config().groups[0].id == "own"
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "launchers.yaml").write_text("local: [{id: env}]\n")
    monkeypatch.setenv("LAUNCHERS_CONFIG", str(other))  # a directory holding launchers.yaml
    assert load_config().groups[0].id == "env"
    assert load_config(xpm).groups[0].id == "xpm"  # the argument wins
    monkeypatch.setenv("LAUNCHERS_CONFIG", str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigurationError, match="does not exist"):
        load_config()
    with pytest.raises(ConfigurationError, match=r"holds no launchers\.yaml"):
        load_config(tmp_path)


def test_sidecar_files(tmp_path: Path) -> None:
    (tmp_path / "launchers.yaml").write_text(
        "local:\n  - tokens: {gpu: 1}\nslurm:\n  - id: c\n    connector: front\n"
    )
    (tmp_path / "tokens.yaml").write_text("countertoken:\n  gpu: {tokens: 3}\n")
    (tmp_path / "connectors.yaml").write_text(
        "ssh:\n  front: {hostname: h.example.org, port: 2222}\n"
    )
    cfg = load_config(tmp_path)
    assert dict(cfg.tokens) == {"gpu": 3}
    assert cfg.connectors["front"].port == 2222
    (tmp_path / "tokens.yaml").write_text("countertoken:\n  gpu: {tokns: 3}\n")
    with pytest.raises(ConfigurationError) as info:
        load_config(tmp_path)
    assert str(info.value) == (
        f"{tmp_path / 'tokens.yaml'}:2:9: countertoken.gpu.tokns: unknown key 'tokns'; "
        "did you mean 'tokens'? (experimaestro 1.5.7 refused the whole file too: \"tokns is not "
        'a valid field for CounterConfiguration")'
    )


def _touch_later(path: Path, text: str) -> None:
    before = path.stat().st_mtime_ns
    path.write_text(text)
    if path.stat().st_mtime_ns == before:  # coarse clocks: force a visible change
        os.utime(path, ns=(before + 1_000_000, before + 1_000_000))


def test_cache_rereads_only_changed_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clear_cache()
    f = tmp_path / "launchers.yaml"
    f.write_text("local: [{id: one}]\n")
    reads: list[Path] = []
    original = Path.read_bytes

    def counting(self: Path) -> bytes:
        reads.append(self)
        return original(self)

    monkeypatch.setattr(Path, "read_bytes", counting)
    first = load_config(f)
    assert load_config(f) is first and load_config(str(f)) is first
    assert reads == [f.resolve()]
    _touch_later(f, "local: [{id: two}]\n")
    assert load_config(f).groups[0].id == "two"
    assert len(reads) == 2
    (tmp_path / "tokens.yaml").write_text("countertoken: {t: {tokens: 1}}\n")  # a new sidecar
    assert dict(load_config(f).tokens) == {"t": 1}


def _age(*paths: Path, seconds: int = 60) -> None:
    """Move modification times into the past: the fast check trusts only settled files."""
    for path in paths:
        t = path.stat().st_mtime_ns - seconds * 1_000_000_000
        os.utime(path, ns=(t, t))


def test_fast_check_sees_a_replacement_with_the_same_size_and_time(tmp_path: Path) -> None:
    clear_cache()
    d = tmp_path / "cfg"
    d.mkdir()
    f = d / "launchers.yaml"
    f.write_text("local: [{id: one}]\n")
    _age(f, d)
    first = load_config(f)
    assert load_config(f) is first  # the held descriptors' fstat: unchanged
    new = d / "new.yaml"
    new.write_text("local: [{id: two}]\n")  # same size
    st = f.stat()
    os.utime(new, ns=(st.st_atime_ns, st.st_mtime_ns))  # same time
    os.rename(new, f)
    assert load_config(f).groups[0].id == "two"
    f.unlink()
    with pytest.raises(ConfigurationError, match="does not exist"):
        load_config(f)


def test_default_search_path_is_cached_and_watched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clear_cache()
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("LAUNCHERS_CONFIG", raising=False)
    assert load_config() is load_config()  # no file: one empty value, so finder memos work
    assert load_config().is_empty
    xpm = tmp_path / ".config" / "experimaestro"
    xpm.mkdir(parents=True)
    (xpm / "launchers.yaml").write_text("local: [{id: xpm}]\n")
    assert load_config().groups[0].id == "xpm"
    _age(xpm / "launchers.yaml", xpm, tmp_path / ".config", tmp_path)
    first = load_config()
    assert load_config() is first
    ours = tmp_path / ".config" / "launchers"
    ours.mkdir()  # an earlier file of the search path appears: it wins at once
    (ours / "launchers.yaml").write_text("local:\n- {id: ours}\n")
    assert load_config().groups[0].id == "ours"
    _age(ours / "launchers.yaml", ours, tmp_path / ".config")
    assert load_config() is load_config()
    with (ours / "launchers.yaml").open("a") as out:  # an in-place edit
        out.write("- {id: more}\n")
    assert [g.id for g in load_config().groups] == ["ours", "more"]
    (ours / "launchers.yaml").unlink()
    assert load_config().groups[0].id == "xpm"


def test_several_configurations_in_one_process(tmp_path: Path) -> None:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("local: [{id: a}]\n")
    b.write_text("local: [{id: b}]\n")
    assert load_config(a).groups[0].id == "a" and load_config(b).groups[0].id == "b"
    assert load_config(a).path == a.resolve()


def test_errors_never_escape_as_other_types(tmp_path: Path) -> None:
    f = tmp_path / "bin.yaml"
    f.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(LaunchersError):
        load_config(f)
    with pytest.raises(ConfigurationError):
        load_config(42)


# -- implicit local group -----------------------------------------------------------------
def test_implicit_local_group() -> None:
    g = implicit_local_group()
    assert g.implicit and g.kind == "local"
    assert g.cpu.cores is not None and g.cpu.cores >= 1
    assert g.cpu.memory is not None and g.cpu.memory > 0
    assert parse_meminfo("MemFree: 1 kB\nMemTotal:  16318412 kB\n") == 16318412 * 1024
    gpus = parse_nvidia_smi(
        "NVIDIA A100-SXM4-40GB, 40960\nNVIDIA A100-SXM4-40GB, 40960\nTesla T4, 15360\n"
    )
    assert [(x.model, x.count, x.memory) for x in gpus] == [
        ("NVIDIA A100-SXM4-40GB", 2, 40960 * 2**20),
        ("Tesla T4", 1, 15360 * 2**20),
    ]


def test_implicit_local_group_of_a_mac() -> None:
    """macOS: memory from `sysctl -n hw.memsize`; on Apple silicon one Apple GPU (kind mps)
    sharing that memory, so that mps() and gpu() requests find the machine."""
    from launchers import find_launcher
    from launchers.config.implicit import apple_gpus, parse_sysctl_int
    from launchers.config.model import CPUConfig, LaunchersConfig, LocalGroup

    memory = parse_sysctl_int("34359738368\n")
    assert memory == 32 * 2**30 and parse_sysctl_int("") is None and parse_sysctl_int("x") is None
    (gpu,) = apple_gpus("arm64", memory, "Apple M2 Pro\n")
    assert (gpu.model, gpu.count, gpu.memory, gpu.kind) == (
        "Apple M2 Pro GPU (MPS)",
        1,
        memory,
        "mps",
    )
    assert apple_gpus("x86_64", memory, "Intel(R) Core(TM) i9") == ()
    assert apple_gpus("arm64", None) == ()
    mac = LocalGroup(cpu=CPUConfig(cores=10, memory=memory), gpus=(gpu,), implicit=True)
    config = LaunchersConfig(groups=(mac,))
    assert find_launcher("mps(mem=8G) & cpu(mem=16G)", config=config).kind == "local"
    assert find_launcher("gpu(mem=8G)", config=config).kind == "local"
    assert find_launcher("cuda()", config=config, default=None) is None
    assert find_launcher("mps(mem=20G) & cpu(mem=16G)", config=config, default=None) is None


# -- performance ----------------------------------------------------------------------------
def test_ten_thousand_nodes_load_fast(tmp_path: Path) -> None:
    lines = ["slurm:", "  - id: big", "    partitions:"]
    n = 0
    for p in range(5):
        lines += [f"      part{p}:", "        nodes:"]
        for g in range(20):
            hosts = ", ".join(f"node{n + i:05d}" for i in range(100))
            n += 100
            lines.append(f"          - hosts: [{hosts}]")
            lines.append(f"            features: [GPU{g % 4}, 'cpu:x86.v{g % 3}']")
            lines.append("            configuration: {cpu: {cores: 64, memory: 512G}}")
    f = tmp_path / "launchers.yaml"
    f.write_text("\n".join(lines) + "\n")
    # The speed targets live in benchmarks/finder.py; here: it loads, and is cached.
    cfg = load_config(f)
    assert sum(len(ng.hosts) for p in cfg.groups[0].partitions for ng in p.nodes) == 10_000  # type: ignore[union-attr]
    assert load_config(f) is cfg  # unchanged file: not read again


def test_docs_describe_every_key() -> None:
    from launchers.config.keys import SECTIONS

    doc = (ROOT / "docs" / "configuration.md").read_text()
    for name, table in SECTIONS.items():
        for key in table:
            assert f"| `{key}` |" in doc, f"docs/configuration.md lacks {name}.{key}"


def test_resume_signal_takes_the_sig_prefix_as_the_python_api_does() -> None:
    """``resume_signal: SIGUSR2`` in launchers.yaml, as ``launcher.config(resume_signal="SIGUSR2")``."""
    from launchers.config.loader import load_config_text

    cfg = load_config_text("slurm:\n  - id: a\n    resume_signal: SIGUSR2\n")
    assert cfg.groups[0].resume_signal == "USR2"  # type: ignore[union-attr]
