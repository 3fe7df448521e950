"""Index runs of a workspace folder: one at a time per folder, on a daemon thread, with `$/progress`
(cancellable from the client) and what the user is told when a run ends."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from lsprotocol import types
from pygls.capabilities import get_capability
from pygls.progress import Progress

from ..errors import SaiplingError
from ..indexing.indexer import IndexProgress, IndexSummary
from . import convert
from .folders import CLIENT_TIMEOUT, Folder

if TYPE_CHECKING:
    from .server import SaiplingServer

log = logging.getLogger(__name__)


class ProgressReporter:
    """`$/progress` for one run: reports come from the index thread, throttled and sent via `post`."""

    def __init__(self, progress: Progress, token: str, post: Callable[..., None], done: Callable[[str], None]) -> None:
        self.progress = progress
        self.token = token
        self.post = post
        self.done = done
        self._last: tuple[int, str] | None = None
        self._last_at = 0.0

    def update(self, p: IndexProgress) -> None:
        key = (convert.percentage(p), p.phase)
        now = time.monotonic()
        if key == self._last and now - self._last_at < 0.5:
            return
        self._last, self._last_at = key, now
        self.post(self.progress.report, self.token, convert.progress_report(p))

    def end(self, message: str) -> None:
        self.done(self.token)
        self.progress.tokens.pop(self.token, None)
        self.post(self.progress.end, self.token, types.WorkDoneProgressEnd(message=message))


async def begin_progress(ls: SaiplingServer, title: str, cancel: threading.Event) -> ProgressReporter | None:
    """Create a `$/progress` token for a run (None when the client has no progress UI or does not answer)."""
    if not get_capability(ls.client_capabilities, "window.work_done_progress", False):
        return None
    token = f"saipling/index/{next(ls.progress_tokens)}"
    try:
        await asyncio.wait_for(ls.work_done_progress.create_async(token), CLIENT_TIMEOUT)
    except Exception as exc:  # noqa: BLE001 - no progress UI; the run still happens
        log.warning("window/workDoneProgress/create failed: %s", exc)
        return None
    ls.progress_cancels[token] = cancel
    begin = types.WorkDoneProgressBegin(title=title, cancellable=True, message="scanning", percentage=0)
    ls.work_done_progress.begin(token, begin)
    return ProgressReporter(ls.work_done_progress, token, ls.post, lambda t: ls.progress_cancels.pop(t, None))


async def run_index(
    ls: SaiplingServer,
    folder: Folder,
    *,
    full: bool = False,
    paths: list[str] | None = None,
    title: str = "Indexing",
    progress: bool = True,
) -> IndexSummary | None:
    """One index run of a folder (runs of a folder queue behind each other), with `$/progress`."""
    async with folder.lock:
        if ls.stopping or ls.folders.get(folder.uri) is not folder:  # shutting down, or closed
            return None
        live = folder.live
        summary: IndexSummary | None = None
        reporter: ProgressReporter | None = None
        try:
            with live.running(full) as cancel:
                reporter = await begin_progress(ls, title, cancel) if progress else None
                run = partial(
                    live.index,
                    cancel,
                    full,
                    paths,
                    reporter.update if reporter else None,
                    first=list(folder.open_files),  # then open files, then the most recently modified
                    confirm=partial(confirm_cost, ls, folder, cancel),
                )
                try:
                    summary = await folder.run_in_thread(run)
                except SaiplingError as exc:  # refused on purpose (a read-only index): said once, no traceback
                    ls.feedback.show_once(f"index:{folder.uri}:{exc}", f"cannot index {folder.project.root}: {exc}")
                except Exception:
                    log.exception("indexing %s failed", folder.project.root)
        finally:
            if reporter:
                reporter.end(convert.summary_message(summary))
        live.schedule_retry(summary)
        ls.feedback.index_done(folder, summary, title)
        for listener in list(ls.index_listeners):  # (features/name_diagnostics.py: names may have changed)
            listener(folder)
        notices, folder.project.fallback_notices = folder.project.fallback_notices, []
        for notice in notices:  # the local model stands in for the API provider, or it works again
            ls.feedback.show_once(f"fallback:{folder.uri}:{notice}", f"{folder.name}: {notice}")
        return summary


COST_NOT_CONFIRMED = "the cost of embedding was not confirmed (resume indexing to embed)"


def confirm_cost(ls: SaiplingServer, folder: Folder, cancel: threading.Event, estimate: dict) -> bool:
    """On the index thread, between the keyword and the embedding phase of a paid provider's run whose estimate
    is over `confirmCostAboveUsd`: ask the user once per session (`window/showMessageRequest`). "Not now" (or
    no answer) pauses embedding; the keyword index is there either way."""
    if folder.cost_confirmed:
        return True
    loop = ls.loop
    if loop is None or loop.is_closed():
        return False
    future = asyncio.run_coroutine_threadsafe(ask_cost(ls, folder, estimate), loop)
    while True:
        try:
            agreed = future.result(timeout=0.25)
            break
        except concurrent.futures.TimeoutError:
            if cancel.is_set() or ls.stopping:
                future.cancel()
                return False
    if agreed:
        folder.cost_confirmed = True
        return True
    folder.pause_reason = COST_NOT_CONFIRMED
    folder.project.pause()
    return False


async def ask_cost(ls: SaiplingServer, folder: Folder, estimate: dict) -> bool:
    files, cost = estimate["files"], estimate["costUsd"]
    message = (
        f"saipling: index {files:,} file{'s' if files != 1 else ''} of {folder.name} for about ${cost:.2f} "
        f"({estimate['provider']}/{estimate['model']})? Keyword search works meanwhile."
    )
    request = types.ShowMessageRequestParams(
        type=types.MessageType.Info,
        message=message,
        actions=[types.MessageActionItem(title=INDEX), types.MessageActionItem(title=NOT_NOW)],
    )
    try:
        answer = await ls.window_show_message_request_async(request)
    except Exception as exc:  # noqa: BLE001 - a client that cannot ask: nothing is spent
        log.warning("window/showMessageRequest failed (%s): embedding waits for saipling/resumeIndexing", exc)
        return False
    return getattr(answer, "title", None) == INDEX


INDEX, NOT_NOW = "Index", "Not now"
