"""`saipling/mentions` and the hover's chapter look-up run on several request threads at once over one store (the
language server has four workers): every read of the mentions tables takes the store's lock, so none fails with
apsw's ThreadingViolationError ("the Connection is busy in another thread")."""

from __future__ import annotations

import threading
from pathlib import Path

from fixtures import novel_project, open_project

SCENE = "books/book-01/phase-1-setup/ch-03/scene-01.md"


def test_mentions_requests_on_several_threads_at_once(tmp_path: Path) -> None:
    from saipling.retrieval import mentions

    root = novel_project(tmp_path)
    for n in range(600):  # (enough files that a read of the mentions tables takes a while)
        note = root / f"notes/n{n:03d}.md"
        note.parent.mkdir(exist_ok=True)
        note.write_text(f"# Note {n}\n\nMina and Jonathan, note {n}.\n", encoding="utf-8")
    errors: list[BaseException] = []
    with open_project(root) as p:
        p.index()
        start = threading.Barrier(4)

        def ask(name: str) -> None:
            start.wait()
            try:
                for _ in range(150):
                    (entity,) = mentions.request(p, {"name": name})["entities"]
                    assert entity["total"] > 0
                    assert p.store.chapter_num_of(SCENE) == 3
                    assert p.store.known_paths(["characters/mina-harker/profile.md"], ["mina"])
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)

        threads = [threading.Thread(target=ask, args=(n,)) for n in ("Mina", "Jonathan", "the Count", "Mina Harker")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
