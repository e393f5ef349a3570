"""Background uploads: one task's finished files go up while it computes the next."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any


class BackgroundUploads:
    """Uploads running on ``threads`` background threads, bounded (staging disk stays at ``depth`` files).

    The owner must end every batch with `finish` (success: wait, raise the first failure) or `abandon`
    (its task failed: drop what has not started, wait for what has), so no upload outlives its task."""

    def __init__(self, depth: int | None, threads: int = 1) -> None:
        self.depth, self.threads = depth, threads
        self._pool = None
        self._slots = threading.BoundedSemaphore(depth) if depth else None
        self._jobs: list[tuple[Any, Path]] = []  # (future, staged file)
        self._closed = False

    @property
    def active(self) -> bool:
        """Does `staged_file` hand files over? Not after `finish` / `abandon`: a later file uploads in place,
        never to a batch nobody waits for."""
        return self.depth is not None and not self._closed

    def submit(self, upload: Callable[[], None], staged: Path) -> None:
        """Run ``upload`` in the background, then delete ``staged``; blocks while ``depth`` are waiting."""

        assert self._slots is not None
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="bench-build-upload")
        self._slots.acquire()

        def job() -> None:
            try:
                upload()
            finally:
                staged.unlink(missing_ok=True)
                self._slots.release()

        try:
            self._jobs.append((self._pool.submit(job), staged))
        except BaseException:
            self._slots.release()
            raise

    def finish(self) -> None:
        """Wait for every upload; raise the first failure (the others have finished or failed too)."""
        try:
            for f, _ in self._jobs:
                f.result()
        finally:
            self._close()

    def abandon(self) -> None:
        """Cancel uploads not yet started (deleting their staged files), wait for the running one, ignore
        failures: the caller is already failing, and an object is either whole or absent."""
        for f, staged in self._jobs:
            if f.cancel():
                staged.unlink(missing_ok=True)
                assert self._slots is not None
                self._slots.release()
        self._close()

    def _close(self) -> None:
        self._closed = True
        self._jobs = []
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
