"""VectorMatrix: the in-place patched KNN matrix must always answer exactly like brute force over what is live."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from saipling.storage import vector_matrix
from saipling.storage.vector_matrix import VectorMatrix

DIMS = 8


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal((n, DIMS)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def brute(model: dict[int, np.ndarray], q: np.ndarray, k: int, allowed: set[int] | None = None):
    items = [(cid, float(v @ q)) for cid, v in model.items() if allowed is None or cid in allowed]
    items.sort(key=lambda t: -t[1])
    return items[:k]


ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.lists(st.integers(1, 60), min_size=1, max_size=12, unique=True)),
        st.tuples(st.just("remove"), st.lists(st.integers(1, 60), max_size=12, unique=True)),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(ops=ops, seed=st.integers(0, 2**16), k=st.integers(1, 15))
def test_knn_matches_brute_force_after_any_sequence_of_writes(ops, seed, k) -> None:
    rng = np.random.default_rng(seed)
    start = unit(rng, 10)
    matrix = VectorMatrix(np.arange(1, 11, dtype=np.int64), start.copy(), min_compact=4)  # compaction too
    model = {i + 1: start[i] for i in range(10)}
    for op, cids in ops:
        if op == "add":
            vecs = unit(rng, len(cids))
            matrix.add(list(zip(cids, vecs, strict=True)))
            model.update(zip(cids, vecs, strict=True))
        else:
            matrix.remove(cids)
            for c in cids:
                model.pop(c, None)
        assert len(matrix) == len(model)
        q = unit(rng, 1)[0]  # query between writes too: cached state (the holes) must follow every write
        assert [c for c, _ in matrix.knn(q, k)] == [c for c, _ in brute(model, q, k)]
    q = unit(rng, 1)[0]
    got = matrix.knn(q, k)
    want = brute(model, q, k)
    assert [c for c, _ in got] == [c for c, _ in want]
    np.testing.assert_allclose([s for _, s in got], [s for _, s in want], rtol=1e-5, atol=1e-6)
    allowed = {c for c in model if c % 2 == 0} | {999}
    got_f = matrix.knn(q, k, np.asarray(sorted(allowed), dtype=np.int64))
    assert [c for c, _ in got_f] == [c for c, _ in brute(model, q, k, allowed)]
    ids, mat = matrix.arrays()
    assert sorted(ids.tolist()) == sorted(model)
    for cid, row in zip(ids.tolist(), mat, strict=True):
        np.testing.assert_array_equal(row, model[cid])
    assert set(matrix.vectors(list(model) + [999])) == set(model)


def test_rewriting_a_file_reuses_its_rows_instead_of_growing() -> None:
    rng = np.random.default_rng(1)
    matrix = VectorMatrix(np.arange(1, 1001, dtype=np.int64), unit(rng, 1000))
    capacity = len(matrix._mat)
    for step in range(50):  # a sync pass rewriting one 20-chunk file: old ids out, new ids in
        old = range(1 + step * 20, 21 + step * 20)
        matrix.remove(old)
        matrix.add([(10_000 + step * 20 + i, v) for i, v in enumerate(unit(rng, 20))])
    assert len(matrix) == 1000
    assert len(matrix._mat) == capacity  # holes refilled: no reallocation, no copy of the matrix


def test_never_returns_a_removed_row_even_when_every_live_score_is_negative() -> None:
    q = np.ones(DIMS, dtype=np.float32) / np.sqrt(DIMS)
    matrix = VectorMatrix(np.array([1, 2, 3]), np.stack([-q, -q, -q]))
    matrix.remove([2])  # its row is now zeros: similarity 0 would beat every live row
    assert [c for c, _ in matrix.knn(q, 3)] in ([1, 3], [3, 1])
    matrix.remove([1, 3])
    assert matrix.knn(q, 3) == []


def test_dimension_mismatch_is_refused() -> None:
    matrix = VectorMatrix.empty(DIMS)
    with pytest.raises(ValueError):
        matrix.add([(1, np.zeros(DIMS + 1, dtype=np.float32))])


def test_an_id_added_twice_in_one_call_keeps_its_last_vector_and_one_row() -> None:
    rng = np.random.default_rng(3)
    a, b, other = unit(rng, 3)
    matrix = VectorMatrix(np.array([1]), other[None, :])
    matrix.add([(5, a), (5, b)])
    assert len(matrix) == 2 and sorted(matrix.arrays()[0].tolist()) == [1, 5]
    np.testing.assert_array_equal(matrix.vectors([5])[5], b)
    matrix.remove([5])
    assert matrix.arrays()[0].tolist() == [1]
    assert [c for c, _ in matrix.knn(a, 10)] == [1]


def test_a_refused_add_changes_nothing() -> None:
    rng = np.random.default_rng(4)
    matrix = VectorMatrix(np.array([1, 2]), unit(rng, 2))
    with pytest.raises(ValueError):
        matrix.add([(1, np.zeros(DIMS + 1, dtype=np.float32))])
    assert sorted(matrix.arrays()[0].tolist()) == [1, 2]


def test_small_knn_products_run_on_one_blas_thread() -> None:
    """Under CPU load a second BLAS thread waits for a core (a 6k x 384 product: p95 0.3 -> 86 ms): small
    products run on one thread, large ones on BLAS's default while the machine has a core to spare."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from saipling.storage import vector_matrix as vm

    def blas_threads() -> int:
        return min(i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas")

    vm._blas_controller()
    default = vm._blas_default
    if default < 2:
        pytest.skip("BLAS runs one thread here already")
    try:
        m = VectorMatrix(np.arange(1, 101, dtype=np.int64), np.eye(100, 384, dtype=np.float32))
        m.knn(np.eye(1, 384, dtype=np.float32)[0], 3)
        assert blas_threads() == 1
        assert vm.set_blas_threads_for(vm.ONE_THREAD_FLOATS + 1) == (1 if vm._busy() else default)
        assert blas_threads() == vm._blas_now
    finally:
        vm.set_blas_threads_for(0)


# -- the compact matrix (issue 34): int8 codes, candidates rescored on exact vectors -------------------------------
def compact_matrix(ids: np.ndarray, mat: np.ndarray, store: dict[int, np.ndarray], calls: list[int] | None = None):
    from saipling.storage.vector_matrix import quantize, steps_for

    def exact(cids: list[int]) -> dict[int, np.ndarray]:
        if calls is not None:
            calls.append(len(cids))
        return {c: store[c] for c in cids if c in store}

    steps = steps_for(mat)
    return VectorMatrix(ids, quantize(mat, steps), min_compact=4, steps=steps, exact=exact)


@settings(max_examples=60, deadline=None)
@given(ops=ops, seed=st.integers(0, 2**16), k=st.integers(1, 15))
def test_a_compact_matrix_answers_like_brute_force_after_any_writes(ops, seed, k) -> None:
    """Rescored on exact vectors, the codes' candidates give the exact top k and exact scores; a quarter of the
    memory of float32 rows."""
    rng = np.random.default_rng(seed)
    start = unit(rng, 10)
    model = {i + 1: start[i] for i in range(10)}
    matrix = compact_matrix(np.arange(1, 11, dtype=np.int64), start.copy(), model)
    assert matrix.compact and matrix._mat.dtype == np.int8
    for op, cids in ops:
        if op == "add":
            vecs = unit(rng, len(cids))
            model.update(zip(cids, vecs, strict=True))  # (the store holds the vector before the matrix is patched)
            matrix.add(list(zip(cids, vecs, strict=True)))
        else:
            matrix.remove(cids)
            for c in cids:
                model.pop(c, None)
        assert len(matrix) == len(model)
    q = unit(rng, 1)[0]
    got = matrix.knn(q, k)
    want = brute(model, q, k)
    assert [c for c, _ in got] == [c for c, _ in want]
    np.testing.assert_allclose([s for _, s in got], [s for _, s in want], rtol=1e-5, atol=1e-6)
    allowed = {c for c in model if c % 2 == 0} | {999}
    got_f = matrix.knn(q, k, np.asarray(sorted(allowed), dtype=np.int64))
    assert [c for c, _ in got_f] == [c for c, _ in brute(model, q, k, allowed)]
    assert matrix.compact and matrix._mat.dtype == np.int8  # compaction kept the codes


def clustered(rng: np.random.Generator, n: int, dims: int = 384, clusters: int = 40) -> np.ndarray:
    """Unit vectors around `clusters` centres (real embeddings cluster; uniform random ones have no neighbours)."""
    centres = rng.standard_normal((clusters, dims))
    v = (centres[rng.integers(0, clusters, n)] + 0.6 * rng.standard_normal((n, dims))).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.mark.parametrize("signs", [True, False])
def test_a_compact_matrix_ranks_a_large_set_on_its_codes_and_rescores_only_the_best(signs, monkeypatch) -> None:
    """A large compact matrix finds the exact top k: sign bits first (numpy >= 2), then the codes, then exact
    vectors for the best few hundred only."""
    from saipling.storage import vector_matrix as vm

    if signs and not hasattr(np, "bitwise_count"):
        pytest.skip("numpy < 2: no popcount")
    if not signs:
        monkeypatch.setattr(vm, "_has_popcount", lambda: False)
    rng = np.random.default_rng(7)
    n = 6000
    points = clustered(rng, n + 20)
    mat, queries = points[:n], points[n:]  # queries near the data, as real ones are
    ids = np.arange(1, n + 1, dtype=np.int64)
    store = {int(i): v for i, v in zip(ids, mat, strict=True)}
    calls: list[int] = []
    matrix = compact_matrix(ids.copy(), mat.copy(), store, calls)
    assert (matrix._bits is not None) == signs
    exact = VectorMatrix(ids.copy(), mat.copy())  # (a matrix owns the arrays it is given: writes them)
    assert matrix._mat.nbytes * 4 == exact._mat.nbytes  # int8 codes: a quarter of the rows' memory
    matrix.remove(range(1, 200))
    exact.remove(range(1, 200))
    allowed = np.arange(1, n + 1, 2, dtype=np.int64)
    for q in queries:
        assert [c for c, _ in matrix.knn(q, 10)] == [c for c, _ in exact.knn(q, 10)]
        assert [c for c, _ in matrix.knn(q, 10, allowed)] == [c for c, _ in exact.knn(q, 10, allowed)]
    assert calls and max(calls) <= vm.RESCORE < n  # a few candidates read back, never every row


def test_a_compact_matrix_searching_for_100_rescores_160_and_returns_the_exact_list() -> None:
    """A hybrid or semantic search asks the vector side for 100 candidates: the best 160 by code score are read
    back exactly (k + k / 2 up to a multiple of 8, not 2 x k = 200: the exact top 100 lies within them), and the
    100 returned are the exact search's, in its order, with its cosines; a search for 300 reads 456."""
    rng = np.random.default_rng(11)
    n = 6000
    points = clustered(rng, n + 10)
    mat, queries = points[:n], points[n:]
    ids = np.arange(1, n + 1, dtype=np.int64)
    store = {int(i): v for i, v in zip(ids, mat, strict=True)}
    calls: list[int] = []
    matrix = compact_matrix(ids.copy(), mat.copy(), store, calls)
    exact = VectorMatrix(ids.copy(), mat.copy())
    for q in queries:
        calls.clear()
        got, want = matrix.knn(q, 100), exact.knn(q, 100)
        assert calls == [160]
        assert [c for c, _ in got] == [c for c, _ in want]
        np.testing.assert_allclose([s for _, s in got], [s for _, s in want], rtol=1e-5, atol=1e-6)
    calls.clear()
    assert [c for c, _ in matrix.knn(queries[0], 300)] == [c for c, _ in exact.knn(queries[0], 300)]
    assert calls == [456]


def test_a_float32_matrix_turns_compact_when_it_grows_past_the_limit(monkeypatch) -> None:
    from saipling.storage import vector_matrix as vm

    rng = np.random.default_rng(8)
    store: dict[int, np.ndarray] = {}
    matrix = VectorMatrix(np.zeros(0, dtype=np.int64), np.zeros((0, DIMS), dtype=np.float32))
    matrix.exact = lambda cids: {c: store[c] for c in cids}
    monkeypatch.setattr(vm, "COMPACT_FLOATS", 100 * DIMS)
    for start in range(0, 300, 50):
        vecs = unit(rng, 50)
        store.update({start + i: v for i, v in enumerate(vecs)})
        matrix.add([(start + i, v) for i, v in enumerate(vecs)])
    assert matrix.compact and len(matrix) == 300
    q = unit(rng, 1)[0]
    assert [c for c, _ in matrix.knn(q, 5)] == [c for c, _ in brute(store, q, 5)]


@pytest.mark.parametrize("compact", [False, True])
def test_many_queries_at_once_answer_like_one_at_a_time(compact: bool) -> None:
    """knn_many (the fallback calibration's 64 samples in one product) ranks exactly as knn does, holes included."""
    from saipling.storage.vector_matrix import quantize, steps_for

    rng = np.random.default_rng(5)
    vecs = unit(rng, 300)
    ids = np.arange(1, 301, dtype=np.int64)
    if compact:
        steps = steps_for(vecs)
        m = VectorMatrix(ids, quantize(vecs, steps), steps=steps, exact=lambda c: {i: vecs[i - 1] for i in c})
    else:
        m = VectorMatrix(ids, vecs.copy())
    m.remove([3, 50, 51, 200])
    queries = unit(rng, 20)
    many = m.knn_many(queries, 12)
    assert len(many) == 20 and all(len(hits) == 12 for hits in many)
    for q, hits in zip(queries, many, strict=True):
        one = m.knn(q, 12)
        assert [c for c, _ in hits] == [c for c, _ in one]
        assert np.allclose([s for _, s in hits], [s for _, s in one], atol=1e-5)
        assert not {3, 50, 51, 200} & {c for c, _ in hits}
    assert m.knn_many(queries[:0], 12) == []


def test_a_frozen_view_keeps_its_rows_while_the_matrix_changes_saving_only_the_blocks_written() -> None:
    """VectorMatrix.freeze (what the vector snapshot writes from its thread): rows removed, replaced and added
    after the view was taken, some while it is being read, never show in it; only the blocks written are copied."""
    rng = np.random.default_rng(3)
    vecs = rng.standard_normal((1000, 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    m = VectorMatrix(np.arange(1000, dtype=np.int64), vecs.copy(), min_compact=10_000)
    m.remove([5])  # a hole before the view: not a live row of it
    state = m.freeze(block=100)
    blocks = iter(state.live_blocks())
    got = [next(blocks) for _ in range(3)]  # rows 0-299 read
    m.remove([150, 420, 421])  # one block already read, one not
    m.add([(2000, vecs[0]), (421, -vecs[421])])  # holes refilled, one id given a new vector
    m.add([(3000 + i, vecs[i]) for i in range(30)])  # past the view's rows
    got += list(blocks)
    ids = np.concatenate([g[0] for g in got])
    rows = np.concatenate([g[1] for g in got])
    want = np.array([i for i in range(1000) if i != 5])
    assert np.array_equal(ids, want) and np.array_equal(rows, vecs[want])
    assert len(state) == 999 and sorted(state._saved) == [1, 4]  # (the last add grew new arrays: nothing to save)
    m.thaw(state)
    assert 2000 in m and 150 not in m and len(m) == 999 - 3 + 2 + 30


def test_a_matrix_made_from_its_arrays_builds_no_map_of_every_id() -> None:
    """Opening a big index makes its matrix from arrays (a snapshot's, mapped): nothing per row is built before the
    first answer. A dict of every id (what was built: ~100 MB and 0.26 s of CPU at a million rows) would show in
    the memory allocated by the constructor and the first search."""
    import tracemalloc

    n, dims = 200_000, 8
    ids = np.arange(7, 7 + 3 * n, 3, dtype=np.int64)[::-1].copy()  # (not in id order)
    mat = np.zeros((n, dims), dtype=np.float32)
    mat[:, 0] = 1.0
    tracemalloc.start()
    try:
        matrix = VectorMatrix(ids, mat)
        hits = matrix.knn(np.eye(dims, dtype=np.float32)[0], 3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(hits) == 3 and len(matrix) == n
    assert peak < 24 * n  # (the scores and their partition: ~13 bytes a row; with a dict of the ids: ~146)


def test_rows_are_found_by_id_through_removals_additions_and_compaction() -> None:
    """Lookups by id (membership, vectors, removal) agree with a plain dict through a random mix of changes: rows
    removed and refilled, ids added again elsewhere, the sorted index rebuilt and the matrix compacted."""
    rng = np.random.default_rng(11)
    dims = 4
    start = rng.permutation(np.arange(1, 3001, dtype=np.int64))[:2000]
    vecs = {int(i): rng.standard_normal(dims).astype(np.float32) for i in start}
    matrix = VectorMatrix(start.copy(), np.stack([vecs[int(i)] for i in start]), min_compact=16)
    for step in range(300):
        if step % 3 == 0:
            gone = [int(i) for i in rng.choice(4000, int(rng.integers(1, 40)))]
            matrix.remove(gone)
            for g in gone:
                vecs.pop(g, None)
        else:
            picked = rng.choice(4000, int(rng.integers(1, 12)))
            new = [(int(i), rng.standard_normal(dims).astype(np.float32)) for i in picked]
            matrix.add(new)
            vecs.update(dict(new))
        probe = [int(i) for i in rng.choice(4200, 30)]
        assert {p for p in probe if p in matrix} == {p for p in probe if p in vecs}
        assert matrix.holding(probe) == {p for p in probe if p in vecs}
        assert len(matrix) == len(vecs)
    assert sorted(matrix.ids()) == sorted(vecs)
    got = matrix.vectors(list(vecs)[:50])
    assert got.keys() == set(list(vecs)[:50])
    for cid, v in got.items():
        assert np.allclose(v, vecs[cid])


def test_the_sign_pass_picks_the_pool_nearest_rows_ties_in_row_order_never_a_masked_one() -> None:
    """nearest_by_distance (the pool of a compact matrix's sign pass): exactly `pool` rows, every one nearer than
    any left out, the rows at the threshold distance taken in row order, rows marked far never taken."""
    from saipling.storage.vector_matrix import nearest_by_distance

    rng = np.random.default_rng(11)
    dist = rng.integers(0, 40, 5000).astype(np.uint16)
    dist[rng.choice(5000, 300, replace=False)] = 41  # masked (a hole or a filtered row)
    for pool in (1, 37, 500, 2000):
        got = nearest_by_distance(dist, pool, 41)
        assert len(got) == pool and np.all(np.diff(got) > 0)
        cut = int(dist[got].max())
        assert dist[np.setdiff1d(np.arange(5000), got)].min() >= cut  # nothing left out is nearer
        at = np.flatnonzero(dist == cut)
        assert np.array_equal(got[dist[got] == cut], at[: len(got[dist[got] == cut])])  # ties: the first rows
    assert np.array_equal(nearest_by_distance(dist, 10_000, 41), np.flatnonzero(dist < 41))  # fewer than the pool


@pytest.mark.skipif(not hasattr(np, "bitwise_count"), reason="numpy < 2: no popcount")
def test_a_warm_search_of_a_large_compact_matrix_allocates_nothing_the_size_of_its_rows(monkeypatch) -> None:
    """The sign pass and the pool's scoring run on buffers kept between searches, a block of rows at a time: a
    warm search's peak allocation stays far below a byte per dimension of the pool (the pool gathered and cast to
    float32 whole) and below 8 bytes a row (the XOR words of every row), while it answers as before."""
    import tracemalloc

    from saipling.storage import vector_matrix as vm
    from saipling.storage.vector_matrix import quantize, signs, steps_for

    monkeypatch.setattr(vm, "SIGN_BLOCK", 8192, raising=False)  # several blocks, the last one short
    rng = np.random.default_rng(12)
    n, dims = 60_000, 384
    vecs = clustered(rng, n + 5, dims)
    mat, queries = vecs[:n], vecs[n:]
    steps = steps_for(mat[:20_000])
    codes = quantize(mat, steps)
    ids = np.arange(1, n + 1, dtype=np.int64)
    matrix = VectorMatrix(ids, codes, steps=steps, exact=lambda c: {i: mat[i - 1] for i in c})
    matrix.remove([5, 6, 7])
    q = queries[0]
    matrix.knn(q, 10)  # (the kept buffers made)
    pool = max(vm.SIGN_POOL, n // vm.SIGN_SHARE)
    tracemalloc.start()
    try:
        got = matrix.knn(q, 10)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < min(8 * n, pool * dims)
    # the same pool as one whole pass would pick: the Hamming distances of every row, ranked
    qbits = signs((q / steps)[None, :])[0]
    dist = np.bitwise_count(signs(codes) ^ qbits).sum(axis=1)
    dist[[4, 5, 6]] = dims + 1
    assert np.array_equal(np.sort(matrix._hamming(qbits)[0])[:-3], np.sort(dist)[:-3])
    truth = sorted(((float(mat[i] @ q), i + 1) for i in range(n) if i + 1 not in (5, 6, 7)), reverse=True)[:10]
    assert [c for c, _ in got] == [c for _, c in truth]


def test_a_compact_matrix_searched_then_grown_within_its_capacity_still_searches() -> None:
    """The sign pass keeps its buffers between searches; rows added after a search (a catch-up from the journal)
    within the matrix's capacity must not leave them too short for the next search (it raised ValueError)."""
    from saipling.storage.vector_matrix import quantize, steps_for

    rng = np.random.default_rng(0)
    dims, n = 64, 9000

    def unit_rows(k: int) -> np.ndarray:
        x = rng.normal(size=(k, dims))
        return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)

    vecs = dict(enumerate(unit_rows(n), start=1))
    steps = steps_for(np.stack(list(vecs.values())))
    matrix = VectorMatrix(
        np.arange(1, n + 1),
        quantize(np.stack(list(vecs.values())), steps),
        steps=steps,
        exact=lambda cs: {c: vecs[c] for c in cs if c in vecs},
    )
    for step in range(4):
        q = unit_rows(1)[0]
        got = [c for c, _ in matrix.knn(q, 5)]
        want = sorted(vecs, key=lambda c: -float(vecs[c] @ q))[:5]
        assert len(set(got) & set(want)) >= 4, (step, got, want)
        new = dict(enumerate(unit_rows(100), start=n + 1 + step * 100))
        vecs.update(new)
        matrix.add(list(new.items()))


@pytest.mark.skipif(not hasattr(np, "bitwise_count"), reason="numpy < 2: no popcount")
def test_the_sign_pool_is_a_fortieth_of_a_large_matrix_and_keeps_its_recall(monkeypatch) -> None:
    """Past SIGN_POOL, the sign pass keeps rows / 40 for the codes (a million rows: 25k, where it kept 62.5k;
    benchmarks/README.md S21 measured the rule's recall on real MiniLM vectors and on a million of their copies):
    the rows scored on codes are no more than that, the top 10 of clustered vectors still match brute force, and a
    pool cut to 10 rows would not (the bound has teeth)."""
    from saipling.storage import vector_matrix as vm
    from saipling.storage.vector_matrix import quantize, steps_for

    monkeypatch.setattr(vm, "SIGN_POOL", 100)  # (the share decides at 40k rows, as it does past 160k by default)
    rng = np.random.default_rng(3)
    n = 40_000
    vecs = clustered(rng, n + 30, 384, 40)
    mat, queries = vecs[:n], vecs[n:]
    steps = steps_for(mat[:20_000])
    matrix = VectorMatrix(
        np.arange(n, dtype=np.int64), quantize(mat, steps), steps=steps, exact=lambda c: {i: mat[i] for i in c}
    )
    scored: list[int] = []
    pool_scores = matrix._pool_scores
    monkeypatch.setattr(matrix, "_pool_scores", lambda near, qs: scored.append(len(near)) or pool_scores(near, qs))
    truth = [set(np.argsort(-(mat @ q))[:10].tolist()) for q in queries]

    def recall() -> float:
        got = [{c for c, _ in matrix.knn(q, 10)} for q in queries]
        return float(np.mean([len(g & t) / 10 for g, t in zip(got, truth, strict=True)]))

    assert recall() >= 0.99
    assert len(scored) == len(queries) and max(scored) <= n // 40
    monkeypatch.setattr(vm, "SIGN_POOL", 10)
    monkeypatch.setattr(vm, "SIGN_SHARE", 10**9)
    assert recall() < 0.5


@pytest.mark.skipif(not hasattr(np, "bitwise_count"), reason="numpy < 2: no popcount")
def test_a_search_shares_its_blocks_with_a_helper_thread_and_answers_the_same(monkeypatch) -> None:
    """On two cores, the sign pass and the pool's scoring run their blocks on this thread and the helper
    (`in_blocks`): the helper does some of them, and the distances, pool and answers equal a one-thread search's."""
    import threading

    from saipling.storage import vector_matrix as vm
    from saipling.storage.vector_matrix import quantize, signs, steps_for

    monkeypatch.setattr(vm, "SIGN_BLOCK", 2048)
    monkeypatch.setattr(vm, "POOL_BLOCK", 256)
    monkeypatch.setattr(vm, "_busy", lambda: True)  # (a busy machine too: the helper is not gated on the load)
    monkeypatch.setattr(vm, "_cores", lambda: 2)
    rng = np.random.default_rng(5)
    n = 30_000
    vecs = clustered(rng, n + 8, 128, 20)
    mat, queries = vecs[:n], vecs[n:]
    steps = steps_for(mat)
    codes = quantize(mat, steps)

    def build() -> VectorMatrix:
        m = VectorMatrix(np.arange(1, n + 1), codes.copy(), steps=steps, exact=lambda c: {i: mat[i - 1] for i in c})
        m.remove([3, 4000, 29_999])
        return m

    one, two = build(), build()
    threads: set[str] = set()
    take = np.take

    def watched_take(*args, **kwargs):
        threads.add(threading.current_thread().name)
        return take(*args, **kwargs)

    monkeypatch.setattr(vm.np, "take", watched_take)
    for q in queries:
        monkeypatch.setattr(vm, "KNN_THREADS", 1)
        want = one.knn(q, 10)
        d1, c1 = (x.copy() for x in one._hamming(signs((q / steps)[None, :])[0]))
        monkeypatch.setattr(vm, "KNN_THREADS", 2)
        assert two.knn(q, 10) == want
        d2, c2 = two._hamming(signs((q / steps)[None, :])[0])
        assert np.array_equal(d1, d2) and np.array_equal(c1, c2)
    assert any(t.startswith("saipling-knn") for t in threads)


def test_a_matrix_of_64_dimensions_owns_its_sign_bits_once_it_owns_its_rows() -> None:
    """At <= 64 dimensions the sign bits are one word a row, already word-major: the matrix keeps them as a view
    of the buffer they came in (a mapped snapshot). `borrowed` says so and `own` copies them too: a lease let go
    while the bits still read the mapping would leave a page that SIGBUS kills the process on."""
    rng = np.random.default_rng(7)
    n, dims = 20_000, 64
    codes = rng.integers(-127, 128, size=(n, dims), dtype=np.int8)
    buf = bytearray(codes.tobytes() + vector_matrix.signs(codes).tobytes() + np.arange(n, dtype=np.int64).tobytes())
    mat = np.frombuffer(buf, dtype=np.int8, count=n * dims).reshape(n, dims)
    bits = np.frombuffer(buf, dtype=np.uint64, count=n, offset=n * dims).reshape(n, 1)
    ids = np.frombuffer(buf, dtype=np.int64, count=n, offset=n * dims + n * 8)
    exact = codes.astype(np.float32) * 0.01  # (the stored vectors the top candidates are rescored on)
    steps = np.full(dims, 0.01, dtype=np.float32)
    m = vector_matrix.VectorMatrix(ids, mat, steps=steps, bits=bits, exact=lambda c: {i: exact[i] for i in c})
    assert m.has_bits and m.borrowed
    m.own()
    assert not m.borrowed
    before = m.knn(codes[n - 5].astype(np.float32) * 0.01, 5)
    buf[:] = b"\0" * len(buf)  # (the buffer gone: nothing of the matrix may still read it)
    assert m.knn(codes[n - 5].astype(np.float32) * 0.01, 5) == before


@pytest.mark.parametrize("signs", [True, False])
def test_a_matrix_over_a_borrowed_base_grows_into_a_tail_and_answers_like_one_matrix(signs, monkeypatch) -> None:
    """Rows past a mapped snapshot (a borrowed base) go into a tail of their own: the base is never copied to make
    room (the first search after another process's edits copied the whole mapped matrix, ~1 s of CPU at a million
    rows), and the base + tail answer exactly what one matrix with the same writes answers, removed and replaced
    base rows never returned; a frozen view reads the same rows, and `own` folds the tail in."""
    from saipling.storage import vector_matrix as vm
    from saipling.storage.vector_matrix import quantize, steps_for

    if signs and not hasattr(np, "bitwise_count"):
        pytest.skip("numpy < 2: no popcount")
    if not signs:
        monkeypatch.setattr(vm, "_has_popcount", lambda: False)
    rng = np.random.default_rng(11)
    dims, n = 128, 9000
    points = clustered(rng, n + 6000, dims)
    vecs = {i + 1: points[i] for i in range(n)}
    steps = steps_for(points[:n])
    codes = quantize(points[:n], steps)
    mapped = codes.copy()  # (stands for the snapshot's mapping: the matrix gets views of it, not its own arrays)
    exact = lambda cs: {c: vecs[c] for c in cs if c in vecs}  # noqa: E731
    matrix = VectorMatrix(np.arange(1, n + 1)[:], mapped[:], steps=steps, exact=exact)
    one = VectorMatrix(np.arange(1, n + 1), codes.copy(), steps=steps, exact=exact)
    assert matrix.borrowed and not one.borrowed
    base = matrix._mat
    removed = list(range(1, 400, 3))
    nxt = n + 1
    for step in range(5):  # a catch-up's writes: new chunks, removed and re-embedded base rows
        new = {nxt + i: points[nxt - 1 + i] for i in range(900)}
        nxt += 900
        changed = {c: points[-1 - c - step] for c in range(1000 + step * 50, 1000 + step * 50 + 40)}
        vecs.update(new)
        vecs.update(changed)
        for m in (matrix, one):
            m.remove(removed[step::5])
            m.add(list(new.items()) + list(changed.items()))
        for c in removed[step::5]:
            vecs.pop(c, None)
    assert len(matrix) == len(one) == len(vecs) > n
    assert matrix._mat is base and matrix.borrowed  # the base was never copied to make room
    assert matrix._n > len(base) and len(matrix._tail) >= matrix._n - len(base)
    gone = set(removed)
    queries = list(points[n + 4500 : n + 4520]) + [points[r - 1] for r in removed[:5]]
    allowed = np.asarray(sorted(c for c in vecs if c % 3), dtype=np.int64)
    for q in queries:
        got = matrix.knn(q, 10)
        assert got == one.knn(q, 10)
        assert [c for c, _ in got] == sorted(vecs, key=lambda c: -float(vecs[c] @ q))[:10]
        assert not gone & {c for c, _ in got}
        assert matrix.knn(q, 10, allowed) == one.knn(q, 10, allowed)
    assert sorted(matrix.ids()) == sorted(vecs) and matrix.holding([n + 5, 4, 2]) == {n + 5, 2}
    view = matrix.freeze(block=1000)
    matrix.add([(nxt, points[-1])])  # (a write while the view is out: the view keeps what it saw)
    got_ids = np.concatenate([i for i, _, _ in view.live_blocks()])
    want_ids = np.concatenate([i for i, _, _ in one.live_blocks(1000)])
    assert np.array_equal(got_ids, want_ids)
    rows = np.concatenate([r for _, r, _ in view.live_blocks()])
    assert np.array_equal(rows, np.concatenate([r for _, r, _ in one.live_blocks(1000)]))
    matrix.thaw(view)
    one.add([(nxt, points[-1])])
    matrix.own()
    assert not matrix.borrowed and not len(matrix._tail) and len(matrix._mat) >= matrix._n
    for q in queries[:5]:
        assert matrix.knn(q, 10) == one.knn(q, 10)
