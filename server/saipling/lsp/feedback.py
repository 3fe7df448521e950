"""What the user sees: `window/showMessage` once per cause they must act on, `window/logMessage` for the rest."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from lsprotocol import types

from ..indexing.indexer import IndexSummary
from . import convert
from .folders import Folder

log = logging.getLogger(__name__)

Post = Callable[..., None]  # runs a call on the event loop (the protocol is not thread-safe)


class Feedback:
    def __init__(self, server: Any, post: Post) -> None:
        self.server = server
        self.post = post
        self._shown: set[str] = set()
        self._lock = threading.Lock()

    def log(self, message: str, kind: types.MessageType = types.MessageType.Log) -> None:
        self.post(self.server.window_log_message, types.LogMessageParams(type=kind, message=message))

    def show_once(self, cause: str, message: str, kind: types.MessageType = types.MessageType.Warning) -> None:
        """The first time a cause occurs: showMessage; afterwards: logMessage."""
        with self._lock:
            first = cause not in self._shown
            self._shown.add(cause)
        if not first:
            self.log(message, kind)
            return
        log.warning("%s", message)
        self.post(
            self.server.window_show_message,
            types.ShowMessageParams(type=kind, message=f"saipling: {message}"),
        )

    def warnings(self, folder: Folder, warnings: list[str]) -> None:
        """Configuration and open-time warnings (unknown keys, index rebuilt after corruption, ...)."""
        for w in warnings:
            self.show_once(f"warning:{folder.uri}:{w}", f"{folder.name}: {w}")

    def provider(self, folder: Folder, degraded: str | None = None) -> None:
        """An embedding provider that rejected the key or failed: told once per folder."""
        failed = folder.project.provider.failed
        if failed or degraded:
            kind = types.MessageType.Error if failed else types.MessageType.Warning
            message = f"{folder.name}: embeddings failed, keyword search only: {failed or degraded}"
            self.show_once(f"provider:{folder.uri}", message, kind)

    def index_done(self, folder: Folder, summary: IndexSummary | None, title: str) -> None:
        if summary is None:
            self.show_once(
                f"index:{folder.uri}",
                f"{folder.name}: indexing failed (see the log)",
                types.MessageType.Error,
            )
        self.log(f"{title} {folder.name}: {convert.summary_message(summary)}", types.MessageType.Info)
        for warning in (summary.warnings if summary else [])[:50]:
            self.log(f"{folder.name}: {warning}", types.MessageType.Warning)
        self.provider(folder, summary.degraded if summary else None)


class ClientLogHandler(logging.Handler):
    """Engine log records (INFO and up) -> `window/logMessage`."""

    LEVELS = ((logging.ERROR, types.MessageType.Error), (logging.WARNING, types.MessageType.Warning))

    def __init__(self, feedback: Feedback) -> None:
        super().__init__(logging.INFO)
        self.feedback = feedback

    def emit(self, record: logging.LogRecord) -> None:
        kind = next((t for level, t in self.LEVELS if record.levelno >= level), types.MessageType.Info)
        with contextlib.suppress(Exception):
            self.feedback.log(self.format(record), kind)
