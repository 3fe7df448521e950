"""The CLI's indexing progress bar (rich), with files done/total, current file and ETA."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from .indexer import IndexProgress


class IndexBar:
    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._progress: Progress | None = None
        self._task = None

    def __enter__(self) -> IndexBar:
        if self.enabled:
            self._progress = Progress(
                TextColumn("[bold]indexing"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                TextColumn("{task.fields[current]}", style="dim"),
                console=Console(stderr=True),
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task("index", total=None, current="")
        return self

    def update(self, p: IndexProgress) -> None:
        if self._progress is None or self._task is None:
            return
        current = (p.current_file or p.phase)[-50:]
        self._progress.update(
            self._task, total=p.files_total or None, completed=p.files_done, current=current
        )

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
