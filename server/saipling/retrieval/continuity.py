"""Evidence for a continuity check (issue 35, `saipling/checkPassage`): the entities a passage names (written or
drafted by an agent), and for each its profile facts and the passages up to a chapter most related to what the
passage says about it, within a token budget, so an agent can tell whether the passage contradicts the bible.
It retrieves evidence; it does not judge.

Per entity: its profile (frontmatter facts and body, cut to a share of the budget), then hybrid search (keywords
alone without embeddings) with the passage's lines that name it as the query, limited to what the entity knows
(`knownBy`: scenes it is mentioned in or the pov of) and to chapters up to `chapter`, its own profile left out.
"""

from __future__ import annotations

import json
from typing import Any

from ..config.visibility import role_levels, visible
from ..embeddings.base import estimate_tokens
from ..files.metadata import extract_metadata, split_frontmatter
from .entities import Entity, EntityProject, body_as_of, disk_reader, entity_index

DEFAULT_BUDGET = 4000
PASSAGES_PER_ENTITY = 5
QUERY_MAX_CHARS = 1500


def _facts(fm: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fm.items() if isinstance(v, str | int | float | bool | list) and k != "aliases"}


def _cost(text: str) -> int:
    return estimate_tokens(text) if text else 0


def _cut(text: str, tokens: int) -> str:
    """`text` within `tokens` (as estimate_tokens counts them), cut at a word and marked ` …`; "" when not even the
    mark fits. (Cut at 4 characters a token before: CJK text, a token a character, came 4 times over the budget,
    and the mark on top of a cut that filled it.)"""
    if _cost(text) <= tokens:
        return text
    if tokens < 1:
        return ""
    lo, hi = 0, len(text)  # the longest start of the text that fits with the mark
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_tokens(text[:mid] + " …") <= tokens:
            lo = mid
        else:
            hi = mid - 1
    out = text[:lo]
    return (out.rsplit(" ", 1)[0] if " " in out else out) + " …"


def _facts_within(facts: dict[str, Any], tokens: int) -> tuple[dict[str, Any], int]:
    """The profile's facts that fit `tokens` (in order; a long text cut, a list's first items), and their cost:
    they were given whole, outside the budget (a frontmatter `backstory` of 3,000 words came with `maxTokens: 10`)."""
    out: dict[str, Any] = {}
    used = 0
    for key, value in facts.items():
        left = tokens - used - _cost(f"{key}: ")
        if left < 1:
            break
        if isinstance(value, str):
            value = _cut(value, left)
            if not value.strip(" …"):
                continue
        elif isinstance(value, list):
            kept: list[Any] = []
            spent = 1  # (the brackets; each item with its separator counted on its own: never under the whole)
            for item in value:
                spent += _cost(json.dumps(item, ensure_ascii=False, default=str) + ", ")
                if spent > left:
                    break
                kept.append(item)
            if not kept and value:
                continue
            value = kept
        cost = _cost(
            f"{key}: " + (value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str))
        )
        if used + cost > tokens:
            continue
        out[key] = value
        used += cost
    return out, used


def check_passage(project: Any, params: dict[str, Any]) -> dict[str, Any]:
    """`saipling/checkPassage` (retrieval.requests.CheckPassageParams)."""
    from .requests import CheckPassageParams, parse
    from .search import search

    req = parse(CheckPassageParams, params)
    budget = req.max_tokens or DEFAULT_BUDGET
    index = entity_index(project, req.role)  # (the profiles this role may see: never another's facts)
    levels = role_levels(project.settings.roles, req.role, project.settings.default_role)
    lines = req.text.split("\n")
    found: dict[str, tuple[Entity, list[str]]] = {}
    for m in index.mentions(req.text):
        for e in m.entities:
            entry = found.setdefault(e.path, (e, []))
            if lines[m.line] not in entry[1]:
                entry[1].append(lines[m.line])
    out: list[dict[str, Any]] = []
    used = 0
    share = budget // max(1, len(found))
    read = disk_reader(project.root)
    for e, said in found.values():
        left = share
        text = read(e.path) or ""
        if text and not visible(extract_metadata(e.path, text).visibility, levels):
            text = ""  # made invisible to this role on disk since it was indexed: its facts are not given
        fm, body_start, _ = split_frontmatter(text)
        facts, cost = _facts_within(_facts(fm), left)  # (part of the evidence: within the budget too)
        left -= cost
        # (as of the passage's chapter: a profile's sections headed for a later one are no evidence yet)
        body = body_as_of("\n".join(text.split("\n")[max(0, body_start - 1) :]), req.chapter).strip()
        profile_text = _cut(body, max(0, left // 3))
        left -= _cost(profile_text)
        query = " ".join(" ".join(said).split())[:QUERY_MAX_CHARS]
        flt: dict[str, Any] = {"knownBy": e.path}
        if req.chapter is not None:
            flt["maxChapter"] = req.chapter
        response = search(
            project,
            {"query": query, "maxResults": PASSAGES_PER_ENTITY + 1, "filter": flt, "source": "agent", "role": req.role},
        )
        passages: list[dict[str, Any]] = []
        for r in response["results"]:
            if r["filePath"] == e.path:
                continue
            if any(
                p["filePath"] == r["filePath"] and p["startLine"] <= r["endLine"] and r["startLine"] <= p["endLine"]
                for p in passages
            ):
                continue  # (lines a passage given already holds: overlapping chunks spent the budget twice)
            chunk = _chunk_text(project, r["filePath"], r["startLine"])
            cost = estimate_tokens(chunk)
            if cost > left:
                chunk = _cut(chunk, left)
                cost = estimate_tokens(chunk)
                if cost <= 0 or not chunk.strip(" …"):
                    break
            left -= cost
            passages.append(
                {
                    "filePath": r["filePath"],
                    "startLine": r["startLine"],
                    "endLine": r["endLine"],
                    "chapterId": r["chapterId"],
                    "score": r["score"],
                    "text": chunk,
                }
            )
            if len(passages) >= PASSAGES_PER_ENTITY or left <= 0:
                break
        used += share - left
        out.append(
            {
                "entity": {"name": e.name, "path": e.path, "type": e.entity_type, "aliases": list(e.aliases)},
                "said": said,
                "profile": {"facts": facts, "text": profile_text},
                "passages": passages,
            }
        )
    return {"entities": out, "tokensUsed": used, "budget": budget, "chapter": req.chapter}


def _chunk_text(project: EntityProject, path: str, start_line: int) -> str:
    for row in project.store.chunks_for_path(path):
        if row.start_line == start_line:
            return str(row.text or "")
    return ""
