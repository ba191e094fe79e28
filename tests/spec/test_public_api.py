"""The names of the package root (docs/api.md): ``__all__`` is the documented list, each name
imports, and mypy sees each as what it is (tests/typing/public_api.py)."""

from __future__ import annotations

import ast
import importlib
import re

import mypy.api
import pytest

import launchers
from paths import ROOT

SRC = ROOT / "src"
INIT = SRC / "launchers" / "__init__.py"


def _documented() -> list[str]:
    """The first column of the table of docs/api.md."""
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    return re.findall(r"^\| `(\w+)` \|", text, flags=re.MULTILINE)


def test_all_is_the_documented_list() -> None:
    documented = _documented()
    assert len(documented) == len(set(documented))
    assert sorted(launchers.__all__) == sorted(documented)


@pytest.mark.parametrize("name", sorted(launchers.__all__))
def test_every_public_name_imports(name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from launchers import {name}", namespace)  # the statement a script writes
    assert namespace[name] is getattr(launchers, name)
    assert getattr(namespace[name], "__name__", name) == name


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'find_launchers'"):
        launchers.find_launchers  # type: ignore[attr-defined]  # noqa: B018


def test_type_checkers_import_what_runs() -> None:
    """Each lazily loaded name has a ``TYPE_CHECKING`` import of the same object, so that
    mypy does not see it through ``__getattr__`` (as ``Any``)."""
    lazy: dict[str, str] = launchers._LAZY  # type: ignore[attr-defined]
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    typed: dict[str, str] = {}
    for stmt in block.body:
        assert isinstance(stmt, ast.ImportFrom)
        for alias in stmt.names:
            assert alias.asname == alias.name  # an explicit re-export
            typed[alias.name] = f"launchers.{stmt.module}"
    assert set(typed) == set(lazy)
    for name, module in typed.items():
        assert getattr(importlib.import_module(module), name) is getattr(launchers, name)


def test_mypy_sees_the_public_names_as_what_they_are(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fast once ``python -m mypy`` has filled the cache this run shares."""
    monkeypatch.setenv("MYPYPATH", str(SRC))  # the launchers of this tree, not an installed one
    stdout, stderr, status = mypy.api.run(
        [
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            str(ROOT / "tests" / "typing" / "public_api.py"),
        ]
    )
    assert status == 0, stdout + stderr
    revealed = re.findall(r'Revealed type is "(.*)"', stdout)
    assert len(revealed) == 1
    assert revealed[0].startswith("def (*requirements: str | launchers.language.values.")
    assert "config: launchers.config.model.LaunchersConfig" in revealed[0]
