"""Property tests: whatever YAML document is loaded, only ``LaunchersError`` escapes, and
every problem names the file, a 1-based line and column; the schema accepts the example."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launchers.cli.main import main
from launchers.config.keys import SECTIONS
from launchers.config.loader import load_config_text
from launchers.config.schema import json_schema
from launchers.errors import ConfigurationError, LaunchersError
from paths import ROOT

EXAMPLE = ROOT / "configs" / "launchers.yaml"
FILE = "fuzz.yaml"
PROBLEM_LINE = re.compile(rf"^{re.escape(FILE)}:\d+:\d+: ")

KEYS = sorted({k for table in SECTIONS.values() for k in table} | {"use_memory_contraint"})
VALUES = [
    "4G",
    "16",
    "2 days",
    "4",
    "auto",
    "ALL",
    "yes",
    "GPU(?P<cuda_count>\\d+)",
    "(",
    "https://h/x",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=False),
    st.sampled_from(VALUES),
    st.text(max_size=8),
)
keys = st.one_of(st.sampled_from(KEYS), st.text(min_size=1, max_size=6), st.integers(0, 3))
documents = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(keys, children, max_size=5),
    ),
    max_leaves=25,
)
tops = st.dictionaries(
    st.sampled_from(["local", "slurm", "unicore", "firecrest", "connectors", "tokens", "slrum"]),
    st.one_of(
        st.lists(st.dictionaries(st.sampled_from(KEYS), documents, max_size=6), max_size=3),
        documents,
    ),
    max_size=4,
)


def dump(doc: Any) -> str:
    """YAML text of ``doc`` (libyaml's emitter when available: much faster)."""
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump(doc, Dumper=dumper, sort_keys=False)


def assert_well_formed(error: ConfigurationError) -> None:
    text = str(error)
    assert error.file == FILE and error.line is not None and error.line >= 1, text
    assert error.column is not None and error.column >= 1, text
    for line in text.splitlines():
        if not line.startswith((" ", "\t")):
            assert PROBLEM_LINE.match(line), text


def load(text: str) -> None:
    try:
        load_config_text(text, FILE)
    except ConfigurationError as e:
        assert_well_formed(e)
    except LaunchersError:
        pass


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tops)
def test_random_structured_documents(doc: dict[str, Any]) -> None:
    load(dump(doc))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents)
def test_random_documents(doc: Any) -> None:
    load(dump(doc))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_random_text(text: str) -> None:
    load(text)


_EXAMPLE_LINES = EXAMPLE.read_text().splitlines()


@settings(max_examples=150, deadline=None)
@given(st.integers(0, len(_EXAMPLE_LINES) - 1), st.sampled_from([*VALUES, "[]", "{}", "- x"]))
def test_mutated_example(index: int, value: str) -> None:
    """Replace one value of the documented example: still only well-formed errors."""
    lines = list(_EXAMPLE_LINES)
    line = lines[index]
    if ":" in line and not line.lstrip().startswith("#"):
        head = line.split(":", 1)[0]
        lines[index] = f"{head}: {value}"
    load("\n".join(lines) + "\n")


# -- the JSON Schema ------------------------------------------------------------------------
def _validate(schema: dict[str, Any], value: Any, defs: dict[str, Any], path: str = "") -> None:
    """A small structural validator for the subset of JSON Schema that json_schema() uses."""
    if schema is False:
        raise AssertionError(f"{path}: forbidden key")
    if "$ref" in schema:
        _validate(defs[schema["$ref"].split("/")[-1]], value, defs, path)
        return
    if "anyOf" in schema:
        errors = []
        for option in schema["anyOf"]:
            try:
                _validate(option, value, defs, path)
                return
            except AssertionError as e:
                errors.append(str(e))
        raise AssertionError(f"{path}: no alternative matched: {errors}")
    if "const" in schema:
        assert value == schema["const"], path
    if "enum" in schema:
        assert value in schema["enum"], f"{path}: {value!r} not in {schema['enum']}"
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else types
        py = {
            "object": dict, "array": list, "string": str, "integer": int,
            "number": (int, float), "boolean": bool, "null": type(None),
        }  # fmt: skip
        ok = any(
            isinstance(value, py[n])
            and not (n in ("integer", "number") and isinstance(value, bool))
            for n in names
        )
        assert ok, f"{path}: {value!r} is not {names}"
    if "pattern" in schema and isinstance(value, str):
        assert re.search(schema["pattern"], value), f"{path}: {value!r} !~ {schema['pattern']}"
    if "minimum" in schema and isinstance(value, (int, float)):
        assert value >= schema["minimum"], path
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for req in schema.get("required", []):
            assert req in value, f"{path}: missing {req}"
        for k, v in value.items():
            if k in props:
                _validate(props[k], v, defs, f"{path}.{k}")
            elif schema.get("additionalProperties") is False:
                raise AssertionError(f"{path}: unexpected key {k}")
            elif isinstance(schema.get("additionalProperties"), dict):
                _validate(schema["additionalProperties"], v, defs, f"{path}.{k}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            _validate(schema["items"], item, defs, f"{path}[{i}]")


def test_example_validates_against_schema() -> None:
    schema = json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    doc = yaml.safe_load(EXAMPLE.read_text())
    _validate(schema, doc, schema["$defs"])
    try:
        import jsonschema
    except ImportError:
        return
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(doc)


def test_schema_rejects_what_the_loader_rejects() -> None:
    schema = json_schema()
    for bad in (
        {"slurm": [{"id": "a", "partitons": {}}]},
        {"slurm": [{"partitions": {}}]},
        {"local": [{"cpu": {"memory": "4000"}}]},
        {"unicore": [{"id": "u", "site": {"url": "https://x", "password": "p"}}]},
        {"slrum": []},
    ):
        try:
            _validate(schema, bad, schema["$defs"])
        except AssertionError:
            continue
        raise AssertionError(f"schema accepted {bad}")


def test_every_key_has_a_description() -> None:
    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for name, prop in node.get("properties", {}).items():
                assert prop is False or prop.get("description"), name
            for v in node.values():
                walk(v)

    walk(json_schema())


# -- the commands ---------------------------------------------------------------------------
def test_cli_schema_and_validate(capsys: Any, tmp_path: Path) -> None:
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "launchers.yaml"
    assert main(["validate", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "OK: 5 groups" in out and "5 partitions" in out and "5 node groups" in out
    bad = tmp_path / "launchers.yaml"
    bad.write_text("slurm:\n  - id: a\n    partitions: {p: {nodes: [{featurs: [x]}]}}\n")
    assert main(["validate", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"launchers: {bad}:3:31: slurm[0].partitions.p.nodes[0].featurs:")
    assert "Traceback" not in err


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@settings(max_examples=100, deadline=None)
@given(documents)
def test_located_reads_what_pyyaml_reads(doc: Any) -> None:
    """The lean resolver gives the same values as PyYAML's safe loader."""
    from launchers.config.located import load_located

    text = dump(doc)
    assert _plain(load_located(text, FILE)) == yaml.load(text, Loader=yaml.CSafeLoader)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["down", "off", "On", "yes", "NO", "~", "null", "0x1F", "0o17",
                                 "1_000", "1:30", "-.inf", ".NaN", "2024-01-02", "1e3", "+12",
                                 "<<", "=", "", "true", "tRue", "08", "0b101"]) | st.text(max_size=5),
                min_size=1, max_size=5))  # fmt: skip
def test_plain_scalars_resolve_like_pyyaml(words: list[str]) -> None:
    from launchers.config.located import load_located

    text = "\n".join(f"k{i}: {w}" for i, w in enumerate(words)) + "\n"
    try:
        expected = yaml.safe_load(text)
    except yaml.YAMLError:
        return
    got = _plain(load_located(text, FILE))
    assert repr(got) == repr(expected)


def test_cli_validate_delegates_backend_configs(capsys: Any, tmp_path: Path) -> None:
    import pytest

    pytest.importorskip("launchers.remote.backend_config")
    f = tmp_path / "backend.yaml"
    f.write_text(
        "UnicoreApiUrl: https://h/x/rest/core\nResources:\n  Queue: batch\n  MemoryPerNode: 16\n"
    )
    assert main(["validate", str(f)]) == 2
    assert f"{f}:4:18: Resources.MemoryPerNode:" in capsys.readouterr().err
    f.write_text("UnicoreApiUrl: https://h/x/rest/core\nResources:\n  Queue: batch\n")
    assert main(["validate", str(f)]) == 0
    assert "Compute Backend Config" in capsys.readouterr().out


def test_cli_validate_without_configuration(capsys: Any, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("LAUNCHERS_CONFIG", raising=False)
    assert main(["validate"]) == 0
    assert "implicit local launcher" in capsys.readouterr().out
    monkeypatch.setenv("LAUNCHERS_CONFIG", str(tmp_path / "nope.yaml"))
    assert main(["validate"]) == 2
    assert "does not exist" in capsys.readouterr().err
