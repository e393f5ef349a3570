"""A live progress bar for builds (examples/s, ETA) that degrades to log lines when not on a TTY."""

from __future__ import annotations

import re
import sys
import threading
import time

from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)


class BuildProgress:
    def __init__(self, total: int, *, enabled: bool = True) -> None:
        self.total, self.done, self.enabled = total, 0, enabled
        self._t0 = time.time()
        self._start_done: int | None = None
        self._progress = None
        self._task = None
        self._last_log = 0.0
        if enabled and sys.stderr.isatty():

            self._progress = Progress(TextColumn("[bold]examples"), BarColumn(), MofNCompleteColumn(),
                                      TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TextColumn("ETA"),
                                      TimeRemainingColumn(), transient=False)
            self._progress.start()
            self._task = self._progress.add_task("build", total=total, rate="")

    def rate(self) -> float:
        base = self._start_done or 0
        elapsed = time.time() - self._t0
        return (self.done - base) / elapsed if elapsed > 0 else 0.0

    def advance(self, n: int) -> None:
        if self._start_done is None:
            self._start_done = n  # work found already done by an earlier run is not this run's rate
            self._t0 = time.time()
        self.done += n
        if self._progress is not None:
            self._progress.update(self._task, completed=self.done, rate=f"{self.rate():.1f} ex/s")
        elif self.enabled and (time.time() - self._last_log > 5 or self.done >= self.total):
            self._last_log = time.time()
            r = self.rate()
            # no rate yet (nothing finished in this run): say so rather than "ETA nan s"
            eta = f"ETA {(self.total - self.done) / r:.0f} s" if r > 0 else "ETA after the first task"
            print(f"[bench-build] {self.done}/{self.total} examples, {r:.1f} ex/s, {eta}", file=sys.stderr, flush=True)

    def update_to(self, done: int) -> None:
        """Move the bar to ``done`` examples (never backwards)."""
        if done > self.done:
            self.advance(done - self.done)

    def fail(self, shard: str, error: str) -> None:
        if self.enabled:
            first = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", error).strip().splitlines()[0] if error.strip() else ""
            msg = f"shard {shard} FAILED: {first}"
            if self._progress is not None:

                self._progress.console.print(f"[red]{escape(msg)}")
            else:
                print(f"[bench-build] {msg}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


class TransferProgress:
    """Bytes uploaded/downloaded with rate and ETA: a rich bar on a TTY, log lines every 5 s otherwise.

    ``advance`` is thread-safe (boto3 calls it from its transfer threads)."""

    def __init__(self, total_bytes: int, label: str, *, enabled: bool = True) -> None:

        self.total, self.done, self.label, self.enabled = total_bytes, 0, label, enabled
        self._lock = threading.Lock()
        self._t0 = time.time()
        self._last_log = 0.0
        self._progress = None
        self._task = None
        if enabled and sys.stderr.isatty():

            self._progress = Progress(TextColumn(f"[bold]{label}"), BarColumn(), DownloadColumn(),
                                      TransferSpeedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                      transient=False)
            self._progress.start()
            self._task = self._progress.add_task(label, total=total_bytes)

    def advance(self, n: int) -> None:
        with self._lock:
            self.done += n
            if self._progress is not None:
                self._progress.update(self._task, completed=self.done)
            elif self.enabled and (time.time() - self._last_log > 5):
                self._last_log = time.time()
                self._log()

    def skip(self, n: int) -> None:
        """``n`` bytes need no transfer (already there): out of the total, not counted in the rate."""
        with self._lock:
            self.total -= n
            if self._progress is not None:
                self._progress.update(self._task, total=self.total)

    def _log(self) -> None:
        elapsed = time.time() - self._t0
        rate = self.done / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else float("nan")
        print(f"[bench-build] {self.label}: {self.done / 1e6:.1f}/{self.total / 1e6:.1f} MB, "
              f"{rate / 1e6:.1f} MB/s, ETA {eta:.0f} s", file=sys.stderr, flush=True)

    def message(self, text: str) -> None:
        if not self.enabled:
            return
        if self._progress is not None:
            self._progress.console.print(text)
        else:
            print(f"[bench-build] {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        elif self.enabled and self.total:
            self._log()


class ProgressCounter:
    """Ray actor: examples written so far per shard, so the driver's bar moves file by file, not shard by
    shard. A shard's count restarts when its task (re)starts, so retries are not counted twice. It lives
    in this light module so that the actor's process imports nothing else (from `bench_build.build` it imported
    the whole pipeline: ≈ 0.5 s of CPU taken from the workers at the start of every build)."""

    def __init__(self) -> None:
        self.rows: dict[str, int] = {}

    def start(self, shard: str) -> None:
        self.rows[shard] = 0

    def add(self, shard: str, rows: int) -> None:
        self.rows[shard] = self.rows.get(shard, 0) + rows

    def snapshot(self) -> dict[str, int]:
        return dict(self.rows)
