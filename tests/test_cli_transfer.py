"""`saipling export` / `saipling import` on the default SQLite store, through the real CLI in a subprocess: a file
that is not an export (a text file, gzip'd JSON of another shape, a real export cut short, one damaged) is refused
with exit 2 and a message naming the problem, before anything is written; an export to a folder that does not
exist says so of that folder (not of the temporary file written beside OUT)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import need_local_model, saipling_project

SAIPLING = [sys.executable, "-m", "saipling"]


def cli(*args: str, provider: str = "local") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAIPLING_")} | {"SAIPLING_PROVIDER": provider}
    return subprocess.run([*SAIPLING, *args], env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real export of a small indexed project (the bundled local model's vectors)."""
    need_local_model()
    root = saipling_project(tmp_path_factory.mktemp("source"))
    done = cli("index", str(root), "--json")
    assert done.returncode == 0, done.stderr
    out = root.parent / "vectors.jsonl.gz"
    done = cli("export", str(out), "--root", str(root), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["vectors"] > 0
    return out


def _bad_file(kind: str, folder: Path, export: Path) -> tuple[Path, str]:
    """A file of `kind` that is not a usable export, and what the refusal must say."""
    if kind == "text":
        path = folder / "notes.txt"
        path.write_text("hello, not an export\n")
        return path, "is not a saipling vector export"
    if kind == "other-json":
        path = folder / "x.jsonl.gz"
        path.write_bytes(gzip.compress(b'{"a":1}\n'))
        return path, "is not a saipling vector export"
    if kind == "cut-short":
        path = folder / "cut.jsonl.gz"
        data = export.read_bytes()
        path.write_bytes(data[: len(data) // 2])
        return path, "is cut short"
    if kind == "damaged-line":
        path = folder / "damaged.jsonl.gz"
        lines = gzip.decompress(export.read_bytes()).decode().splitlines(keepends=True)
        path.write_bytes(gzip.compress("".join([*lines[:2], '{"h": "x", "v": "not base64!"}\n']).encode()))
        return path, "is damaged: line 3 is not a vector"
    if kind == "deep-header":  # JSON nested past the parser's recursion: a traceback before
        path = folder / "deep.jsonl.gz"
        path.write_bytes(gzip.compress(b"[" * 200_000 + b"\n"))
        return path, "is not a saipling vector export"
    if kind == "deep-line":
        path = folder / "deep-line.jsonl.gz"
        lines = gzip.decompress(export.read_bytes()).decode().splitlines(keepends=True)
        path.write_bytes(gzip.compress("".join([*lines[:2], "[" * 200_000 + "\n"]).encode()))
        return path, "is damaged: line 3 is not a vector"
    if kind == "huge-header":  # one line inflating to megabytes was read whole (a bomb: gigabytes of memory)
        path = folder / "huge.jsonl.gz"
        path.write_bytes(gzip.compress(b'{"format": "' + b"x" * 3_000_000 + b'"}\n'))
        return path, "is not a saipling vector export"
    if kind == "huge-line":
        path = folder / "huge-line.jsonl.gz"
        lines = gzip.decompress(export.read_bytes()).decode().splitlines(keepends=True)
        path.write_bytes(gzip.compress("".join([*lines[:2], '{"h": "x", "v": "' + "A" * 3_000_000 + '"}\n']).encode()))
        return path, "is damaged: line 3 is longer than any vector's"
    raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind", ["text", "other-json", "cut-short", "damaged-line", "deep-header", "deep-line", "huge-header", "huge-line"]
)
def test_import_refuses_a_file_that_is_not_an_export_and_writes_nothing(
    tmp_path: Path, export: Path, kind: str
) -> None:
    root = saipling_project(tmp_path)  # never indexed: no .saipling/ yet
    bad, says = _bad_file(kind, tmp_path, export)
    done = cli("import", str(bad), "--root", str(root))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert done.stderr.startswith(f"error: SRC: {bad} {says}") and done.stderr.count("\n") == 1
    assert not (root / ".saipling").exists()  # nothing written, not even the index folder


def test_import_of_a_real_export_reuses_its_vectors(tmp_path: Path, export: Path) -> None:
    root = saipling_project(tmp_path)
    done = cli("import", str(export), "--root", str(root), "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["embedded"] == 0 and summary["reused"] == summary["chunks"] > 0


def test_export_to_a_folder_that_does_not_exist_says_so(tmp_path: Path, export: Path) -> None:
    root = export.parent / "novel"  # the indexed project of the fixture
    missing = tmp_path / "no" / "such" / "dir"
    done = cli("export", str(missing / "x.gz"), "--root", str(root))
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"error: OUT: cannot write {missing / 'x.gz'}: the folder {missing} does not exist\n"
    assert ".saipling-export-" not in done.stderr and not missing.exists()
    a_file = tmp_path / "file.md"
    a_file.write_text("# x\n")
    done = cli("export", str(a_file / "x.gz"), "--root", str(root))
    assert done.returncode == 2 and f"the folder {a_file} is not a folder" in done.stderr
    assert list(tmp_path.iterdir()) == [a_file]  # no temporary file left anywhere


def test_export_never_writes_over_the_users_files_nor_the_index(tmp_path: Path, export: Path) -> None:
    """The attacker's repro: `saipling export chapter1.md` replaced the chapter with gzip data (exit 0), and
    `export .saipling/index.db` the live index. Refused with exit 2, nothing written; an export is replaced."""
    root = export.parent / "novel"  # the indexed project of the fixture
    chapter = next(root.rglob("*.md"))
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes, not an export\n")
    link = tmp_path / "link.gz"
    link.symlink_to(notes)
    db = root / ".saipling" / "index.db"
    keep = {p: p.read_bytes() for p in [chapter, notes, db]}
    before = sorted(p.name for p in [*root.rglob("*"), *tmp_path.iterdir()])
    cases = [
        (chapter, "it is a file of the project (one it indexes)"),
        (db, "it is inside the project's index folder"),
        (root / ".saipling" / "new.gz", "it is inside the project's index folder"),
        (tmp_path / "new-chapter.md", "it is a markdown file"),
        (notes, "it exists and is not a saipling vector export (only an export is replaced)"),
        (link, "it is a symbolic link"),
    ]
    for out, says in cases:
        done = cli("export", str(out), "--root", str(root))
        assert done.returncode == 2, (out, done.stderr)
        assert done.stderr.startswith(f"error: OUT: will not write {out}: {says}"), done.stderr
        assert done.stderr.endswith("; name another file\n") and done.stderr.count("\n") == 1
        assert "Traceback" not in done.stderr and done.stdout == ""
    relative = subprocess.run(  # (as the repro typed it: a name in the project folder)
        [*SAIPLING, "export", os.path.relpath(chapter, root)],
        cwd=root,
        env={k: v for k, v in os.environ.items() if not k.startswith("SAIPLING_")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert relative.returncode == 2 and "it is a file of the project" in relative.stderr
    assert {p: p.read_bytes() for p in keep} == keep
    assert sorted(p.name for p in [*root.rglob("*"), *tmp_path.iterdir()]) == before
    again = tmp_path / "again.jsonl.gz"  # an export (here a stale one: its header alone) is replaced
    again.write_bytes(gzip.compress(gzip.decompress(export.read_bytes()).split(b"\n", 1)[0] + b"\n"))
    done = cli("export", str(again), "--root", str(root), "--json")
    assert done.returncode == 0, done.stderr
    vectors = json.loads(done.stdout)["vectors"]
    assert vectors > 0 and gzip.decompress(again.read_bytes()).count(b"\n") == 1 + vectors


def test_import_counts_what_it_imported_and_says_what_it_dropped(tmp_path: Path, export: Path) -> None:
    """An export holding NaN, infinite and all-zero vectors: `imported N vectors` counted them, though the store
    keeps none of them. The message counts what the store holds, and says how many were dropped and why."""
    import base64

    import numpy as np

    lines = gzip.decompress(export.read_bytes()).decode().splitlines(keepends=True)
    header = json.loads(lines[0])
    good = len(lines) - 1
    dims = int(header["dimensions"])

    def row(h: str, values: np.ndarray) -> str:
        return json.dumps({"h": h, "v": base64.b64encode(values.astype("<f4").tobytes()).decode()}) + "\n"

    nan, inf = np.ones(dims), np.ones(dims)
    nan[3], inf[5] = np.nan, np.inf
    bad = [row("a" * 64, nan), row("b" * 64, inf), row("c" * 64, np.zeros(dims))]
    poisoned = tmp_path / "poisoned.jsonl.gz"
    poisoned.write_bytes(gzip.compress("".join([*lines, *bad]).encode()))
    done = cli("import", str(poisoned), "--root", str(saipling_project(tmp_path / "a")))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        f"imported {good:,} vectors; 3 dropped (2 not finite (NaN or infinite values), 1 all zero: their chunks are "
        "embedded by `saipling index`); indexed "
    ), done.stdout
    done = cli("import", str(poisoned), "--root", str(saipling_project(tmp_path / "b")), "--json")
    summary = json.loads(done.stdout)
    assert summary["vectors"] == good and summary["dropped"] == 3
    assert summary["droppedReasons"] == {"not finite (NaN or infinite values)": 2, "all zero": 1}
    done = cli("import", str(export), "--root", str(saipling_project(tmp_path / "c")))
    assert done.stdout.startswith(f"imported {good:,} vectors; indexed "), done.stdout  # (none dropped: as before)
