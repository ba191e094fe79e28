"""Spec conformance of docs/design/matching.md (§1-§7), through the public surface only.

Every test checks one rule of docs/design/matching.md; its comment quotes the wording of the
behaviour spec the rule was first written in. Only ``import launchers`` and the ``launchers``
command are used: no internal module, no mock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import launchers
from launchers import (
    ConfigurationError,
    LauncherNotFoundError,
    LaunchersError,
    RequirementSyntaxError,
    cpu,
    cuda_gpu,
    duration,
    find_launcher,
    parse,
)
from paths import ROOT

K = 2**10
M = 2**20
G = 2**30
T = 2**40
HOUR = 3600
DAY = 24 * HOUR

# ------------------------------------------------------------------------------- helpers


def write(directory: Path, text: str, name: str = "launchers.yaml") -> Path:
    """Write ``text`` (dedented) to ``directory/name`` and return the path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def find(tmp_path: Path, text: str, *specs: Any, **kw: Any) -> Any:
    """``find_launcher(*specs, config=<text written to tmp_path>)``."""
    return find_launcher(*specs, config=write(tmp_path, text), **kw)


def sargs(tmp_path: Path, text: str, *specs: Any, **kw: Any) -> list[str]:
    """The sbatch arguments of the launcher found."""
    return list(find(tmp_path, text, *specs, **kw).sbatch_args())


def not_found(tmp_path: Path, text: str, *specs: Any, **kw: Any) -> bool:
    """True when no launcher fits (``default=None``)."""
    return find(tmp_path, text, *specs, default=None, **kw) is None


def clean_env(home: Path) -> dict[str, str]:
    """An environment with a private HOME and no LAUNCHERS_CONFIG."""
    env = {k: v for k, v in os.environ.items() if k != "LAUNCHERS_CONFIG"}
    env["HOME"] = str(home)
    env.pop("XDG_CONFIG_HOME", None)
    return env


def cli(
    *argv: str, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the ``launchers`` command; stderr never holds a traceback."""
    proc = subprocess.run(
        [sys.executable, "-m", "launchers", *argv],
        capture_output=True,
        text=True,
        input=stdin,
        env=env,
        timeout=120,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def in_process(code: str, home: Path, env_extra: dict[str, str] | None = None) -> str:
    """Run python ``code`` in a fresh interpreter with a private HOME; return its stdout."""
    env = clean_env(home)
    env.update(env_extra or {})
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def first(spec: str) -> Any:
    """The first alternative of a requirement string."""
    return parse(spec).requirements[0]


# A slurm group used by several sections: two partitions, features and GPUs.
BASIC = """
slurm:
  - id: cluster
    features_regex:
      - GPU(?P<cuda_count>\\d+)
      - GPUM(?P<cuda_memory>\\d+G)
    partitions:
      small:
        nodes:
          - hosts: [s1, s2]
            features: [GPU2, GPUM12G, TITAN]
            configuration: {cpu: {cores: 8, memory: 32G}}
      big:
        nodes:
          - hosts: [b1]
            features: [GPU4, GPUM48G, A6000]
            configuration: {cpu: {cores: 32, memory: 256G}}
"""


# =============================================================================== docs/design/matching.md §1
# docs/design/matching.md §1 Requirement strings


def test_s1_alternatives_in_order_of_preference() -> None:
    # "`|` separates **alternatives**, listed in order of preference. `&` joins **atoms** into
    # one alternative."
    u = parse("duration=4 days & cuda(mem=24G)*2 & cpu(mem=400M, cores=4) | cuda(mem=12G)*4")
    a, b = u.requirements
    assert a.duration == 4 * DAY
    assert [g.memory for g in a.cuda_gpus] == [24 * G, 24 * G]
    assert a.cpu.memory == 400 * M and a.cpu.cores == 4
    assert [g.memory for g in b.cuda_gpus] == [12 * G] * 4
    assert b.duration == 0


def test_s1_star_repeats_the_gpu() -> None:
    # "`*N` after a `cuda(...)` atom repeats its GPU N times."
    assert [g.memory for g in first("cuda(mem=8G)*3").cuda_gpus] == [8 * G] * 3


def test_s1_precedence_star_over_and_over_or() -> None:
    # "Precedence: `*` over `&` over `|`."
    u = parse("cpu(cores=2) & cuda()*2 | cpu(cores=3) & cuda(mem=1G)")
    assert len(u.requirements) == 2
    a, b = u.requirements
    assert a.cpu.cores == 2 and len(a.cuda_gpus) == 2
    assert b.cpu.cores == 3 and [g.memory for g in b.cuda_gpus] == [G]


@pytest.mark.parametrize(
    "text",
    [
        " cuda ( mem = 24G ) * 2 & cpu ( mem = 1G , cores = 4 ) | duration = 4h ",
        "\tcuda(\tmem=24G\t)\t*\t2\t&\tcpu(mem=1G,\tcores=4)\t|\tduration=4h",
        "cuda(mem=24G)*2\n&\ncpu(\nmem=1G,\ncores=4\n)\n|\nduration=4h\n",
    ],
)
def test_s1_whitespace_between_any_two_tokens(text: str) -> None:
    # "Whitespace (spaces, tabs, newlines) is allowed between any two tokens."
    assert parse(text) == parse("cuda(mem=24G)*2 & cpu(mem=1G, cores=4) | duration=4h")


def test_s1_empty_atoms() -> None:
    # "`cuda()` is one GPU with no memory floor; `cpu()` is one core."
    g = first("cuda()")
    assert len(g.cuda_gpus) == 1 and g.cuda_gpus[0].memory == 0
    c = first("cpu()")
    assert c.cpu.cores == 1 and c.cpu.memory == 0 and len(c.cuda_gpus) == 0


@pytest.mark.parametrize(
    "text", ["CUDA()", "Cpu(cores=2)", "cuda(MEM=1G)", "DURATION=4h", "cpu(Cores=2)"]
)
def test_s1_keywords_are_lower_case(text: str) -> None:
    # "Keys: `mem` for `cuda`; `mem` and `cores` for `cpu`. Keywords are lower case."
    with pytest.raises(RequirementSyntaxError):
        parse(text)


@pytest.mark.parametrize("text", ["cuda(cores=2)", "cpu(gpus=2)", "cpu(memory=1G)"])
def test_s1_unknown_keys_are_errors(text: str) -> None:
    # "Keys: `mem` for `cuda`; `mem` and `cores` for `cpu`."
    with pytest.raises(RequirementSyntaxError):
        parse(text)


@pytest.mark.parametrize(
    ("size", "nbytes"),
    [
        ("1K", K),
        ("1k", K),
        ("3M", 3 * M),
        ("24G", 24 * G),
        ("24g", 24 * G),
        ("2T", 2 * T),
        ("1KiB", K),
        ("5MiB", 5 * M),
        ("24GiB", 24 * G),
        ("24gib", 24 * G),
        ("1TiB", T),
        ("1KB", 1000),
        ("7MB", 7 * 10**6),
        ("24GB", 24 * 10**9),
        ("24gb", 24 * 10**9),
        ("1TB", 10**12),
        ("512B", 512),
        ("512b", 512),
        ("1.5G", 3 * G // 2),
        ("0.5K", 512),
    ],
)
def test_s1_size_units(size: str, nbytes: int) -> None:
    # "Sizes: a number (integer or decimal) followed by a unit, unit case-insensitive. `K`, `M`,
    # `G`, `T` and `KiB`, `MiB`, `GiB`, `TiB` are **binary** (1G = 2^30 bytes), as in Slurm;
    # `KB`, `MB`, `GB`, `TB` are decimal; `B` is bytes."
    assert first(f"cpu(mem={size})").cpu.memory == nbytes
    assert first(f"cuda(mem={size})").cuda_gpus[0].memory == nbytes
    assert cpu(mem=size) == first(f"cpu(mem={size})")


@pytest.mark.parametrize("text", ["cpu(mem=4000)", "cuda(mem=24)", "cpu(mem=1.5)"])
def test_s1_size_without_unit_is_an_error(text: str) -> None:
    # "A size without a unit is an error (the older tool silently read `mem=4000` as 4000 bytes)."
    with pytest.raises(RequirementSyntaxError):
        parse(text)
    with pytest.raises(RequirementSyntaxError):
        cpu(mem=text.split("=")[1].rstrip(")"))


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("30 sec", 30),
        ("1 second", 1),
        ("30 seconds", 30),
        ("5m", 300),
        ("5 min", 300),
        ("1 minute", 60),
        ("90 minutes", 5400),
        ("2h", 2 * HOUR),
        ("1 hour", HOUR),
        ("3 hours", 3 * HOUR),
        ("1.5h", 5400),
        ("4d", 4 * DAY),
        ("4 day", 4 * DAY),
        ("4 days", 4 * DAY),
        ("0.5d", 12 * HOUR),
        ("1w", 7 * DAY),
        ("2 week", 14 * DAY),
        ("2 weeks", 14 * DAY),
    ],
)
def test_s1_duration_units(text: str, seconds: int) -> None:
    # "Durations: a number (integer or decimal) and a unit: `s`, `sec`, `second(s)`, `m`,
    # `min`, `minute(s)`, `h`, `hour(s)`, `d`, `day(s)`, `w`, `week(s)`, with or without a space
    # (`4d`, `4 days`, `1.5h`, `90 minutes`)."
    assert first(f"duration={text}").duration == seconds
    assert first(f"duration={text.replace(' ', '')}").duration == seconds
    assert duration(text).duration == seconds


@pytest.mark.parametrize("text", ["duration=4", "duration=1.5", "duration=4 fortnights"])
def test_s1_bare_duration_is_an_error(text: str) -> None:
    # "A bare number is an error."
    with pytest.raises(RequirementSyntaxError):
        parse(text)


def test_s1_star_zero_is_an_error() -> None:
    # "`*N` needs N >= 1 (`*0` is an error; the older tool turned it into one GPU)."
    with pytest.raises(RequirementSyntaxError):
        parse("cuda(mem=1G)*0")
    with pytest.raises(RequirementSyntaxError):
        cuda_gpu("1G") * 0
    assert len(first("cuda()*1").cuda_gpus) == 1


@pytest.mark.parametrize(
    "text", ["cpu(cores=2, cores=8)", "cpu(mem=1G, mem=2G)", "cuda(mem=1G, mem=1G)"]
)
def test_s1_repeated_key_is_an_error(text: str) -> None:
    # "A key repeated inside one atom (`cpu(cores=2, cores=8)`) is an error."
    with pytest.raises(RequirementSyntaxError):
        parse(text)


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        ("cuda(mem=24G", 1, 13),
        ("cpu(cores=2, cores=8)", 1, 14),
        ("cuda(mem=1G) &\n  cpu(mem=4000)", 2, 11),
        ("cuda()*0", 1, 8),
        ("cuda(mem=1G) | | cpu()", 1, 16),
    ],
)
def test_s1_syntax_error_shape(text: str, line: int, column: int) -> None:
    # "Every syntax error is a `RequirementSyntaxError` (a `ValueError` and a `LaunchersError`)
    # whose message shows the text, a caret under the offending column, and what was expected;
    # it carries `.text`, `.line`, `.column`."
    with pytest.raises(RequirementSyntaxError) as info:
        parse(text)
    e = info.value
    assert isinstance(e, ValueError) and isinstance(e, LaunchersError)
    assert e.text == text and e.line == line and e.column == column
    msg = str(e)
    src = text.split("\n")[line - 1]
    lines = msg.split("\n")
    # the offending line is shown, and a caret sits under the offending column of it
    at = [i for i, ln in enumerate(lines) if ln.endswith(src) and src.strip()]
    assert at, msg
    shown = lines[at[0]]
    caret = lines[at[0] + 1]
    assert caret.strip() == "^", msg
    assert caret.index("^") == len(shown) - len(src) + column - 1, msg


def test_s1_syntax_error_says_what_was_expected() -> None:
    # "... and what was expected"
    with pytest.raises(RequirementSyntaxError) as info:
        parse("cuda(mem=24G")
    assert "expected" in str(info.value)
    assert ")" in str(info.value)


_TOKENS = st.sampled_from(
    ["cuda", "cpu", "duration", "(", ")", "=", ",", "*", "&", "|", "mem", "cores", "24G", "4", "0",
     "1.5", "days", "h", " ", "\n", "\t", "G", "-", "[", "é", "\x00", "\\", "'", '"', "()", "1e9"]
)  # fmt: skip


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_TOKENS, max_size=12).map("".join) | st.text(max_size=30))
def test_s1_never_an_internal_error(text: str) -> None:
    # "Never a `TypeError` or a Lark internal."
    try:
        parse(text)
    except RequirementSyntaxError as e:
        assert (
            isinstance(e.line, int) and isinstance(e.column, int) and e.line >= 1 and e.column >= 1
        )
        assert e.text == text


# =============================================================================== docs/design/matching.md §2
# docs/design/matching.md §2 Requirement values (Python API)


def test_s2_builders_defaults() -> None:
    # "Builders: `cpu(mem=None, cores=1)`, `cuda_gpu(mem=None)`, `duration(spec)` (a string as
    # above or a number of seconds), and `parse(text)`."
    assert cpu() == first("cpu()")
    assert cpu(mem="400M", cores=4) == first("cpu(mem=400M, cores=4)")
    assert cuda_gpu() == first("cuda()")
    assert cuda_gpu(mem="24G") == first("cuda(mem=24G)")
    assert cuda_gpu("24G") == first("cuda(mem=24G)")
    assert duration("4 days") == first("duration=4 days")
    assert duration(3600) == first("duration=1h")
    assert duration(3600).duration == 3600


@pytest.mark.parametrize("bad", [2.5, "24", "x", [1], -1])
def test_s2_builders_reject_bad_sizes(bad: Any) -> None:
    # docs/design/matching.md §1 "A size without a unit is an error" / "Never a `TypeError`": builders too
    with pytest.raises(RequirementSyntaxError):
        cpu(mem=bad)
    with pytest.raises(RequirementSyntaxError):
        cuda_gpu(mem=bad)


def test_s2_operators() -> None:
    # "Operators `&`, `|`, `*`."
    r = (
        duration("4 days") & cuda_gpu(mem="24G") * 2 & cpu(mem="400M", cores=4)
        | cuda_gpu(mem="12G") * 4
    )
    assert (
        r.requirements
        == parse(
            "duration=4 days & cuda(mem=24G)*2 & cpu(mem=400M, cores=4) | cuda(mem=12G)*4"
        ).requirements
    )


def test_s2_values_are_immutable() -> None:
    # "Values are **immutable**: `a & b` returns a new value and leaves `a` and `b` unchanged
    # (the older tool mutated `a`)."
    a = cuda_gpu(mem="24G") & cpu(cores=2)
    b = cuda_gpu(mem="12G") & duration("2h")
    g = cuda_gpu(mem="24G")
    before_a, before_b, before_g = str(a), str(b), str(g)
    c = a & b
    d = a | b
    e = (
        g * 3
    )  # '*' repeats GPUs only (a * 3 is an error, as "(...)*3" is: see docs/design/matching.md §1 tests)
    assert str(a) == before_a and str(b) == before_b and str(g) == before_g
    assert len(a.requirements[0].cuda_gpus) == 1 and len(g.requirements[0].cuda_gpus) == 1
    assert len(c.requirements[0].cuda_gpus) == 2
    assert len(d.requirements) == 2 and len(e.requirements[0].cuda_gpus) == 3
    alt = a.requirements[0]
    with pytest.raises(AttributeError):  # attrs' FrozenInstanceError is an AttributeError
        setattr(alt, "duration", 5)  # noqa: B010
    with pytest.raises(AttributeError):
        setattr(alt.cpu, "cores", 5)  # noqa: B010


def test_s2_alternative_attributes() -> None:
    # "One alternative exposes `.duration` (seconds, 0 = unspecified), `.cpu.memory` (bytes),
    # `.cpu.cores`, `.cuda_gpus` (list of GPU requests, each with `.memory` in bytes)."
    alt = first("duration=90 minutes & cpu(mem=2G, cores=3) & cuda(mem=10G) & cuda()")
    assert alt.duration == 5400
    assert alt.cpu.memory == 2 * G and alt.cpu.cores == 3
    assert [g.memory for g in alt.cuda_gpus] == [10 * G, 0]
    assert len(list(alt.cuda_gpus)) == 2
    assert first("cpu()").duration == 0


def test_s2_parse_always_returns_a_union() -> None:
    # "A union exposes `.requirements`, the alternatives in order. `parse()` always returns a
    # union (one alternative for a string without `|`)."
    u1 = parse("cuda(mem=1G)")
    u2 = parse("cuda(mem=1G) | cpu(cores=2)")
    assert type(u1) is type(u2)
    assert len(u1.requirements) == 1
    assert [len(a.cuda_gpus) for a in u2.requirements] == [1, 0]


def test_s2_and_takes_maximum_and_concatenates_gpus() -> None:
    # "`&` of two alternatives: CPU memory, cores and duration take the **maximum**; GPU requests
    # are concatenated."
    a = duration("2h") & cpu(mem="8G", cores=2) & cuda_gpu("24G")
    b = duration("1h") & cpu(mem="16G", cores=1) & cuda_gpu("12G") * 2
    c = (a & b).requirements[0]
    assert c.duration == 2 * HOUR
    assert c.cpu.memory == 16 * G and c.cpu.cores == 2
    assert [g.memory for g in c.cuda_gpus] == [24 * G, 12 * G, 12 * G]
    s = first("duration=2h & cpu(mem=8G, cores=2) & duration=1h & cpu(mem=16G, cores=1)")
    assert (s.duration, s.cpu.memory, s.cpu.cores) == (2 * HOUR, 16 * G, 2)


def test_s2_or_is_flat() -> None:
    # "`a | b | c` is a flat union of three."
    a, b, c = cpu(cores=1), cpu(cores=2), cpu(cores=3)
    assert [x.cpu.cores for x in (a | b | c).requirements] == [1, 2, 3]
    assert [x.cpu.cores for x in (a | (b | c)).requirements] == [1, 2, 3]
    assert [
        x.cpu.cores for x in parse("cpu(cores=1) | (cpu(cores=2) | cpu(cores=3))").requirements
    ] == [1, 2, 3]


def test_s2_and_distributes_over_or() -> None:
    # "`x & (a | b)` distributes to `(x & a) | (x & b)` (the older tool crashed on both)."
    x, a, b = duration("1h"), cuda_gpu("24G"), cpu(cores=8)
    assert (x & (a | b)).requirements == ((x & a) | (x & b)).requirements
    assert ((a | b) & x).requirements == ((a & x) | (b & x)).requirements
    assert (
        parse("duration=1h & (cuda(mem=24G) | cpu(cores=8))").requirements
        == ((x & a) | (x & b)).requirements
    )


def test_s2_string_and_python_give_the_same_answers(tmp_path: Path) -> None:
    # "A string and the equivalent Python expression give the same answers everywhere."
    text = "duration=2h & cuda(mem=20G)*2 | cpu(cores=4, mem=8G)"
    value = duration("2h") & cuda_gpu(mem="20G") * 2 | cpu(cores=4, mem="8G")
    assert parse(text).requirements == value.requirements
    a = find(tmp_path, BASIC, text)
    b = find(tmp_path, BASIC, value)
    assert a.sbatch_args() == b.sbatch_args() and a.alternative == b.alternative


_SIZES = st.sampled_from(["512M", "1G", "1.5G", "24GiB", "10GB", "3000MB", "7K", "100B"])
_ATOM = st.one_of(
    st.builds(lambda m, c: cpu(mem=m, cores=c), st.none() | _SIZES, st.integers(1, 64)),
    st.builds(lambda m, n: cuda_gpu(mem=m) * n, st.none() | _SIZES, st.integers(1, 8)),
    st.builds(duration, st.sampled_from(["90s", "1.5h", "4 days", "2w", "59 minutes"])),
)
_ALT = st.lists(_ATOM, min_size=1, max_size=4).map(
    lambda xs: __import__("functools").reduce(lambda a, b: a & b, xs)
)
_REQ = st.lists(_ALT, min_size=1, max_size=3).map(
    lambda xs: __import__("functools").reduce(lambda a, b: a | b, xs)
)


@settings(max_examples=150, deadline=None)
@given(_REQ)
def test_s2_text_form_round_trips(value: Any) -> None:
    # "A string and the equivalent Python expression give the same answers everywhere."
    assert parse(str(value)).requirements == value.requirements


# =============================================================================== docs/design/matching.md §3
# docs/design/matching.md §3 Matching one alternative against one host

LOCAL_8C_32G = """
local:
  - id: box
    cpu: {cores: 8, memory: 32G}
"""


def test_s3_cores_reject(tmp_path: Path) -> None:
    # "Cores: rejected if the host declares cores and has fewer than asked."
    assert find(tmp_path, LOCAL_8C_32G, "cpu(cores=8)").kind == "local"
    assert not_found(tmp_path, LOCAL_8C_32G, "cpu(cores=9)")
    # only the cores are short (the older tool needed both short)
    assert not_found(tmp_path, LOCAL_8C_32G, "cpu(cores=9, mem=1G)")


def test_s3_memory_rejects(tmp_path: Path) -> None:
    # "Memory: rejected if the host declares memory and has less than asked."
    assert find(tmp_path, LOCAL_8C_32G, "cpu(mem=32G)").kind == "local"
    assert not_found(tmp_path, LOCAL_8C_32G, "cpu(mem=33G)")
    assert not_found(tmp_path, LOCAL_8C_32G, "cpu(mem=33G, cores=1)")


def test_s3_undeclared_quantities_do_not_constrain(tmp_path: Path) -> None:
    # "An undeclared quantity does not constrain. (... and rejected any request with both memory
    # and cores on a host that declared neither.)"
    text = """
    slurm:
      - id: c
        partitions:
          p:
            nodes: [{hosts: [n1], features: []}]
    """
    assert find(tmp_path, text, "cpu(cores=256, mem=2T)").kind == "slurm"
    only_cores = """
    slurm:
      - id: c
        partitions:
          p:
            nodes: [{hosts: [n1], configuration: {cpu: {cores: 4}}}]
    """
    assert find(tmp_path, only_cores, "cpu(cores=4, mem=2T)").kind == "slurm"
    assert not_found(tmp_path, only_cores, "cpu(cores=5, mem=1G)")


@pytest.mark.parametrize("order", ["small-first", "big-first"])
@pytest.mark.parametrize(
    "request_", ["cuda(mem=20G) & cuda(mem=10G)", "cuda(mem=10G) & cuda(mem=20G)"]
)
def test_s3_gpus_assigned_to_distinct_gpus_in_any_order(
    tmp_path: Path, order: str, request_: str
) -> None:
    # "GPUs: the request matches if its GPU requests can be assigned to **distinct** host GPUs such
    # that each host GPU accepts its request ... (The older tool paired them by list position, so
    # the order in which GPUs were listed changed the answer.)"
    gpus = ["{model: small, count: 1, memory: 12G}", "{model: big, count: 1, memory: 24G}"]
    if order == "big-first":
        gpus.reverse()
    text = f"""
    local:
      - id: box
        gpus: [{", ".join(gpus)}]
    """
    assert find(tmp_path, text, request_).kind == "local"
    assert not_found(tmp_path, text, "cuda(mem=20G)*2")
    assert not_found(tmp_path, text, "cuda()*3")
    assert find(tmp_path, text, "cuda()*2").kind == "local"


def test_s3_min_memory_bounds_the_request(tmp_path: Path) -> None:
    # "each host GPU accepts its request: `min_memory <= requested <= memory` where a request of 0
    # means "any"."
    text = """
    local:
      - id: box
        gpus: [{model: big, count: 1, memory: 48G, min_memory: 16G}]
    """
    assert not_found(tmp_path, text, "cuda(mem=15G)")
    assert find(tmp_path, text, "cuda(mem=16G)").kind == "local"
    assert find(tmp_path, text, "cuda(mem=48G)").kind == "local"
    assert not_found(tmp_path, text, "cuda(mem=49G)")
    assert find(tmp_path, text, "cuda()").kind == "local"


def _ratio_config(group_ratio: str, node_ratio: str) -> str:
    return f"""
    slurm:
      - id: c
        configuration: {{gpu: {{min_mem_ratio: {group_ratio}}}}}
        partitions:
          p:
            nodes:
              - hosts: [n1]
                configuration: {{gpu: {{count: 1, memory: 24G, min_mem_ratio: {node_ratio}}}}}
    """


def test_s3_min_mem_ratio_most_specific_level(tmp_path: Path) -> None:
    # "A GPU's `min_memory` is the larger of its `min_memory` and `min_mem_ratio * memory`, with
    # `min_mem_ratio` taken from the most specific configuration level that sets it (the older tool
    # ignored it below the group level)."
    # node level 0.5 of 24G = 12G, overriding the group's 0.1
    text = _ratio_config("0.1", "0.5")
    assert not_found(tmp_path, text, "cuda(mem=11G)")
    assert find(tmp_path, text, "cuda(mem=12G)").kind == "slurm"
    # an explicit 0 at node level overrides the group's 0.9
    text = _ratio_config("0.9", "0")
    assert find(tmp_path, text, "cuda(mem=1G)").kind == "slurm"


def test_s3_min_memory_is_the_larger(tmp_path: Path) -> None:
    # "the larger of its `min_memory` and `min_mem_ratio * memory`"
    text = """
    slurm:
      - id: c
        partitions:
          p:
            nodes:
              - hosts: [n1]
                configuration: {gpu: {count: 1, memory: 24G, min_memory: 20G, min_mem_ratio: 0.5}}
    """
    assert not_found(tmp_path, text, "cuda(mem=19G)")
    assert find(tmp_path, text, "cuda(mem=20G)").kind == "slurm"


def test_s3_duration_limit_equality_fits(tmp_path: Path) -> None:
    # "Duration: rejected if the host has a maximum and the request exceeds it (equality fits)."
    text = """
    slurm:
      - id: c
        partitions:
          p:
            configuration: {max_duration: 1 day}
            nodes: [{hosts: [n1]}]
    """
    assert "--time=1-00:00:00" in find(tmp_path, text, "duration=24h").sbatch_args()
    assert not_found(tmp_path, text, "duration=1441 minutes")
    unlimited = text.replace("configuration: {max_duration: 1 day}", "priority: 0")
    assert find(tmp_path, unlimited, "duration=52w").kind == "slurm"


def test_s3_qos_min_gpu(tmp_path: Path) -> None:
    # "QoS `min_gpu`: rejected if fewer GPUs are requested."
    text = """
    slurm:
      - id: c
        qos:
          gpuq: {min_gpu: 2}
        partitions:
          p:
            qos: [gpuq]
            nodes: [{hosts: [n1], configuration: {gpu: {count: 4, memory: 24G}}}]
    """
    assert not_found(tmp_path, text, "cuda()")
    assert not_found(tmp_path, text, "cpu()")
    assert "--qos=gpuq" in sargs(tmp_path, text, "cuda()*2")


# =============================================================================== docs/design/matching.md §4
# docs/design/matching.md §4 launchers.yaml


ALL_KINDS = """
local:
  - id: mine
    cpu: {cores: 2, memory: 2G}
slurm:
  - id: s
    partitions:
      p: {nodes: [{hosts: [n1], configuration: {cpu: {cores: 4}}}]}
"""


def test_s4_top_level_kinds(tmp_path: Path) -> None:
    # "Top level: a mapping from a launcher kind to a **list of groups**. Kinds: `local`, `slurm`,
    # and for remote sites `unicore` and `firecrest`"
    assert find(tmp_path, ALL_KINDS, "cpu(cores=2)").kind == "local"
    assert find(tmp_path, ALL_KINDS, "cpu(cores=4)").kind == "slurm"


def test_s4_unknown_top_level_kind_is_an_error(tmp_path: Path) -> None:
    # "Unknown top-level kinds are errors too."
    with pytest.raises(ConfigurationError) as info:
        find(tmp_path, ALL_KINDS + "slurn: []\n", "cpu()")
    assert "slurn" in str(info.value)
    assert "launchers.yaml" in str(info.value)


def test_s4_groups_must_be_a_list(tmp_path: Path) -> None:
    # "a mapping from a launcher kind to a **list of groups**"
    with pytest.raises(ConfigurationError):
        find(tmp_path, "local: {id: x}\n", "cpu()")


def test_s4_slurm_group_id_required(tmp_path: Path) -> None:
    # "`id` (required for slurm-like groups)" / "a missing required key"
    text = """
    slurm:
      - partitions:
          p: {nodes: [{hosts: [n1]}]}
    """
    with pytest.raises(ConfigurationError) as info:
        find(tmp_path, text, "cpu()")
    msg = str(info.value)
    assert "id" in msg and "launchers.yaml" in msg and "slurm[0]" in msg


def test_s4_weight_default_zero_higher_first(tmp_path: Path) -> None:
    # "`weight` (int, default 0, higher is tried first)"
    text = """
    local:
      - id: first-in-file
    slurm:
      - id: heavier
        weight: 1
        partitions:
          p: {nodes: [{hosts: [n1]}]}
      - id: lighter
        weight: -1
        partitions:
          p: {nodes: [{hosts: [n1]}]}
    """
    assert find(tmp_path, text, "cpu()").group_id == "heavier"


def test_s4_weight_must_be_int(tmp_path: Path) -> None:
    # "`weight` (int, ...)" / "a wrong type"
    text = """
    local:
      - id: a
        weight: heavy
    """
    with pytest.raises(ConfigurationError) as info:
        find(tmp_path, text, "cpu()")
    assert "weight" in str(info.value)


def test_s4_connector_defaults_to_local(tmp_path: Path) -> None:
    # "`connector` (default `local`; or the name of an SSH connector)."
    launcher = find(tmp_path, ALL_KINDS, "cpu(cores=4)")
    assert launcher.connector == "local"
    assert find(tmp_path, ALL_KINDS, "cpu(cores=1)").connector == "local"


def test_s4_ssh_connector_by_name(tmp_path: Path) -> None:
    # "`connector` ... or the name of an SSH connector" / "Inline `connectors: {ssh: {NAME:
    # {hostname, port, username, identity_file, known_hosts}}}`"
    text = """
    connectors:
      ssh:
        front:
          hostname: 127.0.0.1
          port: 2222
          username: root
          identity_file: /nonexistent/id
          known_hosts: /nonexistent/known_hosts
    slurm:
      - id: s
        connector: front
        partitions:
          p: {nodes: [{hosts: [n1]}]}
    """
    assert find(tmp_path, text, "cpu()").connector == "front"


def test_s4_unknown_connector_is_an_error(tmp_path: Path) -> None:
    # "an unknown token or connector name"
    text = """
    slurm:
      - id: s
        connector: nowhere
        partitions:
          p: {nodes: [{hosts: [n1]}]}
    """
    with pytest.raises(ConfigurationError) as info:
        find(tmp_path, text, "cpu()")
    msg = str(info.value)
    assert "nowhere" in msg and "launchers.yaml:3" in msg and "connector" in msg


def test_s4_connectors_yaml_next_to_launchers_yaml(tmp_path: Path) -> None:
    # "(those two files, next to `launchers.yaml`, are read too)" / "`connectors.yaml` holds the
    # same mapping without the `connectors:` key."
    write(
        tmp_path,
        """
        ssh:
          front:
            hostname: 127.0.0.1
            port: 2222
            username: root
        """,
        "connectors.yaml",
    )
    text = """
    slurm:
      - id: s
        connector: front
        partitions:
          p: {nodes: [{hosts: [n1]}]}
    """
    assert find(tmp_path, text, "cpu()").connector == "front"


def test_s4_tags_filter(tmp_path: Path) -> None:
    # "`tags` (list)" and docs/design/matching.md §5.3 "If `tags` is given, only groups having at least one of those tags
    # are considered."
    text = """
    local:
      - id: untagged
    slurm:
      - id: tagged
        tags: [gpu, big]
        partitions:
          p: {nodes: [{hosts: [n1]}]}
    """
    assert find(tmp_path, text, "cpu()").group_id == "untagged"
    assert find(tmp_path, text, "cpu()", tags=["big"]).group_id == "tagged"
    assert find(tmp_path, text, "cpu()", tags=["nope", "gpu"]).group_id == "tagged"
    assert find(tmp_path, text, "cpu()", tags=["nope"], default=None) is None
    with pytest.raises(LauncherNotFoundError):
        find(tmp_path, text, "cpu()", tags=["nope"])


def test_s4_local_group_keys(tmp_path: Path) -> None:
    # "`local` group: `cpu: {cores, memory}`, `gpus: [{model, count, memory, min_memory?}]`,
    # `tokens: {name: count}` ..., `disabled`."
    text = """
    tokens: {licence: 2}
    local:
      - id: disabled-box
        disabled: true
        cpu: {cores: 64, memory: 1T}
      - id: enabled-box
        cpu: {cores: 4, memory: 8G}
        gpus:
          - {model: A100, count: 2, memory: 80G, min_memory: 10G}
        tokens: {licence: 1}
    """
    assert find(tmp_path, text, "cpu(cores=4) & cuda(mem=40G)*2").group_id == "enabled-box"
    assert not_found(tmp_path, text, "cpu(cores=5)")
    assert not_found(tmp_path, text, "cuda()*3")
    assert not_found(tmp_path, text, "cuda(mem=9G)")


def test_s4_unknown_token_is_an_error(tmp_path: Path) -> None:
    # "an unknown token or connector name"
    text = """
    local:
      - id: box
        tokens: {licence: 1}
    """
    with pytest.raises(ConfigurationError) as info:
        find(tmp_path, text, "cpu()")
    assert "licence" in str(info.value) and "launchers.yaml:3" in str(info.value)


def test_s4_tokens_yaml_older_format(tmp_path: Path) -> None:
    # "`tokens.yaml` keeps the older format `countertoken: {NAME: {tokens: COUNT}}`."
    write(tmp_path, "countertoken:\n  licence:\n    tokens: 3\n", "tokens.yaml")
    text = """
    local:
      - id: box
        tokens: {licence: 1}
    """
    assert find(tmp_path, text, "cpu()").group_id == "box"


def test_s4_slurm_keys_and_defaults_accepted(tmp_path: Path) -> None:
    # "`slurm` group: `partitions`, `features_regex`, `features`, `configuration`, `qos`,
    # `use_features` (default true), `use_hosts` (default true), `use_memory_constraint` (default
    # true ...), `query_slurm` (default false), `path`, `gpu_option` (`gpus-per-node` default, or
    # `gres`)."
    text = """
    slurm:
      - id: s
        weight: 3
        tags: [a]
        connector: local
        features_regex: ['GPU(?P<cuda_count>\\d+)', 'GPUM(?P<cuda_memory>\\d+G)']
        features:
          FAST: {configuration: {cpu: {cores: 16}}}
        configuration: {max_duration: 2 days}
        qos:
          normal: {max_duration: 1 day, min_gpu: 0, priority: 1, partition_time_limit: false}
        use_features: true
        use_hosts: true
        use_memory_constraint: true
        query_slurm: false
        path: /usr/bin
        gpu_option: gpus-per-node
        partitions:
          p:
            nodes:
              - {hosts: [n1], features: [GPU2, GPUM24G, FAST], count: 1,
                 configuration: {cpu: {memory: 64G}}}
            configuration: {cpu: {mem_per_cpu: 4G}}
            priority: 2
            disabled: false
            qos: [normal]
            accounts: [research]
    """
    got = sargs(tmp_path, text, "cuda(mem=20G)*2 & cpu(cores=16, mem=1G) & duration=3h")
    assert got == [
        "--partition=p",
        "--constraint=GPU2&GPUM24G&FAST",
        "--gpus-per-node=2",
        "--cpus-per-task=16",
        "--mem=1024M",
        "--time=03:00:00",
        "--qos=normal",
        "--account=research",
    ]


def test_s4_gpu_option_gres(tmp_path: Path) -> None:
    # "`gpu_option` (`gpus-per-node` default, or `gres`)" / docs/design/matching.md §5 "`--gpus-per-node` (or `--gres=gpu:N`)"
    text = BASIC.replace("  - id: cluster\n", "  - id: cluster\n    gpu_option: gres\n")
    got = sargs(tmp_path, text, "cuda(mem=12G)*2")
    assert "--gres=gpu:2" in got and not any(a.startswith("--gpus-per-node") for a in got)
    launcher = find(tmp_path, text, "cuda(mem=12G)*2")
    assert launcher.options.gres == "gpu:2" and launcher.options.gpus_per_node is None
    default = find(tmp_path, BASIC, "cuda(mem=12G)*2")
    assert default.options.gpus_per_node == 2 and default.options.gres is None


def test_s4_gpu_option_invalid(tmp_path: Path) -> None:
    # "`gpu_option` (`gpus-per-node` default, or `gres`)": anything else is a wrong value
    text = BASIC.replace("  - id: cluster\n", "  - id: cluster\n    gpu_option: gpus\n")
    with pytest.raises(ConfigurationError) as info:
        find(tmp_path, text, "cpu()")
    assert "gpu_option" in str(info.value)


def test_s4_use_memory_contraint_alias(tmp_path: Path) -> None:
    # "the older misspelling `use_memory_contraint` is accepted as an alias"
    text = """
    slurm:
      - id: s
        use_memory_contraint: false
        configuration: {cpu: {mem_per_cpu: 2G}}
        partitions:
          p: {nodes: [{hosts: [n1], configuration: {cpu: {cores: 8, memory: 16G}}}]}
    """
    got = sargs(tmp_path, text, "cpu(mem=6G)")
    assert not any(a.startswith("--mem") for a in got)
    assert "--cpus-per-task=3" in got


def test_s4_features_regex_whole_feature_name(tmp_path: Path) -> None:
    # "`features_regex` (list of regexes with named groups `cuda_count` and `cuda_memory`,
    # matched against the **whole** feature name)"
    text = """
    slurm:
      - id: s
        features_regex: ['(?P<cuda_count>\\d)GPU', 'MEM(?P<cuda_memory>\\d+G)']
        partitions:
          p:
            nodes:
              - {hosts: [n1], features: [X2GPU, MEM24GB]}
              - {hosts: [n2], features: [2GPU, MEM12G]}
    """
    # n1's features only match as substrings: n1 has no declared GPU
    launcher = find(tmp_path, text, "cuda(mem=10G)*2")
    assert launcher.options.constraint == "2GPU&MEM12G"
    assert not_found(tmp_path, text, "cuda(mem=20G)")
    assert not_found(tmp_path, text, "cuda()*3")


def test_s4_features_configuration(tmp_path: Path) -> None:
    # "`features: {feature: {configuration}}`"
    text = """
    slurm:
      - id: s
        features:
          BIG: {configuration: {cpu: {cores: 64, memory: 512G}, gpu: {count: 8, memory: 80G}}}
        partitions:
          p:
            nodes:
              - {hosts: [b1], features: [BIG]}
              - {hosts: [s1], features: [SMALL], configuration: {cpu: {cores: 4}}}
    """
    assert sargs(tmp_path, text, "cpu(cores=64) & cuda(mem=80G)*8")[:2] == [
        "--partition=p",
        "--constraint=BIG",
    ]
    assert not_found(tmp_path, text, "cpu(cores=65)")


def test_s4_configuration_may_be_absent_or_null(tmp_path: Path) -> None:
    # "`configuration` (group defaults; may be absent)"
    text = """
    slurm:
      - id: s
        configuration: null
        partitions:
          p:
            configuration: null
            nodes: [{hosts: [n1], configuration: null}]
    """
    assert find(tmp_path, text, "cpu()").kind == "slurm"


def test_s4_explicit_zero_or_false_overrides(tmp_path: Path) -> None:
    # "the more specific level wins key by key, and an explicit 0 or false does override"
    text = """
    slurm:
      - id: s
        configuration: {max_duration: 1h, cpu: {cores: 4, memory: 4G}}
        partitions:
          p:
            configuration: {max_duration: 0, cpu: {memory: 0}}
            nodes: [{hosts: [n1]}]
    """
    # partition: max_duration 0 = none, memory 0 = not declared; cores 4 kept from the group
    assert find(tmp_path, text, "duration=2h & cpu(mem=100G)").kind == "slurm"
    assert not_found(tmp_path, text, "cpu(cores=5)")


def test_s4_features_regex_set_gpu(tmp_path: Path) -> None:
    # "Features matched by `features_regex` set `gpu.count` / `gpu.memory`."
    assert find(tmp_path, BASIC, "cuda(mem=48G)*4").options.partition == "big"
    assert not_found(tmp_path, BASIC, "cuda(mem=48G)*5")
    assert not_found(tmp_path, BASIC, "cuda(mem=49G)")


def test_s4_sizes_and_durations_in_file_use_same_units(tmp_path: Path) -> None:
    # "Sizes and durations in the file use the same units as requirement strings."
    text = """
    slurm:
      - id: s
        partitions:
          p:
            configuration: {max_duration: 90 minutes, cpu: {memory: 1.5GiB}}
            nodes: [{hosts: [n1]}]
    """
    assert find(tmp_path, text, "duration=1.5h & cpu(mem=1536M)").kind == "slurm"
    assert not_found(tmp_path, text, "duration=91 minutes")
    assert not_found(tmp_path, text, "cpu(mem=1537M)")


def test_s4_size_without_unit_in_file_is_an_error(tmp_path: Path) -> None:
    # "Sizes and durations in the file use the same units as requirement strings." (a size
    # without a unit is an error)
    text = """
    local:
      - id: a
        cpu: {cores: 2, memory: 4000}
    """
    with pytest.raises(ConfigurationError) as info:
        find(tmp_path, text, "cpu()")
    assert "memory" in str(info.value)


def _config_error(tmp_path: Path, text: str) -> ConfigurationError:
    with pytest.raises(ConfigurationError) as info:
        launchers.find_launcher("cpu()", config=write(tmp_path, text))
    return info.value


def test_s4_error_yaml_syntax(tmp_path: Path) -> None:
    # "Errors: a file that cannot be used raises `ConfigurationError` naming the **file, the
    # 1-based line and column** ...: YAML syntax"
    e = _config_error(tmp_path, "local:\n  - id: a\n    cpu: {cores: 2\n")
    msg = str(e)
    assert str(tmp_path / "launchers.yaml") in msg
    assert e.line is not None and e.column is not None and e.line >= 3


def test_s4_error_unknown_key_with_did_you_mean(tmp_path: Path) -> None:
    # "an unknown key (with a "did you mean" when close)" and the key path
    # (`slurm[0].partitions.hard.nodes[1].features`)
    text = """
    slurm:
      - id: s
        partitions:
          hard:
            nodes:
              - {hosts: [n1]}
              - {hosts: [n2], featurs: [A]}
    """
    e = _config_error(tmp_path, text)
    msg = str(e)
    assert "slurm[0].partitions.hard.nodes[1].featurs" in msg, msg
    assert "did you mean" in msg and "features" in msg
    assert f"{tmp_path / 'launchers.yaml'}:7:" in msg, msg


def test_s4_error_wrong_type_names_key_path(tmp_path: Path) -> None:
    # "naming the **file, the 1-based line and column, and the key path**
    # (`slurm[0].partitions.hard.nodes[1].features`), for: ... a wrong type"
    text = """
    slurm:
      - id: s
        partitions:
          hard:
            nodes:
              - {hosts: [n1]}
              - hosts: [n2]
                features: 12
    """
    e = _config_error(tmp_path, text)
    msg = str(e)
    assert "slurm[0].partitions.hard.nodes[1].features" in msg, msg
    assert f"{tmp_path / 'launchers.yaml'}:8:" in msg, msg
    assert e.line == 8 and e.column in (13, 23)  # the key or its value


def test_s4_error_invalid_regex(tmp_path: Path) -> None:
    # "an invalid regex"
    text = """
    slurm:
      - id: s
        features_regex: ['GPU(?P<cuda_count>\\d+']
        partitions:
          p: {nodes: [{hosts: [n1]}]}
    """
    msg = str(_config_error(tmp_path, text))
    assert "features_regex" in msg and "launchers.yaml:3" in msg


def test_s4_error_unknown_qos_in_partition(tmp_path: Path) -> None:
    # "an unknown QoS name in a partition"
    text = """
    slurm:
      - id: s
        qos: {normal: {}}
        partitions:
          p:
            qos: [normal, hihg]
            nodes: [{hosts: [n1]}]
    """
    msg = str(_config_error(tmp_path, text))
    assert "hihg" in msg and "slurm[0].partitions.p.qos" in msg and "launchers.yaml:6" in msg


def test_s4_error_no_memory_constraint_without_mem_per_cpu(tmp_path: Path) -> None:
    # "`use_memory_constraint: false` without any `mem_per_cpu`"
    text = """
    slurm:
      - id: s
        use_memory_constraint: false
        partitions:
          p: {nodes: [{hosts: [n1]}]}
    """
    msg = str(_config_error(tmp_path, text))
    assert "mem_per_cpu" in msg and "launchers.yaml" in msg


@pytest.mark.parametrize(
    ("text", "line", "key"),
    [
        (
            "local:\n  - id: a\n    cpu: {cores: 2\n",
            4,
            None,
        ),  # YAML syntax (at the end of the text)
        (
            "local:\n  - id: a\n    gpus: [{model: x, count: 1, memroy: 1G}]\n",
            3,
            "local[0].gpus[0].memroy",
        ),
        ("local:\n  - id: a\n    cpu: {cores: two}\n", 3, "local[0].cpu.cores"),
        ("slurm:\n  - weight: 1\n    partitions: {}\n", 2, "slurm[0]"),
        (
            "slurm:\n  - id: s\n    features_regex: ['(?P<cuda_count>']\n    partitions: {}\n",
            3,
            "slurm[0].features_regex[0]",
        ),
        ("local:\n  - id: a\n    tokens: {x: 1}\n", 3, "local[0].tokens.x"),
        ("local:\n  - id: a\n    connector: nope\n", 3, "local[0].connector"),
        (
            "slurm:\n  - id: s\n    partitions:\n      p: {qos: [q], nodes: [{hosts: [n]}]}\n",
            4,
            "slurm[0].partitions.p.qos",
        ),
        (
            "slurm:\n  - id: s\n    use_memory_constraint: false\n    partitions: {}\n",
            3,
            "slurm[0].use_memory_constraint",
        ),
        ("local: []\nslurmm: []\n", 2, "slurmm"),
    ],
)
def test_s4_error_names_file_line_column_key(
    tmp_path: Path, text: str, line: int, key: str | None
) -> None:
    # "Errors: a file that cannot be used raises `ConfigurationError` naming the **file, the 1-based
    # line and column, and the key path** ..., for: YAML syntax, an unknown key ..., a wrong type, a
    # missing required key, an invalid regex, an unknown token or connector name, an unknown QoS
    # name in a partition, `use_memory_constraint: false` without any `mem_per_cpu`."
    path = tmp_path / "launchers.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigurationError) as info:
        find_launcher("cpu()", config=path)
    msg = str(info.value)
    assert f"{path}:{line}:" in msg, msg
    if key is not None:
        assert key in msg, msg
    proc = cli("validate", str(path))
    assert proc.returncode == 2 and f"{path}:{line}:" in proc.stderr


def test_s4_whole_file_validated_at_load(tmp_path: Path) -> None:
    # "The whole file is validated at load, not when a search happens to reach a group."
    text = """
    local:
      - id: first
        weight: 10
    slurm:
      - id: later
        partitions:
          unused:
            disabled: true
            nodes: [{hosts: [n1], configuration: {cpu: {cores: many}}}]
    """
    msg = str(_config_error(tmp_path, text))
    assert "slurm[0].partitions.unused.nodes[0].configuration.cpu.cores" in msg, msg


def test_s4_error_via_cli_validate(tmp_path: Path) -> None:
    # docs/design/matching.md §6 "`launchers validate [PATH]`: loads and checks a configuration, exit status as above."
    good = write(tmp_path / "good", BASIC)
    proc = cli("validate", str(good))
    assert proc.returncode == 0, proc.stderr
    bad = write(tmp_path / "bad", "slurm:\n  - id: s\n    partitons: {}\n")
    proc = cli("validate", str(bad))
    assert proc.returncode == 2
    assert "partitons" in proc.stderr and str(bad) in proc.stderr
    proc = cli("validate", str(tmp_path / "bad"))  # a directory holding launchers.yaml
    assert proc.returncode == 2


def test_s4_config_argument_file_or_directory(tmp_path: Path) -> None:
    # "Where it is read: the `config=` argument (a file, or a directory holding `launchers.yaml`)"
    path = write(tmp_path, ALL_KINDS)
    assert find_launcher("cpu(cores=4)", config=path).kind == "slurm"
    assert find_launcher("cpu(cores=4)", config=tmp_path).kind == "slurm"
    assert find_launcher("cpu(cores=4)", config=str(tmp_path)).kind == "slurm"


def test_s4_missing_config_path_is_an_error(tmp_path: Path) -> None:
    # "a file that cannot be used raises `ConfigurationError`"
    with pytest.raises(ConfigurationError):
        find_launcher("cpu()", config=tmp_path / "nope.yaml")


_WHICH = """
import launchers
l = launchers.find_launcher("cpu()")
print(l.kind, l.group_id)
"""


def test_s4_search_path_env_var(tmp_path: Path) -> None:
    # "else `$LAUNCHERS_CONFIG`"
    write(tmp_path / "home/.config/launchers", "local: [{id: home}]\n")
    path = write(tmp_path / "env", "local: [{id: fromenv}]\n")
    out = in_process(_WHICH, tmp_path / "home", {"LAUNCHERS_CONFIG": str(path)})
    assert out.split() == ["local", "fromenv"]


def test_s4_search_path_home(tmp_path: Path) -> None:
    # "else `~/.config/launchers/launchers.yaml`, else the older tool's
    # `~/.config/experimaestro/launchers.yaml`."
    home = tmp_path / "home"
    write(home / ".config/experimaestro", "local: [{id: older}]\n")
    assert in_process(_WHICH, home).split() == ["local", "older"]
    write(home / ".config/launchers", "local: [{id: newer}]\n")
    assert in_process(_WHICH, home).split() == ["local", "newer"]


def test_s4_several_configurations_in_one_process(tmp_path: Path) -> None:
    # "Several configurations may be loaded in one process (the older tool could build only one)."
    a = write(tmp_path / "a", "local: [{id: a, cpu: {cores: 2}}]\n")
    b = write(tmp_path / "b", "local: [{id: b, cpu: {cores: 64}}]\n")
    assert find_launcher("cpu()", config=a).group_id == "a"
    assert find_launcher("cpu()", config=b).group_id == "b"
    assert find_launcher("cpu(cores=64)", config=a, default=None) is None
    assert find_launcher("cpu(cores=64)", config=b).group_id == "b"


def test_s4_rewritten_file_is_read_again(tmp_path: Path) -> None:
    # "the `config=` argument (a file ...)": a file rewritten in the same clock tick with the same
    # size (coarse file timestamps keep its mtime) must not answer from the previous content.
    path = write(tmp_path, "local: [{id: a, cpu: {cores: 2}}]\n")
    assert find_launcher("cpu()", config=path).group_id == "a"
    before = path.stat()
    path.write_text("local: [{id: b, cpu: {cores: 4}}]\n", encoding="utf-8")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size
    assert find_launcher("cpu()", config=path).group_id == "b"


def test_s4_no_configuration_implicit_local(tmp_path: Path) -> None:
    # "With no configuration at all, there is one implicit local launcher describing this machine
    # (cores, memory, GPUs found by `nvidia-smi` if present), and requests are still parsed and
    # matched against it."
    code = """
    import os, launchers
    l = launchers.find_launcher("cpu(cores=1)")
    print(l.kind, isinstance(l, launchers.DirectLauncher))
    print(launchers.find_launcher(f"cpu(cores={(os.cpu_count() or 1) + 1})", default=None))
    print(launchers.find_launcher("cpu(mem=1000T)", default=None))
    try:
        launchers.find_launcher("cpu(mem=4000)")
    except launchers.RequirementSyntaxError:
        print("syntax")
    """
    out = in_process(code, tmp_path / "home").split("\n")
    assert out[:4] == ["local True", "None", "None", "syntax"]


def test_s4_implicit_local_reads_nvidia_smi(tmp_path: Path) -> None:
    # "there is one implicit local launcher describing this machine (cores, memory, GPUs found by
    # `nvidia-smi` if present)" (a stand-in nvidia-smi answering the documented CSV query)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\necho 'NVIDIA A100-SXM4-80GB, 81920'\necho 'NVIDIA A100-SXM4-80GB, 81920'\n"
    )
    smi.chmod(0o755)
    code = """
    import launchers
    print(launchers.find_launcher("cuda(mem=80G)*2").kind)
    print(launchers.find_launcher("cuda()*3", default=None))
    print(launchers.find_launcher("cuda(mem=81G)", default=None))
    """
    path = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    assert in_process(code, tmp_path / "home", {"PATH": path}).split() == ["local", "None", "None"]


@pytest.mark.parametrize("content", ["", "\n# nothing\n", "local: []\nslurm: []\n", "local: []\n"])
def test_s7_empty_file_is_no_configuration(tmp_path: Path, content: str) -> None:
    # docs/design/matching.md §7 "An existing file that is empty, or holds only empty lists, counts as no configuration."
    home = tmp_path / "home"
    write(home / ".config/launchers", content)
    code = """
    import launchers
    l = launchers.find_launcher("cpu(cores=1)")
    print(l.kind)
    """
    assert in_process(code, home).split() == ["local"]
    (tmp_path / "x").mkdir()
    path = write(tmp_path / "x", content)
    assert find_launcher("cpu(cores=1)", config=path).kind == "local"


# =============================================================================== docs/design/matching.md §5
# docs/design/matching.md §5 The search


def test_s5_1_positional_alternatives_concatenated(tmp_path: Path) -> None:
    # "Each positional argument is a string or a requirement; their alternatives are concatenated
    # in order. `find_launcher("A", "B")` equals `find_launcher("A | B")`."
    a, b = "cuda(mem=100G)", "cuda(mem=12G) & cpu(cores=2)"
    one = find(tmp_path, BASIC, a, b)
    two = find(tmp_path, BASIC, f"{a} | {b}")
    three = find(tmp_path, BASIC, cuda_gpu("100G"), parse(b))
    assert one.alternative == two.alternative == three.alternative == 1
    assert one == two == three
    assert one.sbatch_args() == two.sbatch_args() == three.sbatch_args()


def test_s5_2_equal_weights_keep_file_order(tmp_path: Path) -> None:
    # "Groups are ordered by decreasing `weight`; equal weights keep file order."
    text = """
    slurm:
      - id: one
        weight: W1
        partitions: {p: {nodes: [{hosts: [n1]}]}}
      - id: two
        partitions: {p: {nodes: [{hosts: [n1]}]}}
      - id: three
        weight: W3
        partitions: {p: {nodes: [{hosts: [n1]}]}}
    """

    def winner(w1: int, w3: int) -> str:
        return str(
            find(tmp_path, text.replace("W1", str(w1)).replace("W3", str(w3)), "cpu()").group_id
        )

    assert winner(0, 0) == "one"
    assert winner(0, 1) == "three"
    assert winner(-1, 0) == "two"
    assert winner(-1, -1) == "two"
    assert winner(2, 2) == "one"


def test_s5_4_alternative_major_order(tmp_path: Path) -> None:
    # "**For each alternative in order, for each group in order**: the first group that can run
    # the alternative gives the launcher. A later alternative is tried only if no group can run an
    # earlier one."
    text = """
    local:
      - id: heavy
        weight: 5
        cpu: {cores: 2}
      - id: light
        cpu: {cores: 16}
    """
    launcher = find(tmp_path, text, "cpu(cores=16) | cpu(cores=1)")
    assert launcher.group_id == "light" and launcher.alternative == 0
    launcher = find(tmp_path, text, "cpu(cores=32) | cpu(cores=1)")
    assert launcher.group_id == "heavy" and launcher.alternative == 1


def test_s5_5_not_found_explains_every_group(tmp_path: Path) -> None:
    # "Nothing found: `find_launcher` raises `LauncherNotFoundError` whose message says, for each
    # group, why it was rejected"
    text = """
    local:
      - id: laptop
        cpu: {cores: 2}
    slurm:
      - id: hpc
        partitions: {p: {nodes: [{hosts: [n1], configuration: {cpu: {cores: 8}}}]}}
    """
    with pytest.raises(LauncherNotFoundError) as info:
        find(tmp_path, text, "cpu(cores=9)")
    assert isinstance(info.value, LaunchersError)
    msg = str(info.value)
    assert "laptop" in msg and "hpc" in msg


def test_s5_5_default(tmp_path: Path) -> None:
    # "`find_launcher(..., default=None)` returns the default instead of raising."
    assert find(tmp_path, BASIC, "cuda(mem=1T)", default=None) is None
    sentinel = object()
    assert find(tmp_path, BASIC, "cuda(mem=1T)", default=sentinel) is sentinel


def test_s5_5_default_does_not_hide_errors(tmp_path: Path) -> None:
    # "`find_launcher(..., default=None)` returns the default instead of raising" (only when nothing
    # is found: a syntax or configuration error still raises)
    with pytest.raises(RequirementSyntaxError):
        find(tmp_path, BASIC, "cuda(mem=24)", default=None)
    with pytest.raises(ConfigurationError):
        find(tmp_path, "slurm:\n  - id: s\n    partitons: {}\n", "cpu()", default=None)


def test_s5_5_explain_cli(tmp_path: Path) -> None:
    # "(this is also what `launchers find --explain` prints)" / docs/design/matching.md §6 "Exit status ... 1 when no
    # launcher fits (the explanation on stderr)"
    path = write(tmp_path, BASIC)
    proc = cli("find", "cuda(mem=1T)", "--config", str(path), "--explain")
    assert proc.returncode == 1
    assert "cluster" in proc.stderr
    proc = cli("find", "cuda(mem=12G)", "--config", str(path), "--explain")
    assert proc.returncode == 0 and "cluster" in proc.stdout + proc.stderr


QOS = """
slurm:
  - id: s
    qos:
      short: {max_duration: 2h, priority: 10}
      long: {max_duration: 3 days, priority: 0}
      over: {max_duration: 10 days, priority: 0, partition_time_limit: true}
    partitions:
      p:
        configuration: {max_duration: 1 day}
        qos: [short, long]
        nodes: [{hosts: [n1]}]
"""


def test_s5_qos_priority_and_duration(tmp_path: Path) -> None:
    # "priority = partition priority + QoS priority; duration limit = the **smaller** of the
    # partition's and the QoS's"
    assert "--qos=short" in sargs(tmp_path, QOS, "duration=2h")
    assert "--qos=long" in sargs(tmp_path, QOS, "duration=3h")
    assert "--qos=long" in sargs(tmp_path, QOS, "duration=1 day")
    # the QoS allows 3 days but the partition only 1
    assert not_found(tmp_path, QOS, "duration=25h")


def test_s5_qos_partition_time_limit(tmp_path: Path) -> None:
    # "(unless the QoS sets `partition_time_limit: true`, Slurm's flag for a QoS that overrides the
    # partition limit)"
    text = QOS.replace("qos: [short, long]", "qos: [short, long, over]")
    got = sargs(tmp_path, text, "duration=5 days")
    assert "--qos=over" in got and "--time=5-00:00:00" in got
    assert not_found(tmp_path, text, "duration=11 days")


def test_s5_partition_priority_plus_qos_priority(tmp_path: Path) -> None:
    # "priority = partition priority + QoS priority" ; "The best is the one with the highest
    # priority (then file order)."
    text = """
    slurm:
      - id: s
        qos:
          a: {priority: 1}
          b: {priority: 5}
        partitions:
          p1:
            priority: 10
            qos: [a]
            nodes: [{hosts: [n1]}]
          p2:
            priority: 7
            qos: [b]
            nodes: [{hosts: [n2]}]
    """
    # p1+a = 11 vs p2+b = 12
    launcher = find(tmp_path, text, "cpu()")
    assert (launcher.options.partition, launcher.options.qos) == ("p2", "b")


def test_s5_accounts_are_candidates(tmp_path: Path) -> None:
    # "Candidates: every enabled partition x node group x QoS of the partition (or none) x account
    # (or none)" / "The launcher uses the best candidate's QoS and account"
    text = """
    slurm:
      - id: s
        partitions:
          p:
            accounts: [alpha, beta]
            nodes: [{hosts: [n1]}]
    """
    launcher = find(tmp_path, text, "cpu()")
    assert (launcher.options.partition, launcher.options.account) == ("p", "alpha")


def test_s5_disabled_partitions_are_not_candidates(tmp_path: Path) -> None:
    # "Candidates: every enabled partition"
    text = """
    slurm:
      - id: s
        partitions:
          unused:
            disabled: true
            priority: 100
            nodes: [{hosts: [o1], configuration: {cpu: {cores: 64}}}]
          used:
            nodes: [{hosts: [n1], configuration: {cpu: {cores: 8}}}]
    """
    assert find(tmp_path, text, "cpu()").options.partition == "used"
    assert not_found(tmp_path, text, "cpu(cores=9)")


def test_s5_merge_only_same_qos_and_account(tmp_path: Path) -> None:
    # "The best is the one with the highest priority (then file order). The launcher uses the best
    # candidate's QoS and account, and merges every other matching candidate that has **exactly the
    # same QoS and the same account** (none equals only none)."
    text = """
    slurm:
      - id: s
        qos: {q: {}}
        partitions:
          a:
            nodes: [{hosts: [a1], features: [FA]}]
          b:
            qos: [q]
            nodes: [{hosts: [b1], features: [FB]}]
          c:
            nodes: [{hosts: [c1], features: [FC]}]
          d:
            accounts: [acct]
            nodes: [{hosts: [d1], features: [FD]}]
    """
    launcher = find(tmp_path, text, "cpu()")
    assert launcher.options.partition == "a,c"
    assert launcher.options.constraint == "(FA)|(FC)" or launcher.options.constraint == "FA|FC"
    assert launcher.options.qos is None and launcher.options.account is None


def test_s5_constraint_clauses_parenthesised(tmp_path: Path) -> None:
    # "`--constraint` clauses in candidate order, each clause the node group's features joined with
    # `&`, clauses joined with `|`, and each clause in parentheses when there is more than one
    # (`(A&B)|(C&D)`)"
    text = """
    slurm:
      - id: s
        partitions:
          p:
            nodes:
              - {hosts: [n1], features: [A, B], configuration: {cpu: {cores: 8}}}
              - {hosts: [n2], features: [C, D], configuration: {cpu: {cores: 8}}}
              - {hosts: [n3], features: [E, F], configuration: {cpu: {cores: 2}}}
    """
    launcher = find(tmp_path, text, "cpu(cores=4)")
    assert launcher.options.constraint == "(A&B)|(C&D)"
    assert launcher.options.partition == "p"
    single = find(tmp_path, text, "cpu(cores=2)")
    assert single.options.constraint == "(A&B)|(C&D)|(E&F)"
    text1 = "".join(line for line in text.splitlines(keepends=True) if "[n2]" not in line)
    assert text1 != text
    assert find(tmp_path, text1, "cpu(cores=4)").options.constraint == "A&B"


def test_s5_no_constraint_when_a_matching_group_has_no_features(tmp_path: Path) -> None:
    # "no `--constraint` when a matching node group has no features"
    text = """
    slurm:
      - id: s
        partitions:
          p:
            nodes:
              - {hosts: [n1], features: [A], configuration: {cpu: {cores: 8}}}
              - {hosts: [n2], configuration: {cpu: {cores: 8}}}
    """
    launcher = find(tmp_path, text, "cpu(cores=4)")
    assert launcher.options.constraint is None
    assert not any(a.startswith("--constraint") for a in launcher.sbatch_args())


def test_s5_use_features_false_excludes_non_matching_hosts(tmp_path: Path) -> None:
    # "no `--constraint` ... when `use_features: false`; with `use_features: false` and
    # `use_hosts: true`, `--exclude` lists the hosts of the listed partitions that did not match
    # (never `--nodelist`, which would ask for all of them at once)"
    text = """
    slurm:
      - id: s
        use_features: false
        partitions:
          p:
            nodes:
              - {hosts: [big1, big2], features: [A], configuration: {cpu: {cores: 32}}}
              - {hosts: [small1], features: [B], configuration: {cpu: {cores: 4}}}
          q:
            nodes:
              - {hosts: [other], features: [C], configuration: {cpu: {cores: 2}}}
    """
    launcher = find(tmp_path, text, "cpu(cores=8)")
    args = launcher.sbatch_args()
    assert launcher.options.constraint is None
    assert launcher.options.partition == "p"
    assert launcher.options.exclude == "small1"
    assert not any(a.startswith("--nodelist") or a.startswith("-w") for a in args)
    # all nodes match: nothing to exclude
    assert find(tmp_path, text, "cpu(cores=1)").options.exclude is None


def test_s5_use_features_false_use_hosts_false(tmp_path: Path) -> None:
    # "with `use_features: false` and `use_hosts: true`, `--exclude` ..." (so not without use_hosts)
    text = """
    slurm:
      - id: s
        use_features: false
        use_hosts: false
        partitions:
          p:
            nodes:
              - {hosts: [big1], features: [A], configuration: {cpu: {cores: 32}}}
          q:
            nodes:
              - {hosts: [small1], features: [B], configuration: {cpu: {cores: 4}}}
    """
    launcher = find(tmp_path, text, "cpu(cores=8)")
    assert launcher.options.exclude is None and launcher.options.constraint is None
    assert launcher.options.partition == "p"


def test_s5_soundness_drops_partitions(tmp_path: Path) -> None:
    # "Soundness: Slurm may place the job on any node of any listed partition that satisfies the
    # constraint. Every such node must belong to a matching candidate. If the union would admit a
    # node that did not match, drop partitions or clauses (never the best candidate's) until it
    # does not."
    text = """
    slurm:
      - id: s
        partitions:
          p1:
            priority: 1
            nodes:
              - {hosts: [a1], features: [X], configuration: {cpu: {cores: 16}}}
          p2:
            nodes:
              - {hosts: [b1], features: [Y], configuration: {cpu: {cores: 16}}}
              - {hosts: [b2], features: [X], configuration: {cpu: {cores: 2}}}
    """
    launcher = find(tmp_path, text, "cpu(cores=8)")
    # p1 (X) is best; p2 with clause X|Y would admit b2 (X, 2 cores): p2 must go
    assert launcher.options.partition == "p1"
    assert launcher.options.constraint == "X"


def test_s5_soundness_drops_clauses_before_excluding(tmp_path: Path) -> None:
    # "drop partitions or clauses (never the best candidate's) until it does not." / docs/design/matching.md §7 "If
    # soundness cannot be reached by dropping partitions or clauses ..., exclude"
    text = """
    slurm:
      - id: s
        partitions:
          p:
            priority: 1
            nodes:
              - {hosts: [px], features: [X], configuration: {cpu: {cores: 16}}}
              - {hosts: [py], features: [Y], configuration: {cpu: {cores: 2}}}
          q:
            nodes:
              - {hosts: [qy], features: [Y], configuration: {cpu: {cores: 16}}}
    """
    # q's clause Y would admit py (2 cores) in the best partition: drop it, do not exclude py
    launcher = find(tmp_path, text, "cpu(cores=8)")
    assert launcher.options.partition == "p"
    assert launcher.options.constraint == "X"
    assert launcher.options.exclude is None


def test_s5_exclude_covers_every_listed_partition(tmp_path: Path) -> None:
    # "with `use_features: false` and `use_hosts: true`, `--exclude` lists the hosts of the listed
    # partitions that did not match"
    text = """
    slurm:
      - id: s
        use_features: false
        partitions:
          p:
            nodes:
              - {hosts: [p1], features: [F], configuration: {cpu: {cores: 16}}}
              - {hosts: [p2], features: [F], configuration: {cpu: {cores: 2}}}
          r:
            nodes:
              - {hosts: [r1], configuration: {cpu: {cores: 16}}}
              - {hosts: [r2, r3], configuration: {cpu: {cores: 2}}}
          z:
            nodes:
              - {hosts: [z1], configuration: {cpu: {cores: 2}}}
    """
    launcher = find(tmp_path, text, "cpu(cores=8)")
    assert launcher.options.partition == "p,r"
    assert launcher.options.constraint is None
    assert sorted(launcher.options.exclude.split(",")) == ["p2", "r2", "r3"]


def test_s5_mem_rounded_up_in_mib(tmp_path: Path) -> None:
    # "`--mem` in MiB rounded **up** (never below the request; the older tool rounded down)"
    text = """
    slurm:
      - id: s
        partitions: {p: {nodes: [{hosts: [n1]}]}}
    """
    assert find(tmp_path, text, "cpu(mem=1025K)").options.mem == "2M"
    assert find(tmp_path, text, "cpu(mem=1G)").options.mem == "1024M"
    assert find(tmp_path, text, "cpu(mem=1GB)").options.mem == "954M"  # 953.67 MiB up
    assert find(tmp_path, text, "cpu(mem=1B)").options.mem == "1M"
    assert "--mem=954M" in find(tmp_path, text, "cpu(mem=1GB)").sbatch_args()


def test_s5_more_cores_instead_of_memory(tmp_path: Path) -> None:
    # "or, with `use_memory_constraint: false`, more cores instead, rejected if the node does not
    # have them"
    text = """
    slurm:
      - id: s
        use_memory_constraint: false
        configuration: {cpu: {mem_per_cpu: 4G}}
        partitions:
          p: {nodes: [{hosts: [n1], configuration: {cpu: {cores: 4, memory: 64G}}}]}
    """
    launcher = find(tmp_path, text, "cpu(mem=9G)")
    assert launcher.options.mem is None and launcher.options.cpus_per_task == 3
    assert find(tmp_path, text, "cpu(mem=16G)").options.cpus_per_task == 4
    assert find(tmp_path, text, "cpu(mem=1G, cores=2)").options.cpus_per_task == 2
    assert not_found(tmp_path, text, "cpu(mem=17G)")  # would need 5 cores


@pytest.mark.parametrize(
    ("spec", "time"),
    [
        ("duration=90s", "00:02:00"),
        ("duration=1s", "00:01:00"),
        ("duration=1h", "01:00:00"),
        ("duration=59.5 minutes", "01:00:00"),
        ("duration=25h", "1-01:00:00"),
        ("duration=4 days", "4-00:00:00"),
        ("duration=1.5h", "01:30:00"),
        ("duration=2w", "14-00:00:00"),
    ],
)
def test_s5_time_rounded_up(tmp_path: Path, spec: str, time: str) -> None:
    # "`--time` as `[D-]HH:MM:SS` rounded up" / docs/design/matching.md §7 "`--time` is rounded up to whole minutes
    # (Slurm's unit)."
    text = """
    slurm:
      - id: s
        partitions: {p: {nodes: [{hosts: [n1]}]}}
    """
    launcher = find(tmp_path, text, spec)
    assert launcher.options.time == time
    assert f"--time={time}" in launcher.sbatch_args()


def test_s5_output_option_order(tmp_path: Path) -> None:
    # "Output options ...: `--partition`, `--constraint`, ..., `--gpus-per-node`, `--cpus-per-task`,
    # `--mem`, `--time`, `--qos`, `--account`."
    text = """
    slurm:
      - id: s
        qos: {q: {}}
        partitions:
          p:
            qos: [q]
            accounts: [acc]
            nodes: [{hosts: [n1], features: [A], configuration: {gpu: {count: 2, memory: 16G}}}]
    """
    got = sargs(tmp_path, text, "duration=1h & cuda(mem=8G)*2 & cpu(cores=2, mem=1G)")
    assert got == [
        "--partition=p",
        "--constraint=A",
        "--gpus-per-node=2",
        "--cpus-per-task=2",
        "--mem=1024M",
        "--time=01:00:00",
        "--qos=q",
        "--account=acc",
    ]


def test_s5_deterministic_across_hash_seeds(tmp_path: Path) -> None:
    # "Output options, deterministic (the same for any `PYTHONHASHSEED`)"
    text = """
    slurm:
      - id: s
        features:
          A: {configuration: {cpu: {cores: 8}}}
          B: {configuration: {cpu: {cores: 8}}}
        partitions:
          z: {nodes: [{hosts: [z1, z2], features: [B, A]}]}
          a: {nodes: [{hosts: [a1], features: [A, B]}, {hosts: [a2], features: [B]}]}
          m: {nodes: [{hosts: [m1], features: [C]}, {hosts: [m2], features: [A]}]}
    """
    path = write(tmp_path, text)
    outs = set()
    for seed in ("0", "1", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        proc = cli("find", "cpu(cores=4)", "--config", str(path), "--json", env=env)
        assert proc.returncode == 0, proc.stderr
        outs.add(proc.stdout)
    assert len(outs) == 1


# An independent oracle: random small clusters (hosts known, uniform GPUs) against the rules of
# docs/design/matching.md §3 and the soundness and output rules of docs/design/matching.md §5, checked only through find_launcher's options.

_FEATURES = ["A", "B", "C"]


@st.composite
def _cluster(draw: st.DrawFn) -> list[dict[str, Any]]:
    parts = []
    for pi in range(draw(st.integers(1, 3))):
        groups = []
        for gi in range(draw(st.integers(1, 3))):
            groups.append(
                {
                    "hosts": [f"p{pi}g{gi}a", f"p{pi}g{gi}b"],
                    "features": draw(st.lists(st.sampled_from(_FEATURES), max_size=2, unique=True)),
                    "cores": draw(st.sampled_from([4, 16])),
                    "memory": draw(st.sampled_from([8, 64])),
                    "gpus": draw(st.sampled_from([0, 2, 4])),
                    "gpu_memory": draw(st.sampled_from([12, 24])),
                }
            )
        parts.append(
            {
                "name": f"p{pi}",
                "priority": draw(st.integers(0, 2)),
                "max_hours": draw(st.sampled_from([0, 1, 24])),
                "nodes": groups,
            }
        )
    return parts


def _cluster_yaml(parts: list[dict[str, Any]], use_features: bool = True) -> str:
    lines = [
        "slurm:",
        "  - id: rnd",
        f"    use_features: {str(use_features).lower()}",
        "    partitions:",
    ]
    for p in parts:
        lines.append(f"      {p['name']}:")
        lines.append(f"        priority: {p['priority']}")
        if p["max_hours"]:
            lines.append(f"        configuration: {{max_duration: {p['max_hours']}h}}")
        lines.append("        nodes:")
        for g in p["nodes"]:
            lines.append(
                f"          - {{hosts: [{', '.join(g['hosts'])}], features: [{', '.join(g['features'])}], "
                f"configuration: {{cpu: {{cores: {g['cores']}, memory: {g['memory']}G}}, "
                f"gpu: {{count: {g['gpus']}, memory: {g['gpu_memory']}G}}}}}}"
            )
    return "\n".join(lines) + "\n"


_RANDOM_REQ = st.tuples(
    st.sampled_from([1, 8, 16]),  # cores
    st.sampled_from([0, 16]),  # memory, GiB
    st.lists(st.sampled_from([0, 12, 20]), max_size=3),  # GPU memories, GiB
    st.sampled_from([0, 2]),  # duration, hours
)


def _oracle_match(
    p: dict[str, Any], g: dict[str, Any], req: tuple[int, int, list[int], int]
) -> bool:
    cores, mem, gpus, hours = req
    return (
        cores <= g["cores"]
        and mem <= g["memory"]
        and len(gpus) <= g["gpus"]
        and all(m <= g["gpu_memory"] for m in gpus)
        and (not p["max_hours"] or hours <= p["max_hours"])
    )


def _req_text(req: tuple[int, int, list[int], int]) -> str:
    cores, mem, gpus, hours = req
    atoms = [f"cpu(cores={cores}" + (f", mem={mem}G)" if mem else ")")]
    atoms += [f"cuda(mem={m}G)" if m else "cuda()" for m in gpus]
    if hours:
        atoms.append(f"duration={hours}h")
    return " & ".join(atoms)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(_cluster(), _RANDOM_REQ, st.booleans())
def test_s5_random_clusters_against_an_oracle(
    tmp_path: Path,
    parts: list[dict[str, Any]],
    req: tuple[int, int, list[int], int],
    use_features: bool,
) -> None:
    # docs/design/matching.md §3 matching, docs/design/matching.md §5 "the first group that can run the alternative", "The best is the one with the
    # highest priority (then file order)", "Soundness: ... Every such node must belong to a matching
    # candidate", "--exclude lists the hosts ... that did not match", --mem/--time never below.
    launcher = find(tmp_path, _cluster_yaml(parts, use_features), _req_text(req), default=None)
    matching = [(p, g) for p in parts for g in p["nodes"] if _oracle_match(p, g, req)]
    if not matching:
        assert launcher is None
        return
    assert launcher is not None
    o = launcher.options
    listed = o.partition.split(",")
    best = max(matching, key=lambda pg: pg[0]["priority"])  # max keeps the first: file order
    assert listed[0] == best[0]["name"]
    clauses = None
    if not use_features:
        assert o.constraint is None
    if o.constraint is not None:
        text = o.constraint
        many = text.split("|")
        if len(many) > 1:
            assert all(c.startswith("(") and c.endswith(")") for c in many), text
        clauses = [set(c.strip("()").split("&")) for c in many]
    excluded = set((o.exclude or "").split(",")) - {""}
    for p in parts:
        if p["name"] not in listed:
            continue
        for g in p["nodes"]:
            ok = _oracle_match(p, g, req)
            for host in g["hosts"]:
                if host in excluded:
                    assert not ok, f"{host} matches but is excluded"
                    continue
                if clauses is not None and not any(c <= set(g["features"]) for c in clauses):
                    continue
                assert ok, (
                    f"Slurm could place the job on {host} of {p['name']}, which does not match"
                )
    cores, mem, gpus, hours = req
    assert o.cpus_per_task is not None and o.cpus_per_task >= cores
    if mem:
        assert o.mem is not None and int(o.mem.rstrip("M")) * M >= mem * G
    assert o.gpus_per_node == (len(gpus) or None)
    assert o.time == (f"{hours:02d}:00:00" if hours else None)


# -------------------------------------------------------------- docs/design/matching.md §5 slurm convert (CLI)

SCONTROL = """\
NodeName=gpu.node:01 Arch=x86_64 CoresPerSocket=4
   CPUAlloc=0 CPUEfctv=8 CPUTot=8 CPULoad=0.00
   AvailableFeatures=GPU,GPU2,GPUM48G,A6000
   ActiveFeatures=GPU,GPU2,GPUM48G,A6000
   Gres=gpu:a6000:2
   NodeAddr=127.0.0.1 NodeHostName=localhost Version=22.05.8
   RealMemory=32000 AllocMem=0 FreeMem=1000 Sockets=2 Boards=1
   State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=gpu,debug

NodeName=gpu.node:02 Arch=x86_64 CoresPerSocket=4
   CPUAlloc=0 CPUEfctv=8 CPUTot=8 CPULoad=0.00
   AvailableFeatures=GPU,GPU2,GPUM48G,A6000
   ActiveFeatures=GPU,GPU2,GPUM48G,A6000
   Gres=gpu:a6000:2
   NodeAddr=127.0.0.1 NodeHostName=localhost Version=22.05.8
   RealMemory=32000 AllocMem=0 FreeMem=1000 Sockets=2 Boards=1
   State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=gpu,debug

NodeName=plain01 Arch=x86_64 CoresPerSocket=4
   CPUAlloc=0 CPUEfctv=8 CPUTot=8 CPULoad=0.00
   AvailableFeatures=(null)
   ActiveFeatures=(null)
   Gres=(null)
   NodeAddr=127.0.0.1 NodeHostName=localhost Version=22.05.8
   RealMemory=16000 AllocMem=0 FreeMem=1000 Sockets=2 Boards=1
   State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=debug

"""


def _convert(tmp_path: Path, *extra: str) -> tuple[str, Any]:
    proc = cli("slurm", "convert", *extra, stdin=SCONTROL)
    assert proc.returncode == 0, proc.stderr
    path = write(tmp_path / ("conv" + "".join(extra)), proc.stdout)
    return proc.stdout, path


def test_s5_convert_loads_as_it_is(tmp_path: Path) -> None:
    # "`launchers slurm convert [--no-hosts]` reads `scontrol show nodes` output on stdin and
    # writes a `launchers.yaml` that loads as it is (a `slurm:` list with one group)"
    import yaml

    text, path = _convert(tmp_path)
    doc = yaml.safe_load(text)
    assert list(doc) == ["slurm"] and len(doc["slurm"]) == 1
    assert cli("validate", str(path)).returncode == 0
    assert find_launcher("cpu()", config=path).kind == "slurm"


def test_s5_convert_own_features_and_names(tmp_path: Path) -> None:
    # "each node's features and partitions are its own (the older tool let a node without features
    # inherit the previous node's); node names and features keep dots, colons and other characters;
    # `Gres=gpu:N` fills `gpu.count`, `CPUTot` and `RealMemory` fill `cpu`; no YAML aliases."
    import yaml

    text, path = _convert(tmp_path)
    doc = yaml.safe_load(text)
    group = doc["slurm"][0]
    nodes = {
        h: (pname, n)
        for pname, part in group["partitions"].items()
        for n in part["nodes"]
        for h in n["hosts"]
    }
    assert "gpu.node:01" in nodes and "plain01" in nodes
    _, plain = nodes["plain01"]
    assert not plain.get("features")
    _, gpu = nodes["gpu.node:01"]
    assert gpu["features"] == ["GPU", "GPU2", "GPUM48G", "A6000"]
    assert gpu["configuration"]["gpu"]["count"] == 2
    assert gpu["configuration"]["cpu"]["cores"] == 8
    # RealMemory is in MB (MiB): 32000M
    memory = str(gpu["configuration"]["cpu"]["memory"])
    assert cpu(mem=memory).requirements[0].cpu.memory == 32000 * M
    # plain01 belongs only to debug
    in_gpu = [h for n in group["partitions"]["gpu"]["nodes"] for h in n["hosts"]]
    assert "plain01" not in in_gpu
    # no aliases: PyYAML anchors would be '&id001' / '*id001'
    assert "&id" not in text and "*id" not in text
    # the finder uses them
    launcher = find_launcher("cuda()*2 & cpu(mem=31G)", config=path)
    assert set(launcher.options.partition.split(",")) <= {"gpu", "debug"}
    assert find_launcher("cuda()*3", config=path, default=None) is None


def test_s7_convert_groups_identical_nodes(tmp_path: Path) -> None:
    # docs/design/matching.md §7 "`slurm convert`: nodes with the same features and the same `CPUTot`, `RealMemory` and GPU
    # count (from `Gres`) form one node group, whose `configuration` carries `cpu.cores`,
    # `cpu.memory` and `gpu.count`"
    import yaml

    text, _ = _convert(tmp_path)
    group = yaml.safe_load(text)["slurm"][0]
    gpu_nodes = group["partitions"]["gpu"]["nodes"]
    assert len(gpu_nodes) == 1
    assert gpu_nodes[0]["hosts"] == ["gpu.node:01", "gpu.node:02"]
    conf = gpu_nodes[0]["configuration"]
    assert conf["cpu"]["cores"] == 8 and conf["gpu"]["count"] == 2 and "memory" in conf["cpu"]


def test_s7_convert_no_hosts(tmp_path: Path) -> None:
    # docs/design/matching.md §7 "`--no-hosts` empties `hosts` and writes `use_hosts: false`."
    import yaml

    text, path = _convert(tmp_path, "--no-hosts")
    group = yaml.safe_load(text)["slurm"][0]
    assert group["use_hosts"] is False
    for part in group["partitions"].values():
        for n in part["nodes"]:
            assert not n.get("hosts")
    assert find_launcher("cuda()*2", config=path).kind == "slurm"


@pytest.mark.slurm
def test_s5_query_slurm_reads_partitions_max_time(
    slurm_cluster: dict[str, str], tmp_path: Path
) -> None:
    # "`query_slurm: true` does the same from `scontrol` at search time, and also reads each
    # partition's `MaxTime` as its `max_duration`."
    text = """
    slurm:
      - id: live
        query_slurm: true
        features_regex: ['GPU(?P<cuda_count>\\d+)', 'GPUM(?P<cuda_memory>\\d+G)']
    """
    path = write(tmp_path, text)
    # debug: 1 h, gpu: 1 day, long: 7 days
    assert find_launcher("duration=2 days", config=path).options.partition == "long"
    assert find_launcher("duration=8 days", config=path, default=None) is None
    g = find_launcher("cuda(mem=40G) & duration=2h", config=path)
    assert g.options.partition == "gpu"
    assert g.options.constraint is not None and "GPUM48G" in g.options.constraint
    proc = subprocess.run(
        ["sbatch", "--test-only", *g.sbatch_args(), "--wrap", "true"],
        capture_output=True,
        text=True,
        cwd=slurm_cluster["CLUSTER_JOBS_DIR"],
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slurm
@pytest.mark.parametrize("no_hosts", [False, True])
@pytest.mark.parametrize(
    ("spec", "node"), [("cuda()*4", "gpu02"), ("cuda()*2 & cpu(cores=8)", None)]
)
def test_s5_convert_then_find_on_real_slurm(
    slurm_cluster: dict[str, str], tmp_path: Path, no_hosts: bool, spec: str, node: str | None
) -> None:
    # "`launchers slurm convert [--no-hosts]` reads `scontrol show nodes` output on stdin and writes
    # a `launchers.yaml` that loads as it is"; the options found from it are accepted by the real
    # sbatch and place the job on a matching node.
    nodes = subprocess.run(
        ["scontrol", "show", "nodes"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    proc = cli("slurm", "convert", *(["--no-hosts"] if no_hosts else []), stdin=nodes)
    assert proc.returncode == 0, proc.stderr
    path = write(tmp_path, proc.stdout)
    proc = cli("find", spec, "--config", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    args = json.loads(proc.stdout)["sbatch_args"]
    test = subprocess.run(
        ["sbatch", "--test-only", *args, "--wrap", "true"],
        capture_output=True,
        text=True,
        cwd=slurm_cluster["CLUSTER_JOBS_DIR"],
        timeout=60,
    )
    assert test.returncode == 0, (args, test.stderr)
    if node is not None:
        assert f"on nodes {node} " in test.stderr, (args, test.stderr)


def test_s5_config_returns_new_launcher(tmp_path: Path) -> None:
    # "`SlurmLauncher.config(**options)` returns a new launcher with only the given options changed."
    launcher = find(tmp_path, BASIC, "cuda(mem=12G)*2 & duration=1h")
    before = launcher.sbatch_args()
    other = launcher.config(time="2:00:00", account="research")
    assert isinstance(other, launchers.SlurmLauncher)
    assert launcher.sbatch_args() == before
    assert other.options.account == "research"
    assert other.options.partition == launcher.options.partition
    assert other.options.constraint == launcher.options.constraint
    assert other.options.gpus_per_node == launcher.options.gpus_per_node
    assert other.options.time != launcher.options.time
    with pytest.raises(LaunchersError):
        launcher.config(partiton="x")


# =============================================================================== docs/design/matching.md §6
# docs/design/matching.md §6 Public surface


@pytest.mark.parametrize(
    "name",
    [
        "parse", "cpu", "cuda_gpu", "duration", "find_launcher", "LaunchersError",
        "RequirementSyntaxError", "ConfigurationError", "LauncherNotFoundError",
        "DirectLauncher", "SlurmLauncher", "UnicoreLauncher", "FirecrestLauncher",
    ],
)  # fmt: skip
def test_s6_public_names(name: str) -> None:
    # "`launchers.parse`, `cpu`, `cuda_gpu`, `duration`, `find_launcher`, and the error types ...
    # all importable from the package root." / "The launcher kinds: `DirectLauncher` (local),
    # `SlurmLauncher`, `UnicoreLauncher`, `FirecrestLauncher`."
    assert getattr(launchers, name) is not None
    ns: dict[str, Any] = {}
    exec(f"from launchers import {name}", ns)
    assert ns[name] is getattr(launchers, name)


def test_s6_error_hierarchy() -> None:
    # "the error types `LaunchersError`, `RequirementSyntaxError`, `ConfigurationError`,
    # `LauncherNotFoundError`"
    for cls in (RequirementSyntaxError, ConfigurationError, LauncherNotFoundError):
        assert issubclass(cls, LaunchersError)
    assert issubclass(RequirementSyntaxError, ValueError)


REMOTE = """
unicore:
  - id: juwels
    site: {url: "https://unicore.invalid:9112/JUWELS/rest/core", account: myproject}
    partitions: {booster: {configuration: {gpu: {count: 4, memory: 40G}, max_duration: 1d}}}
firecrest:
  - id: daint
    site: {api_url: "https://firecrest.invalid", machine: daint, token_url: "https://auth.invalid/token"}
    partitions: {normal: {configuration: {gpu: {count: 1, memory: 16G}}}}
"""


def test_s6_remote_launcher_kinds(tmp_path: Path) -> None:
    # "The launcher kinds: ... `UnicoreLauncher`, `FirecrestLauncher`. A Slurm-like launcher has
    # `.options` ... and `.sbatch_args()`"
    u = find(tmp_path, REMOTE, "cuda(mem=40G)*4 & duration=1d")
    assert isinstance(u, launchers.UnicoreLauncher) and u.kind == "unicore"
    assert u.options.partition == "booster" and u.options.gpus_per_node == 4
    assert "--time=1-00:00:00" in u.sbatch_args()
    f = find(tmp_path, REMOTE, "cuda(mem=16G)", tags=None, default=None)
    assert f is not None
    f = find(
        tmp_path,
        REMOTE.replace("  - id: juwels", "  - id: juwels\n    weight: -1"),
        "cuda(mem=16G)",
    )
    assert isinstance(f, launchers.FirecrestLauncher) and f.kind == "firecrest"
    assert f.options.partition == "normal" and f.sbatch_args()[0] == "--partition=normal"
    path = write(tmp_path / "cli", REMOTE)
    proc = cli("find", "cuda(mem=40G)*2", "--config", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert (data["kind"], data["group"]) == ("unicore", "juwels")


def test_s6_launcher_kinds(tmp_path: Path) -> None:
    # "The launcher kinds: `DirectLauncher` (local), `SlurmLauncher`"
    assert isinstance(find(tmp_path, ALL_KINDS, "cpu()"), launchers.DirectLauncher)
    assert isinstance(find(tmp_path, ALL_KINDS, "cpu(cores=4)"), launchers.SlurmLauncher)


OPTION_NAMES = (
    "partition", "constraint", "gpus_per_node", "gres", "cpus_per_task", "mem", "time", "qos",
    "account", "exclude", "nodes",
)  # fmt: skip


def test_s6_options_attributes_none_when_unset(tmp_path: Path) -> None:
    # "A Slurm-like launcher has `.options`, whose attributes are named after sbatch's long options
    # with underscores (`partition`, `constraint`, `gpus_per_node`, `gres`, `cpus_per_task`, `mem`,
    # `time`, `qos`, `account`, `exclude`, `nodes`; `None` when not set)"
    text = """
    slurm:
      - id: s
        partitions: {p: {nodes: [{hosts: [n1]}]}}
    """
    options = find(tmp_path, text, "cpu()").options
    assert options.partition == "p"
    for name in OPTION_NAMES[1:]:
        value = getattr(options, name)
        assert value is None or (name == "cpus_per_task" and value == 1), (name, value)


def test_s6_sbatch_args_match_options(tmp_path: Path) -> None:
    # "and `.sbatch_args()`, the same as a list of `--name=value` strings."
    launcher = find(tmp_path, BASIC, "cuda(mem=12G)*2 & cpu(mem=3G, cores=2) & duration=2h")
    opts = launcher.options
    expected = [
        f"--{n.replace('_', '-')}={getattr(opts, n)}"
        for n in OPTION_NAMES
        if getattr(opts, n) is not None
    ]
    assert sorted(launcher.sbatch_args()) == sorted(expected)
    assert all(a.startswith("--") and "=" in a for a in launcher.sbatch_args())


def test_s6_cli_find_json(tmp_path: Path) -> None:
    # "with `--json` one object `{"kind": ..., "group": <group id or index>, "alternative": <index
    # of the alternative used>, "options": {...}, "sbatch_args": [...]}`. Exit status 0 when found"
    path = write(tmp_path, BASIC)
    proc = cli("find", "cuda(mem=100G)", "cuda(mem=40G)*2", "--config", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert set(data) == {"kind", "group", "alternative", "options", "sbatch_args"}
    assert data["kind"] == "slurm" and data["group"] == "cluster" and data["alternative"] == 1
    assert data["options"]["partition"] == "big"
    assert data["options"]["gpus_per_node"] == 2
    assert (
        data["sbatch_args"]
        == find_launcher("cuda(mem=100G) | cuda(mem=40G)*2", config=path).sbatch_args()
    )


def test_s6_cli_find_json_local_group_index(tmp_path: Path) -> None:
    # ""group": <group id or index>"
    path = write(tmp_path, "local:\n  - cpu: {cores: 2}\n  - cpu: {cores: 64}\n")
    proc = cli("find", "cpu(cores=4)", "--config", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["kind"] == "local" and data["group"] == 1 and data["sbatch_args"] == []


def test_s6_cli_find_tags(tmp_path: Path) -> None:
    # "`launchers find SPEC [SPEC...] [--config PATH] [--tags a,b] ..."
    text = """
    local:
      - id: plain
    slurm:
      - id: tagged
        tags: [x]
        partitions: {p: {nodes: [{hosts: [n1]}]}}
    """
    path = write(tmp_path, text)
    proc = cli("find", "cpu()", "--config", str(path), "--tags", "y,x", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["group"] == "tagged"
    proc = cli("find", "cpu()", "--config", str(path), "--tags", "z", "--json")
    assert proc.returncode == 1


@pytest.mark.slow
def test_s6_cli_exit_status(tmp_path: Path) -> None:
    # "Exit status 0 when found, 1 when no launcher fits (the explanation on stderr), 2 for a
    # syntax or configuration error (the message on stderr, no traceback)."
    path = write(tmp_path, BASIC)
    assert cli("find", "cpu()", "--config", str(path)).returncode == 0
    proc = cli("find", "cuda(mem=1T)", "--config", str(path))
    assert proc.returncode == 1 and proc.stderr.strip() and not proc.stdout.strip()
    proc = cli("find", "cuda(mem=24)", "--config", str(path))
    assert proc.returncode == 2 and "cuda(mem=24)" in proc.stderr and "^" in proc.stderr
    bad = write(tmp_path / "bad", "slurm:\n  - id: s\n    use_feature: true\n")
    proc = cli("find", "cpu()", "--config", str(bad))
    assert proc.returncode == 2 and "use_feature" in proc.stderr and "did you mean" in proc.stderr
    proc = cli("find", "cpu()", "--config", str(tmp_path / "missing.yaml"))
    assert proc.returncode == 2 and proc.stderr.strip()
    proc = cli("find", "cpu()", "--config", str(bad), "--json")
    assert proc.returncode == 2 and not proc.stdout.strip()


def test_s6_cli_validate_exit_status(tmp_path: Path) -> None:
    # "`launchers validate [PATH]`: loads and checks a configuration, exit status as above."
    assert cli("validate", str(write(tmp_path, BASIC))).returncode == 0
    proc = cli("validate", str(write(tmp_path / "y", "local: [\n")))
    assert proc.returncode == 2 and "launchers.yaml" in proc.stderr
    proc = cli("validate", str(tmp_path / "nothing-here.yaml"))
    assert proc.returncode == 2


# =============================================================================== docs/design/matching.md §7
# docs/design/matching.md §7 Precise points


def test_s7_layering_order(tmp_path: Path) -> None:
    # "Layering order of configurations, later wins key by key: group `configuration`, partition
    # `configuration`, node group `configuration`, then `features.<f>.configuration` for each of the
    # node group's features in order, then values from `features_regex`."
    text = """
    slurm:
      - id: s
        features_regex: ['G(?P<cuda_count>\\d+)']
        features:
          F1: {configuration: {cpu: {cores: 32}, max_duration: 4h, gpu: {count: 1, memory: 10G}}}
          F2: {configuration: {cpu: {cores: 48}}}
          G3: {configuration: {gpu: {count: 1}}}
        configuration: {cpu: {cores: 4, memory: 8G}, max_duration: 1h, gpu: {memory: 1G}}
        partitions:
          p:
            configuration: {cpu: {cores: 8, memory: 16G}, max_duration: 2h}
            nodes:
              - hosts: [n1]
                features: [F1, F2, G3]
                configuration: {cpu: {cores: 16}, max_duration: 3h}
    """
    # cores: F2 (last feature) wins; memory: partition; duration: F1; gpu count from regex (3)
    # over features.G3 (1); gpu memory from F1
    assert (
        find(tmp_path, text, "cpu(cores=48, mem=16G) & duration=4h & cuda(mem=10G)*3").kind
        == "slurm"
    )
    assert not_found(tmp_path, text, "cpu(cores=49)")
    assert not_found(tmp_path, text, "cpu(mem=17G)")
    assert not_found(tmp_path, text, "duration=241 minutes")
    assert not_found(tmp_path, text, "cuda()*4")
    assert not_found(tmp_path, text, "cuda(mem=11G)")


def test_s7_candidate_order(tmp_path: Path) -> None:
    # "Candidate order" is: priority descending, then file order (partition, node group, QoS list,
    # account list)." / "`--partition` in candidate order"
    text = """
    slurm:
      - id: s
        partitions:
          low1: {nodes: [{hosts: [l1], features: [L1]}]}
          high: {priority: 5, nodes: [{hosts: [h1], features: [H]}]}
          low2: {nodes: [{hosts: [l2], features: [L2]}]}
    """
    launcher = find(tmp_path, text, "cpu()")
    assert launcher.options.partition == "high,low1,low2"
    assert launcher.options.constraint == "(H)|(L1)|(L2)"


def test_s7_candidate_order_qos_and_account_lists(tmp_path: Path) -> None:
    # "Candidate order" is: priority descending, then file order (partition, node group, QoS list,
    # account list)."
    text = """
    slurm:
      - id: s
        qos: {zeta: {}, alpha: {}}
        partitions:
          p:
            qos: [zeta, alpha]
            accounts: [yy, bb]
            nodes: [{hosts: [n1]}]
    """
    launcher = find(tmp_path, text, "cpu()")
    assert (launcher.options.qos, launcher.options.account) == ("zeta", "yy")


def test_s7_cuda_without_size_fits_any_gpu(tmp_path: Path) -> None:
    # "`min_memory` and `min_mem_ratio` apply to stated sizes; `cuda()` (no size) fits any GPU."
    text = """
    slurm:
      - id: s
        configuration: {gpu: {min_mem_ratio: 0.9, min_memory: 40G}}
        partitions:
          p: {nodes: [{hosts: [n1], configuration: {gpu: {count: 2, memory: 48G}}}]}
    """
    assert find(tmp_path, text, "cuda()*2").kind == "slurm"
    assert not_found(tmp_path, text, "cuda(mem=1G)")


def test_s7_min_mem_ratio_exact(tmp_path: Path) -> None:
    # "`min_mem_ratio * memory` is computed exactly (rational arithmetic, then rounded up to a
    # byte), so a ratio of 0.4 on a 10G card gives exactly 4G."
    text = """
    slurm:
      - id: s
        configuration: {gpu: {min_mem_ratio: 0.4}}
        partitions:
          p: {nodes: [{hosts: [n1], configuration: {gpu: {count: 1, memory: 10G}}}]}
    """
    assert find(tmp_path, text, "cuda(mem=4G)").kind == "slurm"
    assert not_found(tmp_path, text, f"cuda(mem={4 * G - 1}B)")
    # 0.3 of 10G = 3221225472 bytes exactly (0.3 * 10 * 2**30 in floats is 3221225471.9999995)
    text3 = text.replace("0.4", "0.3")
    assert find(tmp_path, text3, "cuda(mem=3221225472B)").kind == "slurm"
    assert not_found(tmp_path, text3, "cuda(mem=3221225471B)")


def test_s7_soundness_exclude_when_hosts_known(tmp_path: Path) -> None:
    # "If soundness cannot be reached by dropping partitions or clauses (the best candidate's own
    # partition holds a non-matching node group that satisfies one of its clauses), exclude that
    # node group's hosts with `--exclude` when they are known"
    text = """
    slurm:
      - id: s
        partitions:
          p:
            nodes:
              - {hosts: [good1], features: [X], configuration: {cpu: {cores: 16}}}
              - {hosts: [bad1, bad2], features: [X, OLD], configuration: {cpu: {cores: 2}}}
    """
    launcher = find(tmp_path, text, "cpu(cores=8)")
    # clause X admits bad1/bad2 (they have X)
    assert launcher.options.partition == "p"
    assert launcher.options.constraint == "X"
    assert launcher.options.exclude == "bad1,bad2"


def test_s7_soundness_unknown_hosts_explained(tmp_path: Path) -> None:
    # "when they are not, keep the best candidate and say so in the explanation."
    text = """
    slurm:
      - id: s
        use_hosts: false
        partitions:
          p:
            nodes:
              - {features: [X], configuration: {cpu: {cores: 16}}}
              - {features: [X, OLD], configuration: {cpu: {cores: 2}}}
    """
    launcher = find(tmp_path, text, "cpu(cores=8)")
    assert launcher.options.partition == "p" and launcher.options.constraint == "X"
    assert launcher.options.exclude is None
    path = write(tmp_path, text)
    proc = cli("find", "cpu(cores=8)", "--config", str(path), "--explain")
    assert proc.returncode == 0
    assert "sound" in (proc.stdout + proc.stderr).lower() or "OLD" in proc.stdout + proc.stderr


def test_s7_inline_tokens(tmp_path: Path) -> None:
    # "Inline `tokens: {NAME: COUNT}` at the top level defines counter tokens"
    text = """
    tokens: {gpu_licence: 2}
    local:
      - id: a
        tokens: {gpu_licence: 1}
    """
    assert find(tmp_path, text, "cpu()").group_id == "a"
    bad = text.replace("gpu_licence: 2", "gpu_licence: two")
    with pytest.raises(ConfigurationError):
        find(tmp_path, bad, "cpu()")


# =============================================================================== experimaestro 1.5.7
# "It starts from experimaestro's YAML-era finder (releases 0.11 to 1.5.7 ...), keeps its names and
# file format so that existing files load unchanged". benchmarks/data/launchers.yaml is byte for
# byte experimaestro 1.5.7's tests/launchers/config_slurm/launchers.yaml; the cases below are that
# release's tests/test_findlauncher.py, with the answers the spec requires.

EXPERIMAESTRO_YAML = ROOT / "benchmarks" / "data" / "launchers.yaml"


def needs_xpm_file(test: Any) -> Any:
    """Tests of experimaestro's own file, which the repository holds: a missing file fails them."""
    return test


def test_experimaestro_local_group_spelling(tmp_path: Path) -> None:
    # 1.5.7's local groups spell the flag `disable` (DirectLauncherConfiguration.disable); the spec
    # calls it `disabled`: both load ("existing files load unchanged"), both together are an error.
    text = """
    local:
      - id: old
        disable: true
        cpu: {cores: 64}
      - id: new
        cpu: {cores: 2}
    """
    assert find(tmp_path, text, "cpu()").group_id == "new"
    assert not_found(tmp_path, text, "cpu(cores=3)")
    with pytest.raises(ConfigurationError):
        find(tmp_path, "local:\n  - disable: true\n    disabled: true\n", "cpu()")


def test_experimaestro_specs() -> None:
    req1 = cuda_gpu(mem="14G") * 2 & cpu(mem="7G")
    (r1,) = req1.requirements
    assert r1.cpu.cores == 1 and r1.cpu.memory == 7 * G
    assert [g.memory for g in r1.cuda_gpus] == [14 * G, 14 * G]
    req2 = cuda_gpu(mem="10G") & cpu(mem="7G")
    (r2,) = req2.requirements
    assert (
        r2.cpu.cores == 1
        and r2.cpu.memory == 7 * G
        and [g.memory for g in r2.cuda_gpus] == [10 * G]
    )


def test_experimaestro_match_host(tmp_path: Path) -> None:
    text = """
    local:
      - id: host
        cpu: {cores: 1, memory: 12G}
        gpus: [{model: big, count: 1, memory: 48G}]
    """
    req1 = cuda_gpu(mem="14G") * 2 & cpu(mem="7G")
    req2 = cuda_gpu(mem="10G") & cpu(mem="7G")
    assert find(tmp_path, text, req1 | req2).alternative == 1


def test_experimaestro_gpu_min_memory(tmp_path: Path) -> None:
    text = """
    local:
      - id: host
        cpu: {cores: 1, memory: 12G}
        gpus: [{model: big, count: 1, memory: 48G, min_memory: 24G}]
    """
    assert not_found(tmp_path, text, cuda_gpu(mem="20G"))  # not enough requested
    assert not_found(tmp_path, text, cuda_gpu(mem="50G"))  # too much requested
    assert find(tmp_path, text, cuda_gpu(mem="30G")).kind == "local"


def test_experimaestro_parse() -> None:
    (r,) = parse("""duration=4 d & cuda(mem=4G) * 2 & cpu(mem=400M, cores=4)""")
    assert [g.memory for g in r.cuda_gpus] == [4 * G, 4 * G]
    assert r.duration == 4 * DAY and r.cpu.memory == 400 * M and r.cpu.cores == 4


@needs_xpm_file
def test_experimaestro_slurm_file() -> None:
    launcher = find_launcher("""duration=4 days & cuda(mem=24G) * 2""", config=EXPERIMAESTRO_YAML)
    assert isinstance(launcher, launchers.SlurmLauncher) and launcher.group_id == "test_slurm"
    options = launcher.options
    assert options.gpus_per_node == 2
    # electronic (RTX 24G) and every node group of hard: a 48G card accepts 24G (ratio 0.4 gives
    # 19.2G); file order among equal priorities; all other partitions only have smaller cards.
    assert options.partition == "electronic,hard"
    assert (
        options.constraint
        == "(GPU4&RTX&GPUM24G)|(GPU2&A6000&GPUM48G)|(GPU3&A5000&GPUM24G)|(GPU3&A6000&GPUM48G)"
    )
    assert options.time == "4-00:00:00"


@needs_xpm_file
@pytest.mark.parametrize(
    ("spec", "partition", "constraint"),
    [
        ("cuda(mem=40G)*3", "hard", "GPU3&A6000&GPUM48G"),
        ("cuda(mem=12G)*8", "funky", "GPU8&TITANX&GPUM12G"),
        # min_mem_ratio 0.4: 4G only fits the 10G cards (4G), not 11G (4.4G) or 12G (4.8G)
        ("cuda(mem=4G)", "jazzy", "GPU2&3080&GPUM10G"),
        ("cuda(mem=80G)", None, None),  # heavy (A100 40G) is disabled anyway
        ("cuda()*8", "funky", "GPU8&TITANX&GPUM12G"),
    ],
)
def test_experimaestro_slurm_file_answers(
    spec: str, partition: str | None, constraint: str | None
) -> None:
    launcher = find_launcher(spec, config=EXPERIMAESTRO_YAML, default=None)
    if partition is None:
        assert launcher is None
        return
    assert launcher.options.partition == partition
    assert launcher.options.constraint == constraint


@needs_xpm_file
def test_experimaestro_file_validates() -> None:
    assert cli("validate", str(EXPERIMAESTRO_YAML)).returncode == 0
