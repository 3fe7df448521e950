"""Request limits and the query check, without pydantic: shared by the request schemas (retrieval/requests.py) and the
CLI's search, which builds its request from options click already checked and so never imports pydantic
(~60 ms of a one-shot `saipling search`, with python-frontmatter and PyYAML behind it)."""

from __future__ import annotations

import re

MAX_QUERY_CHARS = 2000
MAX_RESULTS = 100  # the most results one request may ask for
MODES = ("hybrid", "semantic", "lexical")
SOURCES = ("editor", "agent", "cli", "eval")


def check_query(value: str, max_chars: int | None) -> str:
    """The query stripped; ValueError saying what is wrong with it otherwise."""
    query = value.strip()
    if not query:
        raise ValueError("must not be empty")
    if max_chars is not None and len(query) > max_chars:
        raise ValueError(f"is {len(query)} characters; the limit is {max_chars}")
    try:
        query.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("is not valid Unicode text (it holds a lone surrogate)") from None
    return query


_CHAPTER_REF = re.compile(r"(?:ch(?:apter)?[-_ ]?)?0*(\d+)", re.IGNORECASE)


def chapter_id(ref: str, field: str = "filter.chapterId") -> str:
    """A chapter as a writer types it (`5`, `ch-5`, `Chapter 5`) -> the id its files get (`ch-05`, files/metadata.py);
    InvalidRequest naming `field` for anything else (`five` matched no file, and said only that nothing matched)."""
    from ..errors import InvalidRequest

    m = _CHAPTER_REF.fullmatch(ref.strip())
    if m is None or len(m.group(1)) > 9:
        raise InvalidRequest(field, f"{ref!r} is not a chapter: give its number, ch-NN or Chapter N")
    return f"ch-{int(m.group(1)):02d}"
