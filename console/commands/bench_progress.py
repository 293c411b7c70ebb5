"""`bench sweep`'s progress on stderr: one line per slice under one line for the whole sweep."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from ...collectors.bench.records import RequestRecord
    from ...collectors.bench.sweep import PointResult


class SweepProgressLines:
    """On stderr: one line per slice (level, mode, requests done, live tok/s) under one line for the whole
    sweep (slices done of all, elapsed, time left at the pace measured so far)."""

    def __init__(self, total_slices: int, console: Console | None = None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console if console is not None else Console(stderr=True),
            transient=False,
        )
        self._total_slices = total_slices
        self._overall: Any = None
        self._task: Any = None
        self._duration: float | None = None
        self._done = 0

    def __enter__(self) -> SweepProgressLines:
        self.progress.start()
        self._overall = self.progress.add_task(
            f"[bold]sweep[/] 0/{self._total_slices} slices", total=self._total_slices, detail=""
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def point_started(
        self, concurrency: int, mode: str, total_requests: int | None, duration_s: float | None
    ) -> None:
        self._duration = duration_s
        self._done = 0
        total = float(total_requests) if total_requests is not None else duration_s
        label = "plain" if mode == "plain" else f"spec {mode}"
        self._task = self.progress.add_task(f"[bold]C={concurrency:<4}[/] {label:<8}", total=total,
                                            detail=self._detail(0, 0.0))  # fmt: skip

    @staticmethod
    def _detail(done: int, tok_s: float) -> str:
        return f"{done} req done {tok_s:>8.0f} tok/s"

    def request_done(self, record: RequestRecord, tokens_so_far: int, elapsed_s: float) -> None:
        if self._task is None:
            return
        self._done += 1
        completed = min(elapsed_s, self._duration) if self._duration is not None else self._done
        tok_s = tokens_so_far / max(elapsed_s, 1e-9)
        self.progress.update(self._task, completed=completed, detail=self._detail(self._done, tok_s))

    def point_finished(self, point: PointResult) -> None:
        """The level's pooled figure for one mode, on a line of its own: it sums every round of that mode,
        so it belongs on no single slice's line (each keeps the figures it measured)."""
        tok_s = point.tok_s or point.figures.get("output_throughput") or 0.0
        done = int(point.figures.get("completed", 0) or 0)
        label = "plain" if point.mode == "plain" else f"spec {point.mode}"
        rounds = int(point.figures.get("rounds", 0) or 0)
        pooled = f"pooled over {rounds} rounds" if rounds > 1 else "steady"
        self.progress.console.print(
            f"C={point.concurrency:<4} {label:<8} {pooled}: {done} req done, {tok_s:.0f} tok/s"
        )

    def slice_finished(self, concurrency: int, mode: str) -> None:
        if self._task is not None:  # the slice's own line ends full, with its own last figures
            task = next(t for t in self.progress.tasks if t.id == self._task)
            self.progress.update(self._task, completed=task.total or 0)
            self._task = None
        self.progress.advance(self._overall)
        finished = int(next(t for t in self.progress.tasks if t.id == self._overall).completed)
        label = f"[bold]sweep[/] {finished}/{self._total_slices} slices"
        self.progress.update(self._overall, description=label)
