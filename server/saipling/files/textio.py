"""Reading project files: binary detection, encodings, BOM, newline normalisation."""

from __future__ import annotations

import codecs
import errno
import logging
import os
import re
import stat
from dataclasses import dataclass

from ..errors import SaiplingError

log = logging.getLogger(__name__)


class BinaryFile(SaiplingError):
    """The file holds NUL bytes or cannot be decoded as text."""


@dataclass
class DecodedText:
    text: str  # newlines normalised to \n; line N here is line N on disk
    encoding: str
    warning: str | None = None


def read_regular(path: str | os.PathLike[str]) -> bytes:
    """The bytes of a regular file (symlinks followed); OSError(EINVAL) for anything else.

    Opened non-blocking and checked before reading: a FIFO named `*.md` would block the reader forever and a
    device (`/dev/zero` under a project name, made with mknod) would be read until memory runs out. Every
    read of a project file goes through here."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


def decode(data: bytes, name: str = "") -> DecodedText:
    """Decode file bytes: UTF-8 (BOM stripped), else a detected encoding, else latin-1 (logged)."""
    warning = None
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) and not data.startswith(codecs.BOM_UTF32_LE):
        # UTF-16 with a BOM (Windows Notepad's "Unicode") holds NUL bytes but is text
        try:
            text = data.decode("utf-16")
        except UnicodeDecodeError:
            raise BinaryFile(f"{name}: binary file (invalid UTF-16)") from None
        warning = f"{name}: not UTF-8, decoded as utf-16"
        log.info("%s", warning)
        if "\x00" in text or _looks_binary(text):
            raise BinaryFile(f"{name}: binary file (control characters)")
        return DecodedText(normalise_newlines(text), "utf-16", warning)
    if b"\x00" in data:
        raise BinaryFile(f"{name}: binary file (NUL bytes)")
    if data.startswith(codecs.BOM_UTF8):
        text, encoding = data[len(codecs.BOM_UTF8) :].decode("utf-8", errors="replace"), "utf-8-sig"
    else:
        try:
            text, encoding = data.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            text, encoding = _fallback(data, name)
            warning = f"{name}: not UTF-8, decoded as {encoding}"
            log.info("%s", warning)
    if _looks_binary(text):
        raise BinaryFile(f"{name}: binary file (control characters)")
    return DecodedText(normalise_newlines(text), encoding, warning)


def _fallback(data: bytes, name: str) -> tuple[str, str]:
    from charset_normalizer import from_bytes
    from charset_normalizer.utils import is_multi_byte_encoding

    if _western(data):
        return data.decode("cp1252"), "cp1252"
    best = from_bytes(data[:200_000]).best()
    # Trust the detector when it recognised a language or a multi-byte encoding; on a few accented letters
    # in mostly-ASCII text it guesses an arbitrary code page (cp1006 for latin-1 "Café"), so fall back to
    # Windows-1252 / latin-1, what such files almost always are.
    if best is not None and best.encoding and (best.coherence > 0 or is_multi_byte_encoding(best.encoding)):
        try:
            return data.decode(best.encoding), best.encoding
        except (UnicodeDecodeError, LookupError):
            pass
    try:
        return data.decode("cp1252"), "cp1252"
    except UnicodeDecodeError:
        return data.decode("latin-1"), "latin-1"


_WESTERN_EXTRA = set("\u2018\u2019\u201c\u201d\u2013\u2014\u2026\u20ac\u00a0\u00ab\u00bb\u00b0\u00a9")


def _western(data: bytes) -> bool:
    """True for text that is plainly Windows-1252 prose: mostly ASCII letters with a few accented Latin letters
    (é, ñ, ü...) and typographic punctuation. Single-byte detectors guess wildly on such files (cp1252 "Café"
    read as mac_latin2 "Cafť"); text in a non-Latin script (cp1251 Russian, say) has mostly non-ASCII letters."""
    try:
        text = data[:200_000].decode("cp1252")
    except UnicodeDecodeError:
        return False
    letters = [c for c in text if c.isalpha()]
    high = [c for c in text if ord(c) > 127]
    if not letters or not high:
        return False
    if any(not ("\u00c0" <= c <= "\u00ff" and c.isalpha()) and c not in _WESTERN_EXTRA for c in high):
        return False
    return sum(1 for c in letters if ord(c) > 127) / len(letters) < 0.2


# control characters text files do not hold: below 32 except \t \n \v \f \r and ESC (a regex: a Python loop over
# every file's first 8 KB was ~5% of a first index's keyword phase)
_CONTROL = re.compile("[\x00-\x08\x0e-\x1a\x1c-\x1f]")


def _looks_binary(text: str) -> bool:
    sample = text[:8192]
    if not sample:
        return False
    return len(_CONTROL.findall(sample)) / len(sample) > 0.05


def normalise_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")
