"""The HNSW index build on PostgreSQL (PostgresStore.build_ann_index) against a real server: CREATE INDEX
CONCURRENTLY on a connection of its own, so that neither this process's searches nor other writers wait for it,
and idempotent."""

from __future__ import annotations

import threading
import time

import pytest

from fixtures import chunk_row, file_record

pytest.importorskip("psycopg")


def test_the_hnsw_build_holds_up_neither_searches_nor_writers(pg_server) -> None:
    """While the build waits for another session's open write transaction, a search of this store answers and
    another writer takes chunk_vectors' write lock at once (a plain CREATE INDEX queues a SHARE lock that both
    would wait behind); once that transaction ends the index is built, and a second build changes nothing."""
    import numpy as np
    import psycopg

    from saipling.storage.postgres import open_store
    from saipling.storage.postgres.store import split_location

    dims = 24  # (a dimension of this test's own: one index per dimension for the database)
    store = open_store(pg_server.url())
    admin_url = split_location(pg_server.url())[0]
    holder = psycopg.connect(admin_url)  # (not autocommit: a transaction stays open)
    built: list[object] = []
    try:
        store.configure_vectors("test", "m", dims)
        rng = np.random.default_rng(5)
        store.replace_file(file_record("a.md"), [chunk_row(i, f"passage {i}") for i in range(30)])
        items = [(cid, h, rng.standard_normal(dims).astype(np.float32)) for cid, _p, h, _t in store.unembedded()]
        store.set_vectors(items, "m")
        holder.execute("LOCK TABLE chunk_vectors IN ROW EXCLUSIVE MODE")  # another writer, mid-transaction
        thread = threading.Thread(target=lambda: built.append(store.build_ann_index(dims)), daemon=True)
        thread.start()
        time.sleep(1.0)
        assert thread.is_alive(), "the build did not wait for the open write transaction"
        answered: list[object] = []
        search = threading.Thread(target=lambda: answered.append(store.knn(items[0][2], 5)), daemon=True)
        search.start()
        search.join(10)
        assert answered and len(answered[0]) == 5, "a search waited for the index build"
        with psycopg.connect(admin_url) as writer:
            writer.execute("SET lock_timeout = '2s'")
            writer.execute("LOCK TABLE chunk_vectors IN ROW EXCLUSIVE MODE")  # (raises LockNotAvailable if held up)
            writer.rollback()
        holder.rollback()
        thread.join(60)
        assert built == [True]
        with psycopg.connect(admin_url, autocommit=True) as admin:
            valid = admin.execute(
                "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = %s",
                (f"chunks_hnsw_{dims}",),
            ).fetchall()
        assert valid == [(True,)]
        assert dims in store._existing_ann_dims()
        assert store.build_ann_index(dims) is True  # (idempotent)
    finally:
        holder.close()
        store.close()


def test_an_invalid_index_left_by_a_cut_build_is_built_again(pg_server) -> None:
    import numpy as np
    import psycopg

    from saipling.storage.postgres import open_store
    from saipling.storage.postgres.store import split_location

    dims = 20
    store = open_store(pg_server.url())
    admin_url = split_location(pg_server.url())[0]
    try:
        store.configure_vectors("test", "m", dims)
        store.replace_file(file_record("a.md"), [chunk_row(i, f"text {i}") for i in range(5)])
        rng = np.random.default_rng(2)
        store.set_vectors(
            [(cid, h, rng.standard_normal(dims).astype(np.float32)) for cid, _p, h, _t in store.unembedded()], "m"
        )
        with psycopg.connect(admin_url, autocommit=True) as admin:  # (what a build cut short leaves)
            admin.execute(
                f"CREATE INDEX chunks_hnsw_{dims} ON chunk_vectors USING hnsw ((embedding::vector({dims}))"
                f" vector_cosine_ops) WHERE vector_dims(embedding) = {dims}"
            )
            admin.execute(
                "UPDATE pg_index SET indisvalid = false WHERE indexrelid = %s::regclass", (f"chunks_hnsw_{dims}",)
            )
        assert dims not in store._existing_ann_dims()
        assert store.build_ann_index(dims) is True
        assert dims in store._existing_ann_dims()
    finally:
        store.close()


def test_vectors_that_arrive_with_their_chunks_build_the_hnsw_index(pg_server, monkeypatch) -> None:
    """A workspace whose vectors all come with their chunks (reused from the shared cache after `saipling import`,
    never through set_vectors) gets its HNSW index once it passes the threshold, as an embedded one does."""
    import numpy as np
    import psycopg

    from saipling.storage.postgres import open_store
    from saipling.storage.postgres import store as pg_store
    from saipling.storage.postgres.store import split_location

    dims = 20  # (a dimension of this test's own: one index per dimension for the database)
    monkeypatch.setattr(pg_store, "ANN_MIN_ROWS", 40)
    monkeypatch.setattr(pg_store, "ANN_CHECK_EVERY", 10, raising=False)
    store = open_store(pg_server.url())
    admin_url = split_location(pg_server.url())[0]
    try:
        store.configure_vectors("test", "m", dims)
        rng = np.random.default_rng(7)
        for batch in (range(3), range(3, 6)):  # (an index run stores a batch of files in one transaction)
            with store.atomic():
                for f in batch:
                    rows = [chunk_row(i, f"file {f} passage {i}") for i in range(10)]
                    vecs = {r.content_hash: rng.standard_normal(dims).astype(np.float32) for r in rows}
                    assert store.replace_file(file_record(f"f{f}.md"), rows, vecs, "m") == []
        assert store.embedded_count() == 60
        with psycopg.connect(admin_url, autocommit=True) as admin:
            valid = admin.execute(
                "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = %s",
                (f"chunks_hnsw_{dims}",),
            ).fetchall()
        assert valid == [(True,)]
    finally:
        store.close()
