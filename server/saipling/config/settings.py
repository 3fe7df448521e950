"""One typed, defaulted settings tree and the precedence of SPEC 11 in one function."""

from __future__ import annotations

import dataclasses
import difflib
import logging
import math
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..paths import glob_list_problem
from ..redact import key_shaped, remember, shown, shown_url, unencoded_userinfo

log = logging.getLogger(__name__)

INDEX_DIR = ".saipling"
INDEX_FILE = "index.db"
CONFIG_FILE = "config.toml"


MAX_CHAPTER = 2**31 - 1  # a chapter number past this is no chapter (2**63 was an OverflowError binding it to SQLite)


@dataclass
class ChunkingSettings:
    max_tokens: int = 1000
    target_tokens: int = 500
    overlap_tokens: int = 50


RERANK_PROVIDERS = ("none", "voyage", "cohere", "local")


@dataclass
class RerankSettings:
    """The optional rerank stage (retrieval/rerank.py): the top `top_n` fused candidates sent to a second model, which
    reorders them; off (`provider = "none"`) by default."""

    # none | voyage | cohere (any Cohere-style /v1/rerank: TEI, llama.cpp, vLLM, Jina) | local
    provider: str = "none"
    model: str = ""  # voyage: rerank-2.5-lite by default; cohere-style: sent when set
    base_url: str = ""  # voyage: https://api.voyageai.com by default; cohere-style: required
    model_path: str = ""  # local: a cross-encoder folder (tokenizer.json + model.onnx)
    top_n: int = 20  # fused candidates sent to the reranker
    budget_seconds: float = 2.0  # the stage's wall-clock budget; past it the fused order is answered
    # Secret: from the environment or the editor only (SAIPLING_RERANK_API_KEY), never from project files.
    api_key: str = dataclasses.field(default="", repr=False)
    # set by load_settings, never by a source: base_url comes from the project's config.toml alone (no key is sent
    # to it but to the provider's own host: `key_may_go`)
    base_url_from_project: bool = dataclasses.field(default=False, repr=False)


@dataclass
class Settings:
    enabled: bool = True
    provider: str = "auto"  # auto | voyage | openai | local | none
    model: str = ""
    base_url: str = ""
    dimensions: int = 0
    model_path: str = ""
    local_threads: int = 0  # 0 = onnxruntime default
    auto_index: bool = True
    watch: bool = True
    quiet_period_seconds: float = 120.0
    tick_seconds: float = 10.0
    batch_size: int = 128
    max_results_default: int = 5
    max_search_tokens_default: int = 15000
    include: list[str] = field(default_factory=lambda: ["**/*.md"])
    include_json: bool = False
    exclude: list[str] = field(default_factory=list)
    max_file_bytes: int = 5 * 1024 * 1024
    chunking: ChunkingSettings = field(default_factory=ChunkingSettings)
    rerank: RerankSettings = field(default_factory=RerankSettings)
    skills_dir: str = "skills"
    corpora: dict[str, list[str]] = field(default_factory=dict)
    roles: dict[str, list[str]] = field(default_factory=dict)
    mcp_role: str = ""  # the role `saipling mcp` searches as ("": public content only, never defaultRole's)
    default_role: str = ""  # the role of requests that name none ("": public content only)
    analytics: bool = True
    # where the index lives: "" = the project's .saipling/index.db (SQLite); a postgresql:// URL = a workspace of
    # that database (storage/postgres/, docs/postgres.md; `?workspace=NAME`, else the project folder's name)
    store: str = ""
    references_max_chapter: int = 0  # textDocument/references: mentions up to this chapter only (0 = all)
    name_diagnostics: str = "hint"  # names that drift or have no page: off | hint | information | warning | error
    hover_all_chapters: bool = False  # the entity card ignores the open chapter's spoiler horizon
    request_timeout_seconds: float = 30.0
    max_retries: int = 3
    # How texts are presented to the model (None: the known model family's, see embeddings/families.py).
    query_prefix: str | None = None
    document_prefix: str | None = None
    input_type_field: str = ""  # request field carrying "query" / "document" (e.g. input_type); "" = none
    max_input_tokens: int = 0  # the model's input window in tokens; 0 = known model's, else a default
    # a paid provider asks before embedding more than this costs (0 = always ask; a negative value never asks)
    confirm_cost_above_usd: float = 0.10
    # an API provider unusable on a project without its vectors: index with `local` meanwhile, or `none`
    fallback: str = "local"
    # Secrets: from the environment or the editor only, never from project files.
    voyage_api_key: str = dataclasses.field(default="", repr=False)
    openai_api_key: str = dataclasses.field(default="", repr=False)
    # set by load_settings, never by a source: base_url comes from the project's config.toml alone, so the user's
    # key is not sent to it (`key_may_go`; a cloned project could otherwise collect it)
    base_url_from_project: bool = dataclasses.field(default=False, repr=False)


_ALIASES = {
    # camelCase (SPEC, LSP clients) -> field name
    "baseUrl": "base_url",
    "modelPath": "model_path",
    "localThreads": "local_threads",
    "autoIndex": "auto_index",
    "quietPeriodSeconds": "quiet_period_seconds",
    "tickSeconds": "tick_seconds",
    "batchSize": "batch_size",
    "maxResultsDefault": "max_results_default",
    "maxSearchTokensDefault": "max_search_tokens_default",
    "includeJson": "include_json",
    "maxFileBytes": "max_file_bytes",
    "skillsDir": "skills_dir",
    "requestTimeoutSeconds": "request_timeout_seconds",
    "maxRetries": "max_retries",
    "referencesMaxChapter": "references_max_chapter",
    "nameDiagnostics": "name_diagnostics",
    "hoverAllChapters": "hover_all_chapters",
    "mcpRole": "mcp_role",
    "queryPrefix": "query_prefix",
    "documentPrefix": "document_prefix",
    "inputTypeField": "input_type_field",
    "maxInputTokens": "max_input_tokens",
    "defaultRole": "default_role",
    "confirmCostAboveUsd": "confirm_cost_above_usd",
    "maxTokens": "max_tokens",
    "targetTokens": "target_tokens",
    "overlapTokens": "overlap_tokens",
    "voyageApiKey": "voyage_api_key",
    "openaiApiKey": "openai_api_key",
    "topN": "top_n",
    "budgetSeconds": "budget_seconds",
    "apiKey": "api_key",
}
_TABLES = ("chunking", "rerank")  # settings tables, merged key by key
# minimums of table keys ("table.key")
_TABLE_MINIMUMS = {"rerank.top_n": 1, "rerank.budget_seconds": 0.05}
_TABLE_SECRETS = {"rerank.api_key"}
_SECRET_FIELDS = {"voyage_api_key", "openai_api_key"}
_INTERNAL_FIELDS = {"base_url_from_project"}  # worked out by load_settings: no source sets them
_OPTIONAL_STRINGS = {"query_prefix", "document_prefix"}  # None = not set (the model family decides)
# free-text settings that are sent (a prefix before every text, the model's name) or shown (status) as they are: a
# key pasted into one is refused, not sent to the provider inside every query nor echoed by `status`
_KEY_REFUSED = {
    "model",
    "query_prefix",
    "document_prefix",
    "input_type_field",
    "mcp_role",
    "default_role",
    "skills_dir",
    "rerank.model",
}
_PROVIDERS = {"auto", "voyage", "openai", "local", "none"}
_FALLBACKS = {"local", "none"}
_NAME_DIAGNOSTICS = ("off", "hint", "information", "warning", "error")
_MINIMUMS = {
    "max_file_bytes": 1,
    "batch_size": 1,
    "max_results_default": 1,
    "max_retries": 0,
    "quiet_period_seconds": 0,
    "tick_seconds": 0.1,
    "max_search_tokens_default": 0,
}


def _spellings(cls: type) -> list[str]:
    """The keys of a settings dataclass as the docs spell them: a field's camelCase alias where it has one
    (`topN`, not `top_n`), else its name; tables left out."""
    camel = {v: k for k, v in _ALIASES.items()}
    return [
        camel.get(f.name, f.name)
        for f in dataclasses.fields(cls)
        if f.name not in _TABLES and f.name not in _INTERNAL_FIELDS
    ]


def did_you_mean(key: str, known: list[str]) -> str:
    """` (did you mean X?)` for a key close to a known one (`provder` -> `provider`), else nothing."""
    close = difflib.get_close_matches(key, list(dict.fromkeys(known)), n=1, cutoff=0.75)
    if not close:  # (a case slip: `topn` for `topN`)
        close = [k for k in known if k.casefold() == key.casefold()][:1]
    return f" (did you mean {close[0]}?)" if close else ""


def _field_name(key: str) -> str:
    return _ALIASES.get(key, key.replace("-", "_"))


def _coerce(value: Any, default: Any, key: str) -> Any:
    """`value` as the type of `default`; ValueError naming the setting otherwise. Values are echoed through
    `shown()`: a key pasted into the wrong setting is never repeated in a message or a log."""
    if default is None:  # an optional string (_OPTIONAL_STRINGS)
        if not isinstance(value, str):
            raise ValueError(f"{key}: expected a string, got {shown(value)}")
        return value
    if isinstance(default, bool):
        if isinstance(value, str):
            low = value.strip().lower()
            if low in {"1", "true", "yes", "on"}:
                return True
            if low in {"0", "false", "no", "off"}:
                return False
            raise ValueError(f"{key}: expected a boolean, got {shown(value)}")
        if isinstance(value, bool):
            return value
        raise ValueError(f"{key}: expected a boolean, got {shown(value)}")
    if isinstance(default, int) and not isinstance(default, bool):
        try:
            if isinstance(value, bool):
                raise TypeError
            return int(value)
        except (TypeError, ValueError, OverflowError):  # (JSON's 1e400 is infinity: the folder never opened)
            raise ValueError(f"{key}: expected an integer, got {shown(value)}") from None
    if isinstance(default, float):
        try:
            if isinstance(value, bool):
                raise TypeError
            number = float(value)
            if not math.isfinite(number):
                raise ValueError
            return number
        except (TypeError, ValueError):
            raise ValueError(f"{key}: expected a finite number, got {shown(value)}") from None
    if isinstance(default, str):
        if not isinstance(value, str):
            raise ValueError(f"{key}: expected a string, got {shown(value)}")
        return value
    if isinstance(default, list):
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list | tuple):
            raise ValueError(f"{key}: expected a list, got {shown(value)}")
        return [str(v) for v in value]
    if isinstance(default, dict):
        if not isinstance(value, Mapping):
            raise ValueError(f"{key}: expected a table, got {shown(value)}")
        return {str(k): (list(v) if isinstance(v, list | tuple) else v) for k, v in value.items()}
    return value


def _url_password(value: Any) -> bool:
    """True for a URL carrying a password (`user:password@` or a `password=` parameter)."""
    from urllib.parse import parse_qsl, urlsplit

    if not isinstance(value, str):
        return False
    try:
        if unencoded_userinfo(value):  # (`user:pa/ss@host`: urllib sees no password, libpq none either)
            return True
        parts = urlsplit(value.strip())
        return bool(parts.password) or any(k.lower() == "password" for k, _ in parse_qsl(parts.query))
    except ValueError:
        return False


def _without_password(url: str) -> str:
    """`url` without its password (`user:password@` -> `user@`, no `password=` parameter)."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    if unencoded_userinfo(url):  # the user name (up to its `:`) and what follows the last `@`
        scheme, _, rest = url.strip().partition("://")
        userinfo, _, after = rest.rpartition("@")
        user = re.split(r"[:/?#]", userinfo, maxsplit=1)[0]
        return f"{scheme}://{user + '@' if user else ''}{after}"
    parts = urlsplit(url.strip())
    netloc = parts.netloc
    if parts.password is not None:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}@{host}"
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k.lower() != "password"])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def apply_layer(
    settings: Settings,
    layer: Mapping[str, Any],
    source: str,
    *,
    allow_secrets: bool,
    touched: set[str] | None = None,
) -> list[str]:
    """Merge one source into settings in place; returns warnings for keys or values it ignored. `touched` gets
    the names of the settings it set (`base_url`, `rerank.base_url`)."""
    warnings: list[str] = []
    for raw_key, value in layer.items():
        if value is None:
            continue
        name = _field_name(str(raw_key))
        if name in _TABLES:
            warnings += _apply_table(getattr(settings, name), name, value, source, allow_secrets, touched)
            continue
        if not hasattr(settings, name) or name in _TABLES or name in _INTERNAL_FIELDS:
            if source == "environment":
                log.debug("ignoring environment variable SAIPLING_%s: not a setting", str(raw_key).upper())
            else:
                known = _spellings(Settings) + list(_TABLES)
                warnings.append(f"{source}: unknown setting {raw_key}{did_you_mean(str(raw_key), known)}")
            continue
        if name in _SECRET_FIELDS and not allow_secrets:
            warnings.append(f"{source}: API keys are never read from project files ({raw_key} ignored)")
            continue
        if name == "store" and not allow_secrets and _url_password(value):
            # the password is left out, not the store: without it the project would quietly get an index of its
            # own (SQLite) and its author would stop sharing the workspace unawares; now it connects without the
            # password (PGPASSWORD, ~/.pgpass) or says it cannot
            warnings.append(
                f"{source}: a password in the store URL is never read from project files (left out of {raw_key}: "
                "give it in SAIPLING_STORE, PGPASSWORD or ~/.pgpass)"
            )
            value = _without_password(value)
        try:
            default = None if name in _OPTIONAL_STRINGS else getattr(settings, name)
            value, problem = _only_text(name, value, default, str(raw_key))
            if problem is not None:
                warnings.append(f"{source}: {problem}")
            if value is None:
                continue
            coerced = _coerce(value, default, str(raw_key))
        except (TypeError, ValueError) as exc:
            warnings.append(f"{source}: {exc}")
            continue
        if name in _KEY_REFUSED and key_shaped(coerced):
            warnings.append(_key_pasted(source, str(raw_key)))
            continue
        if name == "provider" and coerced not in _PROVIDERS:
            warnings.append(f"{source}: provider must be one of {sorted(_PROVIDERS)}, got {shown(coerced)}")
            continue
        if name in _MINIMUMS and coerced < _MINIMUMS[name]:  # (maxFileBytes = -1: nothing was indexed, silently)
            warnings.append(f"{source}: {raw_key} must be >= {_MINIMUMS[name]}, got {shown(coerced)}")
            continue
        if (problem := _globs_problem(name, coerced)) is not None:  # (cost bounded: issue 30)
            warnings.append(f"{source}: {raw_key}: {problem}; ignored")
            continue
        if name == "fallback" and coerced not in _FALLBACKS:
            warnings.append(f"{source}: fallback must be one of {sorted(_FALLBACKS)}, got {shown(coerced)}")
            continue
        if name == "name_diagnostics" and coerced not in _NAME_DIAGNOSTICS:
            warnings.append(f"{source}: {raw_key} must be one of {list(_NAME_DIAGNOSTICS)}, got {shown(coerced)}")
            continue
        setattr(settings, name, coerced)
        if touched is not None:
            touched.add(name)
    return warnings


def _apply_table(
    table: Any, table_name: str, value: Any, source: str, allow_secrets: bool, touched: set[str] | None = None
) -> list[str]:
    """Merge one source's `[table]` (chunking, rerank) into the settings' table, key by key."""
    if not isinstance(value, Mapping):
        return [f"{source}: {table_name} must be a table"]
    warnings: list[str] = []
    for key, raw in value.items():
        name = _field_name(str(key))
        full = f"{table_name}.{name}"
        if raw is None:
            continue
        if not hasattr(table, name) or name in _INTERNAL_FIELDS:
            known = _spellings(type(table))
            warnings.append(f"{source}: unknown setting {table_name}.{key}{did_you_mean(str(key), known)}")
            continue
        if full in _TABLE_SECRETS and not allow_secrets:
            warnings.append(f"{source}: API keys are never read from project files ({table_name}.{key} ignored)")
            continue
        try:
            coerced = _coerce(raw, getattr(table, name), f"{table_name}.{key}")
        except (TypeError, ValueError) as exc:
            warnings.append(f"{source}: {exc}")
            continue
        if full in _KEY_REFUSED and key_shaped(coerced):
            warnings.append(_key_pasted(source, f"{table_name}.{key}"))
            continue
        if full in _TABLE_MINIMUMS and coerced < _TABLE_MINIMUMS[full]:
            warnings.append(f"{source}: {table_name}.{key} must be >= {_TABLE_MINIMUMS[full]}, got {shown(coerced)}")
            continue
        if full == "rerank.provider" and coerced not in RERANK_PROVIDERS:
            warnings.append(f"{source}: rerank.provider must be one of {list(RERANK_PROVIDERS)}, got {shown(coerced)}")
            continue
        setattr(table, name, coerced)
        if touched is not None:
            touched.add(full)
    return warnings


def _key_pasted(source: str, key: str) -> str:
    return (
        f"{source}: {key} holds a value that looks like an API key (not shown); ignored. A key goes in "
        "OPENAI_API_KEY, VOYAGE_API_KEY or SAIPLING_RERANK_API_KEY (or the editor's key command), never in a setting"
    )


def _only_text(name: str, value: Any, default: Any, key: str) -> tuple[Any, str | None]:
    """(the value with what is not text left out, what was left out): a list setting's items (`include = [1, 2]`
    became the patterns "1" and "2", and every file left the index unannounced) and each role's levels (`roles =
    {author = "private"}` gave the author the levels p, r, i, v...: no public file any more). The value is None
    when nothing of it is left (the setting is ignored: `include` keeps its default, a role sees `public` only)."""
    if isinstance(default, list) and isinstance(value, list | tuple):
        bad = [v for v in value if not isinstance(v, str)]
        if not bad:
            return value, None
        kept = [v for v in value if isinstance(v, str)]
        told = f"{key}: expected a list of text, got {', '.join(shown(v) for v in bad[:3])}"
        return (kept or None), f"{told}; {'left out' if kept else 'ignored'}"
    if name == "roles" and isinstance(value, Mapping):
        roles, bad_roles = {}, []
        for role, levels in value.items():
            if isinstance(levels, list | tuple) and all(isinstance(v, str) for v in levels):
                roles[role] = levels
            else:
                bad_roles.append(f"{role} = {shown(levels)}")
        if not bad_roles:
            return value, None
        told = f"{key}: a role's levels must be a list of text ({'; '.join(bad_roles[:3])}): that role sees public only"
        return roles, told
    return value, None


def _globs_problem(name: str, value: Any) -> str | None:
    """Why the globs of `include`, `exclude` or a corpus are refused (too many, one too long), else None."""
    if name in ("include", "exclude"):
        return glob_list_problem(value)
    if name == "corpora":
        for corpus, patterns in value.items():
            if isinstance(patterns, list) and (problem := glob_list_problem(patterns)) is not None:
                return f"{corpus}: {problem}"
    return None


LOG_LEVEL_ENV = "SAIPLING_LOG_LEVEL"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_levels_told: set[str] = set()
_level_lock = threading.Lock()


def log_level(value: str | None, default: str) -> tuple[str, str | None]:
    """SAIPLING_LOG_LEVEL's value as a logging level name, in any case (`debug` is DEBUG; `warn` and `fatal` as
    logging spells them); ("", None) when it is unset or blank; `default` and a warning naming the variable (the
    first time only) for a value that is no level (`verbose`, `debug` in a version that did not upper-case it:
    every command died with a traceback)."""
    if value is None or not value.strip():
        return "", None
    name = value.strip().upper()
    name = {"WARN": "WARNING", "FATAL": "CRITICAL"}.get(name, name)
    if name in LOG_LEVELS:
        return name, None
    with _level_lock:  # (told once a process: `saipling serve` reads it in the CLI and again in the server)
        told = value in _levels_told
        _levels_told.add(value)
    return default, None if told else (
        f"{LOG_LEVEL_ENV}={shown(value)} is not a log level (one of {', '.join(LOG_LEVELS)}, in any case); "
        "ignored: the default level is used"
    )


def env_layer(env: Mapping[str, str]) -> dict[str, Any]:
    """Settings from SAIPLING_* variables and the provider keys."""
    layer: dict[str, Any] = {}
    for key, value in env.items():
        if key.startswith("SAIPLING_") and key not in {
            LOG_LEVEL_ENV,
            "SAIPLING_TEST_CLOCK",
            "SAIPLING_PROGRESS",
            "SAIPLING_COPY_ID",  # (storage.copy_identity: which copy of a project writes a shared store)
        }:
            name = key[len("SAIPLING_") :].lower()
            if name.startswith("rerank_"):  # SAIPLING_RERANK_TOP_N -> rerank.top_n
                layer.setdefault("rerank", {})[name[len("rerank_") :]] = value
            else:
                layer[name] = value
    if env.get("VOYAGE_API_KEY"):
        layer["voyage_api_key"] = env["VOYAGE_API_KEY"]
    if env.get("OPENAI_API_KEY"):
        layer["openai_api_key"] = env["OPENAI_API_KEY"]
    if env.get("OPENAI_BASE_URL") and "base_url" not in layer:
        layer["base_url"] = env["OPENAI_BASE_URL"]
    return layer


def project_layer(root: Path) -> tuple[dict[str, Any], list[str]]:
    path = root / INDEX_DIR / CONFIG_FILE
    if not path.is_file():
        return {}, []
    import tomllib  # (~2.5 ms: only a project with a config.toml pays it)

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as exc:  # (nested too deep)
        return {}, [f"{path}: invalid TOML ({exc or type(exc).__name__}); using defaults"]
    data = data.get("saipling", data)
    if not isinstance(data, dict):  # (`saipling = 5`: a value where the table goes)
        return {}, [f"{path}: saipling: expected a table ([saipling]), got {shown(data)}; using defaults"]
    return data, []


def load_settings(
    root: Path,
    env: Mapping[str, str] | None = None,
    init_options: Mapping[str, Any] | None = None,
    workspace_config: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> tuple[Settings, list[str]]:
    """defaults < project config.toml < environment < initializationOptions < workspace/configuration < overrides."""
    settings = Settings()
    warnings: list[str] = []
    layer, w = project_layer(root)
    warnings += w
    from_project: set[str] = set()  # what the project's config.toml set ...
    from_user: set[str] = set()  # ... and what the user's sources set (the environment, the editor, the command)
    warnings += apply_layer(settings, layer, "config.toml", allow_secrets=False, touched=from_project)
    user_env = env_layer(os.environ if env is None else env)
    warnings += apply_layer(settings, user_env, "environment", allow_secrets=True, touched=from_user)
    for source, lay in (
        ("initializationOptions", init_options),
        ("workspace/configuration", workspace_config),
        ("overrides", overrides),
    ):
        if lay:
            warnings += apply_layer(settings, lay, source, allow_secrets=True, touched=from_user)
    settings.base_url_from_project = "base_url" in from_project and "base_url" not in from_user
    settings.rerank.base_url_from_project = "rerank.base_url" in from_project and "rerank.base_url" not in from_user
    warnings += withheld_keys(settings)
    # redacted from every log from now on
    remember(settings.openai_api_key, settings.voyage_api_key, settings.rerank.api_key)
    for w in warnings:
        log.warning("%s", w)
    return settings, warnings


# The providers' own hosts: a user's key goes there whoever named the URL (embeddings/openai.py, voyage.py and
# retrieval/rerank.py start from these)
OPENAI_URL = "https://api.openai.com/v1"
VOYAGE_URL = "https://api.voyageai.com"


def official_host(url: str, official: str) -> bool:
    """`url` is on the host of `official` (https, the same host name, the default port)."""
    from urllib.parse import urlsplit

    if not official:
        return False
    try:
        got, want = urlsplit(url.strip()), urlsplit(official)
        return got.scheme == "https" and got.hostname == want.hostname and got.port in (None, 443)
    except ValueError:
        return False


def key_may_go(url: str, from_project: bool, official: str = "") -> bool:
    """May the user's API key be sent to `url`? To a URL the user set (the environment, the editor, the command
    line) or to the provider's own host (`official`), yes; to one set only by the project's `.saipling/config.toml`,
    no: a project someone else wrote would collect the key of everyone who indexes it. The request goes without a
    key (a keyless local server, Ollama or llama.cpp, works as before)."""
    return not from_project or official_host(url, official)


def withheld_keys(settings: Settings) -> list[str]:
    """The warnings for keys `key_may_go` keeps from a base URL the project's config.toml set (the settings name
    and the variables, never a key)."""
    out: list[str] = []
    p, url = settings.provider, settings.base_url
    if settings.base_url_from_project and url:
        if (
            settings.openai_api_key
            and (p == "openai" or (p == "auto" and not settings.voyage_api_key))
            and not key_may_go(url, True, OPENAI_URL)
        ):
            out.append(_withheld("baseUrl", url, "OpenAI API key (OPENAI_API_KEY / openaiApiKey)", "SAIPLING_BASE_URL"))
        if settings.voyage_api_key and p == "voyage" and not key_may_go(url, True, VOYAGE_URL):
            out.append(_withheld("baseUrl", url, "Voyage API key (VOYAGE_API_KEY / voyageApiKey)", "SAIPLING_BASE_URL"))
    rs = settings.rerank
    if rs.base_url_from_project and rs.base_url:
        voyage = rs.provider == "voyage" and (rs.api_key or settings.voyage_api_key)
        if voyage and not key_may_go(rs.base_url, True, VOYAGE_URL):
            what = "rerank API key (SAIPLING_RERANK_API_KEY or VOYAGE_API_KEY)"
            out.append(_withheld("rerank.baseUrl", rs.base_url, what, "SAIPLING_RERANK_BASE_URL"))
        if rs.provider == "cohere" and rs.api_key:
            what = "rerank API key (SAIPLING_RERANK_API_KEY)"
            out.append(_withheld("rerank.baseUrl", rs.base_url, what, "SAIPLING_RERANK_BASE_URL"))
    return out


def withheld_hint(key_env: str, env_name: str) -> str:
    """What a server that asks for a key is told when `key_may_go` kept the user's from it."""
    return (
        f"{key_env} is not sent to a base URL set only by the project's .saipling/config.toml: to send it there, "
        f"set the URL yourself ({env_name}, or the editor's settings)"
    )


def _withheld(setting: str, url: str, what: str, env_name: str) -> str:
    editor = (
        "the editor's saipling.baseUrl setting (user settings)"
        if setting == "baseUrl"
        else f"{setting} in the editor's initializationOptions"
    )
    return (
        f"config.toml: {setting} {shown_url(url)} is set by the project's .saipling/config.toml, not by you: your "
        f"{what} is not sent there (a project's own config could collect it); the server is called without a key. "
        f"To send your key to it, set the URL yourself: {env_name} in the environment, or {editor}"
    )


def index_path(root: Path) -> Path:
    return root / INDEX_DIR / INDEX_FILE
