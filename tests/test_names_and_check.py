"""Names that drift and names without a page (`retrieval/names.py`), and the evidence for a continuity check
(`retrieval/continuity.py`, `saipling/checkPassage`) (issue 35)."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from fixtures import novel_project, open_project, write_file
from saipling.cli.main import main
from saipling.errors import InvalidRequest
from saipling.retrieval import continuity, names

EXTRA = "books/book-01/phase-1-setup/ch-06/scene-01.md"


def drifting(root: Path) -> Path:
    write_file(
        root,
        EXTRA,
        "# Six\n\nMinna and Jonathon met Renfield, and Renfield laughed, and then Renfield "
        "spoke; so Renfield, Renfield and Renfield left. Mind the gap, said Will; you will go. Never mind.\n",
    )
    return root


def test_drift_flags_close_names_and_not_dictionary_words(tmp_path: Path) -> None:
    with open_project(drifting(novel_project(tmp_path))) as p:
        p.index()
        found = {d.word: d for d in names.drift(p)}
        assert found["Minna"].entity.name == "Mina Harker" and found["Minna"].first == (EXTRA, 3)
        assert found["Jonathon"].name_word == "Jonathan" and found["Jonathon"].distance == 1
        assert "Mind" not in found and "Mina" not in found and "Will" not in found  # ("mind" is a word here)
        unknown = {u.word: u for u in names.unknown(p, min_count=5)}
        assert set(unknown) == {"Renfield"} and unknown["Renfield"].count == 6
        assert names.unknown(p, min_count=7) == []


def test_drift_leaves_out_titles_and_frequent_sound_alikes(tmp_path: Path) -> None:
    """A writer's hints flagged `Candy` (x5) as close to `Count`, `Lloyd` to `Lady` and `Mimi` (a character, x23)
    to `Mina`: titles are no drift targets, and a sound-alike two letters off used more than a few times is another
    name. A slip still is one (`Lucie` once, two letters off `Lucy`)."""
    root = novel_project(tmp_path)
    write_file(root, "characters/dracula/profile.md", "---\nname: Count Dracula\naliases: [the Count]\n---\n# D\n")
    write_file(root, "characters/lucy/profile.md", "---\nname: Lucy Westenra\n---\n# Lucy\n")
    write_file(root, "characters/lady/profile.md", "---\nname: Lady Arabella\n---\n# Lady Arabella\n")
    text = "Candy walked in. Lloyd sat down. Mimi laughed at the joke. " * 6 + "Then Lucie wrote back.\n"
    write_file(root, "ch-30.md", f"# Thirty\n\n{text}")
    with open_project(root) as p:
        p.index()
        found = {d.word: d for d in names.drift(p)}
        assert found["Lucie"].name_word == "Lucy"
        assert not {"Candy", "Lloyd", "Mimi"} & set(found)


def test_drift_compares_only_the_names_that_can_pass_and_finds_what_comparing_all_finds(tmp_path: Path) -> None:
    """drift() looks up the entity words a capitalised word can be close to (by dropping up to 2 characters from
    each, or by sound) instead of measuring the distance to every one: the same drifts as the measure of all of
    them (written out here as drift() did it), on 150 entities and 1,500 capitalised words made to be close."""
    rng = random.Random(5)
    base = ["".join(rng.choices("aeioulnrstmdk", k=rng.randint(4, 8))).capitalize() for _ in range(150)]

    def near(w: str) -> str:
        i = rng.randrange(len(w))
        return rng.choice([w[:i] + w[i + 1 :], w[:i] + "e" + w[i:], w[:i] + "a" + w[i + 1 :], w + "on", w[::-1]])

    files = {f"characters/c{i}/profile.md": f"---\nname: {w}\n---\n# {w}\n" for i, w in enumerate(base)}
    words = sorted({near(w).capitalize() for w in base for _ in range(10)} - set(base))
    files |= {f"ch-{k:02d}.md": " ".join(f"They met {w} there." for w in words[k::15]) + "\n" for k in range(15)}
    root = novel_project(tmp_path)
    for rel, text in files.items():
        write_file(root, rel, text)
    with open_project(root) as p:
        p.index()
        got = [(d.word, d.name_word, d.distance) for d in names.drift(p)]
        ents = names.entity_index(p, None).entities
        voc = names.vocabulary(p, None)
        skip = names.TITLES | names.COMMON
        targets = [
            (w, es)
            for w, es in names._name_words(ents).items()
            if len(w) >= names.MIN_NAME_WORD and w[0].isupper() and w not in skip
        ]
        known = {w.casefold() for w, _ in names._name_words(ents).items()}
        every = []
        for word, occ in voc.capitalised.items():
            low = word.casefold()
            if low in known or voc.lower[low] or word in skip or len(word) < names.MIN_NAME_WORD:
                continue
            if occ.first is None or any(low == t.casefold() + f for t, _ in targets for f in names._FORMS):
                continue
            best = None
            for target, es in targets:
                limit = 1 if len(target) <= 6 else 2
                d = names.distance(word, target, limit)
                rare = occ.count <= names.SOUND_ALIKE_MAX_COUNT
                if d > limit and not (d <= 2 and rare and names.sound_key(word) == names.sound_key(target)):
                    continue
                if best is None or d < best[0]:
                    best = (d, target, es[0])
            if best is not None:
                every.append((best[2].name, word, best[1], best[0]))
        expected = [(w, t, d) for _n, w, t, d in sorted(every, key=lambda x: (x[0], x[1]))]
        assert len(got) > 100 and got == expected


def test_drift_over_a_very_long_capitalised_word_and_name(tmp_path: Path) -> None:
    """A word of 3,000 letters (or an entity word as long) is not expanded into its deletions (~L^2 strings of L
    characters: gigabytes): it is more than 2 from every name, or compared by length."""
    root = drifting(novel_project(tmp_path))
    write_file(root, "notes/long.md", "# Long\n\nThey met " + "Q" + "a" * 3000 + " at dawn.\n")
    write_file(root, "characters/long/profile.md", "---\nname: Z" + "o" * 60 + "\n---\n# Long\n")
    write_file(root, "notes/near.md", "# Near\n\nThey met Z" + "o" * 59 + " at dusk.\n")
    with open_project(root) as p:
        p.index()
        found = {d.word: d for d in names.drift(p)}
        assert "Z" + "o" * 59 in found and not any(len(w) > 100 for w in found)
        assert {"Mina", "Harker"} & {d.name_word for d in found.values()}  # (the usual drifts still found)


def test_distance_and_sound() -> None:
    assert names.distance("Dorman", "Dormaan") == 1
    assert names.distance("Harker", "Hrakre") == 2  # two transpositions
    assert names.distance("abc", "xyz", limit=1) == 2  # past the limit: limit + 1
    assert names.sound_key("Dorman") == names.sound_key("Dormon") != names.sound_key("Harker")


def test_names_cli_json(tmp_path: Path) -> None:
    root = drifting(novel_project(tmp_path))
    assert CliRunner().invoke(main, ["index", str(root), "--provider", "none"]).exit_code == 0
    res = CliRunner().invoke(main, ["names", "--root", str(root), "--drift", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert {d["word"] for d in out["drift"]} >= {"Minna", "Jonathon"} and "unknown" not in out
    res = CliRunner().invoke(main, ["names", "--root", str(root), "--unknown"])
    assert res.exit_code == 0 and "Renfield" in res.output


@pytest.mark.parametrize("budget", [120, 4000])
def test_check_passage_gives_each_entity_its_profile_and_earlier_passages_within_budget(
    tmp_path: Path, budget: int
) -> None:
    root = novel_project(tmp_path)
    names_ = {
        "Mina": "characters/mina-harker/profile.md",
        "Jonathan": "characters/jonathan-harker/profile.md",
        "the Count": "characters/count-dracula/profile.md",
    }
    passages = []
    for (a, b), chapter in itertools.product(itertools.combinations(names_, 2), (2, 3, 4, 5)):
        passages.append((f"{a} spoke with {b} about the letter and the castle.", chapter, {a, b}))
    for a, chapter in itertools.product(names_, (2, 3, 4)):
        passages.append((f"That night {a} wrote a letter.", chapter, {a}))
    assert len(passages) >= 20
    with open_project(root) as p:
        p.index()
        for text, chapter, named in passages:
            r = continuity.check_passage(p, {"text": text, "chapter": chapter, "maxTokens": budget})
            assert {e["entity"]["path"] for e in r["entities"]} == {names_[n] for n in named}
            assert r["tokensUsed"] <= budget
            for e in r["entities"]:
                assert e["profile"]["facts"]["name"] and e["profile"]["text"]
                assert e["passages"], (text, chapter, e["entity"]["name"])
                for hit in e["passages"]:
                    n = int(hit["chapterId"].removeprefix("ch-"))
                    assert n <= chapter and hit["filePath"] != e["entity"]["path"]
                spans = [(h["filePath"], h["startLine"], h["endLine"]) for h in e["passages"]]
                assert not any(  # (overlapping chunks spent the budget on the same lines twice)
                    f == g and a <= d and c <= b for i, (f, a, b) in enumerate(spans) for g, c, d in spans[i + 1 :]
                ), spans
        with pytest.raises(InvalidRequest, match="text"):
            continuity.check_passage(p, {"text": ""})


def test_drift_counts_each_use_once_at_its_line_in_long_files(tmp_path: Path) -> None:
    """A long chapter is chunked in overlapping windows, and a chunk's text does not keep every blank line: a
    misspelling was counted twice where two windows overlap, and reported a line early after a double blank."""
    root = novel_project(tmp_path)
    prose = " ".join(f"The night was long and the road was cold, mile {i}." for i in range(400))
    text = f"# Chapter 9\n\n{prose}\n\n\n\nThen Minna wrote in her journal.\n\n{prose} Minna slept.\n\n{prose}\n"
    write_file(root, "books/book-01/phase-1-setup/ch-09/scene-01.md", text)
    lines = text.split("\n")
    first = next(n for n, line in enumerate(lines, 1) if "Minna" in line)
    with open_project(root) as p:
        summary = p.index()
        assert summary.chunks > 10  # (windows: the overlap is real)
        found = {d.word: d for d in names.drift(p)}
        assert found["Minna"].count == text.count("Minna") == 2
        assert found["Minna"].first == ("books/book-01/phase-1-setup/ch-09/scene-01.md", first)


def test_names_reads_visibility_from_the_text_it_reads(tmp_path: Path) -> None:
    """The vocabulary is read from disk: a file made private since it was indexed must not lend its words."""
    root = novel_project(tmp_path)
    write_file(root, "notes/plan.md", "# Plan\n\nA public note.\n")
    with open_project(root) as p:
        p.index()
        secret = "---\nvisibility: private\n---\n# Plan\n\n" + "Then Jonathon met Zorgath. " * 8 + "\n"
        write_file(root, "notes/plan.md", secret)  # (not indexed again: the row still says public)
        found = names.request(p, {"drift": True, "unknown": True, "minCount": 2})
        assert "Zorgath" not in json.dumps(found) and "notes/plan.md" not in json.dumps(found)


def test_check_passage_keeps_profile_facts_and_cjk_text_within_the_budget(tmp_path: Path) -> None:
    """The profile's facts are evidence too: a 3,000-word `backstory` came whole with `maxTokens: 10` (the budget
    counted only the profile's text and passages); a CJK profile's text was cut at 4 characters a token (a token a
    character: 4 times over)."""
    from saipling.embeddings.base import estimate_tokens

    backstory = " ".join(f"fact{i}" for i in range(3000))
    root = tmp_path / "p"
    write_file(
        root,
        "characters/marcus.md",
        f"---\nname: Marcus Cole\ntype: character\nbackstory: {backstory}\n---\n# Marcus Cole\n\nA sailor.\n",
    )
    write_file(
        root, "characters/mei.md", "---\nname: Mei Lin\ntype: character\n---\n# Mei Lin\n\n" + "梅林是一位画家" * 200
    )
    write_file(root, "ch1.md", "# Chapter 1\n\nMarcus Cole met Mei Lin at the harbor.\n")
    dates = ", ".join(f"2020-01-{d:02d}" for d in range(1, 29))  # (YAML dates: not JSON as they are)
    write_file(root, "characters/ann.md", f"---\nname: Ann Vale\ntype: character\nseen: [{dates}]\n---\n# Ann\n")

    def evidence(e: dict) -> int:
        facts = e["profile"]["facts"]
        return (
            sum(
                estimate_tokens(f"{k}: " + (v if isinstance(v, str) else json.dumps(v, default=str)))
                for k, v in facts.items()
            )
            + (estimate_tokens(e["profile"]["text"]) if e["profile"]["text"] else 0)
            + sum(estimate_tokens(h["text"]) for h in e["passages"])
        )

    with open_project(root) as p:
        p.index()
        for text, budget in [
            ("Marcus Cole met Mei Lin.", 10),
            ("Marcus Cole waved.", 10),
            ("Mei Lin waved.", 40),
            ("Ann Vale", 30),
        ]:
            r = continuity.check_passage(p, {"text": text, "maxTokens": budget})
            assert r["entities"], text
            assert r["tokensUsed"] <= budget
            assert sum(evidence(e) for e in r["entities"]) <= budget, r
        r = continuity.check_passage(p, {"text": "Marcus Cole waved.", "maxTokens": 4000})
        facts = r["entities"][0]["profile"]["facts"]
        assert (
            facts["name"] == "Marcus Cole" and facts["backstory"].startswith("fact0 fact1") and r["tokensUsed"] <= 4000
        )
