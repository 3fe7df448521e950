"""The shared field checks of engine requests: every refusal names its field."""

from __future__ import annotations

import pytest

from saipling.errors import InvalidRequest
from saipling.request_fields import bounded_int, query_text, require_object, required_str, str_list, typed


def refused(fn, *args) -> str:
    with pytest.raises(InvalidRequest) as info:
        fn(*args)
    return info.value.field


def test_bounded_int() -> None:
    assert bounded_int({}, "n", 5, 1, 100) == 5
    assert bounded_int({"n": None}, "n", 5, 1, 100) == 5
    assert bounded_int({"n": 100}, "n", 5, 1, 100) == 100
    for bad in (0, 101, True, 2.0, "3"):
        assert refused(bounded_int, {"n": bad}, "n", 5, 1, 100) == "n"
    assert bounded_int({"n": 10**9}, "n", None, 0) == 10**9  # no maximum
    # a default from the user's settings is brought into range, never trusted blindly
    assert bounded_int({}, "n", 0, 1, 100) == 1 and bounded_int({}, "n", 500, 1, 100) == 100


def test_typed() -> None:
    assert typed({"x": 1}, "x", float) == 1.0 and isinstance(typed({"x": 1}, "x", float), float)
    assert typed({}, "x", str, "d") == "d"
    assert refused(typed, {"x": True}, "x", float) == "x"
    assert refused(typed, {"x": 1}, "x", str) == "x"


def test_required_str_takes_the_first_usable_key_and_names_the_first() -> None:
    assert required_str({"path": "", "uri": "file:///a.md"}, "path", "uri") == "file:///a.md"
    assert refused(required_str, {"path": 5}, "path", "uri") == "path"


def test_str_list_and_object() -> None:
    assert str_list({"k": "a"}, "k") == ["a"]
    assert str_list({}, "k") == []
    assert refused(str_list, {"k": ["a", 1]}, "k", "filter.") == "filter.k"
    assert refused(require_object, ["not", "a", "dict"]) == "params"


@pytest.mark.parametrize("bad", [None, 5, "   ", "x" * 2001, "lone \ud800 surrogate"])
def test_query_text_refuses(bad) -> None:
    assert refused(query_text, bad, 2000) == "query"


def test_query_text_strips() -> None:
    assert query_text("  lighthouse keeper \n") == "lighthouse keeper"
