"""Load YAML (or JSON) while remembering where every key and item was written.

API (used by the ``launchers.yaml`` loader and by the Compute Backend Config reader)::

    from launchers.config.located import load_located, LDict, LList

    data = load_located(text, "path/to/file.yaml")   # ConfigurationError on bad YAML
    if isinstance(data, LDict):
        data.position               # Position(file, line, column) of the mapping itself
        data.key_position("slurm")  # where the key ``slurm`` is written
        data.value_position("slurm")  # where its value starts
    if isinstance(data, LList):
        data.item_position(0)       # where item 0 starts

Mappings come back as ``LDict`` (a ``dict`` subclass), sequences as ``LList`` (a ``list``
subclass), scalars as plain Python values (str, int, float, bool, None, date...).
Lines and columns are 1-based. Positions are ``launchers.config.model.Position`` values
with an empty ``key``; ``locate(pos, key)`` adds the key path. A position is never
``None`` for data read from YAML; for data that was not located (plain dicts, or JSON that
only Python's ``json`` module could read) the helpers return ``Position(file)``.

Syntax errors, several documents in one file, non-scalar mapping keys and duplicate keys
raise ``ConfigurationError`` carrying ``file``, ``line`` and ``column``. Aliases and merge keys
(``<<``) are resolved; recursive aliases do not crash (they yield a shared container).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs
import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from launchers.config.keypath import join
from launchers.config.model import Position
from launchers.errors import ConfigurationError

try:  # the C parser is ~10x faster on big node lists
    _Base: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _Base = yaml.SafeLoader


class _Loader(_Base):  # type: ignore[misc,valid-type,unused-ignore]
    """The safe loader with a leaner implicit-tag resolver (no path resolvers are used)."""

    def descend_resolver(self, current_node: Any, current_index: Any) -> None:
        return None

    def ascend_resolver(self) -> None:
        return None

    def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
        if kind is ScalarNode:
            if implicit[0]:
                for tag, regexp in _RESOLVERS.get(value[:1], ()):
                    if regexp.match(value):
                        return tag
            return self.DEFAULT_SCALAR_TAG
        if kind is SequenceNode:
            return self.DEFAULT_SEQUENCE_TAG
        return self.DEFAULT_MAPPING_TAG


_RESOLVERS: dict[str, tuple[tuple[str, Any], ...]] = {
    first: tuple(resolvers) + tuple(_Loader.yaml_implicit_resolvers.get(None, []))
    for first, resolvers in _Loader.yaml_implicit_resolvers.items()
    if first is not None
}

_MERGE_TAG = "tag:yaml.org,2002:merge"


def _pos(file: str | None, mark: Any) -> Position:
    return Position(file=file, line=mark.line + 1, column=mark.column + 1)


class LDict(dict):  # type: ignore[type-arg,unused-ignore]
    """A ``dict`` that remembers where it, each key and each value were written."""

    _file: str | None
    _mark: Any
    _keys: dict[Any, Any]
    _values: dict[Any, Any]

    def __init__(self, *args: Any, position: Position | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._position = position
        self._file = position.file if position is not None else None
        self._mark = None
        self._keys = {}
        self._values = {}

    @property
    def position(self) -> Position:
        """Where the mapping starts."""
        if self._mark is not None:
            return _pos(self._file, self._mark)
        return self._position if self._position is not None else Position(file=self._file)

    def key_position(self, key: Any) -> Position:
        """Where ``key`` is written (the container's position if unknown)."""
        mark = self._keys.get(key)
        return _pos(self._file, mark) if mark is not None else self.position

    def value_position(self, key: Any) -> Position:
        """Where the value of ``key`` starts (the key's position if unknown)."""
        mark = self._values.get(key)
        return _pos(self._file, mark) if mark is not None else self.key_position(key)


class LList(list):  # type: ignore[type-arg,unused-ignore]
    """A ``list`` that remembers where it and each item were written."""

    _file: str | None
    _mark: Any
    _items: list[Any]
    #: True when every item is a string (set by the loader; False when unknown).
    all_str: bool = False

    def __init__(self, *args: Any, position: Position | None = None) -> None:
        super().__init__(*args)
        self._position = position
        self._file = position.file if position is not None else None
        self._mark = None
        self._items = []

    @property
    def position(self) -> Position:
        """Where the list starts."""
        if self._mark is not None:
            return _pos(self._file, self._mark)
        return self._position if self._position is not None else Position(file=self._file)

    def item_position(self, index: int) -> Position:
        """Where item ``index`` starts (the list's position if unknown)."""
        if -len(self._items) <= index < len(self._items):
            return _pos(self._file, self._items[index])
        return self.position


def position_of(value: Any, file: str | None = None) -> Position:
    """The position of a located container, else ``Position(file)``."""
    pos = getattr(value, "position", None)
    return pos if isinstance(pos, Position) else Position(file=file)


def plain(value: Any) -> Any:
    """Located data as plain dicts and lists (what a value keeps of a YAML mapping)."""
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def locate(pos: Position, key: str) -> Position:
    """``pos`` with its key path set to ``key``."""
    return attrs.evolve(pos, key=key)


def _mark_position(mark: Any, file: str | None) -> Position:
    if mark is None:
        return Position(file=file)
    return _pos(file, mark)


def _yaml_error(exc: yaml.YAMLError, file: str | None) -> ConfigurationError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    msg = f"YAML syntax error: {problem}"
    if context:
        msg += f" ({context})"
    pos = _mark_position(mark, file)
    return ConfigurationError(msg, file=file, line=pos.line, column=pos.column)


_STR_TAG = "tag:yaml.org,2002:str"
_FAST_TAGS = frozenset(
    "tag:yaml.org,2002:" + t for t in ("int", "float", "bool", "null", "timestamp")
)


class _Duplicate(Exception):
    """Internal: a duplicate key; ``load_located`` adds its key path (found only then, so that
    building stays free of path bookkeeping)."""

    def __init__(self, knode: Node, error: ConfigurationError) -> None:
        super().__init__(str(error))
        self.knode = knode
        self.error = error


def _key_path(root: Node, target: Node) -> str | None:
    """The key path (``slurm[0].partitions.p.priority``) of the mapping key node ``target``,
    searched in document order (an anchored mapping is named where it is written)."""
    seen: set[int] = set()
    stack: list[tuple[Node, str]] = [(root, "")]
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue  # an alias met again (recursive aliases too)
        seen.add(id(node))
        children: list[tuple[Node, str]] = []
        if isinstance(node, MappingNode):
            for knode, vnode in node.value:
                if knode.tag == _MERGE_TAG:  # merged keys land in this mapping
                    merged = vnode.value if isinstance(vnode, SequenceNode) else [vnode]
                    children.extend((m, path) for m in merged)
                    continue
                kpath = join(path, knode.value) if isinstance(knode, ScalarNode) else path
                if knode is target:
                    return kpath
                children.append((vnode, kpath))
        elif isinstance(node, SequenceNode):
            children = [(item, f"{path}[{i}]") for i, item in enumerate(node.value)]
        stack.extend(reversed(children))
    return None


class _Builder:
    """Turns a composed YAML node tree into LDict / LList / scalars."""

    def __init__(
        self, loader: Any, file: str | None, duplicates: list[tuple[Node, Any]] | None = None
    ) -> None:
        self.loader = loader
        self.file = file
        #: None: a duplicate key is an error; a list: the last value wins and (key node, mark
        #: of the first one) is recorded
        self.duplicates = duplicates
        self.memo: dict[int, Any] = {}
        self.constructors = loader.yaml_constructors

    def error(self, node: Node, message: str) -> ConfigurationError:
        p = _pos(self.file, node.start_mark)
        return ConfigurationError(message, file=self.file, line=p.line, column=p.column)

    def build(self, node: Node) -> Any:
        cls = node.__class__
        if cls is ScalarNode:
            return self.scalar(node)  # type: ignore[arg-type]
        done = self.memo.get(id(node))
        if done is not None:
            return done
        if cls is SequenceNode:
            out_l = LList()
            out_l._file = self.file
            out_l._mark = node.start_mark
            self.memo[id(node)] = out_l
            marks = out_l._items
            all_str = True
            for item in node.value:
                if item.__class__ is ScalarNode and item.tag == _STR_TAG:
                    out_l.append(item.value)
                else:
                    all_str = False
                    out_l.append(
                        self.scalar(item) if item.__class__ is ScalarNode else self.build(item)
                    )
                marks.append(item.start_mark)
            out_l.all_str = all_str
            return out_l
        if cls is MappingNode:
            out_d = LDict()
            out_d._file = self.file
            out_d._mark = node.start_mark
            self.memo[id(node)] = out_d
            keys = out_d._keys
            values = out_d._values
            merged: list[tuple[Any, Any, Any, Any]] = []
            for knode, vnode in node.value:
                if knode.__class__ is not ScalarNode:
                    raise self.error(
                        knode, "a mapping key must be a plain scalar, not a list or mapping"
                    )
                if knode.tag == _MERGE_TAG:
                    merged.extend(self.merge_items(vnode))
                    continue
                key = knode.value if knode.tag == _STR_TAG else self.scalar(knode)
                try:
                    if key in keys and self.duplicates is not None:
                        # PyYAML's reading (MLflow's): the last value wins; the caller warns
                        self.duplicates.append((knode, keys[key]))
                    elif key in keys:
                        first = _pos(self.file, keys[key])
                        raise _Duplicate(
                            knode,
                            self.error(
                                knode, f"duplicate key {key!r} (first written at line {first.line})"
                            ),
                        )
                except TypeError:
                    raise self.error(knode, f"a mapping key cannot be {type(key).__name__}")
                if vnode.__class__ is ScalarNode:
                    out_d[key] = vnode.value if vnode.tag == _STR_TAG else self.scalar(vnode)
                else:
                    out_d[key] = self.build(vnode)
                keys[key] = knode.start_mark
                values[key] = vnode.start_mark
            for key, value, kmark, vmark in merged:
                if key not in keys:
                    out_d[key] = value
                    keys[key] = kmark
                    values[key] = vmark
            return out_d
        raise self.error(node, "unsupported YAML node")  # pragma: no cover

    def merge_items(self, vnode: Node) -> list[tuple[Any, Any, Any, Any]]:
        """Items brought in by a ``<<`` merge key (a mapping or a list of mappings)."""
        sources = vnode.value if isinstance(vnode, SequenceNode) else [vnode]
        items: list[tuple[Any, Any, Any, Any]] = []
        for src in sources:
            value = self.build(src)
            if not isinstance(value, LDict):
                raise self.error(src, "a merge key (<<) needs a mapping or a list of mappings")
            for k in value:
                items.append((k, value[k], value._keys.get(k), value._values.get(k)))
        return items

    def scalar(self, node: ScalarNode) -> Any:
        tag = node.tag
        if tag == _STR_TAG:
            return node.value
        try:
            if tag in _FAST_TAGS:
                return self.constructors[tag](self.loader, node)
            return self.loader.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
            why = getattr(exc, "problem", None) or str(exc).split("\n")[0]
            raise self.error(node, f"cannot read value {node.value!r}: {why}")


def _plain_to_located(value: Any, file: str | None) -> Any:
    """Wrap plain JSON data into LDict/LList without line information."""
    if isinstance(value, dict):
        d = LDict(position=Position(file=file))
        for k, v in value.items():
            d[k] = _plain_to_located(v, file)
        return d
    if isinstance(value, list):
        lst = LList(position=Position(file=file))
        lst.extend(_plain_to_located(v, file) for v in value)
        return lst
    return value


def _load_json(
    text: str,
    file: str | None,
    yaml_exc: yaml.YAMLError,
    duplicates: list[DuplicateKey] | None = None,
) -> Any:
    """JSON that libyaml refused: usually tabs, which JSON allows only as whitespace (never raw
    inside strings), so they become spaces and positions stay exact."""
    if "\t" in text:
        try:
            return load_located(text.replace("\t", " "), file, duplicates=duplicates)
        except ConfigurationError:
            pass
    try:
        return _plain_to_located(json.loads(text), file)
    except json.JSONDecodeError as e:
        raise ConfigurationError(
            f"JSON syntax error: {e.msg}", file=file, line=e.lineno, column=e.colno
        )
    except ValueError:
        raise _yaml_error(yaml_exc, file)


def _reader_error(exc: Any, text: str, file: str | None) -> ConfigurationError:
    """A bad character (PyYAML reports an index, not a line)."""
    index = getattr(exc, "position", 0) or 0
    line = text.count("\n", 0, index) + 1
    column = index - (text.rfind("\n", 0, index) + 1) + 1
    char = getattr(exc, "character", "")
    if isinstance(char, str) and len(char) == 1:
        char = ord(char)
    code = f"#x{char:04x}" if isinstance(char, int) else repr(char)
    reason = getattr(exc, "reason", "unacceptable character")
    return ConfigurationError(
        f"YAML syntax error: {reason} {code}", file=file, line=line, column=column
    )


@attrs.frozen
class DuplicateKey:
    """A key written twice in one mapping (read with ``duplicates=``): the last value was kept."""

    key: str  # the key path, as in error messages
    first: Position  # where the key was written first
    last: Position  # where it was written again (the value kept)


def load_located(
    text: str, file: str | None = None, *, duplicates: list[DuplicateKey] | None = None
) -> Any:
    """Parse one YAML/JSON document into LDict/LList/scalars; ``None`` for an empty text.

    A duplicate key is an error, unless ``duplicates`` is a list: then the last value wins (as
    PyYAML's ``safe_load`` reads it) and each duplicate is appended to that list.
    """
    loader = None
    found: list[tuple[Node, Any]] | None = [] if duplicates is not None else None
    try:
        try:
            loader = _Loader(text)
            node = loader.get_single_node()
        except yaml.reader.ReaderError as exc:
            raise _reader_error(exc, text, file)
        except UnicodeError as exc:
            index = getattr(exc, "start", 0)
            line = text.count("\n", 0, index) + 1
            column = index - (text.rfind("\n", 0, index) + 1) + 1
            raise ConfigurationError(
                "not valid Unicode text (a lone surrogate)", file=file, line=line, column=column
            )
        except yaml.YAMLError as exc:
            if (file or "").endswith(".json") or text.lstrip().startswith(("{", "[")):
                return _load_json(text, file, exc, duplicates)
            raise _yaml_error(exc, file)
        if node is None:
            return None
        try:
            data = _Builder(loader, file, found).build(node)
            if duplicates is not None and found:
                for knode, first in found:
                    duplicates.append(
                        DuplicateKey(
                            key=_key_path(node, knode) or str(knode.value),
                            first=_pos(file, first),
                            last=_pos(file, knode.start_mark),
                        )
                    )
            return data
        except _Duplicate as dup:
            e = dup.error
            key = _key_path(node, dup.knode)
            raise ConfigurationError(
                e.reason, file=e.file, line=e.line, column=e.column, key=key or None
            ) from None
        except RecursionError:
            raise ConfigurationError("document is nested too deeply", file=file, line=1, column=1)
    finally:
        if loader is not None:
            loader.dispose()


__all__ = ["DuplicateKey", "LDict", "LList", "load_located", "locate", "plain", "position_of"]
