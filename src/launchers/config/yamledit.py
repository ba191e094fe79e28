"""Edit YAML text in place: set, delete and append values and add comment lines, leaving every
other byte as it was (comments, key order, quoting, flow or block style).

Pure: an :class:`Editor` reads a text, collects edits addressed by key paths (``("slurm", 0,
"partitions", "gpu", "nodes")``), and :meth:`Editor.text` returns the edited text. Block
entries are replaced, inserted or removed as whole lines at their own indentation; a change
inside a flow collection (``{cores: 8, memory: 16G}``) rewrites that collection in flow style.
``launchers slurm discover --update`` uses it to refresh what it owns in a file a person edits.
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import yaml

from ..errors import ConfigurationError

Path = tuple[Any, ...]

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BaseDumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Dumper(_BaseDumper):
    """Safe emitter that never writes anchors or aliases (identical lists are written twice)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump(value: Any, *, flow: bool | None = None, width: int = 100) -> str:
    """YAML text of ``value``: block style with leaf collections inline (``flow=None``), or all
    in flow style (``flow=True``); keys in order, no aliases."""
    return yaml.dump(
        value,
        Dumper=_Dumper,
        default_flow_style=flow,
        sort_keys=False,
        allow_unicode=True,
        width=width,
    )


def _scalar(value: Any) -> str:
    text: str = yaml.dump(value, Dumper=_Dumper, allow_unicode=True, width=10**9)
    return text.removesuffix("\n...\n").rstrip("\n")


def _leaf(value: dict[Any, Any] | list[Any]) -> bool:
    items = value.values() if isinstance(value, dict) else value
    return not any(isinstance(v, (dict, list)) for v in items)


def render_entry(key: Any, value: Any) -> str:
    """``key: value`` as a block mapping entry at column 0 (no final newline): collections of
    plain values inline (``cpu: {cores: 8}``), nested ones in block style."""
    k = _scalar(key)
    if isinstance(value, (dict, list)):
        if value and not _leaf(value):
            body = dump(value).rstrip("\n")
            return f"{k}:\n{_indent(body, 2) if isinstance(value, dict) else body}"
        return f"{k}: {dump(value).rstrip(chr(10))}"
    return f"{k}: {_scalar(value)}"


def render_item(value: Any) -> str:
    """``- value`` as a block list item at column 0 (no final newline)."""
    if isinstance(value, dict) and value:
        lines = "\n".join(render_entry(k, v) for k, v in value.items())
        return "- " + _indent(lines, 2)[2:]
    if isinstance(value, (dict, list)):
        return "- " + dump(value).rstrip("\n") if _leaf(value) else dump([value]).rstrip("\n")
    return "- " + _scalar(value)


def plain(node: yaml.Node | None) -> Any:
    """The Python value of a composed node (as ``yaml.safe_load`` gives it)."""
    if node is None:
        return None
    return yaml.constructor.SafeConstructor().construct_document(node)


@attrs.frozen
class _Edit:
    start: int
    end: int
    text: str
    #: among insertions at one place, lower comes first (the deeper entry before the comment
    #: or entry of a shallower one that follows it)
    order: int = 0


def _indent(text: str, spaces: int) -> str:
    pad = " " * spaces
    return "\n".join(pad + line if line else line for line in text.split("\n"))


class Editor:
    """Edits of one YAML text; ``text()`` applies them (edits must not overlap)."""

    def __init__(self, text: str, source: str = "<yaml>") -> None:
        self.original = text
        self.source = source
        try:
            self.root: yaml.Node | None = yaml.compose(text, Loader=_Loader)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            raise ConfigurationError(
                f"YAML syntax error: {getattr(e, 'problem', None) or e}",
                file=source,
                line=None if mark is None else mark.line + 1,
                column=None if mark is None else mark.column + 1,
            ) from None
        self._line_starts = [0, *(m.end() for m in re.finditer("\n", text))]
        self._edits: list[_Edit] = []
        #: flow collections changed in memory, rewritten once by ``text()``: id -> (node, value)
        self._flow: dict[int, tuple[yaml.Node, Any, Path]] = {}

    # -- positions ------------------------------------------------------------------------
    def _index(self, mark: Any) -> int:
        return self._line_starts[mark.line] + mark.column

    def _line_start(self, index: int) -> int:
        return self.original.rfind("\n", 0, index) + 1

    def _line_end(self, index: int) -> int:
        """Index just past the newline ending the line of ``index`` (or the text's end)."""
        end = self.original.find("\n", index)
        return len(self.original) if end < 0 else end + 1

    def _content_end(self, node: yaml.Node) -> int:
        """Where the node's own text ends: a block collection's end mark lies after the
        comments and blank lines that follow it, so take its last leaf's end instead."""
        if isinstance(node, yaml.ScalarNode) or getattr(node, "flow_style", False):
            return self._index(node.end_mark)
        if isinstance(node, yaml.MappingNode):
            if not node.value:
                return self._index(node.end_mark)
            return self._content_end(node.value[-1][1])
        if isinstance(node, yaml.SequenceNode):
            if not node.value:
                return self._index(node.end_mark)
            return self._content_end(node.value[-1])
        return self._index(node.end_mark)  # pragma: no cover - every node kind above

    # -- lookup ---------------------------------------------------------------------------
    def _walk(self, path: Path) -> list[yaml.Node | None]:
        """The nodes along ``path`` (root first); ``None`` from the first missing step."""
        nodes: list[yaml.Node | None] = [self.root]
        node = self.root
        for step in path:
            child = None
            if isinstance(node, yaml.MappingNode) and isinstance(step, str):
                child = next((v for k, v in node.value if k.value == step), None)
            elif (
                isinstance(node, yaml.SequenceNode)
                and isinstance(step, int)
                and 0 <= step < len(node.value)
            ):
                child = node.value[step]
            nodes.append(child)
            node = child
            if node is None:
                nodes.extend([None] * (len(path) - len(nodes) + 1))
                break
        return nodes

    def node(self, path: Path) -> yaml.Node | None:
        """The composed node at ``path``, or None."""
        return self._walk(path)[-1]

    def last_line(self, path: Path) -> int:
        """The 0-based line where the value at ``path`` ends (its last content)."""
        node = self.node(path)
        if node is None:
            raise KeyError(path)
        return self.original.count("\n", 0, self._content_end(node))

    def value(self, path: Path) -> Any:
        """The Python value at ``path`` (None when absent)."""
        return plain(self.node(path))

    def _key_node(self, mapping: yaml.MappingNode, key: str) -> tuple[yaml.Node, yaml.Node]:
        return next((k, v) for k, v in mapping.value if k.value == key)

    def _flow_root(self, path: Path) -> tuple[int, yaml.Node] | None:
        """The outermost flow collection on ``path`` (its depth and node), if any."""
        for depth, node in enumerate(self._walk(path)):
            if node is None:
                return None
            if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and node.flow_style:
                return depth, node
        return None

    # -- edits ----------------------------------------------------------------------------
    def set(self, path: Path, value: Any, same: Callable[[Any, Any], bool] | None = None) -> bool:
        """Make ``path`` hold ``value`` (missing mappings on the way are created); nothing is
        written when the value there is already equal (``same(old, new)``, default ``==``).
        Returns whether an edit was made."""
        nodes = self._walk(path)
        target = nodes[-1]
        if target is not None:
            old = plain(target)
            if (same or _equal)(old, value):
                return False
        flow = self._flow_root(path[:-1]) if path else None
        if flow is not None:
            self._flow_change(path, flow, lambda parent, key: _assign(parent, key, value))
            return True
        if target is not None:
            parent = nodes[-2]
            if isinstance(parent, yaml.SequenceNode):
                self._replace_item(target, value)
            else:
                assert isinstance(parent, yaml.MappingNode)
                self._replace_entry(parent, path[-1], value)
            return True
        # absent: find the deepest existing ancestor and insert what is missing below it
        for depth in range(len(path) - 1, -1, -1):
            anc = nodes[depth]
            if anc is None:
                continue
            missing = path[depth:]
            built: Any = value
            for step in reversed(missing[1:]):
                built = {step: built}
            if isinstance(anc, yaml.MappingNode):
                self._insert_entry(anc, missing[0], built, depth + 1)
            elif isinstance(anc, yaml.ScalarNode) and anc.value in ("", "~", "null") and depth:
                self.set(path[:depth], {missing[0]: built})
            else:
                raise ConfigurationError(
                    f"cannot write {'.'.join(map(str, path))}: "
                    f"{'.'.join(map(str, path[:depth])) or 'the top level'} is not a mapping",
                    file=self.source,
                )
            return True
        raise AssertionError("unreachable: the root is always on the path")  # pragma: no cover

    def delete(self, path: Path) -> bool:
        """Remove the entry (or list item) at ``path``; returns whether it existed."""
        nodes = self._walk(path)
        if nodes[-1] is None:
            return False
        flow = self._flow_root(path[:-1])
        if flow is not None:
            self._flow_change(path, flow, _remove)
            return True
        parent = nodes[-2]
        if isinstance(parent, yaml.MappingNode):
            knode, vnode = self._key_node(parent, path[-1])
            kstart = self._index(knode.start_mark)
            start = self._line_start(kstart)
            if self.original[start:kstart].strip(" "):  # `- key: value`: keep the dash
                self._edits.append(_Edit(kstart, self._content_end(vnode), ""))
                return True
        else:
            vnode = nodes[-1]
            assert vnode is not None
            start = self._line_start(self._index(vnode.start_mark))
        end = self._line_end(self._content_end(vnode))
        self._edits.append(_Edit(start, end, ""))
        return True

    def append(self, path: Path, value: Any) -> None:
        """Add ``value`` as the last item of the list at ``path`` (created when absent)."""
        node = self.node(path)
        if node is None or (isinstance(node, yaml.ScalarNode) and node.value in ("", "~")):
            self.set(path, [value])
            return
        if not isinstance(node, yaml.SequenceNode):
            raise ConfigurationError(
                f"cannot add to {'.'.join(map(str, path))}: it is not a list", file=self.source
            )
        flow = self._flow_root(path)
        if flow is not None:
            self._flow_change((*path, len(node.value)), flow, lambda p, k: p.append(value))
            return
        if not node.value:  # pragma: no cover - an empty block list is written as []
            self.set(path, [value])
            return
        last = node.value[-1]
        dash = self._dash_column(last)
        at = self._line_end(self._content_end(last))
        text = _indent(render_item(value), dash)
        self._edits.append(
            _Edit(at, at, _newline_before(self.original, at) + text + "\n", -len(path) - 1)
        )

    def comment(self, path: Path, lines: Sequence[str]) -> None:
        """Put ``# line`` comment lines just above the entry or list item at ``path`` (none
        inside a flow collection, where a comment line cannot stand)."""
        if not lines or self._flow_root(path) is not None:
            return
        nodes = self._walk(path)
        parent, node = nodes[-2], nodes[-1]
        if node is None:
            raise ConfigurationError(f"nothing at {'.'.join(map(str, path))} to comment")
        if isinstance(parent, yaml.MappingNode):
            knode, _ = self._key_node(parent, path[-1])
            index = self._index(knode.start_mark)
            column = knode.start_mark.column
        else:
            index = self._index(node.start_mark)
            column = self._dash_column(node)
        start = self._line_start(index)
        text = "".join(" " * column + ("# " + line).rstrip() + "\n" for line in lines)
        self._edits.append(_Edit(start, start, text, -len(path)))

    def top_comment(self, lines: Sequence[str]) -> None:
        """Comment lines at the very start of the text."""
        self._edits.append(
            _Edit(0, 0, "".join(("# " + x).rstrip() + "\n" for x in lines), -(10**6))
        )

    # -- helpers --------------------------------------------------------------------------
    def _dash_column(self, item: yaml.Node) -> int:
        """The column of the ``-`` that starts a block list item."""
        index = self._index(item.start_mark)
        line_start = self._line_start(index)
        dash = self.original.rfind("-", line_start, index + 1)
        return (dash - line_start) if dash >= 0 else item.start_mark.column

    def _replace_entry(self, parent: yaml.MappingNode, key: str, value: Any) -> None:
        knode, vnode = self._key_node(parent, key)
        kstart = self._index(knode.start_mark)
        line_start = self._line_start(kstart)
        first = not self.original[line_start:kstart].strip(" ")
        start = line_start if first else kstart
        column = knode.start_mark.column
        text = _indent(render_entry(key, value), column)
        text = text if first else text[column:]
        self._edits.append(_Edit(start, self._content_end(vnode), text))

    def _replace_item(self, item: yaml.Node, value: Any) -> None:
        start = self._line_start(self._index(item.start_mark))
        text = _indent(render_item(value), self._dash_column(item))
        self._edits.append(_Edit(start, self._content_end(item), text))

    def _insert_entry(self, parent: yaml.MappingNode, key: str, value: Any, depth: int) -> None:
        if not parent.value:  # pragma: no cover - an empty block mapping is written as {}
            raise ConfigurationError("cannot insert into an empty block mapping", file=self.source)
        first_key = parent.value[0][0]
        column = first_key.start_mark.column
        at = self._line_end(self._content_end(parent.value[-1][1]))
        text = _indent(render_entry(key, value), column)
        self._edits.append(_Edit(at, at, _newline_before(self.original, at) + text + "\n", -depth))

    def _flow_change(
        self, path: Path, flow: tuple[int, yaml.Node], change: Callable[[Any, Any], None]
    ) -> None:
        depth, node = flow
        if id(node) not in self._flow:
            self._flow[id(node)] = (node, copy.deepcopy(plain(node)), path[:depth])
        value = self._flow[id(node)][1]
        parent = value
        for step in path[depth:-1]:
            parent = parent.setdefault(step, {}) if isinstance(parent, dict) else parent[step]
        change(parent, path[-1])

    def text(self) -> str:
        """The edited text."""
        done = len(self._edits)
        for node, value, at in self._flow.values():
            # a changed flow collection is written again as its block parent writes values:
            # inline while it holds plain values, in block style once it nests collections
            parent = self.node(at[:-1]) if at else None
            if isinstance(parent, yaml.MappingNode) and not parent.flow_style:
                self._replace_entry(parent, at[-1], value)
            elif isinstance(parent, yaml.SequenceNode) and not parent.flow_style:
                self._replace_item(node, value)
            else:
                rendered = dump(value, flow=True, width=10**9).strip()
                self._edits.append(
                    _Edit(self._index(node.start_mark), self._index(node.end_mark), rendered)
                )
        edits = list(self._edits)
        del self._edits[done:]
        edits.sort(key=lambda e: (e.start, e.end, e.order))
        for a, b in itertools.pairwise(edits):
            if b.start < a.end:
                raise AssertionError(f"overlapping YAML edits at {a.start}-{a.end} and {b.start}")
        out = self.original
        for e in reversed(edits):
            out = out[: e.start] + e.text + out[e.end :]
        return out


def _equal(old: Any, new: Any) -> bool:
    return bool(old == new)


def _assign(parent: Any, key: Any, value: Any) -> None:
    if isinstance(parent, list) and key == len(parent):
        parent.append(value)
    else:
        parent[key] = value


def _remove(parent: Any, key: Any) -> None:
    del parent[key]


def _newline_before(text: str, at: int) -> str:
    """A newline to add before inserted lines when the text does not end with one there."""
    return "" if at == 0 or text[at - 1] == "\n" else "\n"
