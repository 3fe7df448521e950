"""The CLI's indexing progress bar (rich): the phase (keywords, then embedding), done/total, current file and the
ETA the indexer measures (remaining work over the throughput of the phase so far)."""

from __future__ import annotations

from rich.cells import cell_len
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..indexing.indexer import IndexProgress
from .shown import printable

BAR_WIDTH = 24


def _tail(text: str, room: int) -> str:
    """`text` in `room` terminal cells (a CJK character takes two), its end kept (`…` before it when cut);
    nothing when there is no room."""
    if cell_len(text) <= room:
        return text
    if room <= 1:
        return ""
    kept, width = [], 0
    for ch in reversed(text):
        if width + cell_len(ch) > room - 1:
            break
        kept.append(ch)
        width += cell_len(ch)
    return "…" + "".join(reversed(kept))


PHASES = {"keywords": "reading", "file_keywords": "whole-file keywords", "embedding": "embedding", "done": "done"}


def format_eta(seconds: float | None) -> str:
    if seconds is None:
        return "eta -:--"
    s = int(round(seconds))
    return f"eta {s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"eta {s // 60}:{s % 60:02d}"


class IndexBar:
    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._progress: Progress | None = None
        self._task = None

    def __enter__(self) -> IndexBar:
        if self.enabled:
            self._progress = Progress(
                TextColumn("[bold]{task.fields[phase]}"),
                BarColumn(bar_width=BAR_WIDTH),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[eta]}"),
                TextColumn("{task.fields[current]}", style="dim", markup=False),  # (a file name, not markup)
                console=Console(stderr=True),
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task("index", total=None, current="", phase="indexing", eta="")
        return self

    def update(self, p: IndexProgress) -> None:
        if self._progress is None or self._task is None:
            return
        done, total = (p.chunks_done, p.chunks_total) if p.phase == "embedding" else (p.files_done, p.files_total)
        phase = PHASES.get(p.phase, p.phase)
        eta = format_eta(p.eta_seconds) if p.phase != "done" else ""
        # the file's name gets what the numbers leave of the line, its end kept (at 80 columns the counter and the
        # times were cut to `5…` and `0:0…` while a long path kept its width)
        used = len(phase) + BAR_WIDTH + len(f"{done}/{total}") + len("00:00:00") + len(eta) + 6
        current = _tail(printable(p.current_file or p.phase), self._progress.console.width - used)
        self._progress.update(
            self._task,
            total=total or None,
            completed=done,
            current=current,
            phase=phase,
            eta=eta,
        )

    def pause(self) -> None:
        """Stop drawing (a question is asked on the terminal)."""
        if self._progress is not None:
            self._progress.stop()

    def resume(self) -> None:
        if self._progress is not None:
            self._progress.start()

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
