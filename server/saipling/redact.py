"""API keys never reach a log or a message: a logging filter that redacts them, and `shown()` for echoing values.

Redacted: the values of every key the process has been given (`remember()`: the settings loader registers
`openaiApiKey`/`voyageApiKey` whatever their source), anything shaped like a provider key (`sk-...`, `pa-...`),
and the value after a name like `apiKey`/`openai_api_key`/`authorization`/`password`/`secret` in text such as a
logged JSON-RPC message (pygls logs whole `initialize` params at debug level).
"""

from __future__ import annotations

import logging
import re
import threading

REDACTED = "<redacted>"

_KEY_SHAPED = re.compile(r"\b(?:sk|pa|rk|pk)-[A-Za-z0-9_\-]{12,}")
_NAMED = re.compile(
    r"""(?ix)
    ( (?:api[_-]?key|apikey|secret|password|authorization|bearer)   # a name that holds a secret
      ["']? \s* [:=] \s* ["']? (?:bearer\s+)? )                     # its separator (JSON, repr, key=value)
    ( [^"'\s,}\]]+ )                                                # the value
    """
)
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@'\"<>]+@")  # https://user:password@host
# the query of a URL: every value is hidden (`?key=...`, `?token=...`: proxies take keys under any name)
_URL_QUERY = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s?#'\"<>]*\?)([^\s#'\"<>]+)")
_known: set[str] = set()
_lock = threading.Lock()


def remember(*secrets: str | None) -> None:
    """Redact these exact values from now on (keys shorter than 8 characters are too common to match)."""
    with _lock:
        _known.update(s for s in secrets if isinstance(s, str) and len(s) >= 8)


def redact(text: str) -> str:
    with _lock:
        known = sorted(_known, key=len, reverse=True)
    for secret in known:
        if secret in text:
            text = text.replace(secret, REDACTED)
    text = _KEY_SHAPED.sub(REDACTED, text)
    text = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    text = _URL_QUERY.sub(lambda m: m.group(1) + _hidden_query(m.group(2)), text)
    return _NAMED.sub(lambda m: m.group(1) + REDACTED if m.group(2) != REDACTED else m.group(0), text)


def _hidden_query(query: str) -> str:
    return "&".join(f"{q.partition('=')[0]}={REDACTED}" if "=" in q else q for q in query.split("&"))


def unencoded_userinfo(url: str) -> bool:
    """True for a URL whose user or password holds a `/`, `?` or `#` that is not percent-encoded
    (`postgresql://writer:pa/ss@db/saipling`): that character ends the URL's authority, so every parser (urllib,
    libpq) reads the rest of the password as the host, port, path, query or fragment, where no redaction looks for
    it and every message shows it. Told by an `@` after the authority where none belongs: in the path, the
    fragment or a query parameter's name, or anywhere after an authority of `name:text` without an `@` whose
    `text` is no port (`writer:pa`). An `@` in a query value after a real host and port (`?user=me@corp`) is
    not one."""
    from urllib.parse import urlsplit

    text = url.strip()
    if "://" not in text or "@" not in text.partition("://")[2]:
        return False
    try:
        parts = urlsplit(text)
    except ValueError:
        return True
    # libpq takes the user part up to the first `@` before any `/` (urllib: up to the last `@` before any `/`, `?`
    # or `#`): where the two differ (`user:p@ss@host`: libpq's host `ss@host`; `user:2024?k=v@host`: urllib's
    # port 2024 and query `k=v@host`), part of the password is shown as a host, port or query value
    head = text.partition("://")[2].partition("/")[0]
    libpq_user = head.partition("@")[0] if "@" in head else None
    if libpq_user != (parts.netloc.rpartition("@")[0] if "@" in parts.netloc else None):
        return True
    if "@" in parts.netloc:
        return "@" in parts.path or "@" in parts.fragment  # (`user:p@ss/w@host`: the first `@` ends too soon)
    if "@" in parts.path or "@" in parts.fragment:
        return True
    if any("@" in item.partition("=")[0] for item in parts.query.split("&")):
        return True
    return "@" in parts.query and not all(_port_ok(host) for host in parts.netloc.split(","))


def _port_ok(host: str) -> bool:
    """`host`, `host:5432`, `[::1]` or `[::1]:5432`: no port, or a port of digits."""
    if host.endswith("]") or ":" not in host:
        return True
    return host.rpartition(":")[2].isdigit()


def without_userinfo(url: str) -> str:
    """`url` with everything between `://` and its last `@` hidden: for a URL `unencoded_userinfo` refuses, whose
    password cannot be told from the rest."""
    scheme, _, rest = url.strip().partition("://")
    return f"{scheme}://{REDACTED}@{rest.rpartition('@')[2]}"


def shown_url(url: str) -> str:
    """`url` for messages and logs: credentials in it (`user:password@`) and query values (`?api-key=...`,
    as some proxies take the key) replaced by REDACTED; the scheme, host, port and path kept."""
    from urllib.parse import urlsplit, urlunsplit

    if unencoded_userinfo(url):
        url = without_userinfo(url)
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact(url)
    netloc = f"{REDACTED}@{parts.netloc.rpartition('@')[2]}" if "@" in parts.netloc else parts.netloc
    query = "&".join(f"{q.partition('=')[0]}={REDACTED}" for q in parts.query.split("&")) if parts.query else ""
    return redact(urlunsplit((parts.scheme, netloc, parts.path, query, REDACTED if parts.fragment else "")))


def looks_secret(value: object) -> bool:
    """True for a string that is, or looks like, an API key."""
    if not isinstance(value, str):
        return False
    with _lock:
        if value in _known:
            return True
    v = value.strip()
    if _KEY_SHAPED.search(v):
        return True
    # long, no spaces, letters and digits mixed: a token, not a word or a path a user would set
    return (
        len(v) >= 24 and " " not in v and "/" not in v and any(c.isdigit() for c in v) and any(c.isalpha() for c in v)
    )


_TOKEN = re.compile(r"[A-Za-z0-9]{32,}")  # a key without a provider's prefix (Cohere's: 40 letters and digits)


def key_shaped(value: object) -> bool:
    """True for a value that is a key the process was given, holds one in a provider's shape (`sk-...`, `pa-...`),
    or is a long run of mixed-case letters and digits alone. Stricter than `looks_secret`: model ids such as
    `text-embedding-nomic-embed-text-v1.5` and timestamps are not keys, so a value this says yes to can be refused
    as a setting and hidden where it would be shown as it is (status)."""
    if not isinstance(value, str) or not value.strip():
        return False
    v = value.strip()
    with _lock:
        if v in _known or any(k in v for k in _known):
            return True
    if _KEY_SHAPED.search(v):
        return True
    return bool(
        _TOKEN.fullmatch(v)
        and any(c.isdigit() for c in v)
        and any(c.islower() for c in v)
        and any(c.isupper() for c in v)
    )


def shown(value: object, limit: int = 60) -> str:
    """A setting's value as echoed in a message: never one that looks like a key."""
    if looks_secret(value):
        return "a value that looks like an API key (not shown)"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class RedactingFilter(logging.Filter):
    """Put on a handler: every record it emits (message, arguments, traceback) has keys redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string: leave it to the handler
            return True
        record.msg, record.args = redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
            record.exc_info = None
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


def install(*handlers: logging.Handler) -> None:
    """Redact on these handlers (default: every handler of the root logger)."""
    for handler in handlers or tuple(logging.getLogger().handlers):
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
