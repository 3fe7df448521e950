"""Text from the project on a terminal: a file's name, heading or line may hold control characters (a cloned
repository's `ESC ] 52` writes the clipboard, `ESC [ 2 J` clears the screen, `CR` or a bidirectional override hides
text behind other text). The CLI's readable output shows them escaped (`\\x1b`) instead of sending them to the
terminal; `--json` output escapes them already (JSON strings cannot hold them raw)."""

from __future__ import annotations

import logging
import re

# C0 controls but tab and newline, DEL, C1 controls, and the bidirectional marks, embeddings, overrides and isolates
_CONTROL_RE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


# and in a name (a file's path, a heading), which is one line of a row: tab and newline too
_NAME_CONTROL_RE = re.compile("[\t\n" + _CONTROL_RE.pattern[1:])


def _escaped(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _json_escaped(m: re.Match[str]) -> str:
    return f"\\u{ord(m.group()):04x}"


def printable(text: str) -> str:
    """`text` with every control character (see _CONTROL_RE) written as its escape."""
    return _CONTROL_RE.sub(_escaped, text)


def printable_name(text: str) -> str:
    """A name (a file's path, a heading) shown in one line of output: every control character escaped as
    `printable` does, a newline (`new\\x0aline.md`) and a tab too, so that no name splits a row or a line."""
    return _NAME_CONTROL_RE.sub(_escaped, text)


def printable_json(text: str) -> str:
    """JSON text (json.dumps with ensure_ascii=False) with the control characters it leaves raw (C1, bidirectional
    ones: it escapes only C0 and only inside strings, where these can be) written as JSON escapes: the same JSON."""
    return _CONTROL_RE.sub(_json_escaped, text)


class PrintableFormatter(logging.Formatter):
    """Log lines (to the terminal's stderr) with control characters escaped; a traceback's newlines kept. Without
    a format: `warning: message`, as the CLI's own notes read."""

    def __init__(self, fmt: str | None = None) -> None:
        super().__init__(fmt)
        self.plain = fmt is None

    def format(self, record: logging.LogRecord) -> str:
        if self.plain:
            text = f"{record.levelname.lower()}: {record.getMessage()}"
            if record.exc_info:
                text += "\n" + self.formatException(record.exc_info)
            return printable(text)
        return printable(super().format(record))
