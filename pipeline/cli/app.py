"""The typer app every command registers on, the numeric pin set before any command imports NumPy, the one
place a `BenchBuildError` becomes a one-line message and its exit code, and the options commands share."""

from __future__ import annotations

import inspect
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from typer.core import TyperGroup

from bench_build.bench.cli import bench_app  # typer only: NumPy is imported by its commands, after the pin
from bench_build.errors import BenchBuildError
from bench_build.runtime.numeric import NumericPinError, pin_environment

# Before any command imports NumPy (they import pipeline modules lazily): this process and every process it
# starts compute with the numeric pin (NumPy without AVX-512 dispatch, OpenBLAS on Haswell kernels), so shard
# and demo-data bytes do not depend on the machine's CPU. A user's own setting of either variable is kept.
try:
    pin_environment()
except NumericPinError as e:  # a NumPy whose dispatch targets the pin cannot judge: refuse before any work
    print(f"bench-build: {e}", file=sys.stderr)
    raise SystemExit(2) from None


#: `bench-build --help` lists the commands in these panels, in this order (`COMMAND_ORDER`): what a newcomer does
#: first comes first
PANEL_BUILD = "Build"
PANEL_USE = "Use a built version"
PANEL_PUBLISH = "Publish and fetch"
PANEL_MACHINE = "Demo data and this machine"
COMMAND_ORDER = ("run", "status", "list", "plan", "verify", "export", "score", "render", "validate", "diff",
                 "publish", "versions", "pull", "s3-local", "demo-data", "demo-objects", "warm", "repro-check", "bench")


#: click's usage errors as typer raises them (not `errors.UsageError`): typer 0.29 carries its own copy of click
#: and exports only a subclass of its `UsageError`
TyperUsageError = typer.BadParameter.__bases__[0]

#: what a user's path of the wrong kind raises deep inside a command (see `Commands`)
PATH_ERRORS = (NotADirectoryError, IsADirectoryError, FileExistsError, PermissionError)


class Commands(TyperGroup):
    """Every command's `BenchBuildError` ends here, once: its message on one line and its exit code (2: refused,
    nothing written; 1: part of the work failed). So does a path of the wrong kind or without permission that a
    command's own checks did not refuse first (a file where a folder must be, a folder where a file must be): one
    line naming the path, exit 1, as work may have begun. So does a usage error (an unknown command or option, a
    missing argument, a value of the wrong type or out of range): one line and where the options are listed, exit
    2, before any work (`usage_failure`). Any other exception is a bug and keeps its traceback."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except TyperUsageError as e:  # the top level's own options (`bench-build --bogus`)
            raise usage_failure(e) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except TyperUsageError as e:  # a command's options and arguments, an unknown command
            raise usage_failure(e, ctx) from None
        except BenchBuildError as e:
            raise fail(e, e.exit_code) from None
        except PATH_ERRORS as e:
            if e.filename is None:
                raise
            raise fail(f"{e.filename}: {e.strerror}", code=1) from None

    def list_commands(self, ctx):
        """The commands in `COMMAND_ORDER`, any other after them as registered."""
        names = super().list_commands(ctx)
        return sorted(names, key=lambda n: COMMAND_ORDER.index(n) if n in COMMAND_ORDER else len(COMMAND_ORDER))

    def get_command(self, ctx, cmd_name):
        """The command, its line in the command list being its help's first paragraph as one flowing line (typer
        keeps a docstring's line breaks there, mid-sentence)."""
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None and cmd.short_help is None and cmd.help:
            cmd.short_help = " ".join(inspect.cleandoc(cmd.help).partition("\n\n")[0].split())
        return cmd


app = typer.Typer(cls=Commands, add_completion=False, no_args_is_help=True,
                  help="Build corrupted point-cloud robustness benchmarks, reproducibly, with Ray.")


console = Console(stderr=True, soft_wrap=True)


out_console = Console(soft_wrap=True)


app.add_typer(bench_app, name="bench", rich_help_panel=PANEL_MACHINE)


# Object storage: credentials only ever come from the AWS chain (env, profile, ~/.aws), never from options.
EndpointOpt = Annotated[str | None, typer.Option(
    "--endpoint-url", help="S3 endpoint for S3-compatible stores (default: AWS_ENDPOINT_URL, the profile's, AWS)")]


class Recheck(StrEnum):  # a typer choice: anything else is a usage error (exit 2), never silently "size"
    sha256 = "sha256"
    size = "size"


class Encoding(StrEnum):  # a typer choice: a misspelt encoding is a usage error (exit 2) before Ray starts
    full = "full"
    compact = "compact"


ProfileOpt = Annotated[str | None, typer.Option(help="AWS profile from ~/.aws/config (default: AWS_PROFILE)")]


def local_version(value: str, command: str) -> Path:
    """A version argument a command reads from a local folder: a URL is refused in one line saying how to pull it
    (``Path("s3://b/v")`` would read as the folder ``s3:/b/v``, "no such directory")."""
    if "://" in value:
        dataset_url, _, version = value.rstrip("/").rpartition("/")
        dataset = dataset_url.rpartition("/")[2]
        raise fail(f"{command} reads a version from a local folder, not {value}: pull it first (`bench-build pull "
                   f"{dataset_url} --version {version} --out DIR`), then {command} DIR/{dataset}/{version}")
    return Path(value)


def counted(n: int, noun: str) -> str:
    """``1 render``, ``2 renders``, ``0 files``: a count and its noun, plural unless one."""
    return f"{n} {noun}{'s' * (n != 1)}"


def usage_failure(e: TyperUsageError, parent=None) -> TyperUsageError | typer.Exit:
    """A usage error as one line, ``error: Invalid value for '--workers': Input should be greater than or equal to
    1, got '0'. See `bench-build run --help`.``, exit 2 (typer's own print is a usage line, a hint and a framed
    box). The value refused is named where typer's check leaves it out; the command whose help it names is the
    error's own, or (click leaves it out of "Option '--workers' requires an argument") the one ``parent``, the
    group's context, was invoking. A command called without arguments that shows its help instead
    (``no_args_is_help``) is left as it is."""
    if type(e).__name__ == "NoArgsIsHelpError":
        return e
    message = e.format_message().replace(": Value error, ", ": ")
    errors = getattr(e.__cause__, "errors", None)  # typer's pydantic check: a ValidationError's errors()
    inputs = [d.get("input") for d in errors()] if callable(errors) else []
    if len(inputs) == 1 and isinstance(inputs[0], str | int | float) and f"'{inputs[0]}'" not in message:
        message = f"{message.rstrip('.')}, got {inputs[0]!r}"
    if not message.endswith((".", "?")):
        message += "."
    if e.ctx is not None:
        where = f" See `{e.ctx.command_path} --help`."
    elif parent is not None and parent.invoked_subcommand:
        where = f" See `{parent.command_path} {parent.invoked_subcommand} --help`."
    else:
        where = ""
    return fail(f"{message}{where}")


def fail(e: BaseException | str, code: int = 2) -> typer.Exit:
    from rich.markup import escape

    from bench_build.storage import redact

    console.print(f"[red]error:[/red] {escape(redact(str(e)))}", highlight=False)
    return typer.Exit(code=code)
