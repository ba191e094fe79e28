"""Parse requirement strings (``duration=4h & cuda(mem=24G)*2 | cpu(cores=8)``) into values.

The grammar lives in ``grammar.lark`` (LALR(1), built once on first use); an inline transformer
builds the immutable values of ``values.py`` while parsing. A regular-expression fast path
reads flat valid strings first and defers everything else to that parser. Every error,
lexical, syntactic or semantic, becomes a ``RequirementSyntaxError`` with the line, the
column and what was expected.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, cast

import attrs
from lark import Lark, Token, Transformer
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from ..errors import RequirementSyntaxError
from ..units import (
    DURATION_UNITS_LIST,
    SIZE_UNITS,
    SIZE_UNITS_LIST,
    NoUnit,
    UnitError,
    UnitOrder,
    UnknownUnit,
    duration_of,
    quantity,
    size_from,
)
from .values import (
    REPEAT_NEEDS_GPUS,
    CPURequest,
    GPURequest,
    HostRequirement,
    Requirement,
    RequirementUnion,
    gpus_only,
)

__all__ = ["MAX_ALTERNATIVES", "MAX_GPUS", "parse"]

#: Upper bound of ``*N`` and of the GPUs of one alternative (one host never has more).
MAX_GPUS = 1024
#: Upper bound of the alternatives of one requirement (``(a|b) & (c|d) & ...`` multiplies).
MAX_ALTERNATIVES = 4096

_GRAMMAR = Path(__file__).with_name("grammar.lark")

_ATOMS = "duration=..., cuda(...), gpu(...), mps(...) or cpu(...)"
_KEYS = {"cuda": ("mem",), "gpu": ("mem",), "mps": ("mem",), "cpu": ("mem", "cores")}
#: the atoms asking for one accelerator (their name is the request's kind)
_GPU_ATOMS = ("cuda", "gpu", "mps")
_SIZE_EXAMPLE = "a size such as 24G"
_DURATION_EXAMPLE = "a duration such as 4h"
_AT_MOST_GPUS = (f"at most {MAX_GPUS} GPUs in one alternative",)
_CORES_EXAMPLE = "a whole number of cores such as 4"
_SIZE_UNIT = f"a size unit: {SIZE_UNITS_LIST}"
_DURATION_UNIT = f"a duration unit: {DURATION_UNITS_LIST}"


class _Fail(Exception):
    """Internal: a semantic error at a token, turned into RequirementSyntaxError by ``parse``."""

    def __init__(self, message: str, token: Token | None, expected: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.token = token
        self.expected = expected


class _Word:
    """A value that starts with a word (``model=A100``): kept so that an unknown key is reported
    at the key, and a known key's value is told what it should look like."""

    def __init__(self, token: Token) -> None:
        self.token = token


def _word_fail(key: str, parts: list[Any], what: str, expected: str) -> None:
    """A value of ``key`` that starts with a word instead of a number."""
    if parts and isinstance(parts[0], _Word):
        raise _Fail(f"{key}= needs {what}", parts[0].token, (expected,))


def _size(key: Token, parts: list[Any]) -> int:
    """Bytes from the (number, unit) tokens of ``mem=...``: exactly one number with a unit."""
    _word_fail(str(key), parts, "a size: a number and a unit, such as 24G", _SIZE_EXAMPLE)
    if len(parts) != 2:
        raise _Fail("a size is one number and one unit, such as 24G or 1.5GiB", parts[2],
                    ("',' or ')' after the unit",))  # fmt: skip
    number, unit = parts
    try:
        return size_from(str(number), None if unit is None else str(unit))
    except NoUnit:
        raise _Fail(
            f"{key}={number}: a size needs a unit; write {number}G (binary, as in Slurm), "
            f"{number}M or {number}GB",
            number,
            (_SIZE_EXAMPLE,),
        ) from None
    except UnitError as e:  # an unknown unit
        raise _Fail(str(e), unit, (_SIZE_UNIT,)) from None


def _duration(parts: list[Any]) -> int:
    """Seconds from ``4 days`` or ``1h30m`` (parts in decreasing units, each with a unit)."""
    _word_fail("duration", parts, "a duration: a number and a unit, such as 4h", _DURATION_EXAMPLE)
    pairs = [
        (str(parts[i]), None if parts[i + 1] is None else str(parts[i + 1]))
        for i in range(0, len(parts), 2)
    ]
    try:
        return duration_of(pairs)
    except NoUnit as e:
        number = parts[2 * e.part]
        raise _Fail(
            f"duration={number}: a duration needs a unit ({number}s, {number}m, {number}h, "
            f"{number}d or {number}w)",
            number,
            (_DURATION_EXAMPLE,),
        ) from None
    except UnknownUnit as e:
        raise _Fail(str(e), parts[2 * e.part + 1], (_DURATION_UNIT,)) from None
    except UnitOrder as e:
        raise _Fail(
            "in a duration of several parts (such as 1h30m), each unit must be smaller than "
            "the one before",
            parts[2 * e.part + 1],
            ("a unit smaller than the one before",),
        ) from None


_gpus_only = gpus_only  # the rule Python's ``*`` applies too (values.py)


class _Build(Transformer[Token, RequirementUnion]):
    """Inline LALR callbacks: each rule reduction builds an immutable requirement value."""

    def start(self, children: list[Any]) -> RequirementUnion:
        value: RequirementUnion = children[0]
        return value

    def union(self, children: list[Any]) -> RequirementUnion:
        alts: list[HostRequirement] = []
        for child in children:
            alts.extend(child.requirements)
        return RequirementUnion(tuple(alts))

    def alternative(self, children: list[Any]) -> Requirement:
        if len(children) == 1:
            result: Requirement = children[0]
            return result
        if all(type(c) is HostRequirement for c in children):
            duration = cores = memory = 0
            gpus: tuple[GPURequest, ...] = ()
            for c in children:
                duration = max(duration, c.duration)
                cores = max(cores, c.cpu.cores)
                memory = max(memory, c.cpu.memory)
                gpus += c.cuda_gpus
            if len(gpus) > MAX_GPUS:
                raise _Fail(f"more than {MAX_GPUS} GPUs in one alternative", None, _AT_MOST_GPUS)
            return HostRequirement(duration, CPURequest(memory, cores), gpus)
        value = children[0]
        for c in children[1:]:
            if len(value.requirements) * len(c.requirements) > MAX_ALTERNATIVES:
                raise _Fail(
                    f"more than {MAX_ALTERNATIVES} alternatives after distributing '&'",
                    None,
                    (f"at most {MAX_ALTERNATIVES} alternatives",),
                )
            value = value & c
        for alt in value.requirements:
            if len(alt.cuda_gpus) > MAX_GPUS:
                raise _Fail(f"more than {MAX_GPUS} GPUs in one alternative", None, _AT_MOST_GPUS)
        return value

    def repeat(self, children: list[Any]) -> Requirement:
        value, star, count = children
        if "." in count:
            raise _Fail(
                f"*{count}: the GPU count must be a whole number", count, ("a count such as 2",)
            )
        n = int(count)
        if n < 1:
            raise _Fail(
                f"*{count}: the GPU count must be at least 1", count, ("a count such as 2",)
            )
        if n * max(len(alt.cuda_gpus) for alt in value.requirements) > MAX_GPUS:
            raise _Fail(f"*{count}: at most {MAX_GPUS} GPUs in one alternative", count,
                        (f"a count of at most {MAX_GPUS}",))  # fmt: skip
        if not _gpus_only(value):
            raise _Fail(
                REPEAT_NEEDS_GPUS, star, ("'*' only after cuda(...), gpu(...) or mps(...)",)
            )
        result: Requirement = value * n
        return result

    def setting(self, children: list[Any]) -> HostRequirement:
        name: Token = children[0]
        if name != "duration":
            if name in _KEYS:
                raise _Fail(f"{name} takes arguments: write {name}(...)", name, (f"'{name}('",))
            raise _Fail(_unknown_atom(name), name, _atom_names())
        return HostRequirement(duration=_duration(children[1:]))

    def word_value(self, children: list[Any]) -> _Word:
        return _Word(children[0])

    def argument(self, children: list[Any]) -> tuple[Token, list[Any]]:
        return children[0], children[1:]

    def call(self, children: list[Any]) -> HostRequirement:
        name: Token = children[0]
        keys = _KEYS.get(str(name))
        if keys is None:
            if name == "duration":
                raise _Fail("duration is not a function: write duration=4h", name, ("'duration='",))
            raise _Fail(_unknown_atom(name), name, _atom_names())
        seen: dict[str, Token] = {}
        memory = 0
        cores = 1
        for arg in children[1:]:
            if arg is None:
                continue
            key, parts = arg
            if key not in keys:
                raise _Fail(
                    f"unknown key {str(key)!r} in {name}(...); {name} accepts "
                    + " and ".join(f"{k}=" for k in keys)
                    + (" (keys are lower case)" if key.lower() in keys else ""),
                    key,
                    tuple(f"'{k}='" for k in keys),
                )
            if key in seen:
                others = (*(f"'{k}='" for k in keys if k not in seen), "')'")
                raise _Fail(f"key {str(key)!r} repeated in {name}(...)", key, others)
            seen[key] = key
            if key == "mem":
                memory = _size(key, parts)
            else:
                cores = _cores(key, parts)
        if name in _GPU_ATOMS:
            return HostRequirement(cuda_gpus=(GPURequest(memory, str(name)),))
        return HostRequirement(cpu=CPURequest(memory, cores))


def _cores(key: Token, parts: list[Any]) -> int:
    _word_fail(str(key), parts, "a whole number of cores, such as cores=4", _CORES_EXAMPLE)
    number, unit = parts[0], parts[1]
    if len(parts) != 2 or unit is not None:
        bad = unit if unit is not None else parts[2]
        raise _Fail("cores is a whole number without unit, such as cores=4", bad, ("',' or ')'",))
    if "." in number:
        raise _Fail(f"cores={number}: cores must be a whole number", number, (_CORES_EXAMPLE,))
    n = int(number)
    if n < 1:
        raise _Fail(f"cores={number}: cores must be at least 1", number, (_CORES_EXAMPLE,))
    return n


def _unknown_atom(name: str) -> str:
    hint = ""
    if name.lower() in ("duration", "cpu", *_GPU_ATOMS):
        hint = f" (keywords are lower case: {name.lower()})"
    elif name.lower() in ("gpus", "cudas", "accelerator", "mps_gpu", "cuda_gpu"):
        hint = " (one GPU is gpu(...), any kind; cuda(...), a CUDA one; mps(...), an Apple one; *N repeats it)"
    return f"unknown requirement {str(name)!r}; expected {_ATOMS}{hint}"


def _atom_names() -> tuple[str, ...]:
    return ("'duration='", "'cuda('", "'gpu('", "'mps('", "'cpu('")


# --- fast path ---------------------------------------------------------------------------
#
# Most requirement strings are flat (no parentheses) and valid. One compiled regular
# expression per atom reads them about 20 times faster than the LALR parser (whose per-token
# cost dominates on such short texts). It accepts only a strict subset of the grammar and
# returns None on anything else (parentheses, errors, odd spacing), and the LALR parser then
# decides, so answers and error messages are exactly the grammar's (tests/language/test_language.py
# checks the two agree on random texts).

_NUM = r"[0-9]+(?:\.[0-9]+)?"
_ARG = rf"(mem|cores)\s*=\s*({_NUM})\s*([A-Za-z_]+)?"
_FAST_ATOM = re.compile(
    rf"""\s*(?:
        duration\s*=\s*({_NUM}\s*[A-Za-z_]+(?:\s*{_NUM}\s*[A-Za-z_]+)*)  # duration
      | (cuda|gpu|mps|cpu)\s*\(\s*(?:{_ARG}\s*(?:,\s*{_ARG}\s*)?)?\)  # call with at most two arguments
        (?:\s*\*\s*([0-9]+))?  # count
    )\s*([&|]|\Z)  # separator""",
    re.X,
)
_FAST_PART = re.compile(rf"({_NUM})\s*([A-Za-z_]+)")


def _fast_value(fn: str, key: str, number: str, unit: str | None) -> int | None:
    """Bytes of ``mem=``, or the count of ``cores=``; None if not clean (let the LALR parser say)."""
    if key == "mem":
        factor = SIZE_UNITS.get(unit.lower()) if unit else None
        return None if factor is None else quantity(number, factor)
    if fn != "cpu" or unit or "." in number:
        return None
    n = int(number)
    return n if n >= 1 else None


def _fast_parse(text: str) -> RequirementUnion | None:
    """Parse a flat, valid requirement string quickly; None means "ask the LALR parser"."""
    alternatives: list[HostRequirement] = []
    duration = memory = 0
    cores = 1
    gpus: list[GPURequest] = []
    pos = 0
    end = len(text)
    match = _FAST_ATOM.match
    while True:
        m = match(text, pos)
        if m is None:
            return None
        dur, fn, k1, n1, u1, k2, n2, u2, n, sep = m.groups()
        if dur is not None:
            try:
                seconds = duration_of(_FAST_PART.findall(dur))
            except UnitError:
                return None
            if seconds > duration:
                duration = seconds
        else:
            mem, ncores = 0, 1
            if k1 is not None:
                value = _fast_value(fn, k1, n1, u1)
                if value is None:
                    return None
                if k1 == "mem":
                    mem = value
                else:
                    ncores = value
                if k2 is not None:
                    value = _fast_value(fn, k2, n2, u2)
                    if value is None or k2 == k1:
                        return None
                    if k2 == "mem":
                        mem = value
                    else:
                        ncores = value
            if fn != "cpu":
                request = GPURequest(mem) if fn == "cuda" else GPURequest(mem, fn)
                if n is None:
                    gpus.append(request)
                else:
                    count = int(n)
                    if not 1 <= count <= MAX_GPUS:
                        return None
                    gpus.extend((request,) * count)
            elif n is not None:
                return None
            else:
                if mem > memory:
                    memory = mem
                if ncores > cores:
                    cores = ncores
        if sep != "&":
            if len(gpus) > MAX_GPUS:
                return None
            alternatives.append(HostRequirement(duration, CPURequest(memory, cores), tuple(gpus)))
            if not sep:
                return RequirementUnion(tuple(alternatives))
            duration = memory = 0
            cores = 1
            gpus = []
        pos = m.end()
        if pos >= end:
            return None  # a trailing '&' or '|'


_parser: Lark | None = None


def _get_parser() -> Lark:
    """Build the LALR parser once (about 50 ms), on first use."""
    global _parser
    if _parser is None:
        _parser = Lark(
            _GRAMMAR.read_text(encoding="utf-8"),
            parser="lalr",
            lexer="contextual",
            transformer=_Build(),
            maybe_placeholders=True,
            propagate_positions=False,
        )
    return _parser


def parse(text: str | Requirement) -> RequirementUnion:
    """Parse a requirement string; always a union (one alternative when there is no ``|``).

    A value already built in Python is returned as a union unchanged.
    """
    if isinstance(text, (HostRequirement, RequirementUnion)):
        return text.as_union()
    if not isinstance(text, str):
        raise RequirementSyntaxError(
            f"a requirement must be a string, not {type(text).__name__}", repr(text), 1, 1
        )
    fast = _fast_parse(text)
    if fast is not None:
        return fast
    return _lalr_parse(text)


def _lalr_parse(text: str) -> RequirementUnion:
    """Parse ``text`` with the LALR parser of ``grammar.lark`` (the reference)."""
    try:
        result = cast(RequirementUnion, _get_parser().parse(text))
    except _Fail as e:
        raise _semantic_error(text, e) from None
    except UnexpectedInput as e:
        raise _syntax_error(text, e) from None
    except LarkError as e:  # pragma: no cover - defensive: any other parser failure
        raise RequirementSyntaxError(f"cannot parse requirement: {e}", text, 1, 1) from None
    return result


# --- error reporting (only on the error path) -------------------------------------------


def _position(text: str, index: int) -> tuple[int, int]:
    """1-based (line, column) of character ``index``; lines end at ``\\n`` only."""
    line = text.count("\n", 0, index) + 1
    column = index - (text.rfind("\n", 0, index) + 1) + 1
    return line, column


def _semantic_error(text: str, e: _Fail) -> RequirementSyntaxError:
    if e.token is not None and e.token.line is not None and e.token.column is not None:
        line, column = e.token.line, e.token.column
    else:
        line, column = 1, 1
    return RequirementSyntaxError(e.message, text, line, column, e.expected)


_TOKEN_RE = re.compile(r"\s*(?:([A-Za-z_]+)|([0-9]+(?:\.[0-9]+)?)|(\S))")


@attrs.frozen
class _Context:
    """What precedes an error: the enclosing call (name, index), the key before '=', the last token."""

    call: str
    call_index: int
    key: str
    last: str
    last_index: int
    previous: str
    depth: int


def _context(prefix: str) -> _Context:
    """Scan ``prefix`` (the text before an error) with a tiny tokenizer."""
    stack: list[tuple[str, int]] = []
    tokens: list[tuple[str, int]] = []
    for m in _TOKEN_RE.finditer(prefix):
        tok = m.group(1) or m.group(2) or m.group(3)
        if tok is None:
            continue
        start = m.start(m.lastindex or 0)
        if tok == "(":
            if tokens and tokens[-1][0][0].isalpha():
                stack.append(tokens[-1])
            else:
                stack.append(("", start))
        elif tok == ")" and stack:
            stack.pop()
        tokens.append((tok, start))
    last, last_index = tokens[-1] if tokens else ("", 0)
    previous = tokens[-2][0] if len(tokens) >= 2 else ""
    key = previous if last == "=" else ""
    call, index = stack[-1] if stack else ("", 0)
    return _Context(call, index, key, last, last_index, previous, len(stack))


_PUNCT = {
    "_BAR": "'|'",
    "_AMP": "'&'",
    "STAR": "'*'",
    "_LPAR": "'('",
    "_RPAR": "')'",
    "_COMMA": "','",
    "_EQUAL": "'='",
    "$END": "end of text",
}
_ORDER = ["WORD", "NUMBER", "_EQUAL", "_LPAR", "_COMMA", "_RPAR", "STAR", "_AMP", "_BAR", "$END"]


def _human_expected(expected: set[str], ctx: _Context) -> tuple[str, ...]:
    """Human names of the expected terminals, worded after what precedes the error."""
    optional_only = "$END" in expected or "_AMP" in expected or "_COMMA" in expected
    out: list[str] = []
    for name in sorted(expected, key=lambda n: _ORDER.index(n) if n in _ORDER else 99):
        if (name == "_RPAR" and ctx.depth == 0) or (name == "$END" and ctx.depth > 0):
            continue  # LALR merges states: drop what this position cannot take
        if name == "_EQUAL" and ctx.last in _KEYS:
            continue
        if name == "_LPAR" and ctx.last == "duration":
            continue
        if name == "WORD":
            if optional_only or ctx.last == "=":
                continue  # a unit after a number: optional; a value never starts with a word
            if ctx.call in _KEYS and ctx.last in ("(", ","):
                out.extend(f"'{k}='" for k in _KEYS[ctx.call])
            else:
                out.extend(_atom_names())
        elif name == "NUMBER":
            if optional_only:
                continue
            if ctx.last == "*":
                out.append("a count such as 2")
            elif ctx.key == "mem":
                out.append(_SIZE_EXAMPLE)
            elif ctx.key == "duration":
                out.append(_DURATION_EXAMPLE)
            elif ctx.key == "cores":
                out.append("a whole number such as 4")
            else:
                out.append("a number")
        else:
            out.append(_PUNCT.get(name, name))
    return tuple(out)


def _expected_terminals(e: UnexpectedInput) -> set[str]:
    """The terminals the parser could accept where it failed (from its LALR state)."""
    state = getattr(e, "state", None)
    try:
        table = state.parse_conf.states[state.position]  # type: ignore[union-attr]
        return {name for name in table if name.isupper() or name == "$END"}
    except (AttributeError, KeyError, IndexError, TypeError):
        if isinstance(e, UnexpectedToken):
            return set(e.expected)
        if isinstance(e, UnexpectedCharacters):
            return set(e.allowed or ())
        return set()


def _syntax_error(text: str, e: UnexpectedInput) -> RequirementSyntaxError:
    if isinstance(e, UnexpectedToken) and e.token.type == "$END":
        index = len(text)
        while index > 0 and text[index - 1].isspace():
            index -= 1
        found = ""
    else:
        index = e.pos_in_stream if e.pos_in_stream is not None else 0
        m = _TOKEN_RE.match(text, index)
        found = (m.group(1) or m.group(2) or m.group(3) or "") if m else ""
    ctx = _context(text[:index])
    if ctx.call and ctx.call not in _KEYS:
        # ``foo(`` or ``duration(``: report the name, not what follows it
        line, column = _position(text, ctx.call_index)
        if ctx.call == "duration":
            reason = "duration is not a function: write duration=4h"
            return RequirementSyntaxError(reason, text, line, column, ("'duration='",))
        return RequirementSyntaxError(_unknown_atom(ctx.call), text, line, column, _atom_names())
    at_atom = ctx.previous in ("", "&", "|") or (ctx.previous == "(" and not ctx.call)
    if ctx.last[:1].isalpha() and at_atom and ctx.last not in ("duration", *_KEYS):
        # ``x`` or ``x y``: the word itself is the problem
        line, column = _position(text, ctx.last_index)
        return RequirementSyntaxError(_unknown_atom(ctx.last), text, line, column, _atom_names())
    if ctx.call in _KEYS and ctx.previous in ("(", ",") and ctx.last[:1].isalpha():
        keys = _KEYS[ctx.call]
        if ctx.last not in keys:
            line, column = _position(text, ctx.last_index)
            reason = (
                f"unknown key {ctx.last!r} in {ctx.call}(...); {ctx.call} accepts "
                + " and ".join(f"{k}=" for k in keys)
            )
            return RequirementSyntaxError(
                reason, text, line, column, tuple(f"'{k}='" for k in keys)
            )
    line, column = _position(text, index)
    expected = _human_expected(_expected_terminals(e), ctx)
    if found == "=" and ctx.last[:1].isalpha() and ctx.previous[:1].isdigit():
        reason = f"unexpected '=' (a ',' missing before {ctx.last!r}?)"
        return RequirementSyntaxError(reason, text, line, column, expected)
    if found[:1].isalpha() and at_atom and found not in ("duration", *_KEYS):
        return RequirementSyntaxError(_unknown_atom(found), text, line, column, expected)
    reason = f"unexpected {found!r}" if found else "unexpected end of text"
    return RequirementSyntaxError(reason, text, line, column, expected)
