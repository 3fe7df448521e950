"""A PostgreSQL database of an older saipling schema is brought up to date when a store opens it, its rows
included: the visibility level beside each vector (migration 2), the CJK character pairs in the keywords of
chunks and files (migration 3) and the keyword postings of both (migration 4), without re-embedding anything."""

from __future__ import annotations

import uuid

import pytest

from test_postgres_postings import _assert_in_step

pytest.importorskip("psycopg")


def test_a_schema_1_database_gets_vector_levels_and_cjk_keywords(pg_server) -> None:
    import numpy as np
    import psycopg

    from saipling.storage.base import ChunkFilter, KeywordQuery
    from saipling.storage.postgres import open_store
    from saipling.storage.postgres.schema import MIGRATIONS
    from saipling.storage.postgres.store import split_location
    from saipling.storage.postgres.vectorio import Vector, register

    name = "old" + uuid.uuid4().hex[:8]
    admin_url = split_location(pg_server.url())[0]
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    old_url = admin_url.replace("/saipling?", f"/{name}?")
    with psycopg.connect(old_url, autocommit=True) as conn:  # (what saipling of schema 1 wrote)
        conn.execute("CREATE TABLE saipling_schema(version int NOT NULL)")
        conn.execute("INSERT INTO saipling_schema VALUES (1)")
        conn.execute(MIGRATIONS[0])
        register(conn)
        ws = conn.execute("INSERT INTO workspaces(name) VALUES ('bible') RETURNING id").fetchone()[0]
        text = "冠盖满京华，斯人独憔悴。"
        conn.execute(
            "INSERT INTO files(ws, path, content_hash, mtime_ns, size, tsv, doclen)"
            " VALUES (%s, 'poem.md', 'h', 1, 1, to_tsvector('saipling', saipling_fold(%s)), 2)",
            (ws, text),
        )
        for i, (path, vis) in enumerate((("poem.md", "Private "), ("open.md", None))):
            cid = conn.execute(
                "INSERT INTO chunks(ws, path, chunk_index, content_hash, text, visibility) VALUES (%s, %s, 0, %s, %s,"
                " %s) RETURNING id",
                (ws, path, f"h{i}", text if i == 0 else "plain words", vis),
            ).fetchone()[0]
            conn.execute(
                "INSERT INTO chunk_vectors(chunk_id, ws, embedding) VALUES (%s, %s, %s)",
                (cid, ws, Vector(np.eye(4, dtype=np.float32)[i])),
            )
        conn.execute("INSERT INTO meta(ws, key, value) VALUES (%s, 'dimensions', '4'), (%s, 'model', 'm')", (ws, ws))
        conn.execute(  # (a big workspace's HNSW index: migration 2 drops it rather than rewrite it row by row)
            "CREATE INDEX chunks_hnsw_4 ON chunk_vectors USING hnsw ((embedding::vector(4)) vector_cosine_ops)"
            " WHERE vector_dims(embedding) = 4"
        )
    store = open_store(f"{old_url}&workspace=bible")
    try:
        assert store._scalar("SELECT version FROM saipling_schema") == len(MIGRATIONS)
        assert store._scalar("SELECT count(*) FROM pg_class WHERE relname = 'chunks_hnsw_4'") == 0
        levels = dict(store._rows("SELECT c.path, v.level FROM chunk_vectors v JOIN chunks c ON c.id = v.chunk_id"))
        assert levels == {"poem.md": "private", "open.md": "public"}
        hits = store.knn(np.eye(4, dtype=np.float32)[0], 5, ChunkFilter(visibility=["public"]))
        assert [store.chunk_paths([c])[c] for c, _ in hits] == ["open.md"]
        query = KeywordQuery.parse("京华")
        assert query is not None
        assert [store.chunk_paths([c])[c] for c, _ in store.keyword_search(query, 5)] == ["poem.md"]
        assert [p for p, _s, _n in store.file_keyword_search(query, 5)] == ["poem.md"]
        _assert_in_step(store)  # (the postings of rows written before migration 4)
        plain = KeywordQuery.of([(("plain",), False)])
        assert [store.chunk_paths([c])[c] for c, _ in store.keyword_search(plain, 5)] == ["open.md"]
        assert [store.chunk_paths([c])[c] for c, _ in store.keyword_search(plain, 5, ChunkFilter(visibility=[]))] == []
    finally:
        store.close()


def test_opening_a_current_database_takes_no_migration_lock(pg_server) -> None:
    """Many processes opening stores at once (a site's 64 readers, an agent platform's workers) do not queue one by
    one on the migrations' advisory lock when there is nothing to migrate: a store opens while another session
    holds that lock (before, every open waited for it)."""
    import threading

    import psycopg

    from saipling.storage.postgres import open_store
    from saipling.storage.postgres.schema import MIGRATION_LOCK
    from saipling.storage.postgres.store import split_location

    open_store(pg_server.url()).close()  # (the database is at this saipling's version)
    opened: list[object] = []

    def open_one() -> None:
        store = open_store(pg_server.url())
        opened.append(store.workspace)
        store.close()

    with psycopg.connect(split_location(pg_server.url())[0], autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
        try:
            worker = threading.Thread(target=open_one, daemon=True)
            worker.start()
            worker.join(10)
            assert opened, "the store waited for the migrations' lock though the schema is current"
        finally:
            holder.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
        worker.join(30)
    assert len(opened) == 1


def test_a_database_of_a_newer_saipling_is_refused_naming_it_and_what_to_do(pg_server) -> None:
    """A teammate's newer saipling migrated the shared database: this one refuses it (nothing written) and the
    message names the store and says to upgrade (it said only `the database has saipling schema version 6, newer
    than this saipling knows (5)`: which database, and what then?)."""
    import psycopg

    from saipling.errors import IndexCorrupted
    from saipling.storage.postgres import open_store
    from saipling.storage.postgres.schema import MIGRATIONS
    from saipling.storage.postgres.store import split_location

    name = "new" + uuid.uuid4().hex[:8]
    admin_url = split_location(pg_server.url())[0]
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    url = admin_url.replace("/saipling?", f"/{name}?")
    open_store(f"{url}&workspace=bible").close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE saipling_schema SET version = %s", (len(MIGRATIONS) + 1,))
    with pytest.raises(IndexCorrupted) as caught:
        open_store(f"{url}&workspace=bible")
    message = str(caught.value)
    assert f"/{name}" in message and f"schema version {len(MIGRATIONS) + 1}" in message
    assert "install that version here too" in message
    with psycopg.connect(url, autocommit=True) as conn:  # (refused: nothing of it changed)
        assert conn.execute("SELECT version FROM saipling_schema").fetchone()[0] == len(MIGRATIONS) + 1
