"""The chunking worker's shortcuts (issue 34, benchmarks row S30) give what the plain code gives: markdown-it's
block rules without their debug log calls, paragraphs found as runs of lines, a unit's trailing colon read from
its end, and a one-line paragraph's sentences placed without a line search. (Whole corpora, byte for byte:
tests/test_chunker_identity.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from saipling.embeddings.base import estimate_tokens
from saipling.markdown.chunker import _introduces, _paragraphs, _sentences, _Unit

SERVER = Path(__file__).resolve().parent.parent / "server"

EVERY_BLOCK = """---
title: A note
---
# Title

Intro paragraph with a [[Page|link]].

```python
x = 1

y = 2
```

> quoted
> # not a section

- item
  # not a section either

<!-- a comment -->

    indented code

[ref]: https://example.com

***

Setext
------

<div>

html

</div>

## Last
text
"""

_PROBE = r"""
import json, logging, sys
from saipling.markdown import blocks

text = sys.stdin.read()

def shape(doc):
    return [[list(map(list, ((h.start, h.end, h.level, h.title) for h in doc.headings)))], sorted(doc.keep_whole),
            sorted(doc.code_lines), doc.lines, sorted(doc.noise_lines)]

records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append(record.getMessage())

before = shape(blocks.parse_blocks(text))
logger = logging.getLogger("markdown_it")
if sys.argv[1] == "debug":  # someone debugging the parser: their log lines stay
    logger.setLevel(logging.DEBUG)
    logger.addHandler(Keep())
quiet = blocks.quiet_parser_logs()
records.clear()
after = shape(blocks.parse_blocks(text))
print(json.dumps({"quiet": quiet, "same": before == after, "headings": after[0], "records": len(records)}))
"""


def _probe(mode: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(SERVER)}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, mode], input=EVERY_BLOCK, capture_output=True, text=True, env=env, check=True
    )
    return json.loads(out.stdout)


def test_a_parse_without_the_parsers_debug_calls_finds_the_same_blocks() -> None:
    got = _probe("quiet")
    assert got["quiet"] is True and got["same"] is True
    assert [h[3] for h in got["headings"][0]] == ["Title", "Setext", "Last"]  # (the parse did run: real blocks)
    assert got["records"] == 0


def test_the_parsers_debug_calls_stay_when_its_logger_is_enabled_for_debug() -> None:
    got = _probe("debug")
    assert got["quiet"] is False and got["same"] is True
    assert got["records"] > 10  # each block rule tried logs a line


def test_paragraph_runs_start_and_end_on_text_when_kept_blank_lines_edge_them() -> None:
    lines = ["", "a", "", "b", "", "", "c", ""]
    # lines 1, 3, 5 are kept (inside a block) though blank: 1-5 is one run, trimmed to the text lines 2-4
    units = _paragraphs(lines, 1, 8, estimate_tokens, frozenset({1, 3, 5}))
    assert [(u.start, u.end, u.text) for u in units] == [(2, 4, "a\n\nb"), (7, 7, "c")]
    # a run of nothing but kept blank lines is no paragraph
    assert _paragraphs(["x", "", "", "y"], 2, 3, estimate_tokens, frozenset({2, 3})) == []
    assert [(u.start, u.end) for u in _paragraphs(["x", "", "", "y"], 1, 4, estimate_tokens, frozenset())] == [
        (1, 1),
        (4, 4),
    ]


def test_a_trailing_colon_is_found_past_any_amount_of_trailing_whitespace() -> None:
    long_prose = "word " * 40
    assert _introduces(_Unit(3, 3, long_prose + "as follows:" + " " * 100, 10), set())
    assert _introduces(_Unit(3, 3, long_prose + "as follows：\t", 10), set())
    assert not _introduces(_Unit(3, 3, long_prose + "as follows." + " " * 100, 10), set())
    assert not _introduces(_Unit(3, 3, ":" + " " * 100 + "x", 10), set())
    assert _introduces(_Unit(5, 5, "## A heading   ", 3), {5})
    assert not _introduces(_Unit(5, 6, "## A heading\nand a line", 3), {5})


def test_sentences_of_a_one_line_paragraph_and_of_a_wrapped_one_keep_their_lines() -> None:
    one = _sentences(_Unit(7, 7, "First one. Second one! Third one?", 9), estimate_tokens)
    assert [(s.start, s.end, s.text) for s in one] == [
        (7, 7, "First one."),
        (7, 7, "Second one!"),
        (7, 7, "Third one?"),
    ]
    wrapped = _sentences(_Unit(7, 9, "First one. Sec-\nond one! Third\none?", 9), estimate_tokens)
    assert [(s.start, s.end) for s in wrapped] == [(7, 7), (7, 8), (8, 9)]
