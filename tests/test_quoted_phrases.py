"""A quoted phrase in a question: the question's stop words are left out beside it as they are anywhere else, so
the page that defines the phrase is not ranked below passages that hold "what", "is" and "the" (a new user's
trial on the 13th Age vault: `what is the "escalation die"?` put a monster's page first, the rules page 5th)."""

from __future__ import annotations

from pathlib import Path

from fixtures import fts_query, make_project, open_project

RULES = (
    "# Escalation Die\n\nThe escalation die is a bonus to attacks as the fight goes on. At the start of the second "
    "round the escalation die is set at 1; each round the escalation die advances by one.\n"
)
MONSTER = (
    "# Briar Sovereign\n\n"
    + "\n\n".join(
        f"What is the sovereign's order {n}? It is the {n}th and it is what the others follow." for n in range(6)
    )
    + "\n\nWhen the escalation die is even, the sovereign acts twice.\n"
)


def test_stop_words_beside_a_quoted_phrase_are_left_out() -> None:
    assert fts_query('what is the "escalation die"?') == '"escalation die"'
    assert fts_query('"green signal" the storm') == '"green signal" OR "storm"'
    assert fts_query('"the"') == '"the"'  # (a phrase of a stop word is still searched: it was asked for)


def test_the_page_that_defines_a_quoted_phrase_comes_first(tmp_path: Path) -> None:
    root = make_project(tmp_path, {"rules/escalation-die.md": RULES, "monsters/sovereign.md": MONSTER})
    with open_project(root) as project:
        project.index()
        for query in ('what is the "escalation die"?', "what is the escalation die?"):
            found = project.search({"query": query, "mode": "lexical"})["results"]
            assert found and found[0]["filePath"] == "rules/escalation-die.md", (query, found)
