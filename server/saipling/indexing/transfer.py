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
from pathlib import Path
from typing import Any

from ..errors import InvalidRequest, SaiplingError
from ..lazy import np

FORMAT = "saipling-vectors"
VERSION = 1
BATCH = 1000


def _cache_key(model: str, dims: int) -> str:
    return f"{model}@{int(dims)}" if dims else model  # (storage.base.cache_key)


def export_vectors(store: Any, out: Path) -> dict[str, Any]:
    """Write the vectors of every chunk of `store` to `out` (replaced atomically). Returns what was written."""
    model, dims = store.vector_model()
    if not model or not dims:
        raise SaiplingError("nothing to export: this index holds no vectors (index it with a provider first)")
    hashes = sorted({h for _p, h, _t in store.chunk_hashes() if h})
    out = Path(out)
    fd, tmp = tempfile.mkstemp(prefix=".saipling-export-", dir=out.parent if str(out.parent) else ".")
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


def import_vectors(store: Any, src: Path) -> dict[str, Any]:
    """Put the vectors of an export file in `store`'s embedding cache (nothing else changes: the next index run
    takes them). A file that is not an export, or is damaged, is refused before anything is written."""
    try:
        with gzip.open(src, "rt", encoding="utf-8") as f:
            header = json.loads(f.readline() or "{}")
            if not isinstance(header, dict) or header.get("format") != FORMAT:
                raise InvalidRequest(f"{src} is not a saipling vector export (made by `saipling export`)")
            if header.get("version") != VERSION:
                raise InvalidRequest(f"{src} is export version {header.get('version')}; this saipling reads {VERSION}")
            model, dims = str(header["model"]), int(header["dimensions"])
            items: list[tuple[str, Any]] = []
            for n, line in enumerate(f, start=2):
                row = json.loads(line)
                vec = np.frombuffer(base64.b64decode(row["v"]), dtype="<f4").astype(np.float32)
                if vec.shape[0] != dims:
                    raise InvalidRequest(f"{src} line {n}: a vector of {vec.shape[0]} dimensions, not {dims}")
                items.append((str(row["h"]), vec))
    except (OSError, EOFError, ValueError, KeyError, TypeError) as exc:
        raise InvalidRequest(f"cannot read {src} as a saipling vector export: {exc}") from exc
    key = _cache_key(model, dims)
    for i in range(0, len(items), BATCH):  # (no chunk has id 0: the vectors go to the cache only)
        store.set_vectors([(0, h, v) for h, v in items[i : i + BATCH]], key)
    return {"model": model, "dimensions": dims, "vectors": len(items)}
