"""Context enrichment (SPEC 9): skill TOML parsing, modes and wantSearch, dedup against loadedFiles and force files,
exclusion, token budget shedding, the delimiter format, skipped reasons, book scope."""

# ruff: noqa: F811  (the `api_server` fixture is imported, then requested as a parameter)

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from apiserver import FakeEmbeddingAPI, api_server  # noqa: F401  (fixture)
from fixtures import make_project, open_project, retrieval_project, write_file
from saipling.config.skills import VectorSearchConfig, load_skill, parse_block
from saipling.embeddings.base import estimate_tokens
from saipling.errors import InvalidRequest
from saipling.retrieval.enrich import EnrichRequest, should_search

MARCUS = "characters/marcus-cole/profile.md"
HARBOR = "world/places/harbor.md"  # "force" in .context_settings.json (written with backslashes)
EXCLUDED = {"notes/ideas.md", "notes/secret/plan.md"}
ALWAYS = {
    "enabled": True,
    "mode": "always",
    "min_relevance": 0,
}  # assembly tests: every passage, however weak


@pytest.fixture(scope="module")
def novel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    root = retrieval_project(tmp_path_factory.mktemp("context"))
    with open_project(root) as p:
        p.index()
        yield p


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Any]:
    """A project of its own, for tests that change files."""
    with open_project(retrieval_project(tmp_path)) as p:
        p.index()
        yield p


def blocks_of(response: dict[str, Any]) -> list[str]:
    return [b for b in response["contextBlock"].split("\n=== FILE: ") if b]


# -- skills ----------------------------------------------------------------------------------------------------
def test_skill_defaults(tmp_path: Path) -> None:
    root = retrieval_project(tmp_path)
    assert load_skill(root / "skills", "bare") == VectorSearchConfig(False, "auto", 5, 15000, [])
    assert load_skill(root / "skills", "disabled") == VectorSearchConfig(False, "always", 5, 15000, [])
    assert load_skill(root / "skills", "writer.toml") == VectorSearchConfig(True, "auto", 5, 15000, [])
    assert load_skill(root / "skills", "always") == VectorSearchConfig(True, "always", 3, 15000, [], 0.0)
    assert load_skill(root / "skills", "characters").filter_entity_types == ["character"]
    write_file(root, "skills/empty.toml", "")
    assert load_skill(root / "skills", "empty") == VectorSearchConfig()


def test_parse_block_accepts_camel_case_and_caps_max_results() -> None:
    cfg = parse_block(
        {"enabled": True, "maxResults": 500, "maxSearchTokens": 0, "filterEntityTypes": ["place"]},
        "skillConfig",
    )
    assert cfg == VectorSearchConfig(True, "auto", 100, 0, ["place"])
    with pytest.raises(InvalidRequest, match="unknown_key: is not a setting"):
        parse_block({"enabled": True, "unknown_key": 1}, "skillConfig")


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[context.vector_search\nenabled = true", "not valid TOML"),
        ("context = 3", "must be a table"),
        ("[context]\nvector_search = 3", "must be a table"),
        ('[context.vector_search]\nenabled = "yes"', "enabled"),
        ('[context.vector_search]\nmode = "sometimes"', "mode"),
        ("[context.vector_search]\nmax_results = 0", "max_results"),
        ('[context.vector_search]\nmax_results = "5"', "max_results"),
        ("[context.vector_search]\nmax_search_tokens = -1", "max_search_tokens"),
        ('[context.vector_search]\nfilter_entity_types = "character"', "filter_entity_types"),
        ("[context.vector_search]\nfilter_entity_types = [1]", "filter_entity_types"),
        (b"\xff\xfe[context]", "not valid TOML"),
        # a typo switched the spoiler horizon off, unseen
        ("[context.vector_search]\nmax_chapters = 8", "max_chapters: is not a setting of [context.vector_search] (did"),
    ],
)
def test_bad_skill_files_are_invalid_requests(tmp_path: Path, toml: str | bytes, message: str) -> None:
    write_file(tmp_path, "skills/bad.toml", toml)
    with pytest.raises(InvalidRequest) as info:
        load_skill(tmp_path / "skills", "bad")
    assert message in str(info.value)
    assert info.value.field.startswith("skill")


@pytest.mark.parametrize("name", ["missing", "../skills/writer", ".hidden", "a/b", "", " "])
def test_unknown_or_unsafe_skill_names(novel: Any, name: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        load_skill(novel.root / "skills", name)
    assert info.value.field == "skill"


def test_enrich_with_a_missing_skill_names_the_field(novel: Any) -> None:
    with pytest.raises(InvalidRequest) as info:
        novel.enrich({"query": "storm ledger", "skill": "no-such-skill"})
    assert info.value.field == "skill"


def test_skills_are_read_only_from_inside_the_project(tmp_path: Path) -> None:
    """A `skillsDir` set to a folder outside the project, or a skill file linked out of it, reads nothing there:
    the agent names the skill, the error says where skills are read from and nothing of the file outside."""
    outside = write_file(tmp_path, "elsewhere/shared.toml", "[context.vector_search\nbroken = ")
    write_file(tmp_path, "elsewhere/good.toml", '[context.vector_search]\nmode = "always"\n')
    root = make_project(tmp_path / "proj", {"notes/a.md": "# A\n\nThe storm ledger.\n", "skills/own.toml": ""})
    (root / "skills" / "linked.toml").symlink_to(outside.parent / "good.toml")
    write_file(root, ".saipling/config.toml", f'skillsDir = "{outside.parent}"\n')
    with open_project(root) as project:
        for name in ("shared", "good"):
            with pytest.raises(InvalidRequest) as info:
                project.enrich({"query": "storm ledger", "skill": name})
            assert info.value.field == "skill" and "inside the project" in str(info.value)
            assert "line" not in str(info.value) and "TOML" not in str(info.value)
    write_file(root, ".saipling/config.toml", 'skillsDir = "skills"\n')
    with open_project(root) as project:
        with pytest.raises(InvalidRequest) as info:
            project.enrich({"query": "storm ledger", "skill": "linked"})
        assert "inside the project" in str(info.value)
        assert project.enrich({"query": "storm ledger", "skill": "own"}) is not None  # a skill inside still reads


# -- when to search --------------------------------------------------------------------------------------------
def _req(mode: str, want: bool | None, query: str = "storm ledger", enabled: bool = True) -> EnrichRequest:
    return EnrichRequest(query=query, config=VectorSearchConfig(enabled=enabled, mode=mode), want_search=want)


@pytest.mark.parametrize(
    ("mode", "want", "ran"),
    [
        ("never", True, False),
        ("never", False, False),
        ("never", None, False),
        ("always", True, True),
        ("always", False, True),
        ("always", None, True),
        ("auto", True, True),
        ("auto", False, False),
    ],
)
def test_modes_and_want_search(mode: str, want: bool | None, ran: bool) -> None:
    assert should_search(_req(mode, want))[0] is ran
    assert should_search(_req(mode, want, enabled=False)) == (
        False,
        "vector search is not enabled for this skill (`enabled = true` turns it on)",
    )


@pytest.mark.parametrize(
    ("query", "ran"),
    [
        ("storm", True),  # one content word: the agent asks about it
        ("how do I disengage?", True),
        ("the storm", True),
        ("lighthouse", True),  # whether the project holds it is not asked (it would tell the agent)
        ("undo redo", True),  # (words of a subject, in a project about editing)
        ("ok thanks", False),  # conversation
        ("yes please", False),
        ("a an the of it", False),
        ("can you do it", False),
        ("go to ch", False),
        ("the storm ledger", True),
        ("where did Marcus lose his sister?", True),
    ],
)
def test_auto_heuristic_without_want_search(query: str, ran: bool) -> None:
    """Documented heuristic: search when the query has a content word (no function word, no word of conversation,
    3+ letters)."""
    result, reason = should_search(_req("auto", None, query))
    assert result is ran and reason.startswith("auto:")


def test_whether_to_search_never_tells_an_agent_what_a_hidden_file_holds(tmp_path: Path) -> None:
    """The auto heuristic asked the index whether it held a one-word query: `ran` and `reason` told an agent that
    "affair" was in an excluded diary and "embezzlement" in a private note."""
    root = make_project(
        tmp_path,
        {
            ".context_settings.json": json.dumps({"secret/": "exclude"}),
            "secret/diary.md": "# Diary\n\nThe affair began in May.\n",
            "notes/money.md": "---\nvisibility: private\n---\n# Money\n\nThe embezzlement was found.\n",
            "notes/public.md": "# Public\n\nThe harbour is quiet.\n",
        },
    )
    with open_project(root) as p:
        p.index()
        answers = [p.enrich({"query": q}) for q in ("affair", "embezzlement", "xylophone")]
    shown = [(a["ran"], a["reason"], a["noConfidentMatch"], a["contextBlock"]) for a in answers]
    assert shown[0] == shown[2] and shown[1] == shown[2]  # a hidden word answers as a word nobody wrote
    assert "affair" not in json.dumps(answers[0]["reason"]) and not answers[0]["contextBlock"]


def test_a_one_word_question_gets_context_from_the_real_index(novel: Any) -> None:
    """An agent's "flee" or "how do I disengage?" in a rules vault got an empty block with noConfidentMatch false
    (ran: false, "too short") while search ranked the page first."""
    got = novel.enrich({"query": "chandlery?", "skill": "writer"})
    assert got["ran"] is True
    assert got["contextBlock"], got
    idle = novel.enrich({"query": "thanks", "skill": "writer"})
    assert idle["ran"] is False and "wantSearch" in idle["reason"]


def test_not_running_returns_an_empty_plan(novel: Any) -> None:
    for params in (
        {"skill": "never"},
        {"skill": "disabled"},
        {"skill": "bare"},
        {"skill": "writer", "wantSearch": False},
        {"skillConfig": {"mode": "always"}},
    ):
        response = novel.enrich({"query": "storm ledger sister"} | params)
        assert response["ran"] is False and response["reason"]
        assert (response["contextBlock"], response["searchResults"], response["tokensUsed"], response["skipped"]) == (
            "",
            [],
            0,
            [],
        )
    assert novel.enrich({"query": "storm ledger sister", "skill": "writer"})["ran"] is True
    assert novel.enrich({"query": "storm", "skill": "writer", "wantSearch": True})["ran"] is True
    assert novel.enrich({"query": "ok thanks", "skill": "writer"})["ran"] is False  # heuristic: no content word
    assert novel.enrich({"query": "storm", "skill": "writer"})["ran"] is True  # one content word
    assert novel.enrich({"query": "storm ledger sister"})["ran"] is True  # no skill: enabled, auto


# -- the plan --------------------------------------------------------------------------------------------------
def test_delimiter_format_and_text_from_disk(novel: Any) -> None:
    response = novel.enrich({"query": "storm ledger sister chandlery", "skillConfig": ALWAYS, "maxResults": 4})
    assert response["ran"] and response["degraded"]  # provider none: keyword search, said so
    results = response["searchResults"]
    assert len(results) == 4
    context = response["contextBlock"]
    blocks = blocks_of(response)
    files = list(dict.fromkeys(r["filePath"] for r in results))
    assert [b.split(" (SEARCH) ===")[0].removeprefix("=== FILE: ") for b in blocks] == files  # one per file
    for r in results:
        assert set(r) >= {"filePath", "section", "similarityScore", "tokensEst", "contentPreview"}
        assert 0 <= r["similarityScore"] <= 1
        lines = (novel.root / r["filePath"]).read_text(encoding="utf-8").split("\n")
        text = "\n".join(lines[r["startLine"] - 1 : r["endLine"]]).rstrip()
        block = next(b for b in blocks if b.removeprefix("=== FILE: ").startswith(r["filePath"] + " "))
        assert text in block and re.search(rf"^--- (.* \| )?{re.escape(r['section'])}( \| .*)? \(line", block, re.M)
    for block in blocks:  # passages in file order, each headed by its heading path and lines
        starts = [int(m) for m in re.findall(r"^--- .* \(lines? (\d+)", block, re.M)]
        assert starts and starts == sorted(starts)
    assert response["tokensUsed"] == estimate_tokens(context) == sum(r["tokensEst"] for r in results)
    assert context.startswith("=== FILE: ")
    one = novel.enrich({"query": "chandlery counting rope", "skillConfig": ALWAYS, "maxResults": 1})
    assert one["contextBlock"] == (
        "=== FILE: characters/marcus-cole/profile.md (SEARCH) ===\n"
        "--- Marcus Cole > Background > Childhood (lines 13-17) ---\n"
        "## Background\n\n### Childhood\n\n"
        "He grew up above his father's chandlery, counting rope and listening to the gulls.\n"
    )
    scores = [r["similarityScore"] for r in results]
    assert scores == sorted(scores, reverse=True)


WIZARD = """# Wizard

The wizard class page.

## Spells

### Fireball

A bead of flame that bursts into a sphere of fire: the classic evoker's spell.

#### Epic Feat

Your fireball ignores resistance to fire. The epic feat for evokers.

### Lightning Bolt

A stroke of lightning in a line, for the storm callers.

## Talents

### Evocation

Evokers maximise the damage of one spell per battle.
"""


def test_one_block_per_file_with_heading_paths_in_file_order_adjacent_sections_merged(tmp_path: Path) -> None:
    root = make_project(
        tmp_path,
        {
            "classes/wizard.md": WIZARD,
            "classes/sorcerer.md": "# Sorcerer\n\n## Spells\n\nThe sorcerer's breath of fire is no evoker's spell.\n",
        },
    )
    with open_project(root) as p:
        p.index()
        response = p.enrich({"query": "evoker epic feat fireball evocation", "skillConfig": ALWAYS, "maxResults": 10})
        context = response["contextBlock"]
        assert context.count("=== FILE: classes/wizard.md (SEARCH) ===") == 1
        wizard = next(b for b in blocks_of(response) if "classes/wizard.md" in b.split("\n")[0])
        headers = re.findall(r"^--- (.*) ---$", wizard, re.M)
        # Fireball and its Epic Feat subsection are adjacent: one passage, named by the sections' full paths
        assert headers == [
            "Wizard > Spells > Fireball | Wizard > Spells > Fireball > Epic Feat (lines 5-13)",  # `## Spells` too
            "Wizard > Talents > Evocation (lines 19-23)",  # later in the file, later in the block
        ]
        assert "#### Epic Feat\n\nYour fireball ignores" in wizard
        lines = WIZARD.split("\n")
        assert "\n".join(lines[4:13]) in wizard and "Lightning" not in wizard
        sections = {r["section"] for r in response["searchResults"] if r["filePath"] == "classes/wizard.md"}
        assert "Wizard > Spells > Fireball > Epic Feat" in sections
        assert response["tokensUsed"] == estimate_tokens(context)
        # within budget: a smaller budget keeps whole passages only and never exceeds it
        small = p.enrich(
            {
                "query": "evoker epic feat fireball evocation",
                "skillConfig": ALWAYS,
                "maxResults": 10,
                "maxSearchTokens": response["tokensUsed"] // 2,
            }
        )
        assert 0 < small["tokensUsed"] <= response["tokensUsed"] // 2
        assert small["tokensUsed"] == estimate_tokens(small["contextBlock"])
        assert {"path": "classes/wizard.md", "reason": "over_budget"} in small["skipped"] or small["tokensUsed"]


def test_frontmatter_and_wiki_links_reach_the_agent_as_readable_text(tmp_path: Path) -> None:
    root = make_project(
        tmp_path,
        {
            "characters/marcus/profile.md": (
                "---\nname: Marcus Cole\nid: 42\naliases:\n  - Marc\n  - The Ferryman\n---\n# Marcus\n\n"
                "He rows the [[world/harbor|old harbor]] ferry past [[Greyhaven Light]] every night.\n"
                "![[maps/harbor.png]]\n"
            ),
        },
    )
    with open_project(root) as p:
        p.index()
        response = p.enrich({"query": "Ferryman Marc harbor ferry", "skillConfig": ALWAYS, "maxResults": 5})
        context = response["contextBlock"]
        assert "--- (frontmatter) (lines 1-7) ---\nname: Marcus Cole\naliases: Marc, The Ferryman\n" in context
        assert "  - Marc" not in context and "id: 42" not in context  # not raw YAML, no bookkeeping
        assert "He rows the old harbor ferry past Greyhaven Light every night." in context
        assert "[[" not in context and ".png" not in context
        assert not [s for s in response["skipped"] if s["reason"] == "missing"]


def test_dedup_against_loaded_files(novel: Any) -> None:
    query = {"query": "Marcus ledger storm sister chandlery", "skillConfig": ALWAYS, "maxResults": 10}
    assert MARCUS in {r["filePath"] for r in novel.enrich(query)["searchResults"]}
    for loaded in (
        MARCUS,
        "./characters\\marcus-cole\\profile.md",
        str(novel.root / MARCUS),
        (novel.root / MARCUS).as_uri(),
        f"../{novel.root.name}/{MARCUS}",
        f"characters/../{MARCUS}",
    ):
        response = novel.enrich(query | {"loadedFiles": [loaded]})
        assert MARCUS not in {r["filePath"] for r in response["searchResults"]}
        assert f"=== FILE: {MARCUS}" not in response["contextBlock"]
        assert response["skipped"].count({"path": MARCUS, "reason": "already_loaded"}) == 1
        assert response["searchResults"]


def test_force_files_are_never_added(novel: Any) -> None:
    query = {"query": "Greyhaven harbor docks quay lighthouse", "skillConfig": ALWAYS, "maxResults": 10}
    response = novel.enrich(query)
    assert HARBOR not in {r["filePath"] for r in response["searchResults"]}
    assert {"path": HARBOR, "reason": "already_loaded"} in response["skipped"]
    assert novel.search({"query": "Greyhaven quay"})["results"][0]["filePath"] == HARBOR  # search still finds it


def test_force_folder_entries(fresh: Any) -> None:
    write_file(fresh.root, ".context_settings.json", json.dumps({"characters\\": "force", "notes/": "exclude"}))
    response = fresh.enrich({"query": "Marcus Elena ledger quillfeather journal", "skillConfig": ALWAYS})
    assert not [r for r in response["searchResults"] if r["filePath"].startswith("characters/")]
    assert {s["path"] for s in response["skipped"]} <= {MARCUS, "characters/elena-vance/profile.md"}


def test_loaded_files_do_not_crowd_out_results(tmp_path: Path) -> None:
    files = {"notes/big.md": "\n\n".join(f"## Part {i}\n\nThe zircon lamp glows zircon {i}." for i in range(40))}
    for i in range(8):
        files[f"world/z{i}.md"] = f"# Z{i}\n\nA single zircon appears in this long world text about other things {i}."
    with open_project(make_project(tmp_path, files)) as p:
        p.index()
        response = p.enrich(
            {"query": "zircon lamp", "loadedFiles": ["notes/big.md"], "skillConfig": ALWAYS, "maxResults": 5}
        )
        assert [r["filePath"] for r in response["searchResults"]] == [f"world/z{i}.md" for i in range(5)]
        assert response["skipped"] == [{"path": "notes/big.md", "reason": "already_loaded"}]
        assert len(p.store.search_log(include_eval=True)) == 1  # one logged search per enrich


def test_excluded_files_never_enter_the_context(novel: Any) -> None:
    for query in (
        "cipher",
        "wolfsbane poison tea",
        "ledger could be a cipher",
        "lighthouse keeper knew the sister",
    ):
        for extra in ({}, {"loadedFiles": list(EXCLUDED)}, {"maxResults": 100}):
            response = novel.enrich({"query": query, "skillConfig": ALWAYS} | extra)
            assert not EXCLUDED & {r["filePath"] for r in response["searchResults"]}
            assert not EXCLUDED & {s["path"] for s in response["skipped"]} - set(extra.get("loadedFiles", []))
            assert "cipher" not in response["contextBlock"] and "wolfsbane" not in response["contextBlock"]


def test_budget_sheds_search_results(novel: Any) -> None:
    query = {"query": "Marcus ferry ledger storm harbor lantern", "skillConfig": ALWAYS, "maxResults": 10}
    full = novel.enrich(query)
    sizes = [r["tokensEst"] for r in full["searchResults"]]
    assert len(sizes) >= 3 and not [s for s in full["skipped"] if s["reason"] == "over_budget"]
    budget = sizes[0] + min(sizes[1:]) - 1  # room for the first and not for everything else
    tight = novel.enrich(query | {"maxSearchTokens": budget})
    assert 0 < tight["tokensUsed"] <= budget
    assert len(tight["searchResults"]) < len(full["searchResults"])
    assert tight["searchResults"][0] == full["searchResults"][0]
    assert [s for s in tight["skipped"] if s["reason"] != "over_budget"] == [
        {"path": HARBOR, "reason": "already_loaded"}  # a force file
    ]
    shed = [s["path"] for s in tight["skipped"] if s["reason"] == "over_budget"]
    assert shed and set(shed) <= {r["filePath"] for r in full["searchResults"]}
    assert len(shed) == len(set(shed))  # one entry per file and reason
    nothing = novel.enrich(query | {"maxSearchTokens": 0})
    assert (nothing["contextBlock"], nothing["searchResults"], nothing["tokensUsed"]) == ("", [], 0)
    assert {s["reason"] for s in nothing["skipped"]} == {"already_loaded", "over_budget"}
    n = len(full["searchResults"])  # every passage it found, none added: `reason` says why (not why it searched)
    assert nothing["reason"] == f"skill mode is always; the {n} passages found are each over the 0-token budget"
    assert tight["reason"] == full["reason"] == "skill mode is always"  # something was added: nothing to explain
    # total budget: what the agent already loaded counts against it
    rest = novel.enrich(query | {"totalBudgetTokens": 10_000, "loadedTokens": 10_000 - budget})
    assert rest["tokensUsed"] == tight["tokensUsed"]
    assert novel.enrich(query | {"totalBudgetTokens": 100, "loadedTokens": 500})["tokensUsed"] == 0


def test_skill_budget_and_max_results_with_overrides(novel: Any) -> None:
    response = novel.enrich({"query": "Marcus ferry ledger storm harbor", "skill": "always"})
    assert len(response["searchResults"]) == 3  # always.toml: max_results = 3
    response = novel.enrich({"query": "Marcus ferry ledger storm harbor", "skill": "always", "maxResults": 1})
    assert len(response["searchResults"]) == 1


def test_skill_entity_type_filter(novel: Any) -> None:
    response = novel.enrich(
        {"query": "Marcus Elena harbor ferry ledger journal", "skill": "characters", "maxResults": 10}
    )
    files = {r["filePath"] for r in response["searchResults"]}
    assert files and all(f.startswith("characters/") for f in files)


def test_inline_skill_config(novel: Any) -> None:
    for inline in (
        {"enabled": True, "mode": "always", "max_results": 2},
        {"context": {"vector_search": {"enabled": True, "mode": "always", "maxResults": 2}}},
    ):
        response = novel.enrich({"query": "Marcus ferry ledger storm", "skillConfig": inline})
        assert response["ran"] and len(response["searchResults"]) == 2
    response = novel.enrich({"query": "Marcus ferry ledger", "skillConfig": {"context": {}}})
    assert response["ran"] is False  # an empty block: the defaults (disabled)
    # a key that is no setting is refused, naming it (it was ignored: the defaults ran, and said nothing)
    for inline, says in (({"maxResult": 2}, "did you mean maxResults?"), ({"bogus": 1}, "one of enabled, mode")):
        with pytest.raises(InvalidRequest) as info:
            novel.enrich({"query": "Marcus ferry ledger", "skillConfig": inline})
        assert info.value.field == f"skillConfig.{next(iter(inline))}" and says in str(info.value)


def test_book_scope(novel: Any) -> None:
    query = {"query": "marigold fields harbor road ferry", "skillConfig": ALWAYS, "maxResults": 20}
    book_two = "books/book-02/phase-5-bloom/ch-01/scene-01.md"
    assert book_two in {r["filePath"] for r in novel.enrich(query)["searchResults"]}
    scoped = {r["filePath"] for r in novel.enrich(query | {"bookId": "book-01"})["searchResults"]}
    assert book_two not in scoped
    assert {p for p in scoped if p.startswith("books/")} and {p for p in scoped if not p.startswith("books/")}
    assert book_two in {r["filePath"] for r in novel.enrich(query | {"bookId": "book-02"})["searchResults"]}


def test_missing_or_unreadable_files(fresh: Any) -> None:
    gone = "books/book-01/phase-5-bloom/ch-03/scene-01.md"
    binary = "books/book-01/phase-5-bloom/ch-01/scene-01.md"
    (fresh.root / gone).unlink()
    write_file(fresh.root, binary, b"\x00\x01binary now\x00")
    response = fresh.enrich({"query": "Marcus steers lantern ferry ledger", "skillConfig": ALWAYS, "maxResults": 10})
    files = {r["filePath"] for r in response["searchResults"]}
    assert gone not in files and binary not in files
    # changed on disk since it was indexed: the search's lazy sync re-read it, and a binary file leaves the index
    assert fresh.store.get_file(binary) is None
    assert gone not in {s["path"] for s in response["skipped"] if s["reason"] != "missing"}
    assert fresh.store.get_file(gone) is None  # dropped by the search and deindexed
    assert response["searchResults"]


def test_enrich_with_vectors(tmp_path: Path, api_server: FakeEmbeddingAPI) -> None:
    root = retrieval_project(tmp_path)
    opts = {"base_url": api_server.url + "/v1", "model": "text-embedding-3-small", "max_retries": 0}
    with open_project(root, provider="openai", **opts) as p:
        p.index()
        response = p.enrich({"query": "who lost a sister to the storm", "skill": "always", "loadedFiles": [MARCUS]})
        assert response["ran"] and response["degraded"] is None
        files = {r["filePath"] for r in response["searchResults"]}
        assert len(response["searchResults"]) == 3 and not files & ({MARCUS, HARBOR} | EXCLUDED)
        source = {r.source for r in p.store.search_log(include_eval=True)}
        assert source == {"agent"}


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({}, "query"),
        ({"query": ""}, "query"),
        ({"query": "  "}, "query"),
        ({"query": 3}, "query"),
        ({"query": "a \ud800"}, "query"),
        ({"query": "q", "skill": 3}, "skill"),
        ({"query": "q", "skillConfig": "x"}, "skillConfig"),
        ({"query": "q", "skillConfig": {"context": 3}}, "skillConfig"),
        ({"query": "q", "skillConfig": {"context": {"vector_search": []}}}, "skillConfig"),
        ({"query": "q", "skillConfig": {"enabled": "yes"}}, "skillConfig.enabled"),
        ({"query": "q", "skillConfig": {"mode": "sometimes"}}, "skillConfig.mode"),
        ({"query": "q", "loadedFiles": "a.md"}, "loadedFiles"),
        ({"query": "q", "loadedFiles": [3]}, "loadedFiles[0]"),
        ({"query": "q", "bookId": 1}, "bookId"),
        ({"query": "q", "wantSearch": "yes"}, "wantSearch"),
        ({"query": "q", "maxResults": 0}, "maxResults"),
        ({"query": "q", "maxResults": "3"}, "maxResults"),
        ({"query": "q", "maxSearchTokens": -1}, "maxSearchTokens"),
        ({"query": "q", "maxSearchTokens": True}, "maxSearchTokens"),
        ({"query": "q", "totalBudgetTokens": 1.5}, "totalBudgetTokens"),
    ],
)
def test_enrich_validation_names_the_field(novel: Any, params: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        novel.enrich(params)
    assert info.value.field == field


def test_enrich_rejects_non_object(novel: Any) -> None:
    with pytest.raises(InvalidRequest) as info:
        novel.enrich("storm")  # type: ignore[arg-type]
    assert info.value.field == "params"


def test_passages_come_from_the_file_as_it_is_now_or_are_reported_missing(tmp_path: Path) -> None:
    root = make_project(
        tmp_path,
        {
            "big.md": "# Big\n\n"
            + "\n\n".join(f"## Section {i}\n\nThe lighthouse keeper logs storm {i} at dawn." for i in range(6))
            + "\n",
            "other.md": "# Other\n\nA second lighthouse keeper writes of a storm at dawn too.\n",
        },
    )
    query = {"query": "lighthouse keeper storm dawn", "skillConfig": ALWAYS, "maxResults": 10}
    with open_project(root) as p:
        p.index()
        before = p.enrich(query)
        assert any(r["filePath"] == "big.md" for r in before["searchResults"])
        (root / "big.md").write_text("# Big\n\nShort now.\n", encoding="utf-8")  # edited, not yet reindexed
        after = p.enrich(query)  # the lazy sync re-reads big.md first: its old passages are gone
        assert "big.md" not in {r["filePath"] for r in after["searchResults"]}
        assert "=== FILE: big.md" not in after["contextBlock"]
        assert "=== FILE: other.md" in after["contextBlock"]
        # lines inserted above a passage: the passage is found where it is now, with its own text
        (root / "big.md").write_text(
            "# Big\n\n" + "filler\n" * 7 + "\n## Storm\n\nThe lighthouse keeper logs a storm at dawn.\n",
            encoding="utf-8",
        )
        p.mark_dirty("big.md")  # (what a save or a watcher event does; the server also refreshes it at once)
        moved = p.enrich(query)
        (hit,) = [r for r in moved["searchResults"] if r["filePath"] == "big.md"]
        lines = (root / "big.md").read_text(encoding="utf-8").split("\n")
        assert "logs a storm at dawn" in "\n".join(lines[hit["startLine"] - 1 : hit["endLine"]])
        assert "logs a storm at dawn" in moved["contextBlock"]


def test_an_unchanged_file_gives_its_passage_even_when_the_chunk_text_is_not_verbatim(tmp_path: Path) -> None:
    root = make_project(
        tmp_path,
        {
            "dialogue.md": '# Talk\n\n"Come home." The ferryman did not answer. "Please come home."\n',
            "other.md": "# Other\n\nNotes on the harbor tides.\n",
        },
    )
    query = {"query": "ferryman come home answer", "skillConfig": ALWAYS}
    with open_project(root) as p:
        p.index()
        # an index whose chunk text is not the file's verbatim (an older chunker dropped a closing quote:
        # `home.` for `home."`; CJK sentences were joined by spaces): the file is unchanged, so its lines hold
        p.store.conn.execute("UPDATE chunks SET text = replace(text, 'home.\"', 'home.') WHERE path = 'dialogue.md'")
        response = p.enrich(query)
        assert "=== FILE: dialogue.md" in response["contextBlock"]
        assert '"Come home." The ferryman' in response["contextBlock"]  # as the file has it
        assert {"path": "dialogue.md", "reason": "missing"} not in response["skipped"]


def test_a_paragraph_on_one_long_line_is_given_once_per_chunk_not_whole_each_time(tmp_path: Path) -> None:
    sentences = " ".join(f"The harbour pilot number {i} guides the ship past the reef." for i in range(400))
    root = make_project(tmp_path, {"oneline.md": "# One\n\n" + sentences + "\n"})
    with open_project(root) as p:
        p.index()
        n_chunks = len(p.store.chunks_for_path("oneline.md"))
        assert n_chunks > 2  # the line was split
        response = p.enrich(
            {"query": "harbour pilot reef ship", "skillConfig": ALWAYS, "maxResults": 10, "maxSearchTokens": 100_000}
        )
        assert len(blocks_of(response)) == 1  # one block per file
        passages = re.split(r"^--- .* ---$", response["contextBlock"], flags=re.M)[1:]
        assert len(passages) > 1 and len(set(passages)) == len(passages)  # no passage repeated
        assert all(len(b) < len(sentences) / 2 for b in passages)  # each passage is its chunk, not the whole line
        assert response["tokensUsed"] < estimate_tokens(sentences) * 1.5


def test_token_estimates_count_cjk_characters_as_tokens() -> None:
    assert estimate_tokens("a" * 400) == 100  # about 4 characters a token
    assert estimate_tokens("東京タワー" * 20) == 100  # a token a character, not 25
    assert estimate_tokens("Café " * 80) == 100  # accented Latin is not wide


def test_a_cjk_context_block_stays_within_its_budget(tmp_path: Path) -> None:
    body = "\n\n".join(f"## 第{i}章\n\n" + "灯台守は毎晩嵐の海を見張っている。" * 12 for i in range(8))
    root = make_project(tmp_path, {"灯台.md": "# 灯台\n\n" + body + "\n"})
    with open_project(root) as p:
        p.index()
        response = p.enrich(
            {"query": "灯台守は毎晩嵐の海を見張っている 灯台", "skillConfig": ALWAYS, "maxSearchTokens": 300}
        )
        text = response["contextBlock"]
        assert text and response["tokensUsed"] <= 300
        cjk = sum(1 for c in text if "\u3040" <= c <= "\u9fff")
        assert cjk <= 300  # at most a token of budget per character


# -- passages that start at a sentence and leave out what is not indexed (issue 31) -------------------------


def _wrapped(text: str, width: int = 72) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width)


def test_a_window_that_starts_inside_a_line_is_given_from_its_sentence(tmp_path: Path) -> None:
    sentences = [f"The harbour pilot number {i} guides the ship past the reef." for i in range(160)]
    sentences[120] = "The albatross circles twice above the mast before the storm."
    lines = _wrapped(" ".join(sentences))  # a hard-wrapped paragraph: most sentences start inside a line
    root = make_project(tmp_path, {"wrapped.md": "# Pilots\n\n" + "\n".join(lines) + "\n"})
    with open_project(root) as p:
        p.index()
        chunks = p.store.chunks_for_path("wrapped.md")
        assert len(chunks) > 1
        (hit,) = [c for c in chunks if "albatross" in c.text][:1]
        disk = (root / "wrapped.md").read_text(encoding="utf-8").split("\n")
        first = disk[hit.start_line - 1]
        assert not first.startswith(hit.text.split()[0] + " " + hit.text.split()[1])  # (starts inside it)
        response = p.enrich({"query": "albatross", "skillConfig": ALWAYS, "wantSearch": True})
        passages = re.split(r"^--- .* ---$", response["contextBlock"], flags=re.M)[1:]
        assert passages and "albatross" in response["contextBlock"]
        for passage in passages:
            body = passage.strip("\n")
            assert body.startswith(("The ", "# ")), body[:80]  # a sentence's start, not another's end
            # no line is missing: the passage holds every word of its chunk, in order
            assert " ".join(hit.text.split()) in " ".join(body.split())


def test_link_definitions_and_comments_at_a_passage_end_are_left_out(tmp_path: Path) -> None:
    doc = (
        "# Streams\n\n## `fs.createReadStream(path)`\n\n<!-- YAML\nadded: v0.1.31\n-->\n\n"
        "Returns a new readable stream for the file at `path`, read in chunks.\n\n"
        + "\n".join(f"[`ref{i}()`]: #ref{i}" for i in range(30))
        + "\n"
    )
    root = make_project(tmp_path, {"fs.md": doc, "other.md": "# Other\n\nNotes on the harbor tides.\n"})
    with open_project(root) as p:
        p.index()
        response = p.enrich({"query": "readable stream file", "skillConfig": ALWAYS})
        block = response["contextBlock"]
        assert "Returns a new readable stream" in block
        assert "]: #ref" not in block  # the definitions after the last chunk's text are not given
        (hit,) = [r for r in response["searchResults"] if r["filePath"] == "fs.md"]
        # the chunk's line range still covers them (the lines are not lost for `get`)
        assert hit["endLine"] == doc.count("\n")


def test_a_loaded_file_that_answers_best_does_not_sink_the_other_passages(tmp_path: Path) -> None:
    """Each result's score is measured against the best one: when that was a loaded file (or a force file), every
    other passage fell under min_relevance and the agent got nothing ("best score 0.90 is below 0.50")."""
    crew = "The hunters of the Count: the crew of light, sworn hunters of the Count. " * 12
    files = {
        "world/crew.md": "# The Crew of Light\n\n" + crew,
        "books/ch-04.md": "# Chapter 4\n\nThe hunters met at dusk and swore to find the coffins of the Count.\n",
        **{f"notes/n{i}.md": f"# Note {i}\n\nRain over Whitby; the count of ships was low.\n" for i in range(12)},
    }
    root = make_project(tmp_path, files)
    with open_project(root) as project:
        project.index()
        ask = {"query": "hunters of the Count", "skillConfig": ALWAYS | {"min_relevance": 0.7}, "maxResults": 3}
        free = project.enrich(ask)
        assert [r["filePath"] for r in free["searchResults"]][:1] == ["world/crew.md"]
        loaded = project.enrich(ask | {"loadedFiles": ["world/crew.md"]})
        assert [r["filePath"] for r in loaded["searchResults"]] == ["books/ch-04.md"], loaded["reason"]
        assert {"path": "world/crew.md", "reason": "already_loaded"} in loaded["skipped"]


def test_a_file_with_a_passage_in_the_context_is_not_listed_as_skipped_for_low_relevance(tmp_path: Path) -> None:
    """`skipped` is per file: a file whose strong passage was added and whose weak one was not was listed as
    skipped for low relevance beside its own passage in searchResults."""
    strong = "The lighthouse keeper climbs the lighthouse stair to light the lighthouse lamp at dusk."
    weak = " ".join(f"Gulls cry over grey water, wave {i}." for i in range(200)) + " A lighthouse far off."
    files = {
        "notes/keeper.md": f"# Keeper\n\n## Duty\n\n{strong}\n\n## Weather\n\n{weak}\n",
        **{f"notes/other-{i}.md": f"# Other {i}\n\nBread and cheese at the inn, day {i}.\n" for i in range(8)},
    }
    root = make_project(tmp_path, files)
    with open_project(root) as project:
        project.index()
        response = project.enrich(
            {"query": "lighthouse keeper lamp", "skillConfig": ALWAYS | {"min_relevance": 0.6}, "maxResults": 5}
        )
        added = {r["filePath"] for r in response["searchResults"]}
        assert "notes/keeper.md" in added
        assert not {s["path"] for s in response["skipped"] if s["reason"] == "low_relevance"} & added


def test_while_the_first_index_runs_an_empty_answer_is_not_nothing_relevant(tmp_path: Path) -> None:
    """An agent calling at once after `saipling mcp` started was told noConfidentMatch (nothing relevant exists)
    by search and enrich_context while the first index was still being built."""
    root = make_project(tmp_path, {"notes/deploy.md": "# Deployment\n\nWe deploy with a blue-green switch.\n"})
    with open_project(root) as project:
        project.state.is_indexing = True  # (the first run, not yet at this file)
        found = project.search({"query": "how do we deploy"})
        assert found["results"] == [] and found["indexing"] and found["noConfidentMatch"] is False
        assert "still being built" in found["note"]
        enriched = project.enrich({"query": "how do we deploy our service", "skillConfig": ALWAYS})
        assert enriched["indexing"] and not enriched["noConfidentMatch"] and "still being built" in enriched["reason"]
        project.state.is_indexing = False
        project.index()
        done = project.search({"query": "blue-green deploy"})
        assert done["results"] and "note" not in done and done["indexing"] is False


def test_a_passage_under_no_heading_is_labelled_by_where_it_is(tmp_path: Path) -> None:
    """A passage at lines 25-30 of a file without headings was labelled "(start of file)" (first-hour trial)."""
    body = "\n\n".join(f"Paragraph {i} about the grey harbour and its lighthouse keeper." for i in range(40))
    root = make_project(tmp_path, {"notes/log.md": f"{body}\n\nThe quillwort smuggler hides in the cove.\n"})
    with open_project(root) as project:
        project.index()
        got = project.enrich({"query": "quillwort smuggler cove", "skillConfig": {"enabled": True, "mode": "always"}})
    block = got["contextBlock"]
    assert "quillwort" in block and "(no heading)" in block and "(start of file)" not in block


# -- passages with what they lean on ---------------------------------------------------------------------------
SMALL_WINDOWS = {"max_tokens": 100, "target_tokens": 90, "overlap_tokens": 10}


def _para(template: str, n: int = 6) -> str:
    return " ".join(template.format(i) for i in range(n))


def test_nearby_passages_of_one_section_come_with_the_lines_between(tmp_path: Path) -> None:
    """Two passages a paragraph apart in one section are given as one with that paragraph (a class's spell-choice
    rule came as lines 122-128 and 142-147 without 132-140, the rule itself); a section between them that neither
    is in is not."""
    keeper = (
        "# Keeper\n\n## Duties\n\n"
        + _para("The lantern keeper {} trims the wick above the harbour.")
        + "\n\n"
        + _para("Then gulls {} quarrel over the fish market roofs.")
        + "\n\n"
        + _para("The lantern keeper {} logs each ship in the harbour.")
        + "\n\n"
        + _para("Pigeons {} nest in the eaves of the old customs shed by the quay.", 12)
        + "\n\n"
        + _para("Bakers {} sell rye bread from carts along the cobbled street.", 12)
        + "\n\n## Market\n\n"
        + _para("Stall {} sells salt cod and rope by the pound.")
        + "\n\n## Night\n\n"
        + _para("At night the lantern keeper {} climbs to the harbour light.")
        + "\n"
    )
    root = make_project(tmp_path, {"keeper.md": keeper, "other.md": "# Other\n\nNothing at all here.\n"})
    with open_project(root, chunking=SMALL_WINDOWS) as p:
        p.index()
        starts = sorted(c.start_line for c in p.store.chunks_for_path("keeper.md"))
        assert len(starts) >= 5, starts  # (one chunk a paragraph: the test's premise)
        got = p.enrich({"query": "lantern keeper harbour", "skillConfig": ALWAYS, "maxResults": 3})
    assert sorted(r["startLine"] for r in got["searchResults"]) == [1, 9, 19]  # (Duties is too long to give whole)
    context = got["contextBlock"]
    assert "lantern keeper 0 trims" in context and "lantern keeper 0 logs" in context
    assert "gulls 0 quarrel" in context  # the paragraph between them, in their section
    assert "salt cod" not in context  # a section neither passage is in
    assert "climbs to the harbour light" in context
    headers = re.findall(r"^--- (.*) ---$", context, re.M)
    assert len(headers) == 2, headers


def test_a_piece_of_a_paragraph_on_one_line_comes_as_the_whole_paragraph(tmp_path: Path) -> None:
    """A chunk that is part of a paragraph written on one line was given alone ("That animal companion will be one
    level lower..." without the sentence before it); a paragraph of a few hundred tokens is given whole."""
    line = _para("Sentence {} tells of the mill and its wheel turning slowly.", 10)
    line += " The miller hides the silver ledger under the third stone."
    root = make_project(tmp_path, {"mill.md": "# Mill\n\n" + line + "\n", "other.md": "# Other\n\nNothing here.\n"})
    with open_project(root, chunking=SMALL_WINDOWS) as p:
        p.index()
        assert len(p.store.chunks_for_path("mill.md")) >= 2  # (the line was split: the test's premise)
        got = p.enrich({"query": "silver ledger third stone", "skillConfig": ALWAYS, "maxResults": 1})
    context = got["contextBlock"]
    assert "Sentence 0 tells of the mill" in context and "silver ledger under the third stone." in context
    assert context.count("silver ledger") == 1


def test_a_passage_of_a_small_section_comes_as_the_whole_section(tmp_path: Path) -> None:
    """A spell's passage came without the table its own text points to ("roll a d4 for the effect"): a section of
    at most SECTION_TOKENS is given whole; a longer one as its passages."""
    spell = (
        "# Spells\n\n## Blarrrrgh\n\n"
        + _para("The caster {} spews a cone of chaotic bile at nearby enemies and rolls a d4 for the effect.", 5)
        + "\n\n| d4 | Effect |\n|----|----|\n| 1 | dazed |\n| 2 | weakened |\n| 3 | hampered |\n| 4 | confused |\n\n"
        + "## Long\n\n"
        + _para("Sentence {} of a long section about the wheel of the mill turning in the stream below.", 40)
        + "\n\n"
        + _para("The miller {} keeps a ledger of flour sacks in the loft above.", 4)
        + "\n"
    )
    root = make_project(tmp_path, {"spells.md": spell, "other.md": "# Other\n\nNothing here.\n"})
    with open_project(root, chunking=SMALL_WINDOWS) as p:
        p.index()
        assert len([c for c in p.store.chunks_for_path("spells.md") if c.heading_path == "Spells > Blarrrrgh"]) >= 2
        got = p.enrich({"query": "chaotic bile cone caster", "skillConfig": ALWAYS, "maxResults": 1})
        assert "| 4 | confused |" in got["contextBlock"] and "chaotic bile" in got["contextBlock"]
        long = p.enrich({"query": "miller ledger flour sacks loft", "skillConfig": ALWAYS, "maxResults": 1})
        assert "ledger of flour" in long["contextBlock"] and "Sentence 0 of a long" not in long["contextBlock"]


def test_a_list_of_paths_in_the_settings_is_read_as_exclusions(tmp_path: Path) -> None:
    """`{"exclude": ["secret/"]}` (a plausible wrong shape) excluded a file named `exclude` and left `secret/` to
    agents; the paths a list names are excluded (fail closed) and the author is told how to write it."""
    root = make_project(
        tmp_path,
        {
            ".context_settings.json": json.dumps({"exclude": ["secret/", "notes/diary.md"]}),
            "secret/plan.md": "# Plan\n\nThe lighthouse code is 4711.\n",
            "notes/diary.md": "# Diary\n\nThe lighthouse keeper hid the code.\n",
            "notes/public.md": "# Public\n\nThe lighthouse stands on the cliff.\n",
        },
    )
    with open_project(root) as p:
        p.index()
        found = {r["filePath"] for r in p.search({"query": "lighthouse code", "maxResults": 10})["results"]}
        context = p.enrich({"query": "lighthouse code keeper", "wantSearch": True})["contextBlock"]
        warnings = json.dumps(p.status()["warnings"])
    assert found == {"notes/public.md"}
    assert "4711" not in context and "hid the code" not in context
    assert "names paths" in warnings


MINA_SETEXT = """---
type: character
name: Mina
---
# Mina

## Appearance

Mina has green eyes and a lighthouse keeper's scarf.

Chapter 21
----------

SPOILER: Mina loses her left eye in the siege of the tower.

## Habits

Mina keeps the lighthouse lamp burning and writes in her green notebook.
"""


def test_the_lines_between_passages_never_cross_a_section_past_the_spoiler_horizon(tmp_path: Path) -> None:
    """Gap filling saw only `#` headings: a setext `Chapter 21` section between two passages was given with them,
    past maxChapter 5 (the review of session 24)."""
    root = make_project(tmp_path, {"characters/mina.md": MINA_SETEXT, "chapters/ch-01/a.md": "# One\n\nSail.\n"})
    with open_project(root) as p:
        p.index()
        got = p.enrich({"query": "Mina green lighthouse", "wantSearch": True, "maxChapter": 5})
        free = p.enrich({"query": "Mina green lighthouse", "wantSearch": True})
    assert "green eyes" in got["contextBlock"] and "green notebook" in got["contextBlock"]
    assert "SPOILER" not in got["contextBlock"]
    assert "SPOILER" in free["contextBlock"]  # (without a horizon the section is the file's to give)


def test_a_piece_of_a_long_paragraph_still_fits_a_tight_budget(tmp_path: Path) -> None:
    """The whole paragraph is tried first; when it does not fit, the piece that holds the answer is given (the
    first version gave nothing under a 150-token budget)."""
    line = _para("Sentence {} tells of the mill and its wheel turning slowly in the stream.", 14)
    line += " The miller hides the silver ledger under the third stone."
    root = make_project(tmp_path, {"mill.md": "# Mill\n\n" + line + "\n", "other.md": "# Other\n\nNothing here.\n"})
    with open_project(root, chunking=SMALL_WINDOWS) as p:
        p.index()
        tight = p.enrich({"query": "silver ledger third stone", "wantSearch": True, "maxSearchTokens": 150})
        roomy = p.enrich({"query": "silver ledger third stone", "wantSearch": True, "maxSearchTokens": 5000})
    assert "silver ledger" in tight["contextBlock"] and 0 < tight["tokensUsed"] <= 150
    assert "Sentence 0 tells" in roomy["contextBlock"]  # (room for the whole paragraph)


@pytest.mark.parametrize(
    "settings",
    [
        {"exclude": "secret/"},
        {"exclude": {"secret/": "exclude"}},
        {"force": {"secret/": "force"}},
        {"exclude": ["secret/"]},
        {"exclude": [{"path": "secret/"}]},  # (any depth: the re-review of session 24)
        {"exclude": {"paths": ["secret/"]}},
        {"exclude": [["secret/"]]},
    ],
)
def test_any_shape_that_names_a_path_excludes_it(tmp_path: Path, settings: dict) -> None:
    """A string or object under a mode's name excluded nothing (only a warning); every path another shape names
    is excluded (fail closed), as a list's were."""
    root = make_project(
        tmp_path,
        {
            ".context_settings.json": json.dumps(settings),
            "secret/plan.md": "# Plan\n\nThe lighthouse code is 4711.\n",
            "notes/public.md": "# Public\n\nThe lighthouse stands on the cliff.\n",
        },
    )
    with open_project(root) as p:
        p.index()
        found = {r["filePath"] for r in p.search({"query": "lighthouse code", "maxResults": 10})["results"]}
    assert found == {"notes/public.md"}


def test_a_heading_alone_between_two_passages_keeps_them_apart() -> None:
    """A setext heading whose section holds nothing has no chunk of its own: the chunk sections alone let the lines
    between two passages of one section cross it (`Chapter 21: Mina betrays the crew`, the re-review of session
    24). The passages stay two."""
    from saipling.retrieval.enrich import _merge, _Span

    lines = [
        "# Mina",
        "## Habits",
        "Mina keeps the lighthouse lamp burning every night.",
        "",
        "Chapter 21: Mina betrays the crew",
        "----------",
        "## Habits",
        "Mina writes in her green notebook at the lighthouse.",
    ]
    a = _Span(3, 3, lines[2], ["Mina > Habits"], True)
    b = _Span(8, 8, lines[7], ["Mina > Habits"], True)
    merged = _merge([a, b], lines, None, [(1, 3, "Mina > Habits"), (7, 8, "Mina > Habits")])
    assert [(s.start, s.end) for s in merged] == [(3, 3), (8, 8)]
    assert not any("betrays" in s.text for s in merged)


def test_a_paragraph_on_one_line_given_whole_does_not_come_again_as_its_pieces(tmp_path: Path) -> None:
    """Dracula, chapter 8, line 26 (135 words on one line): the agent's context held the whole paragraph, then
    under the same `(line 26)` header one of its windows again ("She seemed, even in her sleep, ..."), text the
    agent had just read: a window of a line already given whole adds nothing."""
    line = _para("Sentence {} tells how Lucy walked in her sleep along the cliff at night.", 10)
    root = make_project(tmp_path, {"whitby.md": "# Whitby\n\n" + line + "\n", "other.md": "# Other\n\nNothing.\n"})
    with open_project(root, chunking=SMALL_WINDOWS) as p:
        p.index()
        assert len(p.store.chunks_for_path("whitby.md")) >= 2  # (the line was split: the test's premise)
        got = p.enrich({"query": "Lucy walked in her sleep along the cliff", "skillConfig": ALWAYS, "maxResults": 5})
    context = got["contextBlock"]
    assert "Sentence 0 tells" in context and "Sentence 9 tells" in context  # the paragraph, whole
    for i in range(10):
        assert context.count(f"Sentence {i} tells") == 1, context
    assert len(re.findall(r"^--- .* ---$", context, re.M)) == 1, context


def test_a_piece_of_a_long_line_stays_when_the_passage_over_that_line_begins_after_it() -> None:
    """A passage of whole lines may begin inside its first line (from the sentence its chunk starts at:
    `_FileView.sentence_start`): a window of that line's first half lies within its line range, but not within its
    text. It was dropped as "given whole already", and the hit's text left the context."""
    from saipling.retrieval.enrich import _merge, _Span

    first_half = "Lucy rose at midnight and walked to the cliff in her sleep."
    second_half = "Mina followed her with a shawl."
    lines = [f"{first_half} {second_half}", "They came home at dawn.", "Nobody spoke of it."]
    piece = _Span(1, 1, first_half, ["Whitby"], False)
    later = _Span(1, 3, "\n".join([second_half, *lines[1:]]), ["Whitby"], True)
    merged = _merge([piece, later], lines)
    assert any(first_half in s.text for s in merged), merged
    # (a piece the whole passage does hold still goes)
    whole = _Span(1, 3, "\n".join(lines), ["Whitby"], True)
    assert [(s.start, s.end, s.whole_lines) for s in _merge([piece, whole], lines)] == [(1, 3, True)]
