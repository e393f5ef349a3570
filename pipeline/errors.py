"""The one root of every error bench-build reports to its user.

Every domain error derives from `BenchBuildError` (and, where callers caught it so before, from the built-in it
used to be: a `RecipeError` is still a `ValueError`). Its ``exit_code`` is what the CLI exits with: 2 means
refused, nothing was written; 1 means work had begun and part of it failed (the message says how far). The CLI
catches `BenchBuildError` in one place and prints its message on one line; any other exception is a bug in
bench-build and ends with a traceback.

This module imports only the standard library: every layer, `manifests` included, may derive from it, and the
command modules name `refuse_empty_path` at their top level without slowing `--help`.
"""

from __future__ import annotations

import os
from pathlib import Path


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


def refuse_empty_path(ctx: object, param: object, value: object) -> object:
    """The typer ``callback=`` of every command-line argument and option that names a path or URL: an empty string
    (an unset shell variable, ``--out "$OUT"``) is a `UsageError` naming the command and the option, before the
    command runs (exit 2, nothing written): read as a path, "" is the working directory, where a command would then
    write or read. ``.`` still means the working directory; None (the option not given) and a repeated option's
    list without "" pass unchanged."""
    if value == "" or (isinstance(value, list | tuple) and "" in value):
        names = []
        while getattr(ctx, "parent", None) is not None:  # `bench scale`, not the program's name
            names.append(ctx.info_name)
            ctx = ctx.parent
        opts = [o for o in param.opts if o.startswith("--")] if param.param_type_name == "option" else []
        flag = opts[0] if opts else param.name.upper()
        raise UsageError(f"{' '.join(reversed(names))}: {flag} is an empty string, which would mean the working "
                         f"directory ({os.getcwd()}); give a path (. for the working directory)")
    return value


def as_path(value: object) -> object:
    """The typer ``parser=`` of a `pathlib.Path` argument or option that `refuse_empty_path` checks: the value as a
    Path, but "" kept as it is (``Path("")`` is ``Path(".")``, which the callback could not tell from a given ".")."""
    return Path(value) if value != "" else value
