"""Typed errors raised by the engine; the edges (CLI, LSP) turn them into messages."""

from __future__ import annotations


class SaiplingError(Exception):
    """Base class for every error the engine raises on purpose."""


class ConfigError(SaiplingError):
    """Configuration is invalid (the caller falls back to defaults and tells the user)."""


class InvalidRequest(SaiplingError):
    """A request parameter is invalid; `field` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class PathOutsideRoot(InvalidRequest):
    """A path resolves outside the project root or is not an indexable file."""


class StorageError(SaiplingError):
    """The index's storage backend failed (storage/base.py says how each backend maps its driver's errors): the
    driver's exception is the `__cause__`; `system_errno` the OS error number when one is known, else None."""

    def __init__(self, message: str, system_errno: int | None = None) -> None:
        super().__init__(message)
        self.system_errno = system_errno


class StorageReadOnly(StorageError):
    """The index cannot be written here (a read-only file, folder, mount, transaction or role): reads work."""


class StorageFull(StorageError):
    """The index has no room to write (SQLITE_FULL, ENOSPC, a database server's disk full)."""


class StorageBusy(StorageError):
    """Another writer held a lock of the database past the backend's wait."""


class StorageUnavailable(StorageError):
    """The store was closed, or cannot be reached (a database server refused or dropped the connection)."""


class IndexCorrupted(StorageError):
    """The index file failed its integrity check."""


class ProviderError(SaiplingError):
    """An embedding provider failed. Messages never contain API keys."""


class ProviderAuthError(ProviderError):
    """The provider rejected the credentials (401/403): do not retry."""


class ProviderRateLimited(ProviderError):
    """The provider kept answering 429 after every retry."""


class ProviderUnavailable(ProviderError):
    """Timeouts, connection errors or 5xx after every retry, or the circuit breaker is open."""


class ProviderAbandoned(ProviderUnavailable):
    """The call was abandoned because the process is ending (shutdown, exit, end of input) or the provider was
    closed (a project closed, settings changed): not the provider's fault (no fallback, nothing recorded against
    it)."""


class ProviderTimeout(ProviderUnavailable):
    """One request got no answer in time; the server may still be computing it (the caller shrinks the batch)."""


class ProviderDimensionsChanged(ProviderError):
    """A provider whose vector size was learned (not configured, not a known model) answered with another size:
    the model behind it changed (llama.cpp ignores `model`; its model file was swapped). `dimensions` is the
    new size; the next index run rebuilds the vectors at that size."""

    def __init__(self, message: str, dimensions: int) -> None:
        super().__init__(message)
        self.dimensions = dimensions


class IndexCancelled(SaiplingError):
    """An indexing run was cancelled; the index is consistent (every file old or new)."""


class IndexPathUnsafe(SaiplingError):
    """An entry of `.saipling/` (or the folder itself) is a link, a hard link or not what it should be: saipling
    never writes or locks through it (it could lead outside the project). `path` names it."""

    def __init__(self, path: object, what: str) -> None:
        super().__init__(
            f"refusing {path}: it {what}; saipling writes only inside the project and never through a link "
            f"(remove it, e.g. `rm {path}`, and index again)"
        )
        self.path = str(path)


class IndexBusy(SaiplingError):
    """Another process holds the index's writer lock (storage/base.py WriterLock); `where` names the index."""

    def __init__(self, pid: int | None, where: object, doing: str | None = None, what: str | None = None) -> None:
        who = f"PID {pid}" if pid else "another process"
        super().__init__(f"index in use by {who}{f' ({doing})' if doing else ''} ({where})")
        self.pid = pid
        self.what = what  # the holder's kind of run as it published it (`index`, `refresh`, `clear`), or None


class DiskFull(SaiplingError):
    """The disk holding the index has no room (ENOSPC, SQLITE_FULL): not a read-only index."""
