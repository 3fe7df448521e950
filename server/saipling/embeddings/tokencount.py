"""Exact word-piece counts at dictionary speed: count each distinct word once, then add.

The chunker asks for the token count of every paragraph, sentence, window and final chunk text: about four
times the corpus in characters, and the Rust tokenizer runs at ~1 MB/s per core (normalisation with alignment
tracking), which made counting 80% of a first index's keyword phase. For a BERT-style tokenizer the count is
additive over whitespace: the normaliser works character by character (NFD, the only context-dependent step,
never reorders across a space), the pre-tokenizer splits at whitespace and drops it, and WordPiece runs on each
piece alone. So

    count(text) = specials + sum(count_without_specials(w) for w in text split at ASCII whitespace)

exactly, and fiction reuses a few tens of thousands of distinct words. Each new word is counted by the real
tokenizer (the new words of a text in one `encode_batch` call, or one `encode` call each when there are few);
the rest is a dictionary lookup. Tokenizers that are not known to
be additive this way (SentencePiece's Metaspace, byte-level BPE, ...) keep the plain `encode` path.
"""

from __future__ import annotations

import os
import re
import threading
from typing import Any

# Split points: characters every whitespace-splitting pre-tokenizer drops. Anything else (Unicode spaces,
# control characters, CJK) stays inside a "word" and the real tokenizer handles it there.
_WORDS = re.compile(r"[^ \t\n\r]+")
_ADDITIVE_PRE = frozenset({"BertPreTokenizer", "Whitespace", "WhitespaceSplit"})
_CHAR_LOCAL_NORM = frozenset({"BertNormalizer", "Lowercase", "NFD", "NFKD", "StripAccents", "NoneType"})
_ADDITIVE_MODELS = frozenset({"WordPiece"})
MAX_WORDS = 200_000  # memo size bound (~30 MB); cleared when full
# Up to this many new words are counted one `encode` call each: `encode_batch` hands even 3 words to the Rust
# thread pool, which cost 0.33 s against 0.19 s for the ~5,500 small sets of new words of a 1,001-note vault.
SMALL_BATCH = 64
LONG_WORD = 200  # longer "words" (URLs, base64, CJK runs) are counted each time, not remembered


def is_additive(tokenizer: Any) -> bool:
    """True when counts of this `tokenizers.Tokenizer` add up over ASCII whitespace (see the module doc)."""
    return (  # a normalizers.Sequence hides its parts from Python: not recognised, so not additive
        type(tokenizer.pre_tokenizer).__name__ in _ADDITIVE_PRE
        and type(tokenizer.normalizer).__name__ in _CHAR_LOCAL_NORM
        and type(tokenizer.model).__name__ in _ADDITIVE_MODELS
    )


def load_counting_tokenizer(path: str) -> Any:
    """A `tokenizers.Tokenizer` from its file, set to count: no truncation, no padding."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(path)
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def file_key(path: str) -> tuple[str, int, int]:
    """A file's name, size and modification time: whether it is still the file a counter was loaded from."""
    st = os.stat(path)
    return path, st.st_size, st.st_mtime_ns


class WordPieceCounter:
    """count(text) == len(tokenizer.encode(text).ids) for an additive tokenizer, via a word memo.

    By construction count(a + " " + b) == count(a) + count(b) - specials for any a, b (the chunker adds the
    counts of pieces it joins instead of counting the joined text again)."""

    additive = True

    def __init__(self, tokenizer: Any, source: tuple[str, int, int] | None = None) -> None:
        self.tokenizer = tokenizer  # no truncation, no padding
        self.specials = len(tokenizer.encode("").ids)  # [CLS] + [SEP]
        self._words: dict[str, int] = {}
        self._lock = threading.Lock()  # writers; readers see a whole dict (replaced, never emptied in place)
        self._source = source  # the file it was loaded from, as file_key saw it before loading it

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (for chunking workers: indexing/chunk_pool.py) without its memo, and as the file the tokenizer came
        from when it came from one: a spawned worker's arguments go down a pipe the parent blocks on once they
        pass its 64 KB, until the child has started Python and imported the chunker (0.09 s of the indexer's
        time for MiniLM's 466 KB tokenizer); a file name does not block."""
        if self._source is not None:
            return {"source": self._source}
        return {"tokenizer": self.tokenizer}

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "source" in state:
            path = state["source"][0]
            if file_key(path) != tuple(state["source"]):  # (a worker would count another model's word pieces)
                raise RuntimeError(f"tokenizer {path} changed since the indexer loaded it")
            self.__init__(load_counting_tokenizer(path), state["source"])  # type: ignore[misc]
        else:
            self.__init__(state["tokenizer"])  # type: ignore[misc]

    def __call__(self, text: str) -> int:
        words = _WORDS.findall(text)
        memo = self._words
        missing = set(words).difference(memo)  # (C loops: this runs over ~4x the corpus text)
        if not missing:
            return self.specials + sum(map(memo.__getitem__, words))
        fresh = self._learn(missing)
        return self.specials + sum(fresh[w] if w in fresh else memo[w] for w in words)

    def _learn(self, missing: set[str]) -> dict[str, int]:
        new = list(missing)
        if len(new) <= SMALL_BATCH:  # one at a time: a batch call hands its few words to the thread pool
            encode = self.tokenizer.encode
            fresh = {w: len(encode(w, add_special_tokens=False).ids) for w in new}
        else:
            encs = self.tokenizer.encode_batch(new, add_special_tokens=False)
            fresh = {w: len(e.ids) for w, e in zip(new, encs, strict=True)}
        with self._lock:
            if len(self._words) + len(new) > MAX_WORDS:
                self._words = {}
            self._words.update((w, n) for w, n in fresh.items() if len(w) <= LONG_WORD)
        return fresh
