"""Deviations from docs/design/matching.md found by an audit, each checked here once fixed.

1. ``features_regex`` values are validated at load (docs/design/matching.md §4), not at the first search.
2. ``--exclude`` only holds hosts of partitions still listed (docs/design/matching.md §5 soundness).
3. Python ``*`` follows the string ``*N`` rules (docs/design/matching.md §1, §2).
4. A group without an id is labelled by its index within its kind, as configuration errors
   name it (docs/design/matching.md §4, §5.5); the JSON ``"group"`` index is unchanged.
5. The caret of a ``RequirementSyntaxError`` stays under the column when the line has tabs (docs/design/matching.md §1).
6. A duplicate YAML key names its key path (docs/design/matching.md §4).
"""

from __future__ import annotations

import json
import pathlib
import textwrap

import pytest

from launchers import (
    ConfigurationError,
    RequirementSyntaxError,
    cpu,
    cuda_gpu,
    duration,
    find_launcher,
    parse,
)
from launchers.cli.main import main
from launchers.config.loader import load_config, load_config_text
from launchers.config.model import NodeGroup, Partition, SlurmGroup
from launchers.finder.hosts import build_index

G = 2**30


def _write(tmp_path: pathlib.Path, text: str) -> pathlib.Path:
    path = tmp_path / "launchers.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


# --- 1. features_regex values at load ------------------------------------------------------
REGEX_NO_UNIT = """
slurm:
  - id: c
    features_regex: ["gpu(?P<cuda_memory>[0-9]+)"]
    partitions:
      p:
        nodes:
          - hosts: [n1]
            features: [big, gpu40]
"""


def test_regex_capture_without_unit_is_a_load_error(tmp_path: pathlib.Path) -> None:
    path = _write(tmp_path, REGEX_NO_UNIT)
    with pytest.raises(ConfigurationError) as info:
        load_config(path)
    e = info.value
    assert e.file == str(path.resolve())
    assert (e.line, e.column) == (8, 29)  # the feature gpu40 itself
    assert e.key == "slurm[0].partitions.p.nodes[0].features[1]"
    assert "gpu40" in e.reason and "features_regex[0]" in e.reason and "no unit" in e.reason
    assert str(e).startswith(f"{e.file}:8:29: slurm[0].partitions.p.nodes[0].features[1]: ")


def test_regex_capture_not_a_whole_count_is_a_load_error() -> None:
    text = textwrap.dedent(
        """
        slurm:
          - id: c
            features_regex: ["GPU(?P<cuda_count>[0-9.x]+)", "M(?P<cuda_memory>.+)"]
            partitions:
              p:
                nodes:
                  - {hosts: [a], features: [GPU4, M16G]}
                  - {hosts: [b], features: [GPU2.5]}
                  - {hosts: [c], features: [Mlots]}
                  - {hosts: [d], features: [GPU2.5]}
        """
    )
    with pytest.raises(ConfigurationError) as info:
        load_config_text(text, "f.yaml")
    e = info.value
    assert e.key == "slurm[0].partitions.p.nodes[1].features[0]" and e.line == 9
    assert "'2.5'" in e.reason and "whole number" in e.reason
    # every bad feature is listed, each where it is written (a repeated one too)
    assert len(e.problems) == 3
    assert "slurm[0].partitions.p.nodes[2].features[0]" in e.problems[1]
    assert "cuda_memory" in e.problems[1] and "'lots'" in e.problems[1]
    assert "slurm[0].partitions.p.nodes[3].features[0]" in e.problems[2]


def test_validate_exits_2_on_a_bad_regex_capture(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, REGEX_NO_UNIT)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "slurm[0].partitions.p.nodes[0].features[1]" in err and "Traceback" not in err


def test_valid_regex_captures_still_load_and_match(tmp_path: pathlib.Path) -> None:
    path = _write(
        tmp_path,
        """
        slurm:
          - id: c
            features_regex: ["GPU(?P<cuda_count>[0-9]+)", "GPUM(?P<cuda_memory>[0-9]+G)", "X(?P<cuda_count>[0-9]*)"]
            partitions:
              p:
                nodes:
                  - {hosts: [a], features: [GPU4, GPUM32G, other, X]}
        """,
    )
    # "X" matches with an empty cuda_count: not a number either
    with pytest.raises(ConfigurationError, match=r"features\[3\].*cuda_count captured ''"):
        load_config(path)
    path.write_text(path.read_text().replace(', "X(?P<cuda_count>[0-9]*)"', ""))
    launcher = find_launcher(cuda_gpu(mem="32G") * 4, config=path)
    assert launcher.options.gpus_per_node == 4
    assert find_launcher(cuda_gpu(mem="33G"), config=path, default=None) is None


def test_regex_layer_still_guards_groups_built_in_python() -> None:
    import re

    group = SlurmGroup(
        id="py",
        features_regex=(re.compile("gpu(?P<cuda_memory>[0-9]+)"),),
        partitions=(Partition(name="p", nodes=(NodeGroup(features=("gpu40",)),)),),
    )
    with pytest.raises(ConfigurationError, match="no unit"):
        build_index(group)


# --- 2. --exclude and dropped partitions ----------------------------------------------------
EXCLUDE_THEN_DROP = """
slurm:
  - id: s
    use_features: false
    partitions:
      p:
        priority: 1
        nodes:
          - {hosts: [HOSTS], configuration: {cpu: {cores: 16}}}
      r:
        nodes:
          - {hosts: [r1], configuration: {cpu: {cores: 16}}}
          - {hosts: [BAD], configuration: {cpu: {cores: 2}}}
          - {count: 3, configuration: {cpu: {cores: 2}}}
"""


@pytest.mark.parametrize(("hosts", "bad"), [("p1", "r2"), ("h1, h2", "h2")])
def test_exclude_forgets_hosts_of_a_dropped_partition(
    tmp_path: pathlib.Path, hosts: str, bad: str
) -> None:
    path = _write(tmp_path, EXCLUDE_THEN_DROP.replace("HOSTS", hosts).replace("BAD", bad))
    launcher = find_launcher("cpu(cores=8)", config=path)
    assert launcher.sbatch_args() == ["--partition=p", "--cpus-per-task=8"]
    assert launcher.options.exclude is None
    notes = [line for line in launcher.explanation if "soundness" in line]
    assert any("dropped partition r" in line for line in notes), notes
    assert not any("--exclude" in line for line in notes), notes


def test_exclude_kept_for_a_partition_still_listed(tmp_path: pathlib.Path) -> None:
    # r is the best partition: it stays listed, its excluded hosts stay excluded, and its
    # count-only node group is the warning of docs/design/matching.md §7
    text = EXCLUDE_THEN_DROP.replace("HOSTS", "p1").replace("BAD", "r2")
    text = text.replace("priority: 1", "priority: 0").replace(
        "      r:\n", "      r:\n        priority: 5\n"
    )
    path = _write(tmp_path, text)
    launcher = find_launcher("cpu(cores=8)", config=path)
    assert launcher.sbatch_args() == ["--partition=r,p", "--cpus-per-task=8", "--exclude=r2"]
    notes = [line for line in launcher.explanation if "soundness" in line]
    assert any("--exclude the hosts of node group 1" in line for line in notes), notes
    assert any("WARNING" in line for line in notes), notes


# --- 3. Python '*' like the string '*N' ------------------------------------------------------
@pytest.mark.parametrize(
    ("make", "text"),
    [
        (lambda: cpu() * 2, "cpu()*2"),
        (lambda: 2 * cpu(), "cpu()*2"),
        (lambda: duration("4h") * 2, "duration=4h*2"),
        (lambda: (cuda_gpu() & cpu(cores=2)) * 2, "(cuda() & cpu(cores=2))*2"),
        (lambda: (cuda_gpu() | cpu()) * 2, "(cuda() | cpu())*2"),
        (lambda: (cuda_gpu() | duration("1h")) * 3, "(cuda() | duration=1h)*3"),
    ],
)
def test_python_star_rejects_what_the_string_rejects(make: object, text: str) -> None:
    with pytest.raises(RequirementSyntaxError) as in_string:
        parse(text)
    with pytest.raises(RequirementSyntaxError) as in_python:
        make()  # type: ignore[operator]
    assert in_python.value.reason == in_string.value.reason
    assert "repeats GPUs" in in_python.value.reason
    assert isinstance(in_python.value, ValueError)
    e = in_python.value
    assert e.text[e.column - 1] == "*"  # the caret is under the '*' of the text shown


def test_python_star_zero_is_the_string_error() -> None:
    for value in (cuda_gpu(), cpu()):
        with pytest.raises(RequirementSyntaxError) as info:
            value * 0
        assert info.value.reason == "*0: the GPU count must be at least 1"


def test_python_star_on_gpus_is_unchanged() -> None:
    assert (cuda_gpu("24G") * 2).cuda_gpus == parse("cuda(mem=24G)*2").requirements[0].cuda_gpus
    union = (cuda_gpu("1G") | cuda_gpu() * 2) * 2
    assert union == parse("(cuda(mem=1G) | cuda()*2)*2")
    assert 3 * cuda_gpu() == cuda_gpu() * 3
    assert ((cuda_gpu() & cuda_gpu("2G")) * 2).requirements == parse(
        "(cuda() & cuda(mem=2G))*2"
    ).requirements
    assert (cuda_gpu() * 2 & cpu(cores=2)) == parse("cuda()*2 & cpu(cores=2)").requirements[0]


# --- 4. group labels -------------------------------------------------------------------------
LABELS = """
slurm:
  - id: s
    tags: [cluster]
    partitions: {p: {configuration: {cpu: {cores: 4}}}}
local:
  - cpu: {cores: 8}
    tags: [a]
  - cpu: {cores: 32}
    tags: [b]
"""


def test_group_label_is_its_index_within_its_kind(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, LABELS)
    config = load_config(path)
    assert [g.label for g in config.groups] == ["s", "local[0]", "local[1]"]
    assert [g.index for g in config.groups] == [0, 1, 2]
    assert main(["find", "cpu()", "--config", str(path), "--tags", "zz"]) == 1
    err = capsys.readouterr().err
    assert "local group local[0]:" in err and "local group local[1]:" in err
    assert "local[2]" not in err
    # JSON "group" stays the index in the file, across kinds (docs/design/matching.md §6)
    assert main(["find", "cpu(cores=16)", "--config", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["group"] == 2
    # the label is how configuration errors name the group
    with pytest.raises(ConfigurationError) as info:
        load_config_text(LABELS.replace("cores: 32", "cores: many"))
    assert info.value.key == "local[1].cpu.cores"


# --- 5. caret under a column after tabs ------------------------------------------------------
def test_caret_keeps_tabs() -> None:
    with pytest.raises(RequirementSyntaxError) as info:
        parse("duration=4h &\n\t cuda(mem=2G)*0")
    e = info.value
    assert (e.line, e.column) == (2, 16)
    source, caret = str(e).splitlines()[1:3]
    assert source == "    \t cuda(mem=2G)*0"
    assert caret == "    \t" + " " * 14 + "^"
    # on a terminal with any tab width the caret is under the offending '0'
    for width in (2, 4, 8):
        assert caret.expandtabs(width).index("^") == source.expandtabs(width).index("*0") + 1


def test_caret_without_tabs_is_unchanged() -> None:
    with pytest.raises(RequirementSyntaxError) as info:
        parse("cuda(mem=24G) & | cpu()")
    lines = str(info.value).splitlines()
    assert lines[2] == "    " + " " * 16 + "^"


# --- 6. duplicate YAML keys name their key path ----------------------------------------------
@pytest.mark.parametrize(
    ("text", "line", "key"),
    [
        ("slurm:\n  - id: c\n    id: d\n", 3, "slurm[0].id"),
        (
            "slurm:\n  - id: c\n    partitions:\n      p: {priority: 1}\n      p: {priority: 2}\n",
            5,
            "slurm[0].partitions.p",
        ),
        (
            "local:\n  - cpu: {cores: 1}\n  - cpu: {cores: 2, cores: 3}\n",
            3,
            "local[1].cpu.cores",
        ),
        ("local: []\nlocal: []\n", 2, "local"),
    ],
)
def test_duplicate_key_names_its_path(text: str, line: int, key: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        load_config_text(text, "f.yaml")
    e = info.value
    assert (e.file, e.line, e.key) == ("f.yaml", line, key)
    assert "duplicate key" in e.reason and f"f.yaml:{line}:" in str(e) and f"{key}: " in str(e)


def test_duplicate_key_in_an_anchor_is_named_where_written() -> None:
    text = "base: &b {x: 1, x: 2}\nlocal:\n  - <<: *b\n"
    with pytest.raises(ConfigurationError) as info:
        load_config_text(text)
    assert info.value.key == "base.x" and info.value.line == 1
