"""The PostgreSQL + pgvector backend against a real server (tests/pg_fixture.py: one per session, a workspace per
test): same keyword answers as SQLite, workspaces isolated, visibility in SQL, the writer lock, other processes'
writes, and many writers and readers at once."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import chunk_row, file_record, open_project, saipling_project

pytest.importorskip("psycopg")

QUERIES = ["lighthouse ledger", "Marcus", "copper coin", "storm signal", "sister", "green winter harbor"]


def _store(url: str):
    from saipling.storage.postgres import open_store

    return open_store(url)


def _vec(seed: int, dims: int = 8):
    import numpy as np

    v = np.random.default_rng(seed).standard_normal(dims).astype(np.float32)
    return v / np.linalg.norm(v)


def test_keyword_search_answers_as_sqlite(tmp_path: Path, pg_url: str) -> None:
    """The same project, keyword-only, on SQLite and on PostgreSQL: the same results in the same order."""
    root = saipling_project(tmp_path)
    answers = {}
    for name, opts in (("sqlite", {}), ("postgres", {"store": pg_url})):
        with open_project(root, **opts) as project:
            project.index()
            answers[name] = [
                [(r["filePath"], r["startLine"]) for r in project.search({"query": q, "maxResults": 5})["results"]]
                for q in QUERIES
            ]
            if name == "postgres":
                assert project.store.backend == "postgresql"
    assert any(answers["sqlite"]), "the queries found nothing on SQLite"
    assert answers["postgres"] == answers["sqlite"]


def test_bm25_scores_match_fts5(tmp_path: Path, pg_url: str) -> None:
    """Keyword scores are FTS5's BM25 (higher is better), term by term, phrases and accents folded included."""
    from saipling.storage import open_store
    from saipling.storage.base import KeywordQuery

    texts = [
        "The lighthouse keeper counts the ships at dawn.",
        "Ships, ships and more ships crowd the harbour of Émile.",
        "A keeper of secrets walks to the lighthouse keeper's cottage.",
        "Nothing here but the sea.",
        "running runners ran to the lighthouse",
    ]
    lite = open_store(tmp_path / "i.db")
    pg = _store(pg_url)
    try:
        for s in (lite, pg):
            s.replace_file(file_record("a.md"), [chunk_row(i, t) for i, t in enumerate(texts)])
        for words in (["ships"], ["lighthouse", "keeper"], ["emile"], ["run"], ["sea"]):
            phrase = [tuple(words)] if len(words) > 1 else []
            query = KeywordQuery.of([((w,), False) for w in words] + [(p, False) for p in phrase])
            want = [s for _i, s in lite.keyword_search(query, 10)]  # FTS5's negated bm25(), best first
            got = pg.keyword_search(query, 10)
            assert got, f"nothing found for {words}"
            assert [round(s, 6) for _i, s in got] == [round(s, 6) for s in want], words
    finally:
        lite.close()
        pg.close()


def test_workspaces_are_isolated(pg_server) -> None:
    """Two projects in one database: neither sees the other's files, vectors or logs; clearing one leaves the
    other whole."""
    from saipling.storage.base import ChunkFilter, KeywordQuery

    a, b = _store(pg_server.url("iso-a")), _store(pg_server.url("iso-b"))
    try:
        for s in (a, b):
            s.configure_vectors("test", "m", 8)
        a.replace_file(file_record("a.md"), [chunk_row(0, "the shared secret word")], {})
        b.replace_file(file_record("b.md"), [chunk_row(0, "the shared secret word")], {})
        a.set_vectors([(i, h, _vec(1)) for i, _p, h, _t in a.unembedded()], "m")
        b.set_vectors([(i, h, _vec(1)) for i, _p, h, _t in b.unembedded()], "m")
        query = KeywordQuery.of([(("secret",), False)])
        assert {a.chunk_paths([i])[i] for i, _ in a.keyword_search(query, 10)} == {"a.md"}
        assert [p for p, _s, _n in b.file_keyword_search(query, 10)] == ["b.md"]
        assert set(a.chunk_paths([i for i, _ in a.knn(_vec(1), 10)]).values()) == {"a.md"}
        assert set(a.chunk_paths([i for i, _ in b.knn(_vec(1), 10)]).values()) == set()  # b's ids are not a's
        a.log_search("secret", "lsp", "hybrid", 1, 1.0, 2.0)
        assert [r.query for r in a.search_log()] == ["secret"] and b.search_log() == []
        a.clear()
        assert a.file_states() == {} and list(b.file_states()) == ["b.md"]
        assert b.keyword_search(query, 10, ChunkFilter(visibility=["public"]))
    finally:
        a.close()
        b.close()


def test_reader_role_never_sees_private(tmp_path: Path, pg_url: str) -> None:
    """Visibility is in the SQL of every read: a private passage never comes back to a public reader, whatever
    the query or the vector, and an empty level list passes nothing."""
    from dataclasses import replace

    from saipling.storage.base import ChunkFilter, KeywordQuery

    store = _store(pg_url)
    try:
        store.configure_vectors("test", "m", 8)
        secret = replace(file_record("private.md"), visibility="private")
        store.replace_file(secret, [replace(chunk_row(0, "the murderer is the gardener"), visibility="private")])
        store.replace_file(file_record("public.md"), [chunk_row(0, "the garden is in bloom")])
        store.set_vectors([(i, h, _vec(7 if p == "private.md" else 8)) for i, p, h, _t in store.unembedded()], "m")
        reader = ChunkFilter(visibility=["public"])
        for words in (["murderer"], ["gardener"], ["garden"], ["murderer", "gardener"]):
            query = KeywordQuery.of([((w,), False) for w in words])
            hits = store.keyword_search(query, 10, reader)
            assert "private.md" not in store.chunk_paths([i for i, _ in hits]).values()
            assert "private.md" not in [p for p, _s, _n in store.file_keyword_search(query, 10, reader)]
            assert "private.md" not in [p for p, _n in store.keyword_paths(query, reader)]
        assert store.keyword_search(KeywordQuery.of([(("murderer",), False)]), 10), "the owner sees it"
        near = store.knn(_vec(7), 5, reader)  # the private chunk's own vector
        assert near and "private.md" not in store.chunk_paths([i for i, _ in near]).values()
        assert store.knn(_vec(7), 5, ChunkFilter(visibility=[])) == []
        assert store.entity_chunks("x", ChunkFilter(visibility=[])) == []
    finally:
        store.close()


def test_writer_lock_is_per_workspace(pg_server) -> None:
    from saipling.errors import IndexBusy

    one, two, other = (_store(pg_server.url(w)) for w in ("lock-a", "lock-a", "lock-b"))
    try:
        with one.writer_lock(what="index") as held:
            assert held is not None
            with pytest.raises(IndexBusy) as busy:
                with two.writer_lock(wait=False):
                    pass
            assert "indexing" in str(busy.value)
            with other.writer_lock(wait=False) as free:
                assert free is not None  # another workspace is not locked
        with two.writer_lock(wait=False) as again:
            assert again is not None
    finally:
        for s in (one, two, other):
            s.close()


def test_unreachable_server_is_a_clear_error(tmp_path: Path) -> None:
    from saipling.errors import StorageUnavailable

    with pytest.raises(StorageUnavailable, match="cannot connect"):
        _store(f"postgresql://nobody@/db?host={tmp_path}&workspace=x")


def test_another_process_sees_edits_by_the_next_search(tmp_path: Path, pg_url: str) -> None:
    """A `saipling index` in another process (the CLI, SAIPLING_STORE) writes a new file: this process's open store
    finds it at its next search (no cache outlives another process's commit)."""
    root = saipling_project(tmp_path)
    with open_project(root, store=pg_url) as project:
        project.index()
        assert not project.search({"query": "quetzalcoatl"})["results"]
        (root / "notes" / "new.md").write_text("# New\n\nA quetzalcoatl flies over the harbor.\n")
        env = {**os.environ, "SAIPLING_STORE": pg_url, "SAIPLING_PROVIDER": "none"}
        cli = Path(sys.executable).parent / "saipling"
        done = subprocess.run([str(cli), "index", str(root)], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert not (root / ".saipling" / "index.db").exists(), "the CLI wrote a SQLite index instead"
        results = project.search({"query": "quetzalcoatl"})["results"]
        assert [r["filePath"] for r in results] == ["notes/new.md"]


def _role_url(url: str, prefix: str, *grants: str) -> str:
    """`url` as a new login role (`prefix_<random>`) that may use the schema and has `grants` (`{role}` in each)."""
    import uuid

    import psycopg

    from saipling.storage.postgres.store import split_location

    role = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(split_location(url)[0], autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
        for grant in grants:
            conn.execute(grant.format(role=role))
    out = url.replace("postgresql://postgres@", f"postgresql://{role}@", 1)
    assert out != url
    return out


def _cli(*args: str, store: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SAIPLING_STORE": store, "SAIPLING_PROVIDER": "none"}
    cli = Path(sys.executable).parent / "saipling"
    return subprocess.run([str(cli), *args], env=env, capture_output=True, text=True, timeout=120)


def _found(word: str, root: Path, store: str) -> list[str]:
    done = _cli("search", word, "--root", str(root), "--mode", "lexical", "--json", store=store)
    assert done.returncode == 0, done.stderr
    return [r["filePath"] for r in json.loads(done.stdout)["results"]]


def test_two_copies_on_one_workspace_keep_each_others_edits(tmp_path: Path, pg_url: str) -> None:
    """Two authors, each with a copy of the project, on one workspace: a search, a server's sync or an index run
    in one copy writes what changed in that copy and never puts its older text back over the other's saved edit,
    nor drops a file only the other copy has (each copy's own search re-read its copy into the index before)."""
    import shutil

    from saipling.live.freshness import LazySync

    a = saipling_project(tmp_path / "a")
    b = tmp_path / "b" / a.name
    shutil.copytree(a, b)  # (copy2: the same mtimes, as two clones in step)
    for root in (a, b):
        done = _cli("index", str(root), store=pg_url)
        assert done.returncode == 0, done.stderr
    scene = "books/book-01/phase-5-bloom/ch-02/scene-01.md"
    with (a / scene).open("a") as f:
        f.write("\nA quetzalcoatl circles the bell tower.\n")
    (a / "notes" / "tower.md").write_text("# Tower\n\nThe axolotl sleeps in the cistern under the tower.\n")
    assert _found("quetzalcoatl", a, pg_url) == [scene]  # A's search reads A's edit and new file
    assert _found("axolotl", a, pg_url) == ["notes/tower.md"]
    # B's copy holds the older scene and no tower.md: its search, its server's sync and its index run keep both
    assert _found("quetzalcoatl", b, pg_url) == [scene]
    with open_project(b, store=pg_url) as project:
        assert "notes/tower.md" in project.store.file_states()
        assert LazySync(project).sync() is None  # (nothing of B's own changed)
        assert project.index().deleted == 0
    done = _cli("index", str(b), store=pg_url)
    assert done.returncode == 0, done.stderr
    assert _found("quetzalcoatl", a, pg_url) == [scene]
    assert _found("axolotl", a, pg_url) == ["notes/tower.md"]
    # B searching for A's new note (its copy lacks the file): left out of B's results, kept for everyone
    assert _found("axolotl", b, pg_url) == []
    with open_project(b, store=pg_url) as project:  # (before A's own search could read it back in)
        assert "notes/tower.md" in project.store.file_states()
    assert _found("axolotl", a, pg_url) == ["notes/tower.md"]
    # B re-chunking (other chunk limits, or a new saipling's rules) re-reads its own files, not over A's newer ones
    with open_project(b, store=pg_url, chunking={"max_tokens": 300, "target_tokens": 150}) as project:
        summary = project.index()
        assert summary.deleted == 0 and "notes/tower.md" in project.store.file_states()
        # a full run without claiming (an editor's settings change, its rebuild) is no `--full` either
        summary = project.index(full=True)
        assert summary.deleted == 0 and "notes/tower.md" in project.store.file_states()
    assert _found("quetzalcoatl", a, pg_url) == [scene]
    # B's re-chunk did not tell A its own files are re-chunked: each copy re-chunks what it wrote
    with open_project(a, store=pg_url, chunking={"max_tokens": 300, "target_tokens": 150}) as project:
        assert project.indexer.needs_rechunk()
        project.index()
        assert not project.indexer.needs_rechunk()
    # an editor deleting or renaming a folder in B drops B's files there, not A's note that B never had
    from types import SimpleNamespace

    from saipling.lsp.features.sync import stored_under

    (b / "notes" / "b-note.md").write_text("# B\n\nA note of B's own.\n")
    with open_project(b, store=pg_url) as project:
        project.index()
        states = project.store.file_states()
        mine = {p for p, st in states.items() if p.startswith("notes/") and st.mine(project.store.copy_id)}
        under = stored_under(SimpleNamespace(project=project), "notes")
        assert mine and set(under) == mine and "notes/tower.md" in states and "notes/tower.md" not in under
    # B's own edit reaches A the same way, and A's copy (older there) keeps it
    harbor = "world/places/harbor.md"
    with (b / harbor).open("a") as f:
        f.write("\nA narwhal surfaces by the quay.\n")
    assert _found("narwhal", b, pg_url) == [harbor]
    assert _found("narwhal", a, pg_url) == [harbor]
    assert _found("quetzalcoatl", b, pg_url) == [scene]
    # a full run makes the workspace this copy's: B's text of the scene, no tower.md
    done = _cli("index", str(b), "--full", store=pg_url)
    assert done.returncode == 0, done.stderr
    with open_project(a, store=pg_url) as project:
        assert "notes/tower.md" not in project.store.file_states()
        assert not project.search({"query": "quetzalcoatl", "mode": "lexical"})["results"]
    # status names the shared store (its URL and workspace), not a SQLite file that is not there
    done = _cli("status", str(a), "--json", store=pg_url)
    st = json.loads(done.stdout)
    assert st["store"] == "postgresql" and st["indexPath"].startswith("postgresql://") and "#" in st["indexPath"]
    assert "shared workspace" in _cli("status", str(a), store=pg_url).stdout


def test_one_copy_on_postgres_drops_files_deleted_or_excluded_as_sqlite_does(tmp_path: Path, pg_url: str) -> None:
    """One author on a PostgreSQL store: a file deleted, or excluded by the config since, leaves the index at the next
    `saipling index` and the next search (privacy: an excluded diary stayed searchable when every PostgreSQL store
    kept the files a copy lacked)."""
    root = saipling_project(tmp_path)
    (root / "private").mkdir()
    (root / "private" / "diary.md").write_text("# Diary\n\nThe axolotl knows my secret.\n")
    (root / "notes" / "old.md").write_text("# Old\n\nA narwhal note, soon deleted.\n")
    assert _cli("index", str(root), store=pg_url).returncode == 0
    assert _found("axolotl", root, pg_url) == ["private/diary.md"]
    (root / ".saipling").mkdir(exist_ok=True)
    (root / ".saipling" / "config.toml").write_text('exclude = ["private/**"]\n')
    (root / "notes" / "old.md").unlink()
    done = _cli("index", str(root), "--json", store=pg_url)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["deleted"] == 2
    assert _found("axolotl", root, pg_url) == [] and _found("narwhal", root, pg_url) == []
    # and a one-shot search drops them as well, without an index run
    (root / "notes" / "gone.md").write_text("# Gone\n\nA quokka passes.\n")
    assert _found("quokka", root, pg_url) == ["notes/gone.md"]
    (root / "notes" / "gone.md").unlink()
    assert _found("quokka", root, pg_url) == []
    with open_project(root, store=pg_url) as project:
        assert "notes/gone.md" not in project.store.file_states()


def test_a_copy_keeps_its_identity_by_saipling_copy_id(tmp_path: Path, pg_url: str) -> None:
    """A copy is its machine and folder unless SAIPLING_COPY_ID names it: an author whose container gets a new host
    name each run, or whose project folder moved, is still the one copy, and its deletions still leave."""
    import shutil

    root = saipling_project(tmp_path / "first")
    moved = tmp_path / "second" / root.name
    env = {**os.environ, "SAIPLING_STORE": pg_url, "SAIPLING_PROVIDER": "none"}
    cli = [str(Path(sys.executable).parent / "saipling")]

    def index(folder: Path, copy: str | None) -> dict:
        run_env = (
            {**env, "SAIPLING_COPY_ID": copy} if copy else {k: v for k, v in env.items() if k != "SAIPLING_COPY_ID"}
        )
        done = subprocess.run([*cli, "index", str(folder), "--json"], env=run_env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    index(root, "alice-laptop")
    shutil.move(str(root), str(moved))
    (moved / "notes" / "ideas.md").unlink()
    assert index(moved, None)["deleted"] == 0  # (another folder: another copy, whose missing file is not its own)
    assert index(moved, "alice-laptop")["deleted"] == 1


def test_a_misspelt_workspace_is_named_not_created_by_a_reading_command(tmp_path: Path, pg_server) -> None:
    """`?workspace=team-bibel` for team-bible: search, status and export each made an empty workspace of that name
    and answered from it (files: 0), advising `saipling index`, which would build a second workspace."""
    import psycopg

    from saipling.storage.postgres.store import split_location

    root = saipling_project(tmp_path)
    good = pg_server.url("team-bible")
    done = _cli("index", str(root), store=good)
    assert done.returncode == 0, done.stderr
    typo = pg_server.url("team-bibel")
    for args in (("status", str(root)), ("search", "harbor", "--root", str(root)), ("get", "notes/ideas.md")):
        done = subprocess.run(
            [str(Path(sys.executable).parent / "saipling"), *args],
            env={**os.environ, "SAIPLING_STORE": typo, "SAIPLING_PROVIDER": "none"},
            cwd=root,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
        assert "no workspace 'team-bibel' (did you mean team-bible?" in done.stderr, done.stderr
    with psycopg.connect(split_location(good)[0]) as conn:
        assert conn.execute("SELECT count(*) FROM workspaces WHERE name = 'team-bibel'").fetchone()[0] == 0
    # `index` (and the servers) still create a workspace of a new name
    done = _cli("index", str(root), store=typo)
    assert done.returncode == 0, done.stderr
    assert json.loads(_cli("status", str(root), "--json", store=typo).stdout)["totalFiles"] > 0


def test_ann_index_fills_k_under_a_selective_filter(pg_server, monkeypatch) -> None:
    """Past ANN_MIN_ROWS a workspace is searched through HNSW with iterative scan: a filter passing 2% of chunks
    still gets k results, and they are the exact nearest among the passing chunks."""
    import numpy as np

    from saipling.storage.base import ChunkFilter
    from saipling.storage.postgres import store as pgstore

    monkeypatch.setattr(pgstore, "ANN_MIN_ROWS", 500)
    store = _store(pg_server.url("ann"))
    try:
        store.configure_vectors("test", "m", 16)
        rng = np.random.default_rng(3)
        centers = rng.standard_normal((20, 16)).astype(np.float32)
        vecs = {}
        for f in range(50):
            rows = [chunk_row(i, f"file {f} chunk {i}") for i in range(20)]
            store.replace_file(file_record(f"d{f:02d}.md"), rows)
        for cid, _p, _h, _t in store.unembedded():
            v = centers[cid % 20] + 0.3 * rng.standard_normal(16).astype(np.float32)
            vecs[cid] = v / np.linalg.norm(v)
        store.set_vectors([(cid, h, vecs[cid]) for cid, _p, h, _t in store.unembedded()], "m")
        assert 16 in store._ann_dims, "the HNSW index was not built"
        flt = ChunkFilter(only_paths=["d07.md"])  # 20 of 1,000 chunks
        query = vecs[next(iter(vecs))]
        got = store.knn(query, 10, flt)
        assert len(got) == 10
        ids = store.filtered_ids(flt)
        exact = sorted(ids, key=lambda i: -float(np.dot(vecs[int(i)], query)))[:10]
        assert len(set(exact) & {i for i, _ in got}) >= 9
    finally:
        store.close()


def _writer(url: str, n_files: int, queue) -> None:
    try:
        store = _store(url)
        for f in range(n_files):
            store.replace_file(
                file_record(f"f{f:03d}.md"), [chunk_row(i, f"{url[-6:]} word{f} chunk{i}") for i in range(3)]
            )
        store.close()
        queue.put(("ok", url))
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        queue.put(("error", f"{type(exc).__name__}: {exc}"))


def _reader(url: str, rounds: int, queue) -> None:
    from saipling.storage.base import KeywordQuery

    try:
        store = _store(url)
        leaked = 0
        for r in range(rounds):
            hits = store.keyword_search(KeywordQuery.of([((f"word{r % 20}",), False)]), 10)
            paths = store.chunk_paths([i for i, _ in hits])
            leaked += sum(1 for i, _ in hits if i not in paths)  # a hit that is not this workspace's chunk
        store.close()
        queue.put(("ok", leaked))
    except Exception as exc:  # noqa: BLE001
        queue.put(("error", f"{type(exc).__name__}: {exc}"))


def test_eight_writers_and_many_readers(pg_server) -> None:
    """8 writer processes on 8 workspaces and 64 reader processes on the first: no error, nothing lost, nothing
    leaked across workspaces."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    urls = [pg_server.url(f"conc{i}") for i in range(8)]
    n_files = 20
    procs = [ctx.Process(target=_writer, args=(u, n_files, queue)) for u in urls]
    procs += [ctx.Process(target=_reader, args=(urls[0], 10, queue)) for _ in range(64)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
    errors = [r for r in results if r[0] == "error"]
    assert not errors, errors[:3]
    assert sum(r[1] for r in results if isinstance(r[1], int)) == 0
    for u in urls:
        store = _store(u)
        try:
            assert sorted(store.file_states()) == [f"f{f:03d}.md" for f in range(n_files)]
            assert len(store.chunk_hashes()) == 3 * n_files
        finally:
            store.close()


def test_a_dropped_connection_is_opened_again(pg_url: str) -> None:
    """The server drops the store's connection (a restart, a failover): the next call connects again and answers;
    a closed store stays closed (StorageUnavailable)."""
    import psycopg

    from saipling.errors import StorageUnavailable
    from saipling.storage.postgres.store import split_location

    store = _store(pg_url)
    try:
        store.replace_file(file_record("a.md"), [chunk_row(0, "still here after the restart")])
        pid = store.conn.raw.info.backend_pid
        with psycopg.connect(split_location(pg_url)[0], autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        assert list(store.file_states()) == ["a.md"]
        assert store.conn.raw.info.backend_pid != pid
    finally:
        store.close()
    with pytest.raises(StorageUnavailable):
        store.file_states()


def test_a_runaway_statement_is_cut_off_not_left_holding_the_store(pg_url: str, monkeypatch) -> None:
    """Every connection carries a statement timeout: a statement running past it fails with a saipling error
    (StorageBusy) and the store answers the next call, instead of one query holding the store's lock forever."""
    import time

    from saipling.errors import StorageBusy
    from saipling.storage.postgres import store as pg_store

    monkeypatch.setattr(pg_store, "STATEMENT_TIMEOUT_MS", 300)
    store = _store(pg_url)
    try:
        start = time.monotonic()
        with pytest.raises(StorageBusy):
            store.conn.execute("SELECT pg_sleep(30)")
        assert time.monotonic() - start < 20
        store.replace_file(file_record("a.md"), [chunk_row(0, "the store still answers")])
        assert list(store.file_states()) == ["a.md"]
    finally:
        store.close()


def test_writes_gather_planner_statistics(pg_server, monkeypatch) -> None:
    """A store that has inserted many rows runs ANALYZE on chunks and files after its commit (issue 33: never
    analyzed, a keyword search read every chunk of the workspace instead of what the GIN index finds), inside an
    index run's transaction only once it has committed."""
    import psycopg

    from saipling.storage.postgres import store as pgstore

    monkeypatch.setattr(pgstore, "ANALYZE_MIN_ROWS", 30)
    monkeypatch.setattr(pgstore, "ANALYZE_FRACTION", 0.0)
    store = _store(pg_server.url())
    sql = "SELECT (SELECT reltuples FROM pg_class WHERE oid = 'chunks'::regclass), (SELECT count(*) FROM chunks)"
    try:
        with psycopg.connect(pg_server.base_url, autocommit=True) as conn:
            with store.atomic():
                for f in range(3):
                    store.replace_file(file_record(f"a{f}.md"), [chunk_row(i, f"file {f} line {i}") for i in range(20)])
                assert "analyze" in store._due and store._written_since_analyze >= 30
            tuples, count = conn.execute(sql).fetchone()
            assert tuples == count and not store._due and store._written_since_analyze == 0
            store.replace_file(file_record("b.md"), [chunk_row(i, f"line {i}") for i in range(40)])
            tuples, count = conn.execute(sql).fetchone()
            assert tuples == count
            hits = store.keyword_search(pgstore.KeywordQuery.parse("line"), 100)
            assert len(hits) == 100
    finally:
        store.close()


def test_chunks_a_worker_made_are_stored_with_their_previews(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunking workers send their chunks back without previews (the SQLite index stores none); PostgreSQL stores
    them: the indexer makes them, the same as chunking in process."""
    from saipling.indexing.chunk_pool import ChunkPool
    from saipling.markdown.preview import make_preview

    monkeypatch.setenv("SAIPLING_CHUNK_WORKERS", "1")
    monkeypatch.setattr(ChunkPool, "take_back", False)  # every file chunked by the worker
    root = saipling_project(tmp_path)
    with open_project(root, store=pg_url) as project:
        summary = project.index()
        assert summary.chunk_workers == 1
        stored = [c for p in sorted(project.store.file_states()) for c in project.store.chunks_for_path(p)]
    assert stored and all(c.preview and c.preview == make_preview(c.text) for c in stored)


@pytest.mark.parametrize("how", ["select-only", "read-only-sessions"])
def test_a_role_that_may_only_read_searches_the_workspace_as_it_is(tmp_path: Path, pg_server, how: str) -> None:
    """A role granted SELECT only (or one whose sessions are read-only: `default_transaction_read_only`, a hot
    standby) opens the workspace read-only: a search after an edit tried to re-read the file, failed ("could not be
    indexed: permission denied", on every search), `index` said "permission denied for table workspaces" and
    `saipling mcp` could not start."""
    import psycopg

    from saipling.storage.postgres.store import split_location

    root = saipling_project(tmp_path)
    url = pg_server.url()
    done = _cli("index", str(root), store=url)
    assert done.returncode == 0, done.stderr
    if how == "select-only":
        reader = _role_url(url, "reader", "GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    else:
        reader = _role_url(
            url,
            "reader",
            "GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}",
            "GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}",
            "ALTER ROLE {role} SET default_transaction_read_only = on",
        )
    scene = root / "books" / "book-01" / "phase-5-bloom" / "ch-01" / "scene-01.md"
    scene.write_text(scene.read_text() + "\nA new line the reader cannot index.\n")
    done = _cli("search", "harbor", "--root", str(root), "--mode", "lexical", "--json", store=reader)
    assert done.returncode == 0, done.stderr
    assert "could not be indexed" not in done.stderr and "permission denied" not in done.stderr, done.stderr
    assert "world/places/harbor.md" in [r["filePath"] for r in json.loads(done.stdout)["results"]]
    status = _cli("status", str(root), "--json", store=reader)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["readOnly"] is True
    done = _cli("index", str(root), store=reader)
    assert done.returncode == 1 and "is read-only: it cannot be changed" in done.stderr, done.stderr
    # a workspace it cannot create is named as such, not as one `saipling index` would create
    done = _cli("index", str(root), store=reader.replace("workspace=", "workspace=new", 1))
    assert done.returncode == 1 and "may not write the database" in done.stderr, done.stderr
    with psycopg.connect(split_location(url)[0]) as conn:  # nothing the reader did changed the workspace
        assert conn.execute("SELECT count(*) FROM workspaces WHERE name LIKE 'new%'").fetchone()[0] == 0


def test_a_role_that_may_write_only_some_tables_opens_read_only_and_says_why(tmp_path: Path, pg_server) -> None:
    """A role granted INSERT, UPDATE and DELETE on the tables `_can_write` looked at (workspaces, files, chunks...)
    but not on the others a run writes (mentions, writer_runs, embedding_cache...) was taken for a writer: a search
    after an edit re-read the file and failed on it ("permission denied for table ..."), and `index` failed part
    way. It opens read-only, and `index` names what the role may not do."""
    root = saipling_project(tmp_path)
    url = pg_server.url()
    done = _cli("index", str(root), store=url)
    assert done.returncode == 0, done.stderr
    tables = ("workspaces", "files", "chunks", "chunk_vectors", "chunk_terms", "file_terms", "meta")
    partial = _role_url(
        url,
        "partial",
        "GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}",
        "GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}",
        *(f"GRANT INSERT, UPDATE, DELETE ON {table} TO {{role}}" for table in tables),
    )
    scene = root / "books" / "book-01" / "phase-5-bloom" / "ch-01" / "scene-01.md"
    scene.write_text(scene.read_text() + "\nA new line about Mina at the harbor.\n")
    done = _cli("search", "harbor", "--root", str(root), "--mode", "lexical", "--json", store=partial)
    assert done.returncode == 0, done.stderr
    assert "could not be indexed" not in done.stderr and "permission denied" not in done.stderr, done.stderr
    done = _cli("index", str(root), store=partial)
    assert done.returncode == 1 and "read-only" in done.stderr, done.stderr
    assert "permission denied" not in done.stderr and "INSERT" in done.stderr, done.stderr
