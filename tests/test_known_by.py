"""`knownBy` (issue 35): search and context limited to what one character knows by a chapter: scenes whose
frontmatter `pov` is them or that mention them (name or alias, retrieval/entities.py's rules), never a later chapter.
Property-tested on generated novels: the passages found are exactly the known scenes up to `maxChapter`."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fixtures import make_project, novel_project, open_project
from saipling.errors import InvalidRequest

CHARACTERS = {  # slug -> (name, aliases)
    "ada-vane": ("Ada Vane", ["Ada"]),
    "bram-holt": ("Bram Holt", ["Bram", "the Warden"]),
    "cora-lind": ("Cora Lind", ["Cora"]),
}
# words that mention a character (slug) or that must not count as mentioning anyone
MENTIONS = {
    "Ada": "ada-vane",
    "ADA's": "ada-vane",
    "Ada Vane": "ada-vane",
    "Bram's": "bram-holt",
    "the Warden": "bram-holt",
    "The Warden": "bram-holt",
    "Cora": "cora-lind",
    "Cora Lind's": "cora-lind",
}
DECOYS = ["Adamant", "bram", "the warden", "Coral", "Brampton", "`Ada`"]
FILLER = ["lantern", "river", "the", "door", "quiet", "salt"]


def profile(slug: str) -> str:
    name, aliases = CHARACTERS[slug]
    return f"---\nname: {name}\ntype: character\naliases: [{', '.join(aliases)}]\n---\n# Profile\n\nA person.\n"


scene_st = st.tuples(
    st.sampled_from([None, *CHARACTERS, "stranger"]),  # pov
    st.lists(st.sampled_from([*MENTIONS, *DECOYS, *FILLER]), max_size=12),  # body words
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    scenes=st.lists(scene_st, min_size=1, max_size=7),
    who=st.sampled_from(list(CHARACTERS)),
    max_chapter=st.one_of(st.none(), st.integers(0, 8)),
)
def test_search_finds_exactly_the_scenes_the_character_knows_up_to_the_chapter(
    tmp_path_factory: pytest.TempPathFactory, scenes: list, who: str, max_chapter: int | None
) -> None:
    files = {f"characters/{slug}/profile.md": profile(slug) for slug in CHARACTERS}
    expected = set()
    for n, (pov, body) in enumerate(scenes, start=1):
        path = f"books/book-01/phase-1/ch-{n:02d}/scene-01.md"
        pov_name = CHARACTERS[pov][0] if pov in CHARACTERS else pov
        front = f"---\npov: {pov_name}\n---\n" if pov_name else ""
        files[path] = f"{front}# Scene\n\nlantern {' '.join(body)}.\n"
        knows = pov == who or any(MENTIONS.get(w) == who for w in body)
        if knows and (max_chapter is None or n <= max_chapter):
            expected.add(path)
    root = make_project(tmp_path_factory.mktemp("p"), files)
    with open_project(root) as p:
        p.index()
        flt = {"knownBy": CHARACTERS[who][0], "maxChapter": max_chapter}
        found = p.search({"query": "lantern", "mode": "lexical", "maxResults": 100, "filter": flt})
        assert {r["filePath"] for r in found["results"]} == expected


def test_enrich_context_and_a_skill_key_limit_context_to_what_the_character_knows(tmp_path: Path) -> None:
    root = novel_project(tmp_path)
    (root / "skills").mkdir()
    (root / "skills" / "mina.toml").write_text(
        '[context.vector_search]\nenabled = true\nmode = "always"\nmax_results = 10\nknown_by = "Mina"\n'
        "max_chapter = 3\nmin_relevance = 0.0\n",
        encoding="utf-8",
    )
    with open_project(root) as p:
        p.index()
        query = "Jonathan letter castle Count night"
        everything = {
            r["filePath"] for r in p.enrich({"query": query, "skill": "mina", "knownBy": "Jonathan"})["searchResults"]
        }
        own = "characters/jonathan-harker/profile.md"  # (his page mentions him)
        assert everything and all("/ch-01/" in x or "/ch-02/" in x or x == own for x in everything), everything
        mina = {r["filePath"] for r in p.enrich({"query": query, "skill": "mina"})["searchResults"]}
        own = "characters/mina-harker/profile.md"
        assert mina and all(any(f"/ch-0{n}/" in x for n in (2, 3)) or x == own for x in mina), mina
        with pytest.raises(InvalidRequest, match="knownBy"):
            p.enrich({"query": query, "knownBy": "Nobody At All"})
        with pytest.raises(InvalidRequest, match="knownBy"):
            p.search({"query": query, "filter": {"knownBy": "Nobody At All"}})


def test_known_by_is_checked_as_a_name(tmp_path: Path) -> None:
    with open_project(novel_project(tmp_path)) as p:
        p.index()
        for bad in ("", 5):
            with pytest.raises(InvalidRequest, match="knownBy"):
                p.search({"query": "letter", "filter": {"knownBy": bad}})
        assert list(itertools.islice(p.search({"query": "letter", "filter": {"knownBy": "Mina"}})["results"], 1))


def test_cli_search_known_by(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from saipling.cli.main import main

    root = novel_project(tmp_path)
    assert CliRunner().invoke(main, ["index", str(root), "--provider", "none"]).exit_code == 0
    args = ["search", "letter", "--root", str(root), "--mode", "lexical", "--json", "-k", "20"]
    res = CliRunner().invoke(main, [*args, "--known-by", "Jonathan", "--max-chapter", "4"])
    assert res.exit_code == 0, res.output
    assert {r["filePath"] for r in json.loads(res.output)["results"]} == {
        "books/book-01/phase-1-setup/ch-02/scene-01.md"
    }
    res = CliRunner().invoke(main, [*args, "--known-by", "Lucy"])
    assert res.exit_code == 2 and "knownBy: no entity is called 'Lucy'" in res.output
