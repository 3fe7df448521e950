"""Moving an index between backends (SQLite file, PostgreSQL workspace) without re-embedding: `saipling export`
writes the vectors of the index's chunks (by model and content hash, as the embedding cache keys them) to one
portable file; `saipling import` puts them in the destination's embedding cache and indexes the project there,
so every chunk whose text is unchanged takes its vector from the cache (no provider call). The text side
(chunks, keywords, mentions) is rebuilt from the files, which is cheap and always matches this saipling.

The file: gzip'd JSON lines, a header `{"format": "saipling-vectors", "version": 1, "model", "dimensions",
"provider", "count"}` then one `{"h": content hash, "v": base64 of little-endian float32}` per vector.
Only interface methods of the store are used (storage/base.py), so any backend can be either end."""

from __future__ import annotations

import base64
import gzip
import json
import os
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InvalidRequest, SaiplingError
from ..lazy import np

FORMAT = "saipling-vectors"
VERSION = 1
BATCH = 1000
GZIP_MAGIC = b"\x1f\x8b"


def _cache_key(model: str, dims: int) -> str:
    return f"{model}@{int(dims)}" if dims else model  # (storage.base.cache_key)


MARKDOWN_SUFFIXES = (".md", ".markdown", ".mdown", ".mkd", ".mdx")


def is_export(path: Path) -> bool:
    """Whether `path` starts as `saipling export` writes: gzip, and a first line that is the export header (only
    that line is read)."""
    try:
        with open(path, "rb") as raw:
            if raw.read(2) != GZIP_MAGIC:
                return False
            raw.seek(0)
            with gzip.open(raw, "rt", encoding="utf-8") as f:
                first = f.readline(MAX_LINE_CHARS + 1)
        header = json.loads(first) if len(first) <= MAX_LINE_CHARS else None
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(header, dict) and header.get("format") == FORMAT


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def check_export_target(out: Path, root: Path | None = None, settings: Any = None) -> None:
    """InvalidRequest (a usage error: exit 2) when `out` may not be written by `saipling export`: saipling never
    writes over a file of the user's. Refused: a folder that does not exist or is not one; anything inside the
    project's index folder (`.saipling/`: the live index); a markdown file, or a file the project indexes (its
    `include`, when `settings` are given); an existing file that is not an export (said as such: it is replaced
    only when it is one), a link, or anything but a regular file."""
    from ..config.settings import INDEX_DIR

    out = Path(out)
    folder = out.parent
    if not folder.is_dir():
        problem = "is not a folder" if folder.exists() else "does not exist"
        raise InvalidRequest("OUT", f"cannot write {out}: the folder {folder} {problem}")

    def refuse(problem: str) -> InvalidRequest:
        return InvalidRequest("OUT", f"will not write {out}: {problem}; name another file")

    real = os.path.join(os.path.realpath(folder), out.name)
    targets = {real, os.path.realpath(out)}  # (a link's own place and the file it names)
    if root is not None:
        root_real = os.path.realpath(root)
        index_dir = os.path.join(root_real, INDEX_DIR)
        if any(_inside(t, index_dir) for t in targets):
            raise refuse(f"it is inside the project's index folder {Path(root) / INDEX_DIR}")
        if settings is not None:
            from ..files.scanner import is_indexable

            for t in targets:
                if _inside(t, root_real) and t != root_real:
                    rel = os.path.relpath(t, root_real).replace(os.sep, "/")
                    if is_indexable(Path(root_real), rel, settings) is None:
                        raise refuse("it is a file of the project (one it indexes)")
    if out.name.lower().endswith(MARKDOWN_SUFFIXES):
        raise refuse("it is a markdown file")
    if out.is_symlink():
        raise refuse("it is a symbolic link")
    if out.exists():
        if not out.is_file():
            raise refuse("it exists and is not a regular file")
        if not is_export(out):
            raise refuse("it exists and is not a saipling vector export (only an export is replaced)")


def export_vectors(store: Any, out: Path, root: Path | None = None, settings: Any = None) -> dict[str, Any]:
    """Write the vectors of every chunk of `store` to `out` (replaced atomically). Returns what was written.
    InvalidRequest when `out` may not be written (check_export_target: a missing folder, said of that folder,
    never of the temporary file written beside `out` first; the project's index folder, one of its files, an
    existing file that is not an export); nothing is written then."""
    out = Path(out)
    folder = out.parent
    check_export_target(out, root, settings)
    model, dims = store.vector_model()
    if not model or not dims:
        raise SaiplingError("nothing to export: this index holds no vectors (index it with a provider first)")
    hashes = sorted({h for _p, h, _t in store.chunk_hashes() if h})
    try:
        fd, tmp = tempfile.mkstemp(prefix=".saipling-export-", dir=folder)
    except OSError as exc:  # (a folder the user may not write in, a read-only disk)
        raise SaiplingError(f"cannot write {out} in the folder {folder}: {exc.strerror or exc}") from None
    written = 0
    try:
        with os.fdopen(fd, "wb") as raw, gzip.open(raw, "wt", encoding="utf-8") as f:
            header = {"format": FORMAT, "version": VERSION, "model": model, "dimensions": dims}
            header |= {"provider": store.get_meta("provider"), "count": len(hashes)}
            f.write(json.dumps(header) + "\n")
            for i in range(0, len(hashes), BATCH):
                found = store.cached_vectors(model, hashes[i : i + BATCH], dims)
                for h in hashes[i : i + BATCH]:
                    vec = found.get(h)
                    if vec is None:
                        continue
                    data = base64.b64encode(np.asarray(vec, dtype="<f4").tobytes()).decode("ascii")
                    f.write(json.dumps({"h": h, "v": data}) + "\n")
                    written += 1
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return {"model": model, "dimensions": dims, "vectors": written, "chunks": len(hashes), "file": str(out)}


@dataclass
class VectorExport:
    """The vectors of an export file, read and checked whole (`read_export`) before any store is touched."""

    model: str
    dimensions: int
    vectors: list[tuple[str, Any]]  # (content hash, float32 vector)


MAX_LINE_CHARS = 1 << 20  # a line of an export: a vector of 8,192 float32 in base64 is ~44,000 characters


def read_export(src: Path) -> VectorExport:
    """Read an export file whole; InvalidRequest (a usage error: exit 2) naming the problem for a file that is not
    one (not gzip, or not the header `saipling export` writes), one of another version, or one damaged or cut
    short. Nothing is written before the whole file has been read."""

    def refuse(problem: str) -> InvalidRequest:
        return InvalidRequest("SRC", f"{src} {problem}")

    not_export = "is not a saipling vector export (`saipling export` writes one)"
    try:
        with open(src, "rb") as raw:
            if raw.read(2) != GZIP_MAGIC:  # (a text file, a database, ...: said as such, not as a damaged export)
                raise refuse(f"{not_export}: it is not gzip-compressed")
            raw.seek(0)
            with gzip.open(raw, "rt", encoding="utf-8") as f:
                first = f.readline(MAX_LINE_CHARS + 1)
                if len(first) > MAX_LINE_CHARS:  # (a line inflating to gigabytes was read whole: memory)
                    raise refuse(not_export)
                try:
                    header = json.loads(first or "{}")
                except (ValueError, RecursionError):
                    header = None
                if not isinstance(header, dict) or header.get("format") != FORMAT:
                    raise refuse(not_export)
                if header.get("version") != VERSION:
                    raise refuse(f"is export version {header.get('version')}; this saipling reads {VERSION}")
                try:
                    model, dims = str(header["model"]), int(header["dimensions"])
                except (KeyError, TypeError, ValueError):
                    raise refuse("is damaged: its header has no model or dimensions") from None
                items: list[tuple[str, Any]] = []
                n = 1
                while line := f.readline(MAX_LINE_CHARS + 1):
                    n += 1
                    if len(line) > MAX_LINE_CHARS:
                        raise refuse(f"is damaged: line {n} is longer than any vector's ({MAX_LINE_CHARS:,} chars)")
                    try:
                        row = json.loads(line)
                        data = base64.b64decode(row["v"], validate=True)
                        vec = np.frombuffer(data, dtype="<f4").astype(np.float32)
                        h = str(row["h"])
                    except (ValueError, KeyError, TypeError, RecursionError):
                        raise refuse(f"is damaged: line {n} is not a vector") from None
                    if vec.shape[0] != dims:
                        raise refuse(f"is damaged: line {n} holds a vector of {vec.shape[0]} dimensions, not {dims}")
                    items.append((h, vec))
    except EOFError:
        raise refuse("is cut short (its compressed data ends early): export it again") from None
    except (gzip.BadGzipFile, zlib.error, UnicodeDecodeError) as exc:
        raise refuse(f"is damaged ({exc})") from None
    except OSError as exc:
        raise refuse(f"cannot be read ({exc.strerror or exc})") from None
    return VectorExport(model, dims, items)


NOT_FINITE, ALL_ZERO, NOT_STORED = "not finite (NaN or infinite values)", "all zero", "not storable by this index"


def store_vectors(store: Any, export: VectorExport) -> dict[str, Any]:
    """Put the vectors of a read export in `store`'s embedding cache (nothing else changes: the next index run
    takes them). `vectors`: how many the cache really holds now; `dropped`: how many it does not, by reason. A
    vector with NaN or infinite values, or only zeros, is never stored (a store keeps no such vector: its chunk is
    embedded again), nor one the index cannot hold (past float16's range in a float16 index), and a hash written
    twice counts once."""
    key = _cache_key(export.model, export.dimensions)
    dropped: dict[str, int] = {}
    usable: dict[str, Any] = {}
    for h, v in export.vectors:
        why = NOT_FINITE if not np.isfinite(v).all() else ALL_ZERO if not v.any() else None
        if why is None:
            usable[h] = v
        else:
            dropped[why] = dropped.get(why, 0) + 1
    items = list(usable.items())
    held = 0
    for i in range(0, len(items), BATCH):  # (no chunk has id 0: the vectors go to the cache only)
        batch = items[i : i + BATCH]
        store.set_vectors([(0, h, v) for h, v in batch], key)
        held += len(store.cached_vectors(key, [h for h, _v in batch]))
    if held < len(items):
        dropped[NOT_STORED] = len(items) - held
    return {
        "model": export.model,
        "dimensions": export.dimensions,
        "vectors": held,
        "dropped": sum(dropped.values()),
        "droppedReasons": dropped,
    }


def dropped_text(loaded: dict[str, Any]) -> str:
    """`, N dropped (n not finite ..., m all zero)` of a store_vectors summary; "" when none was dropped."""
    if not loaded.get("dropped"):
        return ""
    why = ", ".join(f"{n:,} {reason}" for reason, n in loaded["droppedReasons"].items())
    return f"; {loaded['dropped']:,} dropped ({why}: their chunks are embedded by `saipling index`)"


def import_vectors(store: Any, src: Path) -> dict[str, Any]:
    """`read_export` then `store_vectors`: a file that is not an export, or is damaged, is refused before
    anything is written."""
    return store_vectors(store, read_export(src))
