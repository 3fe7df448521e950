"""apsw's exceptions mapped to `saipling.errors` at the edge of the SQLite backend (storage/base.py, "Errors"):
every public method of `SqliteStore` goes through `mapped_errors`, so nothing above storage/ sees apsw."""

from __future__ import annotations

import contextlib
import errno
import functools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import apsw

from ...errors import (
    IndexCorrupted,
    StorageBusy,
    StorageError,
    StorageFull,
    StorageReadOnly,
    StorageUnavailable,
)

_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)

T = TypeVar("T")


def storage_error(exc: apsw.Error) -> StorageError:
    """The saipling error for an apsw one; its message keeps apsw's class name (`FullError: database or disk is
    full`), as the CLI printed it before."""
    code = getattr(exc, "system_errno", None) or None
    message = f"{type(exc).__name__}: {exc}"
    kind: type[StorageError]
    if isinstance(exc, (apsw.CorruptError, apsw.NotADBError)):
        kind = IndexCorrupted
    elif isinstance(exc, apsw.FullError) or code in _NO_SPACE:
        kind = StorageFull
    elif isinstance(exc, (apsw.ReadOnlyError, apsw.PermissionsError, apsw.AuthError)):
        kind = StorageReadOnly
    elif isinstance(exc, (apsw.BusyError, apsw.LockedError)):
        kind = StorageBusy
    elif isinstance(exc, (apsw.ConnectionClosedError, apsw.CursorClosedError, apsw.CantOpenError)):
        kind = StorageUnavailable
    else:
        kind = StorageError
    return kind(message, code)


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """apsw errors raised in the block leave as saipling errors (the apsw error as the cause)."""
    try:
        yield
    except apsw.Error as exc:
        raise storage_error(exc) from exc


def _wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except apsw.Error as exc:
            raise storage_error(exc) from exc

    return call


def mapped_errors(cls: type[T]) -> type[T]:
    """Class decorator: every public method (and classmethod) of `cls` maps apsw errors (see `translated`).
    Context-manager methods map what their entry and exit raise; they say so by mapping inside themselves."""
    for name, value in list(vars(cls).items()):
        if name.startswith("_"):
            continue
        if isinstance(value, classmethod):
            setattr(cls, name, classmethod(_wrap(value.__func__)))
        elif isinstance(value, staticmethod):
            setattr(cls, name, staticmethod(_wrap(value.__func__)))
        elif callable(value):
            setattr(cls, name, _wrap(value))
    return cls
