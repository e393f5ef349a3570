"""The one root of every error bench-build reports to its user.

Every domain error derives from `BenchBuildError` (and, where callers caught it so before, from the built-in it
used to be: a `RecipeError` is still a `ValueError`). Its ``exit_code`` is what the CLI exits with: 2 means
refused, nothing was written; 1 means work had begun and part of it failed (the message says how far). The CLI
catches `BenchBuildError` in one place and prints its message on one line; any other exception is a bug in
bench-build and ends with a traceback.

This module imports nothing: every layer, `manifests` included, may derive from it.
"""

from __future__ import annotations


class BenchBuildError(Exception):
    """An error the user can act on; the message names the file, key or option and what is wrong."""

    exit_code: int = 2


class UsageError(BenchBuildError, ValueError):
    """A command's inputs contradict each other or name something that does not exist (refused: exit 2)."""


class LedgerMismatch(BenchBuildError, RuntimeError):
    """The output directory holds a build that this run cannot continue: another recipe, frame list, writer,
    numeric profile or task split (refused: exit 2; ``--overwrite`` starts over). Here, not in the build's ledger
    module, because planning refuses a changed task split too."""


#: set on an exception raised after a command began writing (`wrote_before`): the CLI then lets it end with its
#: traceback and exit 1 instead of turning it into exit 2, which promises that nothing was written
WROTE = "bench_build_wrote"


def wrote_before(e: BaseException) -> bool:
    """Whether ``e`` was raised after its command began writing (`WROTE`)."""
    return bool(getattr(e, WROTE, False))
