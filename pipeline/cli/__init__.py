"""The `bench-build` command line. Thin: each command parses its options and calls one function.

`app` (cli/app.py) is the typer app; each module of commands registers its commands on it when imported:
build_commands (run, status), prepare_commands (list, warm, demo-data, demo-objects, plan, repro-check),
data_commands (verify, export, score, render, validate, diff), publish_commands (publish, versions, pull,
s3-local), and the `bench`
sub-app (pipeline/bench/cli.py). Commands import what they run inside their function: the numeric pin (cli/app.py)
must be set before NumPy loads, and `bench-build --help` stays fast.
"""

from bench_build.cli import (  # noqa: F401  (they register commands)
    build_commands,
    data_commands,
    prepare_commands,
    publish_commands,
)
from bench_build.cli.app import Commands, app

__all__ = ["Commands", "app"]
