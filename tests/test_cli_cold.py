"""The one-shot CLI's cold path: a lexical search, `get` and `status` import only what they need.

Each check runs the real CLI in a fresh Python process and reads that process's sys.modules, so a new top-level
`import numpy` (or onnxruntime, pygls, rich ...) on the path fails here instead of silently adding ~100 ms to
every agent's `saipling search`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import saipling_project
from saipling.embeddings import local_available

HEAVY = (
    "numpy",
    "onnxruntime",
    "tokenizers",
    "pygls",
    "lsprotocol",
    "rich",
    "httpx",
    "sqlite_vec",
    "watchdog",
    "mcp",
)
# the request schemas and the front-matter parser: a search's options are checked by click and
# retrieval.search.cli_request, get's by click and cli.main._parse_location (status still builds its provider)
SCHEMAS = ("pydantic", "frontmatter", "yaml")
# what a read that embeds nothing no longer pays (by module name, dotted names included): the local provider
# (only to learn that it is installed), the TOML parser (no config.toml), OpenSSL's hashes and the decoder (a
# search of an unchanged project reads no file; it does scan the folders for changes, so the scanner is loaded)
COLD = (
    "saipling.embeddings.local",
    "concurrent.futures",
    "tomllib",
    "hashlib",
    "_hashlib",
    "saipling.files.textio",
    "saipling.indexing.indexer",
)

PROBE = """
import json, sys
from saipling.cli.main import main
try:
    main(sys.argv[1:], prog_name="saipling")
except SystemExit as exc:
    code = exc.code
else:
    code = 0
want = set(json.loads(sys.stdin.readline()))
loaded = sorted(w for w in want if any(m == w or m.startswith(w + ".") for m in sys.modules))
print(json.dumps({"exit": code, "loaded": loaded}), file=sys.stderr)
"""


def _env(provider: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"VOYAGE_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL"}}
    env["SAIPLING_PROVIDER"] = provider
    env.pop("SAIPLING_LOG_LEVEL", None)
    return env


def heavy_modules(root: Path, *args: str, provider: str = "local", heavy: tuple[str, ...] = HEAVY) -> list[str]:
    """Run `saipling ARGS` in a new process; those of the `heavy` modules (or packages) it imported."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        input=json.dumps(heavy) + "\n",
        capture_output=True,
        text=True,
        cwd=root,
        env=_env(provider),
        timeout=120,
    )
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    assert report["exit"] == 0, proc.stderr
    return report["loaded"]


needs_local = pytest.mark.skipif(not local_available(), reason="the local model extra is not installed")


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project indexed with the local model: vectors in the index, a provider that could embed a query."""
    root = saipling_project(tmp_path_factory.mktemp("cold"))
    proc = subprocess.run(
        [sys.executable, "-m", "saipling", "index", str(root), "--json"],
        capture_output=True,
        text=True,
        env=_env("local"),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["embedded"] > 0
    return root


@needs_local
def test_lexical_search_imports_no_numpy_model_or_server(indexed: Path) -> None:
    assert heavy_modules(indexed, "search", "harbor", "--mode", "lexical", "--json", heavy=HEAVY + SCHEMAS + COLD) == []


@needs_local
def test_get_and_status_import_no_numpy_model_or_server(indexed: Path) -> None:
    first = sorted(p for p in indexed.rglob("*.md") if ".saipling" not in p.parts)[0]
    assert heavy_modules(indexed, "get", f"{first.relative_to(indexed).as_posix()}:1-3", "--json") == []
    assert heavy_modules(indexed, "status", "--json") == []


@needs_local
def test_get_of_a_file_without_frontmatter_imports_no_schemas_yaml_or_provider(indexed: Path) -> None:
    """`saipling get` checks its location with click (no pydantic: ~45 ms) and reads YAML only when the file
    has frontmatter; it embeds nothing, so the local provider is not even looked for."""
    plain = "notes/plain.md"
    (indexed / plain).write_text("# Plain\n\nNo frontmatter here.\nline four\n", encoding="utf-8")
    heavy = HEAVY + SCHEMAS + ("saipling.embeddings.local", "tomllib", "hashlib")
    assert heavy_modules(indexed, "get", f"{plain}:2-3", "--json", heavy=heavy) == []
    got = json.loads(_cli(indexed, "get", f"{plain}:3-4", "--json").stdout)
    assert (got["startLine"], got["endLine"], got["text"]) == (3, 4, "No frontmatter here.\nline four")


@needs_local
def test_get_still_hides_a_file_its_frontmatter_makes_private(indexed: Path) -> None:
    """The YAML parser is skipped only without frontmatter: a `visibility` in it is still read and obeyed."""
    secret = "notes/secret.md"
    (indexed / secret).write_text("---\nvisibility: private\n---\n# Secret\n\nHidden.\n", encoding="utf-8")
    proc = _cli(indexed, "get", secret, "--json", check=False)
    assert proc.returncode == 2 and "is not visible" in proc.stderr
    tagged = "notes/tagged.md"
    (indexed / tagged).write_text("---\ntitle: Tagged\n---\n# Tagged\n\nShown.\n", encoding="utf-8")
    assert heavy_modules(indexed, "get", f"{tagged}:5", "--json", heavy=("yaml",)) == ["yaml"]


def _cli(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "saipling", *args],
        capture_output=True,
        text=True,
        cwd=root,
        env=_env("none"),
        timeout=120,
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def _search_log_rows(root: Path) -> int:
    import apsw

    conn = apsw.Connection(str(root / ".saipling" / "search-log.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return int(next(iter(conn.execute("SELECT count(*) FROM search_log")))[0])
    finally:
        conn.close()


def test_a_search_writes_nothing_to_the_index_and_leaves_its_log_row_in_the_logs_wal(tmp_path: Path) -> None:
    """A search logs its row in `.saipling/search-log.db`, not in index.db (whose readers would empty their page
    caches after each search: storage/sqlite/search_log.py); a one-shot read closes without a WAL checkpoint (no
    copy and no fsync at exit): the row stays in the log's WAL, where every later reader sees it."""
    root = saipling_project(tmp_path)
    _cli(root, "index", "--json")
    wal = root / ".saipling" / "index.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0  # the indexing run checkpointed at exit
    db_before = (root / ".saipling" / "index.db").read_bytes()
    for _ in range(3):
        assert json.loads(_cli(root, "search", "harbor", "--mode", "lexical", "--json").stdout)["results"]
    assert not wal.exists() or wal.stat().st_size == 0  # nothing written to the index
    assert (root / ".saipling" / "index.db").read_bytes() == db_before
    log_wal = root / ".saipling" / "search-log.db-wal"
    assert log_wal.is_file() and log_wal.stat().st_size > 0  # the log rows are in the log's WAL
    assert _search_log_rows(root) == 3
    status = json.loads(_cli(root, "status", "--json").stdout)
    assert status["totalFiles"] > 0
    _cli(root, "index", "--json")
    assert _search_log_rows(root) == 3


@needs_local
def test_hybrid_search_does_load_the_model(indexed: Path) -> None:
    """The check above can fail: a mode that embeds the query does import numpy and onnxruntime."""
    loaded = heavy_modules(indexed, "search", "harbor", "--json")
    assert "numpy" in loaded and "onnxruntime" in loaded


def test_keyword_only_project_search_imports_nothing_heavy(tmp_path: Path) -> None:
    root = saipling_project(tmp_path)
    subprocess.run(
        [sys.executable, "-m", "saipling", "index", str(root), "--json"],
        capture_output=True,
        text=True,
        env=_env("none"),
        timeout=120,
        check=True,
    )
    assert heavy_modules(root, "search", "harbor", "--json", provider="none", heavy=HEAVY + SCHEMAS) == []


def test_status_reads_the_indexer_pending_key() -> None:
    from saipling import status
    from saipling.indexing import indexer

    assert status.PENDING_META == indexer.PENDING_META


@needs_local
def test_a_lexical_search_rereads_a_changed_file_with_the_models_chunk_limits(tmp_path: Path) -> None:
    """A one-shot lexical search builds no provider, but a file changed since it was indexed is read again
    (lazy sync) and must be chunked as `index` would: the model's passage length and tokenizer, not the
    keyword-only estimate (found: 12 chunks of <= 96 word pieces became 4 of up to 482, over the model's window,
    and a later `index` embedded them truncated)."""
    from fixtures import open_project

    root = tmp_path / "p"
    root.mkdir()
    note = root / "note.md"
    note.write_text(
        "# Note\n\n"
        + "".join(
            f"Paragraph {i}: the amber lantern swung over the harbour wall, "
            f"and the keeper counted {i} ships before dawn.\n\n"
            for i in range(40)
        ),
        encoding="utf-8",
    )
    env = _env("local")
    run = [sys.executable, "-m", "saipling"]
    assert subprocess.run([*run, "index", str(root)], env=env, capture_output=True, timeout=300).returncode == 0
    with note.open("a", encoding="utf-8") as f:
        f.write("A late line about the amber lantern.\n")
    proc = subprocess.run(
        [*run, "search", "amber", "--mode", "lexical", "--json", "--root", str(root)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    with open_project(root, "local") as p:
        limit = p.indexer.limits().max_tokens
        stored = p.store.chunks_for_path("note.md")
        assert any("A late line" in c.text for c in stored)  # the search did read the change
        assert max(c.token_count for c in stored) <= limit + 8  # (+ the heading path it carries)
        assert len(stored) > 4
        # exactly what a full index of the same text makes
        p.index(full=True)
        assert [c.text for c in p.store.chunks_for_path("note.md")] == [c.text for c in stored]
