"""Entities follow the request's role (mentions, checkPassage, names, knownBy): a profile a role may not see is no
entity for that role's requests, even when the `defaultRole` (the editor's) sees it."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures import novel_project, open_project, write_file
from saipling.errors import InvalidRequest
from saipling.retrieval import continuity, mentions, names

SECRET = "characters/van-helsing/profile.md"
SECRET_TEXT = (
    "---\nname: Abraham Van Helsing\ntype: character\naliases: [Van Helsing, Abraham]\nvisibility: private\n"
    "eyes: violet\n---\n# Abraham Van Helsing\n\nSecretly the Count's brother.\n"
)
CONFIG = '[roles]\nauthor = ["public", "private"]\nreader = ["public"]\n'


def secret_project(tmp_path: Path) -> Path:
    root = novel_project(tmp_path)
    write_file(root, SECRET, SECRET_TEXT)
    write_file(root, "books/book-01/phase-1-setup/ch-06/scene-01.md", "# Six\n\nAbraham came by. Abraham left.\n")
    write_file(root, ".saipling/config.toml", CONFIG)
    return root


@pytest.fixture
def project(tmp_path: Path):  # type: ignore[no-untyped-def]
    with open_project(secret_project(tmp_path), default_role="author") as p:
        p.index()
        yield p


def test_mentions_of_a_private_entity_are_refused_to_a_public_role(project) -> None:  # type: ignore[no-untyped-def]
    assert mentions.request(project, {"name": "Van Helsing", "role": "author"})["entities"]
    with pytest.raises(InvalidRequest):
        mentions.request(project, {"name": "Van Helsing", "role": "reader"})


def test_check_passage_shows_no_private_profile_to_a_public_role(project) -> None:  # type: ignore[no-untyped-def]
    text = "Abraham Van Helsing looked at Mina with his violet eyes."
    seen = continuity.check_passage(project, {"text": text, "role": "author"})
    assert SECRET in {e["entity"]["path"] for e in seen["entities"]}
    out = continuity.check_passage(project, {"text": text, "role": "reader"})
    assert SECRET not in str(out) and "brother" not in str(out)  # (its profile's path, facts and text)
    assert [e["entity"]["path"] for e in out["entities"]] == ["characters/mina-harker/profile.md"]


def test_known_by_a_private_entity_fails_closed_for_a_public_role(project) -> None:  # type: ignore[no-untyped-def]
    assert project.search({"query": "Abraham", "role": "author", "filter": {"knownBy": "Van Helsing"}})["results"]
    with pytest.raises(InvalidRequest):
        project.search({"query": "Abraham", "role": "reader", "filter": {"knownBy": "Van Helsing"}})


def test_names_do_not_name_a_private_entity_to_a_public_role(project) -> None:  # type: ignore[no-untyped-def]
    write_file(project.root, "books/book-01/phase-1-setup/ch-07/scene-01.md", "# Seven\n\nAbrahem waved.\n")
    project.index()
    assert any(d["entityPath"] == SECRET for d in names.request(project, {"drift": True, "role": "author"})["drift"])
    out = names.request(project, {"drift": True, "role": "reader"})
    assert SECRET not in str(out) and "Van Helsing" not in str(out)


def test_check_passage_gives_no_profile_made_private_on_disk_since_indexed(tmp_path: Path) -> None:
    root = secret_project(tmp_path)
    mina = "characters/mina-harker/profile.md"
    with open_project(root) as p:
        p.index()
        write_file(
            root,
            mina,
            "---\nname: Mina Harker\nvisibility: private\nplan: betrays Jonathan\n---\n# Mina\n\nShe lies.\n",
        )
        out = continuity.check_passage(p, {"text": "Mina wrote a letter."})
        assert "betrays" not in str(out) and "She lies" not in str(out)
