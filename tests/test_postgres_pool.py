"""A PostgreSQL store's connections (storage/postgres/sessions.py) against a real server: a thread's read never
waits for another thread's transaction, the pool is sized by the URL's `pool_size`, a dropped pooled connection
is replaced, and `close()` closes every connection."""

from __future__ import annotations

import threading
import time

import pytest

from fixtures import chunk_row, file_record

pytest.importorskip("psycopg")


def _store(url: str):
    from saipling.storage.postgres import open_store

    return open_store(url)


def _backends(url: str) -> set[int]:
    """The server's backends of saipling connections (their process ids)."""
    import psycopg

    from saipling.storage.postgres.store import split_location

    with psycopg.connect(split_location(url)[0], autocommit=True) as admin:
        rows = admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = 'saipling'").fetchall()
    return {int(r[0]) for r in rows}


def _hold_a_transaction(store, started: threading.Event, release: threading.Event) -> threading.Thread:
    """A thread writing a file inside a transaction it keeps open until `release`."""

    def hold() -> None:
        with store.atomic():
            store.replace_file(file_record("held.md"), [chunk_row(0, "written but not committed yet")])
            started.set()
            release.wait(30)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert started.wait(30)
    return thread


def _in_thread(call, timeout: float) -> tuple[bool, object]:
    """(finished within `timeout`, its result)."""
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(call()), daemon=True)
    thread.start()
    thread.join(timeout)
    return (not thread.is_alive(), out[0] if out else None)


def test_a_read_does_not_wait_for_another_threads_transaction(pg_url: str) -> None:
    """A server's request reads while another request's write transaction is open: on a connection of its own,
    at once, and without seeing the uncommitted write; the write is seen once committed."""
    store = _store(f"{pg_url}&pool_size=3")
    release, started = threading.Event(), threading.Event()
    try:
        store.replace_file(file_record("a.md"), [chunk_row(0, "committed before")])
        holder = _hold_a_transaction(store, started, release)
        done, states = _in_thread(store.file_states, 10)
        assert done, "a read waited for another thread's open transaction"
        assert sorted(states) == ["a.md"]  # (not the uncommitted file)
        release.set()
        holder.join(30)
        assert sorted(store.file_states()) == ["a.md", "held.md"]
    finally:
        release.set()
        store.close()


def test_pool_size_one_keeps_one_connection_in_turn(pg_url: str) -> None:
    """`pool_size=1`: the threads share the store's one connection in turn (a read waits for the transaction)."""
    store = _store(f"{pg_url}&pool_size=1")
    release, started = threading.Event(), threading.Event()
    try:
        holder = _hold_a_transaction(store, started, release)
        out: list[object] = []
        reader = threading.Thread(target=lambda: out.append(store.file_states()), daemon=True)
        reader.start()
        reader.join(1.0)
        assert reader.is_alive()  # the read waits for the transaction
        release.set()
        holder.join(30)
        reader.join(30)  # then answers (before the store closes: a read left waiting failed in the next test)
        assert not reader.is_alive() and sorted(out[0]) == ["held.md"]  # type: ignore[call-overload]
    finally:
        release.set()
        store.close()


def test_close_closes_every_connection_of_the_pool(pg_url: str) -> None:
    before = _backends(pg_url)
    store = _store(f"{pg_url}&pool_size=4")
    release, started = threading.Event(), threading.Event()
    try:
        holder = _hold_a_transaction(store, started, release)
        assert _in_thread(store.file_states, 10)[0]
        during = _backends(pg_url) - before
        assert len(during) >= 2  # the first connection and a pooled one
        release.set()
        holder.join(30)
    finally:
        release.set()
        store.close()
    deadline = time.monotonic() + 10
    while _backends(pg_url) & during and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _backends(pg_url) & during


def test_a_dropped_pooled_connection_is_replaced(pg_url: str) -> None:
    """The server drops a pooled connection between requests: the next request gets another and answers."""
    import psycopg

    from saipling.storage.postgres.store import split_location

    store = _store(f"{pg_url}&pool_size=3")
    release, started = threading.Event(), threading.Event()
    try:
        store.replace_file(file_record("a.md"), [chunk_row(0, "still here")])
        holder = _hold_a_transaction(store, started, release)  # (the first connection stays busy)
        pids: list[int] = []

        def pooled_pid() -> int:
            with store._lock:
                return int(store.conn.execute("SELECT pg_backend_pid()").fetchone()[0])

        pids.append(pooled_pid())
        with psycopg.connect(split_location(pg_url)[0], autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pids[0],))
        time.sleep(0.2)
        done, states = _in_thread(store.file_states, 20)
        assert done and sorted(states) == ["a.md"]
        assert pooled_pid() != pids[0]
        release.set()
        holder.join(30)
    finally:
        release.set()
        store.close()


@pytest.mark.parametrize("size", ["0", "many", "-2"])
def test_a_bad_pool_size_is_a_clear_error(pg_url: str, size: str) -> None:
    from saipling.errors import StorageError

    with pytest.raises(StorageError, match="pool_size"):
        _store(f"{pg_url}&pool_size={size}")
