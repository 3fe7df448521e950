"""Query words: stop words, the FTS5 query, query types, and the folding and stemming that match a query's
words against a chunk's (snippets, lexical coverage)."""

from __future__ import annotations

import functools
import re
import threading
import unicodedata

import snowballstemmer

from .lazy import LazyPattern

STOPWORDS = frozenset(
    "a an and are as at be but by for from has have he her his how i in into is it its of on or she that the their "
    "them then there these they this to was were what when where which who why will with you your".split()
)


_WORD_RE = re.compile(r"\w+", re.UNICODE)


_PHRASE_RE = re.compile(r'"([^"]+)"')


# -- query analysis --------------------------------------------------------------------------------------------
def query_type(query: str) -> str:
    """exact (quoted, identifiers, ALL_CAPS, camelCase) | semantic (questions, 4+ words) | mixed."""
    q = query.strip()
    words = q.split()
    if '"' in q or any(
        re.fullmatch(r"[A-Z][A-Z0-9_]{2,}", w)
        or re.search(r"[a-z][A-Z]", w)
        or re.search(r"\w[_./:#]\w", w)
        or re.search(r"[A-Za-z]\d|\d[A-Za-z]", w)
        for w in words
    ):
        return "exact"
    if q.endswith("?") or len(words) >= 4:
        return "semantic"
    return "mixed"


def fts_query(query: str) -> str | None:
    """A safe FTS5 MATCH expression from raw user text: quoted phrases kept, each word quoted, OR-joined."""
    phrases = [p.strip() for p in _PHRASE_RE.findall(query) if _WORD_RE.search(p)]
    rest = _PHRASE_RE.sub(" ", query)
    words = [w.lower() for w in _WORD_RE.findall(rest)]
    content = [w for w in words if w not in STOPWORDS]
    words = list(dict.fromkeys(content or words))
    terms = [_quote(" ".join(_WORD_RE.findall(p))) for p in phrases] + [
        _quote(w) + ("*" if not w.isascii() and _CJK_RE.search(w) else "") for w in words[:64]
    ]
    return " OR ".join(terms) if terms else None


# The unicode61 tokenizer keeps a run of CJK characters (up to punctuation) as one token: a CJK query word
# matches as a prefix of such runs, so "東京" finds "東京タワーは高い".
_CJK_RE = LazyPattern(r"[\u2e80-\u9fff\uac00-\ud7ff\uf900-\ufaff]")  # compiled only for non-ASCII words


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def highlight_terms(query: str) -> list[str]:
    words = [w.lower() for w in _WORD_RE.findall(query)]
    return [w for w in dict.fromkeys(words) if w not in STOPWORDS and len(w) > 1] or words


def make_snippet(text: str, terms: list[str], width: int = 240) -> str:
    """About `width` characters around the first matched word, matched words wrapped in **.

    A word matches a query term the way FTS5 matched it (`porter unicode61 remove_diacritics`): same Porter
    stem after folding case and accents, so "drowning" marks "drowned" and "cafe" marks "Café".

    The text is shown as read, not as markdown: the file's own `**bold**` markers are dropped (else a bold name
    would read `****Lich** **King****` once marked), a link reads as its text and an image is left out, as
    wiki-links and embeds already are in the index; block-quote markers, callout tags (`> [!info]`) and rules
    (`---`) are left out."""
    flat = " ".join(_LINK_RE.sub(_link_text, _QUOTE_RE.sub("", text.replace("**", ""))).split())
    keys = {match_key(t) for t in terms}
    folded = _fold(flat.lower())
    if not keys or not any(k[:3] in folded for k in keys):  # a stem starts like the word it came from
        return flat[:width]
    m = next((w for w in _WORD_RE.finditer(flat) if match_key(w.group(0)) in keys), None)
    start = 0 if m is None else max(0, m.start() - width // 3)
    if start > 0:
        space = flat.find(" ", start)
        start = space + 1 if 0 <= space < m.start() else start  # type: ignore[union-attr]
    piece = flat[start : start + width]
    marked = _WORD_RE.sub(
        lambda w: f"**{w.group(0)}**" if match_key(w.group(0)) in keys else w.group(0), piece
    )
    return ("…" if start > 0 else "") + marked + ("…" if start + width < len(flat) else "")


# ![alt](src) / [text](url "title"): one level of brackets in the text, the url without spaces or parentheses
_LINK_RE = re.compile(r"(!?)\[([^\[\]\n]*)\]\([^()\s]*(?:\s+\"[^\"\n]*\")?\)")


# at a line's start: block-quote markers with an Obsidian callout tag (`> [!info]-`), or a whole rule line
_QUOTE_RE = re.compile(r"(?m)^[ \t]*(?:>[ \t]?)*(?:\[![\w-]+\][+-]?[ \t]?|(?:-{3,}|\*{3,}|_{3,})[ \t]*$)?")


def _link_text(m: re.Match[str]) -> str:
    return "" if m.group(1) else m.group(2)


_COMBINING = re.compile(r"[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]+")


def _fold(text: str) -> str:
    """Accents removed (é -> e), as the FTS5 tokenizer's remove_diacritics does."""
    return _COMBINING.sub("", unicodedata.normalize("NFKD", text))


_stemmers = threading.local()  # snowball stemmer objects keep state between calls: one per thread


@functools.lru_cache(maxsize=65536)
def match_key(word: str) -> str:
    """What FTS5's porter + unicode61 (remove_diacritics) tokenizer makes of a word: folded, then stemmed."""
    folded = _fold(word.lower())
    stemmer = getattr(_stemmers, "porter", None)
    if stemmer is None:
        stemmer = _stemmers.porter = snowballstemmer.stemmer("porter")
    return stemmer.stemWord(folded)
