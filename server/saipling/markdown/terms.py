"""Query words: stop words, the FTS5 query, query types, and the folding and stemming that match a query's
words against a chunk's (snippets, lexical coverage)."""

from __future__ import annotations

import functools
import re
import threading
import unicodedata
from collections.abc import Iterator

import snowballstemmer

from ..lazy import LazyPattern

STOPWORDS = frozenset(
    "a an and are as at be but by for from has have he her his how i in into is it its of on or she that the their "
    "them then there these they this to was were what when where which who why will with you your".split()
)
# English function words beyond STOPWORDS (which the keyword search also skips): auxiliaries, pronouns, quantifiers,
# particles. They say nothing about a passage's topic, yet in a small project ("should", "we", "done" in a few
# notes) their idf is high and a result's lexical confidence hung on them. Negations stay words.
FUNCTION_WORDS = STOPWORDS | frozenset(
    "about above after again against all also am any anything because been before being below between both can "
    "could did do does doing done down during each either else ever every few further get gets got had having here "
    "hers herself him himself however if itself just least less let lets many me might more most much must my "
    "myself now off once only other others ought our ours ourselves out over own per same shall should so some "
    "something such than those though through thus too under until up upon very via we whether while whom whose "
    "within without would yet yours yourself yourselves".split()  # (not may, mine, us: May, a mine, the US)
)


WORD_RE = re.compile(r"\w+", re.UNICODE)


_PHRASE_RE = re.compile(r'"([^"]+)"')


# -- identifiers -----------------------------------------------------------------------------------------------
# Frontmatter keys that only name or file a page (markdown/chunker.py render_frontmatter writes `key: value` lines)
NAME_KEYS = frozenset({"title", "name", "aliases", "alias"})
TAG_KEYS = frozenset({"tags", "tag"})
_LABEL_WORD_RE = re.compile(r"[^\W_]+")


def is_label_frontmatter(text: str, *names: str | None) -> bool:
    """True when a rendered frontmatter chunk only labels its page: nothing but names and tags, and its names say
    no word that `names` (the file's path, its first heading) do not (`aliases: Flee` / `tags: 13A/Combat/Flee` of
    `Combat-Rules/Flee.md`). An alias the page does not bear otherwise (`aliases: Marc, The Ferryman` of
    `marcus/profile.md`) tells a reader something, as does any other key (`eyes: green`, `description: ...`)."""
    lines = [line for line in text.split("\n") if line.strip()]
    if not lines:
        return False
    known = {w.casefold() for n in names if n for w in _LABEL_WORD_RE.findall(n)}
    for line in lines:
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in TAG_KEYS:
            continue
        if key not in NAME_KEYS or not {w.casefold() for w in _LABEL_WORD_RE.findall(value)} <= known:
            return False
    return True


# A word with a camelCase or PascalCase boundary (`setTimeout`, `XMLHttpRequest`, `HTTP2Stream`). The keyword
# tokenizer already splits `snake_case` and `fs.createReadStream` at `_` and `.`; camelCase stays one token.
# (words are found first and then tested: one pattern doing both backtracks quadratically on a long run of
# letters without a boundary, such as a hash in a code block)
_ALNUM_RE = re.compile(r"[A-Za-z0-9]+")
_ALNUM_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_CAMEL_BOUNDARY_RE = re.compile(r"[a-z0-9][A-Z]|[A-Z]{2}[a-z]")
_CAMEL_PART_RE = re.compile(r"[A-Z0-9]+(?=[A-Z][a-z])|[A-Z]?[a-z0-9]+|[A-Z0-9]+")
MAX_IDENTIFIER_CHARS = 64  # longer runs of letters are not names (hashes, base64)
# a dotted or namespaced name: `fs.createReadStream`, `path::join`, `Class#method`
_DOTTED_RE = re.compile(r"\b\w+(?:(?:\.|::|#)\w+)+")


def _camel(word: str) -> bool:
    return len(word) <= MAX_IDENTIFIER_CHARS and _CAMEL_BOUNDARY_RE.search(word) is not None


def identifier_parts(word: str) -> list[str]:
    """A camelCase word's parts, lower case (`createReadStream` -> create, read, stream); [] for other words."""
    if not (_ALNUM_RE.fullmatch(word) and _camel(word)):
        return []
    return [p.lower() for p in _CAMEL_PART_RE.findall(word)]


def identifier_words(text: str) -> str:
    """The parts of each distinct camelCase word in `text`, one word a line (`setTimeout` -> `set timeout`): the
    keyword index's `ident_words` column, so "timeout" finds `setTimeout` and "create read stream" finds
    `fs.createReadStream` (whose whole `createreadstream` the text column already holds)."""
    if not any(c.isupper() for c in text):
        return ""
    words: dict[str, None] = {}
    taken = 0  # the end of the last word taken
    for i in camel_boundaries(text):  # (a boundary is rare in prose: no pass over every word)
        if i < taken:
            continue
        start, floor = i, max(taken, i - MAX_IDENTIFIER_CHARS)
        while start > floor and text[start - 1] in _ALNUM_CHARS:
            start -= 1
        end = _ALNUM_RE.match(text, i).end()  # type: ignore[union-attr]
        words[text[start:end]] = None
        taken = end
    out = dict.fromkeys(_parts_line(w) for w in words)
    return "\n".join(w for w in out if w)


# A capital at a camelCase boundary: after a lower-case letter or digit (`tT`), or the first of two capitals before
# a lower-case letter (`XMLHttp`: `Ht`). Opening with one class, it is searched for at C speed (sre skips to the
# next capital); `_CAMEL_BOUNDARY_RE`, two alternatives each opening with a class, is tried at every character.
_BOUNDARY_CAPITAL_RE = re.compile(r"[A-Z](?:(?<=[a-z0-9][A-Z])|(?=[A-Z][a-z]))")
_LOWER_OR_DIGIT = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_UPPER = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_LOWER = frozenset("abcdefghijklmnopqrstuvwxyz")


def camel_boundaries(text: str) -> Iterator[int]:
    """Every position where `_CAMEL_BOUNDARY_RE` matches in `text`, in order (overlapping ones too, which its
    finditer skips: identifier_words skips them anyway, inside the word before). 2.1 s over the 17 MB fiction
    corpus with the pattern's finditer, ~0.1 s this way."""
    n = len(text)
    for m in _BOUNDARY_CAPITAL_RE.finditer(text):
        j = m.start()
        if j > 0 and text[j - 1] in _LOWER_OR_DIGIT:
            yield j - 1
        if j + 2 < n and text[j + 1] in _UPPER and text[j + 2] in _LOWER:
            yield j


@functools.lru_cache(maxsize=65536)
def _parts_line(word: str) -> str:
    """`createReadStream` -> `create read stream`; "" for a word that is not camelCase (names repeat: cached)."""
    return " ".join(p.lower() for p in _CAMEL_PART_RE.findall(word)) if _camel(word) else ""


# a query that is one name: `fs.createReadStream`, `setTimeout()`, `child_process`, `Buffer.from`
_NAME_QUERY_RE = re.compile(r"`?([A-Za-z_$][\w$]*(?:(?:\.|::|#)[A-Za-z_$][\w$]*)*)(?:\(\))?`?")
# a heading that names an API item: an optional `Class: `-like label, the name, an optional parameter list
_NAME_HEADING_RE = re.compile(
    r"(?:[A-Z][\w ]{0,30}:\s+)?`?(?:new\s+)?([A-Za-z_$][\w$]*(?:(?:\.|::|#)[\w$]+)*)\s*(?:\(.*)?`?"
)


def query_name(query: str) -> str | None:
    """The identifier a query is, when it is one word shaped like a name in code (camelCase, dotted or
    snake_case; `()` allowed): `fs.createReadStream`, `setTimeout()`. None for plain words."""
    m = _NAME_QUERY_RE.fullmatch(query.strip())
    if m is None:
        return None
    name = m.group(1)
    return name if _CAMEL_BOUNDARY_RE.search(name) or _DOTTED_RE.search(name) or "_" in name.strip("_") else None


def heading_names(heading: str, name: str) -> int:
    """How a heading names `name` (ASCII case ignored): 2 when it is the name (`fs.createReadStream(path[,
    options])`, `Class: fs.ReadStream` for `fs.createReadStream` / `fs.ReadStream`), 1 when it is a member of that
    name (`fs.createReadStream(...)` for `createReadStream`), else 0."""
    m = _NAME_HEADING_RE.fullmatch(heading.strip())
    if m is None:
        return 0
    found, want = m.group(1).lower(), name.lower()
    if found == want:
        return 2
    return 1 if found.endswith(("." + want, "::" + want, "#" + want)) else 0


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


def quoted_phrases(query: str) -> list[str]:
    """The phrases a query quotes ("..."), stripped, those holding a word only."""
    return [p.strip() for p in _PHRASE_RE.findall(query) if WORD_RE.search(p)]


def keyword_terms(query: str) -> list[tuple[tuple[str, ...], bool]]:
    """The keyword terms of raw user text, as (words, prefix) pairs that storage.base.KeywordQuery.of takes (any one
    matches): quoted phrases kept, each word on its own, OR-joined; a CJK word matches as a prefix."""
    phrases = quoted_phrases(query)
    rest = _PHRASE_RE.sub(" ", query)
    words = [w.lower() for w in WORD_RE.findall(rest)]
    content = [w for w in words if w not in STOPWORDS]
    adjacent = words if len(content) == len(words) else []  # (the query's words in order, none left out)
    # (a query of stop words alone searches them; beside a quoted phrase they are left out as anywhere else:
    # `what is the "escalation die"?` ranked passages holding "what" and "the" above the page that defines it)
    words = list(dict.fromkeys(content or ([] if phrases else words)))
    terms = [_term(WORD_RE.findall(p)) for p in phrases]
    for w in words[:64]:
        terms += cjk_terms(w) if not w.isascii() and CJK_RE.search(w) else [_term([w])]
    terms += identifier_terms(rest, adjacent)
    return list(dict.fromkeys(terms))


def identifier_terms(query: str, words: list[str]) -> list[tuple[tuple[str, ...], bool]]:
    """Extra phrases for names in a query: a dotted name as itself (`fs.createReadStream` -> "fs
    createreadstream"), a camelCase word as its parts ("create read stream": the `ident_words` of chunks naming
    it), and a short query of 2-4 plain words (`words`, in order, no stop word among them) as one phrase ("create
    read stream" -> the parts of `createReadStream` in that order)."""
    out = [_term([w.lower() for w in WORD_RE.findall(m.group(0))]) for m in _DOTTED_RE.finditer(query)]
    for w in WORD_RE.findall(query):
        parts = identifier_parts(w)
        if len(parts) > 1:
            out.append(_term(parts))
    if 2 <= len(words) <= 4 and all(w.isascii() and w.isalpha() for w in words) and not out:
        out.append(_term(words))
    return out


# -- CJK -------------------------------------------------------------------------------------------------------
# The unicode61 tokenizer keeps a run of CJK characters (up to punctuation) as one token, and Chinese and Japanese
# put no spaces between words: "京华" inside "冠盖满京华" is no token of its own. So the keyword index also holds
# each chunk's CJK runs as overlapping character pairs (bigrams) and the run's last character, in a column of
# their own (`cjk_words`, written by storage at insert: "冠盖满京华" -> "冠盖 盖满 满京 京华 华"), and a CJK query
# word becomes the phrase of its bigrams ("京华" -> "京华", "鸭先知" -> "鸭先 先知"): found anywhere inside a run,
# never across two runs. One character is a prefix of the pairs it starts ("龙"*, the run's last character
# included). Latin text has no CJK run: its rows get an empty column and its queries are unchanged.
CJK_RE = LazyPattern(r"[\u2e80-\u9fff\uac00-\ud7ff\uf900-\ufaff\U00020000-\U0003134f]")  # (non-ASCII text only)
# a run of CJK letters as unicode61 sees them (\w: no 、。・「」 or symbols): kana, bopomofo, Hangul, the unified
# ideographs with extension A and the supplementary planes, compatibility ideographs, 々〆〇
CJK_RUN_RE = LazyPattern(
    r"(?:(?=\w)[\u3005-\u3007\u303b\u3040-\u30ff\u3100-\u312f\u3131-\u318f\u31a0-\u31ff\u31f0-\u31ff"
    r"\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003134f])+"
)
MAX_CJK_PHRASE = 6  # a longer run in a query (a sentence, not a word) also counts its bigrams one by one


def cjk_bigrams(text: str) -> str:
    """The CJK runs of `text` as the keyword index's `cjk_words` column: one run a line, its overlapping
    character pairs then its last character ("東京タワー" -> "東京 京タ タワ ワー ー"); "" for text without one."""
    if text.isascii() or not CJK_RE.search(text):  # (a plain class: ~15x faster on Latin text than the runs' scan)
        return ""
    runs = []
    for m in CJK_RUN_RE.finditer(text):
        run = m.group(0)
        runs.append(" ".join([run[i : i + 2] for i in range(len(run) - 1)] + [run[-1]]))
    return "\n".join(runs)


def cjk_terms(word: str) -> list[tuple[tuple[str, ...], bool]]:
    """Keyword terms (words, prefix) for a query word holding CJK: per CJK run, the phrase of its bigrams (a run
    of one character: its prefix), and for a run longer than MAX_CJK_PHRASE (a sentence) each distinct bigram too;
    a word mixing scripts (`Tシャツ`) also keeps the whole word as a prefix (the text column's token starts with it)."""
    out = []
    runs = [m.group(0) for m in CJK_RUN_RE.finditer(word)]
    if not runs or runs != [word]:
        out.append(_term([word], True))
    for run in runs:
        if len(run) == 1:
            out.append(_term([run], True))
            continue
        grams = [run[i : i + 2] for i in range(len(run) - 1)]
        out.append(_term(grams))
        if len(run) > MAX_CJK_PHRASE:
            out += [_term([g]) for g in dict.fromkeys(grams)]
    return out


def _term(words: list[str], prefix: bool = False) -> tuple[tuple[str, ...], bool]:
    return tuple(words), prefix


def highlight_terms(query: str) -> list[str]:
    words = [w.lower() for w in WORD_RE.findall(query)]
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
    folded = fold_text(flat.lower())
    if not keys or not any(k[:3] in folded for k in keys):  # a stem starts like the word it came from
        return _ended(flat, 0, width)

    def hit(word: str) -> bool:  # the word, or a part of a camelCase word (`setTimeout` for "timeout")
        return not keys.isdisjoint(word_keys(word))

    # a CJK term is marked wherever it stands inside a run (the keyword index finds it there: cjk_bigrams)
    cjk = sorted((k for k in keys if not k.isascii() and CJK_RE.search(k)), key=len, reverse=True)
    inside = re.compile("|".join(re.escape(k) for k in cjk)) if cjk else None
    m = next((w for w in WORD_RE.finditer(flat) if hit(w.group(0))), None)
    at = None if m is None else m.start()
    if inside is not None and (c := inside.search(flat)) is not None and (at is None or c.start() < at):
        at = c.start()
    start = 0 if at is None else max(0, at - width // 3)
    if start > 0:
        space = flat.find(" ", start)
        start = space + 1 if 0 <= space < at else start  # type: ignore[operator]

    def mark(w: re.Match[str]) -> str:
        word = w.group(0)
        if hit(word):
            return f"**{word}**"
        return inside.sub(lambda c: f"**{c.group(0)}**", word) if inside is not None else word

    piece = _ended(flat, start, width)
    return ("…" if start > 0 else "") + WORD_RE.sub(mark, piece)


def _ended(flat: str, start: int, width: int) -> str:
    """`flat[start:start + width]`, ended at a word's end with "…" when the text goes on (a snippet read "he is
    coming thi")."""
    end = start + width
    if end >= len(flat):
        return flat[start:]
    space = flat.rfind(" ", start + width // 2, end + 1)
    return flat[start : space if space > 0 else end].rstrip() + "…"


# ![alt](src) / [text](url "title"): one level of brackets in the text, the url without spaces or parentheses
_LINK_RE = re.compile(r"(!?)\[([^\[\]\n]*)\]\([^()\s]*(?:\s+\"[^\"\n]*\")?\)")


# at a line's start: block-quote markers with an Obsidian callout tag (`> [!info]-`), or a whole rule line
_QUOTE_RE = re.compile(r"(?m)^[ \t]*(?:>[ \t]?)*(?:\[![\w-]+\][+-]?[ \t]?|(?:-{3,}|\*{3,}|_{3,})[ \t]*$)?")


def _link_text(m: re.Match[str]) -> str:
    return "" if m.group(1) else m.group(2)


_COMBINING = re.compile(r"[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]+")


def fold_text(text: str) -> str:
    """Accents removed (é -> e), as the FTS5 tokenizer's remove_diacritics does."""
    return _COMBINING.sub("", unicodedata.normalize("NFKD", text))


_stemmers = threading.local()  # snowball stemmer objects keep state between calls: one per thread


@functools.lru_cache(maxsize=1 << 16)
def word_keys(word: str) -> tuple[str, ...]:
    """The match keys a word of a text answers to: its own, then its camelCase parts' (`setTimeout`: settimeout,
    set, timeout). Kept per word: a search's snippets test the words of each result's text against the query,
    ~1,350 words a search, nearly all of them seen before; folding and stemming them each time was half of a whole
    search's CPU in the reader process (PostgreSQL backend, fiction corpus)."""
    return (match_key(word), *(match_key(p) for p in identifier_parts(word)))


@functools.lru_cache(maxsize=65536)
def match_key(word: str) -> str:
    """What FTS5's porter + unicode61 (remove_diacritics) tokenizer makes of a word: folded, then stemmed."""
    folded = fold_text(word.lower())
    stemmer = getattr(_stemmers, "porter", None)
    if stemmer is None:
        stemmer = _stemmers.porter = snowballstemmer.stemmer("porter")
    return stemmer.stemWord(folded)


def cjk_sentence_pairs(words: list[str]) -> list[str]:
    """Query words with each CJK run longer than MAX_CJK_PHRASE (a sentence, not a word) replaced by its distinct
    bigrams, as fts_query also searches them: the terms whose share in a result is its lexical coverage."""
    out: list[str] = []
    for w in words:
        if w.isascii() or not CJK_RE.search(w):
            out.append(w)
            continue
        for run in [m.group(0) for m in CJK_RUN_RE.finditer(w)] or [w]:
            out += [run[i : i + 2] for i in range(len(run) - 1)] if len(run) > MAX_CJK_PHRASE else [run]
    return list(dict.fromkeys(out))


def mostly_latin(text: str) -> bool:
    """True when most of the letters of `text` are Latin (ASCII or accented: below U+0250), or it has none.
    An English-only embedding model reads such text; its vectors of a Chinese, Japanese or Russian query are
    noise (retrieval/search.py leaves them out of a hybrid search)."""
    if text.isascii():
        return True
    letters = [c for c in text if c.isalpha()]
    return 2 * sum(c < "\u0250" for c in letters) >= len(letters)
