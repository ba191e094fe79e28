"""hpc_batch templates (docs/design/pilots.md §4): ``<<name>>`` placeholders filled with values quoted for
their place in the shell script: outside quotes a POSIX single-quoted word, inside double quotes
with ``\\ " $ ` `` escaped, inside single quotes by closing and reopening them.

The place of each placeholder is found by lexing the template the way a POSIX shell (bash) does:
``#`` comments, here-documents (an unquoted delimiter makes the body behave like double quotes,
a quoted one makes it literal), ``$(...)``, backquotes and ``${...}`` nested inside double quotes,
``$'...'``, arithmetic and backslash escapes. Where the place cannot be determined safely the
template is refused (``TemplateError`` naming the template and line) rather than a value inserted
without quotes. Where no quoting exists (the body of a here-document with a quoted delimiter,
``${...}``, arithmetic) only values that are inert for the shell are inserted, verbatim.

Unknown names are errors; ``<<...>>`` never survives into a script.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..errors import ScriptError

NAME = re.compile(r"<<([A-Za-z_][A-Za-z0-9_]*)>>")
SCRIPT_NAME = re.compile(r"^[A-Za-z0-9_-]+$")

OUTSIDE, SINGLE, DOUBLE = "outside", "single", "double"
HEREDOC = (
    "heredoc"  # body of a here-document with an unquoted delimiter: like double quotes, `"` literal
)
LITERAL = "literal"  # body of a here-document with a quoted delimiter, or inside ${...}: no quoting exists
ANSI_C = "ansi-c"  # inside $'...'
ARITHMETIC = "arithmetic"  # inside $((...)), ((...)), $[...]
COMMENT = "comment"  # in a # comment: quoted as outside, on one line
BACKQUOTED = (
    "backquoted "  # prefix: the context is inside `...`, whose text is unescaped once first
)

INERT = re.compile(r"[A-Za-z0-9_./,:=@%+-]*")
INTEGER = re.compile(r"[+-]?[0-9]+")

_BLANK = " \t"
_WORD_CHUNK = re.compile(r"[^\s;&|()<>'\"`$\\]+")
_OPENS_COMMAND = {"then", "do", "else", "elif", "if", "while", "until", "!", "{", "time"}


class TemplateError(ScriptError):
    """A template cannot be rendered for one job (unknown name, unusable value)."""


def value_text(name: str, value: Any) -> str:
    """The text of a value: strings as they are, numbers and booleans as YAML writes them."""
    if isinstance(value, str):
        text = value
    elif value is None or isinstance(value, (bool, int, float)):
        text = yaml.safe_dump(value, default_flow_style=True).strip()
        if text.endswith("\n..."):
            text = text[: -len("\n...")]
        text = text.removesuffix("...").strip()
    else:
        raise TemplateError(
            f"template value {name!r} is a {type(value).__name__}; only strings, numbers and booleans can be substituted"
        )
    if "\0" in text:
        raise TemplateError(f"template value {name!r} contains a NUL character")
    return text


def _problem(text: str, context: str) -> str | None:
    """Why ``text`` cannot be placed in ``context``, or None."""
    base = context.removeprefix(BACKQUOTED)
    while base.startswith(BACKQUOTED):
        base = base.removeprefix(BACKQUOTED)
    if base == COMMENT and ("\n" in text or "\r" in text):
        return "contains a line break, which would end the comment it is placed in"
    if base == LITERAL and not INERT.fullmatch(text):
        return (
            "is placed where the shell does no quoting (the body of a here-document with a quoted "
            "delimiter, or inside ${...}); there only letters, digits and _ . / , : = @ % + - can be "
            f"inserted, and the value is {text!r}"
        )
    if base == ARITHMETIC and not INTEGER.fullmatch(text):
        return f"is placed in an arithmetic expression, where only an integer can be inserted, and the value is {text!r}"
    return None


def quote(text: str, context: str) -> str:
    """``text`` quoted for its place: outside quotes, inside double quotes, inside single quotes
    (and the other places :func:`contexts` reports)."""
    if context.startswith(BACKQUOTED):
        inner = quote(text, context[len(BACKQUOTED) :])
        return "".join("\\" + c if c in "\\`$" else c for c in inner)
    problem = _problem(text, context)
    if problem:
        raise TemplateError(f"a value {problem}")
    if context == DOUBLE:
        return "".join("\\" + c if c in '\\"$`' else c for c in text)
    if context == HEREDOC:
        return "".join("\\" + c if c in "\\$`" else c for c in text)
    if context == SINGLE:
        return text.replace("'", "'\\''")
    if context == ANSI_C:
        return "".join("\\" + c if c in "\\'" else c for c in text)
    if context in (LITERAL, ARITHMETIC):
        return text
    if context in (OUTSIDE, COMMENT):
        return "'" + text.replace("'", "'\\''") + "'"
    raise TemplateError(f"unknown template context {context!r}")


@dataclass
class _Heredoc:
    delimiter: str
    strip_tabs: bool
    quoted: bool
    op: int  # position of the << operator
    body_start: int = 0
    body_end: int = 0
    names: list[str] = field(default_factory=list)


@dataclass
class _Frame:
    """State of one command-lexing level (top level, $(...), `...`)."""

    layers: str
    pending: list[_Heredoc] = field(default_factory=list)


class _Scanner:
    def __init__(self, template: str, where: str) -> None:
        self.t = template
        self.where = where
        self.found: list[tuple[int, int, str, str]] = []
        self.heredocs: list[_Heredoc] = []
        self.frames: list[_Frame] = []

    # -- helpers -------------------------------------------------------------------------------

    def fail(self, pos: int, message: str) -> TemplateError:
        line = self.t.count("\n", 0, min(pos, len(self.t))) + 1
        return TemplateError(
            f"{self.where}, line {line}: {message}; the placement of values cannot be determined safely"
        )

    def placeholder(self, i: int, end: int) -> re.Match[str] | None:
        if self.t.startswith("<<", i):
            m = NAME.match(self.t, i)
            if m and m.end() <= end:
                return m
        return None

    def record(self, m: re.Match[str], context: str, heredoc: _Heredoc | None = None) -> int:
        self.found.append((m.start(), m.end(), m.group(1), context))
        if heredoc is not None:
            heredoc.names.append(m.group(1))
        return m.end()

    def escape(self, i: int, end: int, layers: str) -> int:
        """A backslash at ``i``: the position after what it escapes."""
        if i + 1 >= end:
            raise self.fail(i, "a backslash ends the text it is in")
        nxt = self.t[i + 1]
        if self.placeholder(i + 1, end):
            raise self.fail(
                i, "a backslash right before a placeholder would escape part of its value"
            )
        if layers and nxt in '\\`$"':
            raise self.fail(i, f"backslash-escaped {nxt!r} inside backquotes; use $(...) instead")
        return i + 2

    def dollar_placeholder(self, i: int, end: int) -> None:
        if self.placeholder(i + 1, end):
            raise self.fail(
                i, "a '$' right before a placeholder would turn its value into an expansion"
            )

    # -- single-quoted, $'...' ---------------------------------------------------------------

    def single(self, i: int, end: int, layers: str) -> int:
        """After an opening ``'`` at ``i - 1``: the position after the closing one."""
        t = self.t
        start = i - 1
        while i < end:
            m = self.placeholder(i, end)
            if m:
                i = self.record(m, layers + SINGLE)
                continue
            c = t[i]
            if c == "'":
                return i + 1
            if layers and c == "\\" and i + 1 < end and t[i + 1] in "\\`$":
                raise self.fail(
                    i, f"backslash-escaped {t[i + 1]!r} inside backquotes; use $(...) instead"
                )
            i += 1
        raise self.fail(start, "unterminated single quote")

    def ansi_c(self, i: int, end: int, layers: str) -> int:
        t = self.t
        start = i - 2
        while i < end:
            m = self.placeholder(i, end)
            if m:
                i = self.record(m, layers + ANSI_C)
                continue
            c = t[i]
            if c == "\\":
                i = self.escape(i, end, layers)
                continue
            if c == "'":
                return i + 1
            i += 1
        raise self.fail(start, "unterminated $'...' quote")

    # -- double quotes and here-document bodies -------------------------------------------------

    def dollar(self, i: int, end: int, layers: str) -> int | None:
        """``$`` at ``i`` starting a nested construct: the position after it, else None."""
        t = self.t
        if t.startswith("$((", i):
            return self.arithmetic(i + 3, end, layers, "))")
        if t.startswith("$(", i):
            return self.command(i + 2, end, layers, closer=")")
        if t.startswith("${", i):
            return self.parameter(i + 2, end, layers)
        if t.startswith("$[", i):
            return self.arithmetic(i + 2, end, layers, "]")
        self.dollar_placeholder(i, end)
        return None

    def double(self, i: int, end: int, layers: str, heredoc: _Heredoc | None = None) -> int:
        """After an opening ``"`` (or over a here-document body up to ``end``)."""
        t = self.t
        start = i - 1
        context = layers + (HEREDOC if heredoc else DOUBLE)
        while i < end:
            m = self.placeholder(i, end)
            if m:
                i = self.record(m, context, heredoc)
                continue
            c = t[i]
            if c == "\\":
                i = self.escape(i, end, layers)
            elif c == '"' and heredoc is None:
                return i + 1
            elif c == "`":
                i = self.backquote(i, end, layers)
            elif c == "$":
                nxt = self.dollar(i, end, layers)
                i = nxt if nxt is not None else i + 1
            else:
                i += 1
        if heredoc is not None:
            return i
        raise self.fail(start, "unterminated double quote")

    # -- nested constructs ------------------------------------------------------------------------

    def backquote(self, i: int, end: int, layers: str) -> int:
        """A backquote at ``i``: scan its command, return the position after the closing one."""
        t = self.t
        if layers:
            raise self.fail(i, "nested backquotes; use $(...) instead")
        j = i + 1
        while j < end and t[j] != "`":
            j += 2 if t[j] == "\\" else 1
        if j >= end:
            raise self.fail(i, "unterminated backquote")
        self.command(i + 1, j, layers + BACKQUOTED, closer=None)
        return j + 1

    def parameter(self, i: int, end: int, layers: str) -> int:
        """After ``${``: the position after the matching ``}``."""
        t = self.t
        start = i
        # bash pairs single quotes inside ${...} even within double quotes (where "${x:-'a'}" then
        # keeps them): the values placed here are inert, so either reading is safe
        while i < end:
            m = self.placeholder(i, end)
            if m:
                i = self.record(m, layers + LITERAL)
                continue
            c = t[i]
            if c == "}":
                return i + 1
            if c == "\\":
                i = self.escape(i, end, layers)
            elif c == "'":
                j = t.find("'", i + 1, end)
                if j < 0:
                    raise self.fail(i, "unterminated single quote inside ${...}")
                for pm in NAME.finditer(t, i + 1, j):
                    self.record(pm, layers + LITERAL)
                i = j + 1
            elif c == '"':
                i = self.double(i + 1, end, layers)
            elif c == "`":
                i = self.backquote(i, end, layers)
            elif c == "$":
                nxt = self.dollar(i, end, layers)
                i = nxt if nxt is not None else i + 1
            else:
                i += 1
        raise self.fail(start, "unterminated ${...}")

    def arithmetic(self, i: int, end: int, layers: str, closer: str) -> int:
        """After ``$((``, ``((`` or ``$[``: the position after ``))`` or ``]``."""
        t = self.t
        start = i
        depth = 0
        while i < end:
            m = self.placeholder(i, end)
            if m:
                i = self.record(m, layers + ARITHMETIC)
                continue
            c = t[i]
            if closer == "]":
                if c == "[":
                    depth += 1
                elif c == "]":
                    if depth == 0:
                        return i + 1
                    depth -= 1
            elif c == "(":
                depth += 1
            elif c == ")":
                if depth:
                    depth -= 1
                elif t.startswith("))", i):
                    return i + 2
                else:
                    raise self.fail(
                        start, "'$((' (or '((') closed by a single ')'; write '$( (' for a subshell"
                    )
            if c == "\\":
                i = self.escape(i, end, layers)
            elif c == "'":
                i = self.single(i + 1, end, layers)
            elif c == '"':
                i = self.double(i + 1, end, layers)
            elif c == "`":
                i = self.backquote(i, end, layers)
            elif c == "$":
                nxt = self.dollar(i, end, layers)
                i = nxt if nxt is not None else i + 1
            else:
                i += 1
        raise self.fail(start, f"unterminated arithmetic expression (no {closer!r})")

    # -- here-documents ---------------------------------------------------------------------------

    def heredoc_operator(self, i: int, end: int, frame: _Frame) -> int:
        """``<<`` (not a placeholder) at ``i``: here-string or here-document operator."""
        t = self.t
        j = i + 2
        if j < end and t[j] == "<" and not self.placeholder(j, end):
            return i + 3  # here-string <<<: its word is lexed as usual
        strip = j < end and t[j] == "-"
        if strip:
            j += 1
        while j < end and t[j] in _BLANK:
            j += 1
        delimiter = []
        quoted = False
        while j < end and t[j] not in " \t\n;&|()<>":
            c = t[j]
            if c == "<" and self.placeholder(j, end):
                raise self.fail(j, "a placeholder in a here-document delimiter")
            if c == "\\" and j + 1 < end:
                quoted = True
                delimiter.append(t[j + 1])
                j += 2
            elif c in "'\"":
                k = t.find(c, j + 1, end)
                if k < 0:
                    raise self.fail(j, "unterminated quote in a here-document delimiter")
                if self.placeholder_in(j, k):
                    raise self.fail(j, "a placeholder in a here-document delimiter")
                quoted = True
                delimiter.append(t[j + 1 : k])
                j = k + 1
            elif c == "$" and j + 1 < end and t[j + 1] in "'\"":
                j += 1  # $'..' / $".." delimiters: quoted
            else:
                if self.placeholder(j, end):
                    raise self.fail(j, "a placeholder in a here-document delimiter")
                delimiter.append(c)
                j += 1
        if j < end and t[j] == "<" and self.placeholder(j, end):
            raise self.fail(j, "a placeholder in a here-document delimiter")
        word = "".join(delimiter)
        if not word:
            raise self.fail(i, "a here-document operator without a delimiter")
        frame.pending.append(_Heredoc(word, strip, quoted, i))
        return j

    def placeholder_in(self, start: int, stop: int) -> bool:
        return NAME.search(self.t, start, stop) is not None

    def heredoc_bodies(self, i: int, end: int, frame: _Frame) -> int:
        """After the newline that ends a line with here-document operators: read their bodies."""
        t = self.t
        for doc in frame.pending:
            doc.body_start = i
            while True:
                if i >= end:
                    raise self.fail(doc.op, f"here-document {doc.delimiter!r} is not terminated")
                line_start = i
                logical = []
                while True:
                    nl = t.find("\n", i, end)
                    stop = end if nl < 0 else nl
                    line = t[i:stop]
                    trailing = len(line) - len(line.rstrip("\\"))
                    if not doc.quoted and trailing % 2 == 1 and nl >= 0:
                        logical.append(line[:-1])
                        i = nl + 1
                        continue
                    logical.append(line)
                    i = stop if nl < 0 else nl + 1
                    break
                text = "".join(logical)
                if doc.strip_tabs:
                    text = text.lstrip("\t")
                if text == doc.delimiter:
                    doc.body_end = line_start
                    break
            if doc.quoted:
                for m in NAME.finditer(t, doc.body_start, doc.body_end):
                    self.record(m, frame.layers + LITERAL, doc)
            else:
                self.double(doc.body_start, doc.body_end, frame.layers, heredoc=doc)
            self.heredocs.append(doc)
        frame.pending.clear()
        return i

    # -- commands -----------------------------------------------------------------------------------

    def command(self, i: int, end: int, layers: str, closer: str | None) -> int:
        """Shell commands from ``i``: up to ``end`` (closer None) or after the ``)`` closing a ``$(``."""
        t = self.t
        frame = _Frame(layers)
        self.frames.append(frame)
        start = i
        word_start = True
        command_position = True
        after_for = False
        depth = 0
        # case ... esac: a stack of "head" (before "in"), "pattern", "body"
        cases: list[list[Any]] = []
        while i < end:
            m = self.placeholder(i, end)
            if m:
                i = self.record(m, layers + OUTSIDE)
                word_start = command_position = after_for = False
                if cases and cases[-1][0] == "pattern":
                    cases[-1][1] = True
                continue
            c = t[i]
            in_pattern = bool(cases) and cases[-1][0] == "pattern"
            if c == "\n":
                if any(f.pending for f in self.frames[:-1]):
                    raise self.fail(
                        i,
                        "a line break inside a nested command before a pending here-document body",
                    )
                i = self.heredoc_bodies(i + 1, end, frame) if frame.pending else i + 1
                word_start = command_position = True
                after_for = False
                continue
            if c in _BLANK:
                i += 1
                word_start = True
                continue
            if c == "#" and word_start:
                stop = t.find("\n", i, end)
                stop = end if stop < 0 else stop
                for pm in NAME.finditer(t, i, stop):
                    self.record(pm, layers + COMMENT)
                i = stop
                continue
            if c == "\\":
                if t.startswith("\\\n", i):
                    i += 2
                    continue
                i = self.escape(i, end, layers)
                word_start = command_position = False
                continue
            if c == "'":
                i = self.single(i + 1, end, layers)
            elif c == '"':
                i = self.double(i + 1, end, layers)
            elif c == "`":
                i = self.backquote(i, end, layers)
            elif c == "$":
                if t.startswith("$'", i):
                    i = self.ansi_c(i + 2, end, layers)
                elif t.startswith('$"', i):
                    i = self.double(i + 2, end, layers)
                else:
                    nxt = self.dollar(i, end, layers)
                    i = nxt if nxt is not None else i + 1
            elif c == "<" and t.startswith("<<", i):
                i = self.heredoc_operator(i, end, frame)
                word_start = True
                continue
            elif c in "<>":
                i += 1
                word_start = True
                continue
            elif c in ";&|":
                op = t[i : i + 3]
                if (
                    cases
                    and cases[-1][0] == "body"
                    and (op.startswith(";;") or op.startswith(";&"))
                ):
                    cases[-1][0], cases[-1][1] = "pattern", False
                    i += 3 if op == ";;&" else 2
                else:
                    i += 2 if op[:2] in (";;", "&&", "||", "|&", ";&") else 1
                word_start = command_position = True
                after_for = False
                continue
            elif c == "(":
                if in_pattern and not cases[-1][1]:
                    cases[-1][1] = True  # the optional ( before a pattern
                    i += 1
                elif (command_position or after_for) and t.startswith("((", i):
                    i = self.arithmetic(i + 2, end, layers, "))")
                    word_start = command_position = after_for = False
                    continue
                else:
                    depth += 1
                    i += 1
                word_start = command_position = True
                continue
            elif c == ")":
                if in_pattern:
                    if depth:
                        depth -= 1
                    else:
                        cases[-1][0] = "body"
                elif depth:
                    depth -= 1
                elif closer == ")":
                    self.close(frame, i)
                    return i + 1
                i += 1
                word_start = command_position = True
                continue
            else:
                w = _WORD_CHUNK.match(t, i)
                assert w is not None
                word = w.group()
                whole = w.end() >= end or t[w.end()] in " \t\n;&|()<>"
                if word_start and whole:
                    self.reserved(word, cases, command_position)
                    command_position = word in _OPENS_COMMAND
                    after_for = word in ("for", "select")
                    if cases and cases[-1][0] == "pattern" and word != "esac":
                        cases[-1][1] = True
                else:
                    command_position = after_for = False
                    if in_pattern:
                        cases[-1][1] = True
                i = w.end()
                word_start = False
                continue
            # quotes and expansions end here: part of a word
            word_start = command_position = after_for = False
            if in_pattern:
                cases[-1][1] = True
        if closer is not None:
            raise self.fail(start, "unterminated $(...)")
        self.close(frame, i)
        return i

    def reserved(self, word: str, cases: list[list[Any]], command_position: bool) -> None:
        if cases:
            state = cases[-1]
            if state[0] == "head":
                if word == "in":
                    state[0], state[1] = "pattern", False
                return
            if word == "esac" and (
                (state[0] == "pattern" and not state[1])
                or (state[0] == "body" and command_position)
            ):
                cases.pop()
                return
            if state[0] == "pattern":
                return
        if word == "case" and command_position:
            cases.append(["head", False])

    def close(self, frame: _Frame, i: int) -> None:
        if frame.pending:
            raise self.fail(
                i,
                f"here-document {frame.pending[0].delimiter!r} has no body before the end of its command",
            )
        self.frames.pop()


def _scan(template: str, where: str) -> _Scanner:
    scanner = _Scanner(template, where)
    scanner.command(0, len(template), "", closer=None)
    scanner.found.sort()
    return scanner


def contexts(template: str) -> list[tuple[int, int, str, str]]:
    """Every placeholder as ``(start, end, name, context)``, scanning the shell quoting.

    ``context`` is one of ``outside``, ``single``, ``double``, ``heredoc`` (body of a here-document
    with an unquoted delimiter), ``literal`` (body of one with a quoted delimiter, or ``${...}``),
    ``ansi-c`` (``$'...'``), ``arithmetic``, ``comment``, prefixed by ``"backquoted "`` inside
    backquotes. ``TemplateError`` if the quoting cannot be followed.
    """
    return _scan(template, "template").found


#: how a newline of a value is written, by context, where a raw one could be joined away
_NEWLINE_WORDS = {OUTSIDE: "'$'\\n''", SINGLE: "'$'\\n''", DOUBLE: "\"$'\\n'\"", ANSI_C: "\\n"}


def _fill(
    template: str,
    found: list[tuple[int, int, str, str]],
    start: int,
    stop: int,
    quoted: dict[int, str],
) -> str:
    parts = []
    last = start
    for s, e, _name, _context in found:
        if s < start or e > stop:
            continue
        parts.append(template[last:s])
        parts.append(quoted[s])
        last = e
    parts.append(template[last:stop])
    return "".join(parts)


def _logical_lines(body: str, quoted: bool) -> list[str]:
    lines: list[str] = []
    current = ""
    for line in body.split("\n"):
        trailing = len(line) - len(line.rstrip("\\"))
        if not quoted and trailing % 2 == 1:
            current += line[:-1]
            continue
        lines.append(current + line)
        current = ""
    if current:
        lines.append(current)
    return lines


def render(template: str, values: Mapping[str, Any], *, where: str = "template") -> str:
    """Fill every ``<<name>>`` of ``template``; ``TemplateError`` naming an unknown name, or a
    template whose quoting cannot be followed, or a value that cannot be placed safely."""
    scanner = _scan(template, where)
    quoted: dict[int, str] = {}
    for start, _end, name, context in scanner.found:
        if name not in values:
            raise TemplateError(
                f"{where}: unknown placeholder <<{name}>> (known: {', '.join(sorted(values))})"
            )
        text = value_text(name, values[name])
        problem = _problem(text, context)
        if problem:
            line = template.count("\n", 0, start) + 1
            raise TemplateError(f"{where}, line {line}: the value of <<{name}>> {problem}")
        quoted[start] = quote(text, context)
        if (
            "\n" in text
            and context in _NEWLINE_WORDS
            and any(d.body_start <= start < d.body_end and not d.quoted for d in scanner.heredocs)
        ):
            # inside $(...) in a here-document body bash joins backslash-newline lines before
            # any quoting applies: a newline of the value is written as $'\n' instead
            quoted[start] = quoted[start].replace("\n", _NEWLINE_WORDS[context])
    for doc in scanner.heredocs:
        if not doc.names:
            continue
        body = _fill(template, scanner.found, doc.body_start, doc.body_end, quoted)
        for text_line in _logical_lines(body, doc.quoted):
            if (text_line.lstrip("\t") if doc.strip_tabs else text_line) == doc.delimiter:
                at = template.count("\n", 0, doc.op) + 1
                names = ", ".join(f"<<{n}>>" for n in dict.fromkeys(doc.names))
                raise TemplateError(
                    f"{where}, line {at}: the value of {names} would end the here-document {doc.delimiter!r} early"
                )
    return _fill(template, scanner.found, 0, len(template), quoted)


__all__ = ["SCRIPT_NAME", "TemplateError", "contexts", "quote", "render", "value_text"]
