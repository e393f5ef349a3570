"""What export raises: `ExportError` before anything is written (exit 2), `ExportIncomplete` after (exit 1)."""

from __future__ import annotations

from bench_build.errors import BenchBuildError


class ExportError(BenchBuildError, ValueError):
    """Refused before anything was written (the CLI's exit 2)."""


class ExportIncomplete(BenchBuildError, RuntimeError):
    """Writing had begun when something failed (the CLI's exit 1); the message says what is left (OUT as it was,
    unless moving the written files into place failed)."""

    exit_code = 1  # work had begun
