"""The requirement language: parse(), its errors, and agreement with the Python builders."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import launchers
from launchers import (
    LaunchersError,
    RequirementSyntaxError,
    cpu,
    cuda_gpu,
    duration,
    gpu,
    mps,
    parse,
)
from launchers.language.parser import MAX_GPUS, _fast_parse, _lalr_parse
from launchers.language.values import (
    CPURequest,
    GPURequest,
    HostRequirement,
    RequirementUnion,
    as_union,
)

G = 1024**3
M = 1024**2


def test_spec_example() -> None:
    text = "duration=4 days & cuda(mem=24G)*2 & cpu(mem=400M, cores=4) | cuda(mem=12G)*4"
    value = parse(text)
    assert isinstance(value, RequirementUnion)
    first, second = value.requirements
    assert first.duration == 4 * 86400
    assert first.cpu.memory == 400 * M and first.cpu.cores == 4
    assert [g.memory for g in first.cuda_gpus] == [24 * G, 24 * G]
    assert second.duration == 0 and second.cpu.cores == 1
    assert [g.memory for g in second.cuda_gpus] == [12 * G] * 4
    python = duration("4 days") & cuda_gpu(mem="24G") * 2 & cpu(mem="400M", cores=4) | (
        cuda_gpu(mem="12G") * 4
    )
    assert value == as_union(python)


def test_root_exports() -> None:
    assert launchers.parse is parse
    assert issubclass(RequirementSyntaxError, ValueError)
    assert issubclass(RequirementSyntaxError, LaunchersError)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cuda()", cuda_gpu()),
        ("cpu()", HostRequirement()),
        ("cpu()", cpu()),
        ("cuda(mem=24G)", cuda_gpu("24G")),
        ("cuda( mem = 24G )", cuda_gpu("24G")),
        ("cpu(cores=4, mem=1.5GiB)", cpu(mem="1.5G", cores=4)),
        ("cpu(mem=400MB)", cpu(mem=400 * 1000**2)),
        ("cpu(mem=2k)", cpu(mem=2048)),
        ("cpu(mem=2kb)", cpu(mem=2000)),
        ("cpu(mem=3gib)", cpu(mem=3 * G)),
        ("cpu(mem=1T)", cpu(mem=1024**4)),
        ("cpu(mem=1TB)", cpu(mem=1000**4)),
        ("cpu(mem=100B)", cpu(mem=100)),
        ("cpu(mem=0.5K)", cpu(mem=512)),
        ("cuda(mem=0G)", cuda_gpu()),
        ("cuda()*3", cuda_gpu() * 3),
        ("cuda(mem=1G) * 2", cuda_gpu("1G") * 2),
        ("duration=4d", duration(4 * 86400)),
        ("duration=4 days", duration("4d")),
        ("duration=1 day", duration(86400)),
        ("duration=4 day", duration(4 * 86400)),
        ("duration=1.5h", duration(5400)),
        ("duration=90 minutes", duration(5400)),
        ("duration=90min", duration(5400)),
        ("duration=90m", duration(5400)),
        ("duration=1 minute", duration(60)),
        ("duration=30s", duration(30)),
        ("duration=30 sec", duration(30)),
        ("duration=1 second", duration(1)),
        ("duration=45 seconds", duration(45)),
        ("duration=2 hours", duration(7200)),
        ("duration=1 hour", duration(3600)),
        ("duration=1w", duration(7 * 86400)),
        ("duration=2 weeks", duration(14 * 86400)),
        ("duration=1 week", duration(7 * 86400)),
        ("duration=1h30m", duration(5400)),
        ("duration=1d 2h", duration(93600)),
        ("duration = 2H", duration(7200)),
    ],
)
def test_atoms(text: str, expected: HostRequirement) -> None:
    assert parse(text) == as_union(expected)


def test_precedence_and_whitespace() -> None:
    a, b, c = cuda_gpu("1G"), cpu(cores=2), duration("1h")
    assert parse("cuda(mem=1G) | cpu(cores=2) & duration=1h") == as_union(a | (b & c))
    assert parse("cuda(mem=1G) & cpu(cores=2) | duration=1h") == as_union((a & b) | c)
    # '*' binds tighter than '&'
    assert parse("cpu(cores=2) & cuda(mem=1G)*2") == as_union(b & a * 2)
    text = "duration=1h\n\t&  cuda(mem=1G)\r\n|\ncpu(cores=2)\n"
    assert parse(text) == as_union((c & a) | b)
    assert len(parse("cuda() | cuda() | cuda()").requirements) == 3


def test_and_takes_maximum_and_concatenates_gpus() -> None:
    value = parse(
        "cpu(cores=2, mem=8G) & cpu(cores=4, mem=2G) & duration=1h & duration=2h & cuda() & cuda(mem=3G)"
    )
    (alt,) = value.requirements
    assert alt.cpu == CPURequest(memory=8 * G, cores=4)
    assert alt.duration == 7200
    assert alt.cuda_gpus == (GPURequest(0), GPURequest(3 * G))


def test_parentheses_distribute_like_python() -> None:
    x, a, b = duration("2h"), cuda_gpu("1G"), cpu(cores=4)
    assert parse("duration=2h & (cuda(mem=1G) | cpu(cores=4))") == as_union(x & (a | b))
    assert parse("(cuda(mem=1G) | cpu(cores=4)) & duration=2h") == as_union((a | b) & x)
    assert (
        parse("(cuda() | cpu()) & (duration=1h | duration=2h)").requirements
        == ((cuda_gpu() | cpu()) & (duration("1h") | duration("2h"))).requirements
    )
    assert parse("((cuda()))") == as_union(cuda_gpu())
    # '*N' on a group of GPU-only alternatives repeats their GPUs, as in Python
    assert parse("(cuda(mem=1G) | cuda()*2)*2") == as_union((cuda_gpu("1G") | cuda_gpu() * 2) * 2)


def test_values_are_immutable() -> None:
    a = cpu(cores=2)
    b = cuda_gpu("1G")
    c = a & b
    assert a == cpu(cores=2) and b == cuda_gpu("1G")
    assert c.cuda_gpus == (GPURequest(G),)
    assert parse("cuda()") is not parse("cuda()")


def test_parse_accepts_values() -> None:
    assert parse(cuda_gpu("1G")) == as_union(cuda_gpu("1G"))


def _error(text: str) -> RequirementSyntaxError:
    with pytest.raises(RequirementSyntaxError) as info:
        parse(text)
    return info.value


@pytest.mark.parametrize(
    ("text", "column", "fragment"),
    [
        ("cuda(mem=24)", 10, "needs a unit"),
        ("cpu(mem=4000)", 9, "needs a unit"),
        ("duration=4", 10, "needs a unit"),
        ("duration=4 parsecs", 12, "unknown duration unit 'parsecs'"),
        ("cuda(mem=4X)", 11, "unknown size unit 'X'"),
        ("cpu(cores=2, cores=8)", 14, "repeated"),
        ("cuda(mem=1G, mem=2G)", 14, "repeated"),
        ("cuda(cores=2)", 6, "unknown key 'cores'"),
        ("cpu(memory=2G)", 5, "unknown key 'memory'"),
        ("cpu(x)", 5, "unknown key 'x'"),
        ("cuda()*0", 8, "at least 1"),
        ("cuda()*1.5", 8, "whole number"),
        (f"cuda()*{MAX_GPUS + 1}", 8, f"at most {MAX_GPUS}"),
        ("cpu(cores=0)", 11, "at least 1"),
        ("cpu(cores=2.5)", 11, "whole number"),
        ("cpu(cores=4G)", 12, "without unit"),
        ("CUDA()", 1, "lower case"),
        ("Duration=4h", 1, "lower case"),
        ("cpu(Mem=1G)", 5, "lower case"),
        ("gpus(mem=4G)", 1, "unknown requirement 'gpus'"),
        ("gpu(cores=2)", 5, "unknown key 'cores' in gpu(...)"),
        ("mps(mem=4)", 9, "needs a unit"),
        ("MPS()", 1, "lower case"),
        ("mps()*0", 7, "at least 1"),
        ("cpu()*2", 6, "repeats GPUs"),
        ("duration=1h*2", 12, "repeats GPUs"),
        ("duration(4h)", 1, "not a function"),
        ("cuda=4G", 1, "takes arguments"),
        ("duration=30m 1h", 15, "smaller than"),
        ("", 1, "unexpected end of text"),
        ("   ", 1, "unexpected end of text"),
        ("cuda() &", 9, "unexpected end of text"),
        ("cuda() & | cpu()", 10, "unexpected '|'"),
        ("cuda() cpu()", 8, "unexpected 'cpu'"),
        ("cuda(mem=4G", 12, "unexpected end of text"),
        ("cuda(mem=4G))", 13, "unexpected ')'"),
        ("cuda() $", 8, "unexpected '$'"),
        ("4G", 1, "unexpected '4'"),
    ],
)
def test_errors(text: str, column: int, fragment: str) -> None:
    e = _error(text)
    assert fragment in str(e)
    assert (e.line, e.column) == (1, column)
    assert e.text == text
    assert isinstance(e, ValueError)


def test_error_message_shows_caret_and_expected() -> None:
    e = _error("cuda(mem=24G) & | cpu()")
    lines = str(e).splitlines()
    assert lines[1].strip() == "cuda(mem=24G) & | cpu()"
    assert lines[2].index("^") - lines[1].index("c") == 16
    assert "expected one of: 'duration=', 'cuda(', 'gpu(', 'mps(', 'cpu(', '('" in str(e)
    e = _error("cuda(mem=)")
    assert e.expected == ("a size such as 24G",)
    e = _error("cuda() cpu()")
    assert e.expected == ("'*'", "'&'", "'|'", "end of text")
    e = _error("duration=")
    assert e.expected == ("a duration such as 4h",)


def test_error_on_second_line() -> None:
    e = _error("cuda(mem=4G)\n  & cpu(cores=0)")
    assert (e.line, e.column) == (2, 15)
    assert str(e).splitlines()[1].strip() == "& cpu(cores=0)"
    e = _error("cuda() &\n\n")
    assert (e.line, e.column) == (1, 9)


def test_non_string() -> None:
    with pytest.raises(RequirementSyntaxError):
        parse(42)  # type: ignore[arg-type]


# --- property-based -----------------------------------------------------------------------

_ALPHABET = [
    "duration", "cuda", "gpu", "mps", "cpu", "mem", "cores", "=", "(", ")", ",", "&", "|", "*",
    "4", "0", "2.5", "24", "G", "GiB", "MB", "h", "days", "m", " ", "\n", "\t", "x", "$", ".",
]  # fmt: skip


def _check_error_position(text: str, e: RequirementSyntaxError) -> None:
    lines = text.split("\n")
    assert 1 <= e.line <= len(lines)
    assert 1 <= e.column <= len(lines[e.line - 1]) + 1
    assert e.text == text


def _parse_or_error(text: str) -> RequirementUnion | None:
    try:
        value = parse(text)
    except RequirementSyntaxError as e:
        _check_error_position(text, e)
        return None
    assert isinstance(value, RequirementUnion)
    assert value.requirements
    return value


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_random_text_gives_value_or_syntax_error(text: str) -> None:
    _parse_or_error(text)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(_ALPHABET), max_size=25).map("".join))
def test_token_soup_gives_value_or_syntax_error(text: str) -> None:
    value = _parse_or_error(text)
    fast = _fast_parse(text)
    # the fast path never accepts what the grammar rejects, and agrees when it answers
    assert fast is None or fast == value


_SIZES = st.sampled_from(["1G", "24G", "1.5GiB", "400M", "512MB", "2T", "100B", "3k", "0.5g"])
_DURATIONS = st.sampled_from(["4 days", "1h", "1.5h", "90 minutes", "30s", "2w", "1h30m", "1 day"])


@st.composite
def _atoms(draw: st.DrawFn) -> tuple[str, HostRequirement]:
    kind = draw(st.sampled_from(["cuda", "gpu", "mps", "cpu", "duration"]))
    if kind == "duration":
        d = draw(_DURATIONS)
        return f"duration={d}", duration(d)
    if kind != "cpu":
        mem = draw(st.none() | _SIZES)
        n = draw(st.integers(1, 4))
        text = f"{kind}(mem={mem})" if mem else f"{kind}()"
        value = {"cuda": cuda_gpu, "gpu": gpu, "mps": mps}[kind](mem)
        if n > 1 or draw(st.booleans()):
            return f"{text}*{n}", value * n
        return text, value
    mem = draw(st.none() | _SIZES)
    cores = draw(st.none() | st.integers(1, 64))
    args = []
    if mem:
        args.append(f"mem={mem}")
    if cores:
        args.append(f"cores={cores}")
    if draw(st.booleans()):
        args.reverse()
    return f"cpu({', '.join(args)})", cpu(mem=mem, cores=cores or 1)


@st.composite
def _expressions(draw: st.DrawFn, depth: int = 2) -> tuple[str, HostRequirement | RequirementUnion]:
    """A requirement as (text, the same built with Python operators)."""
    alternatives = []
    for _ in range(draw(st.integers(1, 3))):
        factors = []
        for _ in range(draw(st.integers(1, 3))):
            if depth > 0 and draw(st.integers(0, 4)) == 0:
                text, value = draw(_expressions(depth=depth - 1))
                factors.append((f"({text})", value))
            else:
                factors.append(draw(_atoms()))
        text = " & ".join(t for t, _ in factors)
        value = factors[0][1]
        for _, v in factors[1:]:
            value = value & v
        alternatives.append((text, value))
    text = " | ".join(t for t, _ in alternatives)
    value = alternatives[0][1]
    for _, v in alternatives[1:]:
        value = value | v
    return text, value


@settings(max_examples=100, deadline=None)
@given(_expressions())
def test_strings_equal_python_expressions(
    pair: tuple[str, HostRequirement | RequirementUnion],
) -> None:
    text, value = pair
    parsed = parse(text)
    assert parsed == as_union(value)
    assert _lalr_parse(text) == parsed
    assert parse(str(parsed)) == parsed


_GPU = st.builds(GPURequest, st.integers(0, 2**42))
_HOST = st.builds(
    HostRequirement,
    duration=st.integers(0, 10**8),
    cpu=st.builds(CPURequest, memory=st.integers(0, 2**45), cores=st.integers(1, 512)),
    cuda_gpus=st.lists(_GPU, max_size=5).map(tuple),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(_HOST, min_size=1, max_size=4))
def test_round_trip(alternatives: list[HostRequirement]) -> None:
    value = RequirementUnion(tuple(alternatives))
    assert parse(str(value)) == value
    assert _lalr_parse(str(value)) == value
    for alt in alternatives:
        assert parse(str(alt)) == alt.as_union()


def test_str_is_exact_and_parses_back() -> None:
    assert str(cuda_gpu("1.3G")) == "cuda(mem=1.3GiB)"
    assert str(cpu(mem=12345)) == "cpu(mem=12.055KiB)"
    assert str(cpu(mem=400 * 1000**2)) == "cpu(mem=400MB)"
    assert str(cpu(mem=2**40 + 1)) == "cpu(mem=1099511627777B)"
    assert str(duration(5400)) == "duration=1h30m"
    for value in (cuda_gpu("1.3G"), cpu(mem=12345), cpu(mem=2**40 + 1), duration(5400)):
        assert parse(str(value)) == as_union(value)
    # the Python builder reads what str() writes
    assert duration("1h30m") == duration(5400)


def test_limits_are_errors_not_hangs() -> None:
    group = "(" + "|".join(["cuda()"] * 64) + ")"
    assert len(parse(f"{group} & {group}").requirements) == 64 * 64
    assert "alternatives" in str(_error(f"{group} & {group} & {group}"))
    assert "at most 1024 GPUs" in str(_error("((cuda()*1024)*1024)*1024"))
    assert "1024 GPUs" in str(_error(" & ".join(["cuda()*512"] * 3)))


@pytest.mark.parametrize(
    ("text", "column", "start", "expected"),
    [
        ("cuda(model=A100)", 6, "unknown key 'model' in cuda(...)", ("'mem='",)),
        ("cuda(mem=big)", 10, "mem= needs a size", ("a size such as 24G",)),
        (
            "cpu(cores=many)",
            11,
            "cores= needs a whole number of cores",
            ("a whole number of cores such as 4",),
        ),
        ("duration=long", 10, "duration= needs a duration", ("a duration such as 4h",)),
        ("cpu(cores=2, cores=8)", 14, "key 'cores' repeated", ("'mem='", "')'")),
        (
            "cpu(cores=0)",
            11,
            "cores=0: cores must be at least 1",
            ("a whole number of cores such as 4",),
        ),
    ],
)
def test_value_errors_say_where_and_what_was_expected(
    text: str, column: int, start: str, expected: tuple[str, ...]
) -> None:
    """docs/design/matching.md §1: every syntax error shows the column and what was expected there; a key the
    language does not know is reported at the key even when its value starts with a word."""
    e = _error(text)
    assert (e.line, e.column) == (1, column) and e.reason.startswith(start), e
    assert e.expected == expected and "expected one of: " in str(e)


def test_decimals_without_a_leading_or_trailing_digit() -> None:
    """'integer or decimal': .5 and 2. read as Python's float() does, in strings and builders."""
    assert parse("duration=.5h") == parse("duration=30m") == parse(duration(".5h"))
    assert parse("cpu(mem=2.G)") == parse("cpu(mem=2G)")


# ---------------------------------------------------------------- experimaestro 2.x strings


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("gpu(mem=4GiB)", gpu("4G")),
        ("mps(mem=8GiB) & cpu(mem=4G)", mps("8G") & cpu(mem="4G")),
        ("gpu()*2", gpu() * 2),
        ("mps(mem=512MiB) * 3", mps("512M") * 3),
        ("duration=4h & cuda(mem=8GiB) | duration=4h & mps(mem=8GiB)",
         duration("4h") & cuda_gpu("8G") | duration("4h") & mps("8G")),
        ("duration=40h & cpu(mem=700GiB) & cuda(mem=32GiB) * 2",
         duration(40 * 3600) & cpu(mem="700G") & cuda_gpu("32G") * 2),
        ("duration=2h & gpu(mem=4GiB)", duration("2h") & gpu("4G")),
        ("duration=30m", duration(1800)), ("duration=30min", duration(1800)), ("duration=3mins", duration(180)),
        ("duration=2hours", duration(7200)), ("duration=1day", duration(86400)),
    ],
)  # fmt: skip
def test_experimaestro_2_strings(text: str, value: object) -> None:
    assert parse(text) == parse(value)  # type: ignore[arg-type]
    assert _lalr_parse(text) == parse(text)


def test_gpu_kinds_are_kept_apart() -> None:
    (alt,) = parse("cuda(mem=4G) & gpu(mem=4G) & mps(mem=4G)").requirements
    assert [g.kind for g in alt.cuda_gpus] == ["cuda", "gpu", "mps"]
    assert len(set(alt.cuda_gpus)) == 3
    assert str(alt) == "cuda(mem=4GiB) & gpu(mem=4GiB) & mps(mem=4GiB)"
    assert str(parse("gpu()*2 & mps()")) == "gpu()*2 & mps()"
    assert parse(str(alt)).requirements == (alt,)
    assert (gpu() * 2 & mps()).requirements[0].cuda_gpus == [GPURequest(0, "gpu")] * 2 + [
        GPURequest(0, "mps")
    ]
    assert launchers.gpu is gpu and launchers.mps is mps
    with pytest.raises(RequirementSyntaxError, match="repeats GPUs: it must follow cuda"):
        cpu() * 2
    assert [GPURequest(0, k).bit for k in ("cuda", "mps", "gpu")] == [1, 2, 0]
