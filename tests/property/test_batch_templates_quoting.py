"""hpc_batch templates: values are quoted for their place however the template is written
(docs/design/pilots.md §4): comments, here-documents, ``$(...)`` and backquotes inside double quotes,
``$'...'``, ``case`` inside ``$(...)``. Rendered scripts are run with bash to prove that each value
arrives exactly and that nothing in it is executed (the marker file is never created)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from launchers.batch.templates import TemplateError, contexts, render
from launchers.errors import LaunchersError

MARKER = "PWNED"

# pieces that break out of a naively chosen quoting and create the marker file
ATTACKS = [
    f"; touch {MARKER}; ",
    f"$(touch {MARKER})",
    f"`touch {MARKER}`",
    f"'; touch {MARKER}; '",
    f'"; touch {MARKER}; "',
    f"\ntouch {MARKER}\n",
    f"'$(touch {MARKER})'",
    f'"$(touch {MARKER})"',
    f"\\`touch {MARKER}\\`",
    f") ; touch {MARKER} ; (",
    f"}}; touch {MARKER}; ${{",
    "'",
    '"',
    "\\",
    "$",
    "`",
    ";",
    "\n",
    " ",
    "\t",
    "$x",
    "${x}",
    "$(",
    ")",
    "'\\''",
    "#",
    "*",
    "~",
    "EOF",
]

CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\0")
VALUES = st.lists(st.one_of(st.sampled_from(ATTACKS), st.text(CHARS, max_size=6)), max_size=6).map(
    "".join
)

# (template snippet writing its output file, expected content given the value)
SNIPPETS: list[tuple[str, str]] = [
    ("printf '%s' <<x>> > o{n}\n", "{v}"),
    ("printf '%s' \"<<x>>\" > o{n}\n", "{v}"),
    ("printf '%s' 'a<<x>>b' > o{n}\n", "a{v}b"),
    ("printf '%s' x\"<<x>>\"'<<x>>'<<x>> > o{n}\n", "x{v}{v}{v}"),
    ("# it's a comment with \"quotes and $( and `\nprintf '%s' <<x>> > o{n}\n", "{v}"),
    (
        "cat <<END_OF_TEXT > o{n}\ndon't \"<<x>>\" $(printf '%s.' <<x>>)\nEND_OF_TEXT\n",
        'don\'t "{v}" {v}.\n',
    ),
    (
        "cat > o{n} <<\"QUOTED\"\nit's literal: $x `y` \\z\nQUOTED\nprintf '%s' <<x>> >> o{n}\n",
        "it's literal: $x `y` \\z\n{v}",
    ),
    ("printf '%s' \"$(printf '%s.' <<x>>)\" > o{n}\n", "{v}."),
    ("printf '%s' \"$(printf '%s.' \"<<x>>\")\" > o{n}\n", "{v}."),
    ("printf '%s' \"a$(printf b)<<x>>\" > o{n}\n", "ab{v}"),
    ("printf '%s' \"`printf '%s.' <<x>>`\" > o{n}\n", "{v}."),
    ("y=`printf '%s.' \"<<x>>\"`; printf '%s' \"$y\" > o{n}\n", "{v}."),
    (
        "printf '%s' \"$(case a in (a) printf '%s.' <<x>>;; b) echo no;; esac)<<x>>\" > o{n}\n",
        "{v}.{v}",
    ),
    ("printf '%s' \"$(cat <<'Q'\nit's\nQ\nprintf '%s.' <<x>>)\" > o{n}\n", "it's\n{v}."),
    ("printf '%s' $'a\\'<<x>>b' > o{n}\n", "a'{v}b"),
    ("printf '%s' \"${unset_var:-'a b'}\" <<x>> > o{n}\n", "'a b'{v}"),
    ("f() { printf '%s' \"$1\"; }  # don't\nf <<x>> > o{n}\n", "{v}"),
    ("printf '%s' \"$((1 + 2))\" <<x>> > o{n}\n", "3{v}"),
    ("y=\"a}'b\"; printf '%s' \"${y#'a}'}\"<<x>> > o{n}\n", "'b{v}"),
]


def run(script: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    (cwd / "job.sh").write_text(script, encoding="utf-8", errors="surrogateescape")
    return subprocess.run(
        ["bash", "job.sh"], cwd=cwd, capture_output=True, stdin=subprocess.DEVNULL, timeout=20
    )


def read(path: Path) -> str:
    return path.read_bytes().decode("utf-8", "surrogateescape")


def expected(snippet: int, value: str) -> str:
    return SNIPPETS[snippet][1].replace("{v}", value)


@pytest.mark.slow
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=VALUES, order=st.permutations(range(len(SNIPPETS))))
def test_every_context_round_trips_and_runs_nothing(
    tmp_path_factory: pytest.TempPathFactory, value: str, order: list[int]
) -> None:
    assume(
        "\nEND_OF_TEXT\n" not in f"\n{value}\n"
    )  # refused; see test_value_ending_a_heredoc_is_refused
    cwd = tmp_path_factory.mktemp("q")
    template = "".join(SNIPPETS[k][0].replace("{n}", str(k)) for k in order)
    script = render(template, {"x": value})
    assert "<<x>>" not in script
    done = run(script, cwd)
    assert done.returncode == 0, done.stderr
    assert not (cwd / MARKER).exists()
    for k in order:
        assert read(cwd / f"o{k}") == expected(k, value), (k, SNIPPETS[k][0])


SHELLISH = st.sampled_from(
    [
        "'",
        '"',
        "`",
        "$",
        "$(",
        "${",
        "$((",
        ")",
        "))",
        "}",
        "(",
        "#",
        " ",
        "\n",
        ";",
        "\\",
        "<<",
        "<<'E'",
        "<<E",
        "\nE\n",
        "E",
        "a",
        "=",
        "|",
        "&",
        "-",
        "case ",
        " in ",
        " esac",
        ";;",
        "$'",
        "<<x>>",
        "<<x>>",
        "<<x>>",
        "echo ",
        "printf '%s' ",
    ]
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(pieces=st.lists(SHELLISH, min_size=1, max_size=14), value=VALUES)
def test_arbitrary_templates_never_run_a_value(
    tmp_path_factory: pytest.TempPathFactory, pieces: list[str], value: str
) -> None:
    """Whatever the template, a value is either placed safely or refused, never executed."""
    template = "".join(pieces)
    try:
        script = render(template, {"x": value})
    except TemplateError as e:
        assert isinstance(e, LaunchersError)
        assert "template" in str(e)
        return
    assert "<<x>>" not in script
    cwd = tmp_path_factory.mktemp("f")
    try:
        run(script, cwd)
    except subprocess.TimeoutExpired:
        pass
    assert not (cwd / MARKER).exists(), script


@settings(max_examples=60, deadline=None)
@given(value=VALUES)
def test_comment_values_stay_in_the_comment(value: str) -> None:
    template = "# input: <<x>> (it's here)\necho done\n"
    if "\n" in value or "\r" in value:
        with pytest.raises(TemplateError, match=r"line 1.*line break"):
            render(template, {"x": value})
        return
    done = subprocess.run(
        ["bash", "-c", render(template, {"x": value})], capture_output=True, check=True
    )
    assert done.stdout == b"done\n"


def test_audit_cases_are_quoted() -> None:
    bad = {"x": f"a b; touch {MARKER}"}
    assert (
        render("# it's the job script\necho <<x>>\n", bad)
        == f"# it's the job script\necho 'a b; touch {MARKER}'\n"
    )
    assert render("cat <<EOF\ndon't <<x>>\nEOF\necho <<x>>", bad).endswith(
        f"echo 'a b; touch {MARKER}'"
    )
    assert render('echo "$(echo <<x>>)"', bad) == f"echo \"$(echo 'a b; touch {MARKER}')\""
    assert [
        c for *_, c in contexts('echo "`echo <<x>>` $(echo "<<x>>") ${y:-<<x>>} $((<<x>>))"')
    ] == ["backquoted outside", "double", "literal", "arithmetic"]


def test_normal_cases_unchanged() -> None:
    assert (
        render("echo <<a>> \"<<a>>\" '<<a>>'", {"a": "it's"})
        == "echo 'it'\\''s' \"it's\" 'it'\\''s'"
    )
    assert render("cat <<EOF\nx\nEOF\n", {}) == "cat <<EOF\nx\nEOF\n"
    assert render("echo <<n>>", {"n": 6}) == "echo '6'"


def test_places_without_quoting_take_only_inert_values(tmp_path: Path) -> None:
    template = "cat <<'EOF' > out\npath=<<p>>\nEOF\necho \"${unset:-<<p>>}\" >> out\necho $((<<n>> + 1)) >> out\n"
    script = render(template, {"p": "/data/a-1.txt", "n": 41})
    assert run(script, tmp_path).returncode == 0
    assert read(tmp_path / "out") == "path=/data/a-1.txt\n/data/a-1.txt\n42\n"
    with pytest.raises(TemplateError, match=r"line 2: the value of <<p>> .*quoted"):
        render(template, {"p": "a b", "n": 1})
    with pytest.raises(TemplateError, match=r"line 2: the value of <<p>> .*\$\{\.\.\.\}"):
        render("echo\necho ${u:-<<p>>}\n", {"p": "$(x)"})
    with pytest.raises(TemplateError, match="integer"):
        render(template, {"p": "a", "n": "a[$(touch x)]"})


def test_value_ending_a_heredoc_is_refused() -> None:
    with pytest.raises(TemplateError, match="would end the here-document 'EOF'"):
        render("cat <<EOF\n<<x>>\nEOF\n", {"x": "a\nEOF\ntouch PWNED"})
    with pytest.raises(TemplateError, match="would end the here-document 'EOF'"):
        render("cat <<'EOF'\n<<x>>\nEOF\n", {"x": "EOF"})
    with pytest.raises(TemplateError, match="would end the here-document 'EOF'"):
        render("cat <<-EOF\n\t<<x>>\n\tEOF\n", {"x": "EOF"})
    assert render("cat <<EOF\n<<x>>\nEOF\n", {"x": "EOFx\n EOF"}) == "cat <<EOF\nEOFx\n EOF\nEOF\n"


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("echo ok\necho 'unterminated <<x>>\n", "line 2: unterminated single quote"),
        ('echo "<<x>>\n', "line 1: unterminated double quote"),
        ("echo $(echo <<x>>\n", "line 1: unterminated \\$\\(...\\)"),
        ("echo `echo <<x>>\n", "line 1: unterminated backquote"),
        ("cat <<EOF\n<<x>>\n", "line 1: here-document 'EOF' is not terminated"),
        ("cat <<<<x>>\n", "line 1: .*placeholder in a here-document delimiter"),
        ("echo $<<x>>\n", "line 1: .*'\\$' right before a placeholder"),
        ('echo "$<<x>>"\n', "line 1: .*'\\$' right before a placeholder"),
        ("echo \\<<x>>\n", "line 1: .*backslash right before a placeholder"),
        ('echo "\\<<x>>"\n', "line 1: .*backslash right before a placeholder"),
        ("echo `echo \\$(<<x>>)`\n", "line 1: .*inside backquotes"),
        ('echo "${y#\'a}" <<x>>\n', "line 1: unterminated single quote inside"),
        ("echo $((<<x>>)\n", "line 1: .*(unterminated arithmetic|single '\\)')"),
        ("echo $(cat <<EOF)\n<<x>>\nEOF\n", "line 1: .*no body before the end of its command"),
    ],
)
def test_unfollowable_templates_are_refused_with_name_and_line(template: str, message: str) -> None:
    with pytest.raises(TemplateError, match=f"my.template, {message}"):
        render(template, {"x": "v"}, where="my.template")
