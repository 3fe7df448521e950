"""The request schemas (saipling/retrieval/requests.py): one per request, shared by the server, the CLI and code."""

from __future__ import annotations

import pytest

from saipling.errors import InvalidRequest
from saipling.retrieval.requests import REQUESTS, GetParams, SearchParams, parse, validate


def refused(model, params) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        parse(model, params)
    return info.value


@pytest.mark.parametrize(
    ("params", "field", "hint"),
    [
        ({"query": "x", "maxResult": 3}, "maxResult", "maxResults"),  # unknown top-level fields are refused
        ({"query": "x", "Role": "author"}, "Role", "role"),
        ({"query": "x", "filter": {"bookID": "b"}}, "filter.bookID", "bookId"),
        ({"query": "x", "zzz": 1}, "zzz", "expected one of"),
    ],
)
def test_item14_unknown_fields_are_refused_with_the_closest_name(params, field, hint) -> None:
    err = refused(SearchParams, params)
    assert err.field == field and hint in str(err), str(err)


def test_camel_and_snake_names_and_null_fields() -> None:
    assert parse(SearchParams, {"query": "x", "maxResults": 3}).max_results == 3
    assert parse(SearchParams, {"query": "x", "max_results": 3}).max_results == 3
    assert parse(SearchParams, {"query": "x", "maxResults": None}).max_results is None
    assert parse(GetParams, {"uri": "file:///a.md", "startLine": 2}).start_line == 2


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"query": 5}, "query"),
        ({"query": "x", "maxResults": True}, "maxResults"),
        ({"query": "x", "minScore": float("nan")}, "minScore"),
        ({"query": "x", "mode": "psychic"}, "mode"),
        ({"query": "lone \ud800"}, "query"),
        ({}, "query"),
        ({"query": "x", "filter": {"glob": False}}, "filter.glob"),
    ],
)
def test_bad_values_name_the_field(params, field) -> None:
    assert refused(SearchParams, params).field == field


def test_every_request_has_a_schema_and_validate_returns_a_plain_dict() -> None:
    assert {
        "saipling/search",
        "saipling/enrichContext",
        "saipling/related",
        "saipling/get",
        "saipling/status",
        "saipling/reindex",
        "saipling/clearIndex",
        "workspace/symbol",
    } <= set(REQUESTS)
    assert validate("saipling/reindex", {"full": True, "paths": None}) == {"full": True}
    assert refused(REQUESTS["saipling/reindex"], {"paths": ["a.md", 7]}).field == "paths[1]"
    assert refused(SearchParams, ["dragon"]).field == "params"
