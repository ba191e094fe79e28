"""The error hierarchy: every error the library raises on purpose is a ``LaunchersError``."""

from __future__ import annotations


class LaunchersError(Exception):
    """Base class of every error raised by ``launchers`` on purpose."""


class RequirementSyntaxError(LaunchersError, ValueError):
    """A requirement string does not parse; carries the text and the 1-based position."""

    def __init__(
        self,
        message: str,
        text: str = "",
        line: int = 1,
        column: int = 1,
        expected: tuple[str, ...] = (),
    ) -> None:
        self.reason = message
        self.text = text
        self.line = line
        self.column = column
        self.expected = tuple(expected)
        super().__init__(self._render())

    def _render(self) -> str:
        lines = self.text.split("\n") if self.text else [""]
        src = lines[self.line - 1] if 0 < self.line <= len(lines) else ""
        where = f"line {self.line}, column {self.column}"
        # keep the tabs of the source line so that the caret lands under the column however
        # wide a terminal draws them; every other character becomes a space
        pad = "".join("\t" if c == "\t" else " " for c in src[: max(self.column - 1, 0)])
        pad += " " * max(self.column - 1 - len(src), 0)  # a column past the end of the line
        parts = [f"{self.reason} (at {where})", f"    {src}", "    " + pad + "^"]
        if self.expected:
            parts.append("expected one of: " + ", ".join(self.expected))
        return "\n".join(parts)


class ConfigurationError(LaunchersError, ValueError):
    """A configuration file cannot be used; the message names file, line, column and key path."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        column: int | None = None,
        key: str | None = None,
        problems: list[str] | None = None,
    ) -> None:
        self.reason = message
        self.file = file
        self.line = line
        self.column = column
        self.key = key
        self.problems = list(problems) if problems else []
        super().__init__(self._render())

    def _render(self) -> str:
        if self.problems:
            return "\n".join(self.problems)
        loc = ""
        if self.file is not None:
            loc = str(self.file)
            if self.line is not None:
                loc += f":{self.line}"
                if self.column is not None:
                    loc += f":{self.column}"
            loc += ": "
        key = f"{self.key}: " if self.key else ""
        return f"{loc}{key}{self.reason}"


class LauncherNotFoundError(LaunchersError, LookupError):
    """No configured launcher can run any alternative; the message explains every rejection."""


class ScriptError(LaunchersError, ValueError):
    """A job script cannot be written safely (for example a newline in a directive value)."""


class TaskError(LaunchersError, ValueError):
    """A task is not well formed (bad parameter type, a function that cannot be imported)."""


class SubmissionError(LaunchersError):
    """The scheduler refused a job, or answered in a way we cannot read."""


class ConnectorError(LaunchersError):
    """A transport (SSH, HTTP) failed; callers treat it as transient."""


class JobFailedError(LaunchersError):
    """A job ended in a state other than COMPLETED."""

    def __init__(
        self,
        message: str,
        *,
        state: str = "",
        exit_code: int | None = None,
        signal: int | None = None,
        reason: str | None = None,
        stderr_tail: str = "",
    ) -> None:
        self.state = state
        self.exit_code = exit_code
        self.signal = signal
        self.reason = reason
        self.stderr_tail = stderr_tail
        super().__init__(message)


class ExperimentFailed(LaunchersError):
    """An experiment ended with at least one unsuccessful job."""

    def __init__(self, message: str, jobs: list[object] | None = None) -> None:
        self.jobs = list(jobs or [])
        super().__init__(message)


class AuthenticationError(LaunchersError):
    """A remote site refused our credentials."""


__all__ = [
    "AuthenticationError",
    "ConfigurationError",
    "ConnectorError",
    "ExperimentFailed",
    "JobFailedError",
    "LauncherNotFoundError",
    "LaunchersError",
    "RequirementSyntaxError",
    "ScriptError",
    "SubmissionError",
    "TaskError",
]
