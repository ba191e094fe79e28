"""The import structure of the package (docs/jobs.md, Layers), beyond the layer contract that
``lint-imports`` checks: no import cycle at all, no module importing the package root, no
user-API type named by the runtime or the kinds, and every function-local import explained."""

from __future__ import annotations

import ast
import subprocess
import sys

import grimp

from paths import ROOT

SRC = ROOT / "src" / "launchers"

#: Cycles tolerated while a change of issue 17 is under way (none left).
KNOWN_CYCLES: list[set[str]] = []

#: Files whose function-local imports may lack the ``# lazy:`` comment while such a change is
#: under way (none left).
UNMARKED_ALLOWED: set[str] = set()

#: The runtime and the kinds (layers 3 and 4) use ``protocols.JobHandle``, never these.
USER_API = (
    "launchers.jobs.attach",
    "launchers.jobs.job",
    "launchers.jobs.experiment",
    "launchers.services",
)
RUNTIME_AND_KINDS = (
    "launchers.runtime",
    "launchers.connectors",
    "launchers.slurm.executor",
    "launchers.slurm.kind",
    "launchers.slurm.cluster",
    "launchers.slurm.files",
    "launchers.slurm.submit",
    "launchers.slurm.reconcile",
    "launchers.slurm.arrays",
    "launchers.slurm.track",
    "launchers.slurm.query",
    "launchers.local.executor",
    "launchers.local.processes",
    "launchers.local.files",
    "launchers.local.tokens",
    "launchers.remote.retry",
    "launchers.remote.storage",
    "launchers.remote.outputs",
    "launchers.remote.site_executor",
    "launchers.remote.unicore_executor",
    "launchers.remote.firecrest_executor",
    "launchers.remote.firecrest_staging",
    "launchers.remote.firecrest_v1",
    "launchers.remote.firecrest_kind",
    "launchers.remote.ssh_kind",
    "launchers.remote.ssh_executor",
    "launchers.batch.executor",
    "launchers.batch.pilots",
    "launchers.batch.queue",
    "launchers.batch.remote",
    "launchers.batch.rest",
)

#: Modules of pure decisions (the "decisions are pure" contract of pyproject.toml). Beyond what
#: the contract checks, they import none of the standard library's I/O modules, read no clock
#: and call no ``open``.
DECISIONS = (
    "jobs/update.py",
    "local/decide.py",
    "local/settings.py",
    "remote/decide.py",
    "batch/decide.py",
    "slurm/decide.py",
    "slurm/settings.py",
    "slurm/commands.py",
)
STDLIB_IO = {"asyncio", "fcntl", "os", "shutil", "socket", "subprocess", "threading", "time"}


def _graph(*, type_checking: bool) -> grimp.ImportGraph:
    return grimp.build_graph(
        "launchers", exclude_type_checking_imports=not type_checking, cache_dir=None
    )


def _cycles(graph: grimp.ImportGraph) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            targets = [t for t in edges[node] if t in edges]
            if i < len(targets):
                work.append((node, i + 1))
                target = targets[i]
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def test_the_cycle_finder_finds_cycles() -> None:
    class Fake:
        modules = frozenset({"a", "b", "c", "d"})

        @staticmethod
        def find_modules_directly_imported_by(m: str) -> set[str]:
            return {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}[m]

    assert _cycles(Fake()) == [{"a", "b", "c"}]  # type: ignore[arg-type]


def test_no_import_cycle() -> None:
    """Every import that runs (function-local ones included) goes one way."""
    cycles = [c for c in _cycles(_graph(type_checking=False)) if c not in KNOWN_CYCLES]
    assert cycles == []


def test_nothing_imports_the_package_root() -> None:
    """The root only re-exports public names; its modules name ``launchers._version`` etc."""
    graph = _graph(type_checking=True)
    assert graph.find_modules_that_directly_import("launchers") == set()


def test_runtime_and_kinds_name_no_user_api_type() -> None:
    """Executors and the tracker are typed with ``protocols.JobHandle``, even in annotations."""
    graph = _graph(type_checking=True)
    bad = sorted(
        (m, i)
        for m in graph.modules
        if m.startswith(RUNTIME_AND_KINDS)
        for i in graph.find_modules_directly_imported_by(m)
        if i.startswith(USER_API)
    )
    assert bad == []


def _local_imports(tree: ast.Module) -> list[ast.stmt]:
    """The first statement of each run of consecutive imports inside a function."""
    firsts: list[ast.stmt] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for _, value in ast.iter_fields(node):
            if isinstance(value, list):
                previous_import = False
                for stmt in value:
                    if not isinstance(stmt, ast.AST):
                        continue
                    is_import = isinstance(stmt, (ast.Import, ast.ImportFrom))
                    if is_import and in_function and not previous_import:
                        firsts.append(stmt)  # type: ignore[arg-type]
                    previous_import = is_import
                    visit(
                        stmt,
                        in_function or isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)),
                    )
            elif isinstance(value, ast.AST):
                visit(value, in_function)

    visit(tree, False)
    return firsts


def test_every_function_local_import_says_why_it_is_lazy() -> None:
    """A function-local import is kept only for start-up time or a heavy optional library,
    with a ``# lazy: why`` comment above it; one that dodged a cycle or pointed up
    went to the top (or was inverted through ``launchers.hooks``)."""
    unmarked = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel in UNMARKED_ALLOWED:
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        for stmt in _local_imports(ast.parse("\n".join(lines))):
            above = stmt.lineno - 2  # the comment may run over several lines
            while (
                above > 0 and lines[above].strip().startswith("#") and "# lazy:" not in lines[above]
            ):
                above -= 1
            if not lines[above].strip().startswith("# lazy:"):
                unmarked.append(f"{rel}:{stmt.lineno}")
    assert unmarked == []


def test_importing_the_package_stays_cheap() -> None:
    """``import launchers`` loads the errors and the requirement values, nothing of the runtime,
    the configuration or the remote clients (the other public names load on first use)."""
    code = "import sys, launchers; print(' '.join(sorted(sys.modules)))"
    loaded = set(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.split()
    )
    ours = {m for m in loaded if m.startswith("launchers")}
    assert ours == {
        "launchers",
        "launchers._version",
        "launchers.errors",
        "launchers.language",
        "launchers.language.values",
        "launchers.units",
    }
    assert not loaded & {"yaml", "lark", "asyncssh", "pyunicore", "firecrest", "httpx", "requests"}


def test_decisions_do_no_io() -> None:
    """A decision imports no module that runs or waits, reads no clock and opens no file."""
    found = []
    for rel in DECISIONS:
        for node in ast.walk(ast.parse((SRC / rel).read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "open":
                names = ["open()"]
            else:
                continue
            found += [f"{rel}:{node.lineno} {n}" for n in names if n.split(".")[0] in STDLIB_IO]
            found += [f"{rel}:{node.lineno} open()" for n in names if n == "open()"]
    assert found == []
