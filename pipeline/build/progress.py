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

from bench_build.runtime.ray import kv_delete_prefix, kv_get_many, kv_put


class BuildProgress:
    def __init__(self, total: int, *, enabled: bool = True) -> None:
        self.total, self.done, self.enabled = total, 0, enabled
        self._start_done: int | None = None
        self._first: tuple[float, int] | None = None  # (time, examples) of this run's first examples
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
        """Examples per second since this run's first examples arrived: Ray's start and each worker's warm-up come
        before them, once, so a rate counted from the start made the first ETA of the demo build ≈ 4,600 s for a
        build that took 23."""
        if self._first is None:
            return 0.0
        t, first = self._first
        elapsed = time.time() - t
        return (self.done - first) / elapsed if elapsed > 0 else 0.0

    def advance(self, n: int) -> None:
        if self._start_done is None:
            self._start_done = n  # work found already done by an earlier run is not this run's rate
        self.done += n
        if self._first is None and self.done > self._start_done:
            self._first = (time.time(), self.done)
        if self._progress is not None:
            self._progress.update(self._task, completed=self.done, rate=f"{self.rate():.1f} ex/s")
        elif self.enabled and (time.time() - self._last_log > 5 or self.done >= self.total):
            self._last_log = time.time()
            r = self.rate()
            if self.done >= self.total:  # the last line: no ETA; who built them (a one-task build's examples all
                # arrive in one update, so a rate of 0 does not mean an earlier run built them)
                earlier = self._start_done or 0
                if earlier >= self.total:
                    said = "all built by an earlier run"
                else:
                    said = "all built" + (f" ({earlier} by an earlier run)" if earlier else "") + (
                        f", {r:.1f} ex/s" if r > 0 else "")
                print(f"[bench-build] {self.done}/{self.total} examples, {said}", file=sys.stderr, flush=True)
                return
            # no rate yet: say so rather than "0.0 ex/s, ETA nan s" (nothing built in this run yet, or only the
            # examples of its first update, from which no rate can be told)
            eta = (f"{r:.1f} ex/s, ETA {(self.total - self.done) / r:.0f} s" if r > 0 else "ETA after the first task"
                   if self._first is None else "rate and ETA at the next update (start-up left out)")
            print(f"[bench-build] {self.done}/{self.total} examples, {eta}", file=sys.stderr, flush=True)

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
        eta = f"ETA {(self.total - self.done) / rate:.0f} s" if rate > 0 else "ETA after the first file"
        print(f"[bench-build] {self.label}: {self.done / 1e6:.1f}/{self.total / 1e6:.1f} MB, "
              f"{rate / 1e6:.1f} MB/s, {eta}", file=sys.stderr, flush=True)

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


class ProgressBoard:
    """Examples written so far by each running task of a run, so the driver's bar moves file by file, not
    shard by shard. Tasks write their count to the cluster's GCS key-value store (`runtime.ray.kv_put`), at most
    every `INTERVAL_S`; the driver reads the running tasks' counts in one request a second. A count restarts
    when its task (re)starts, so retries are not counted twice.

    It replaced a progress actor: an actor is a process of its own, which took one of the workers Ray starts
    with a build (a task then waited for a new one) and their CPU at start. Measured on 2 cores, the 8-frame
    demo at 2 workers: the tasks' first start 1.5–2.4 s after Ray was up with the actor, 1.1–1.2 s without."""

    INTERVAL_S = 0.5

    def __init__(self, run_id: str) -> None:
        self.prefix = f"{run_id}/"
        self._rows: dict[str, int] = {}  # in a task: its shard's count so far
        self._sent: dict[str, float] = {}  # in a task: when it was last written

    def start(self, shard: str) -> None:
        self._rows[shard], self._sent[shard] = 0, time.monotonic()
        kv_put(self.prefix + shard, b"0")

    def add(self, shard: str, rows: int) -> None:
        self._rows[shard] = self._rows.get(shard, 0) + rows
        if time.monotonic() - self._sent.get(shard, 0.0) >= self.INTERVAL_S:
            self._sent[shard] = time.monotonic()
            kv_put(self.prefix + shard, str(self._rows[shard]).encode())

    def snapshot(self, shards: list[str]) -> dict[str, int]:
        """In the driver: the counts of ``shards`` written so far (a shard not started yet is absent)."""
        got = kv_get_many([self.prefix + s for s in shards]) if shards else {}
        return {k[len(self.prefix):]: int(v) for k, v in got.items() if v.isdigit()}

    def clear(self) -> None:
        kv_delete_prefix(self.prefix)
