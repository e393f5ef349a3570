"""`bench-build bench …`: the benchmarks (scripts, not tests) as one typer sub-app.

``bench stages`` (per-stage costs of ``--recipe``, the Parquet floor, 1- vs 2-worker demo builds,
``--costs-out``), ``bench scale`` (1…N workers side by side with `plan`, ``--control``), ``bench sources``, ``bench
loaders``, ``bench layouts``, ``bench publish``, ``bench s3-build``, ``bench score``. ``bench`` with no
subcommand runs ``stages`` with the old flags (``--frames``, ``--no-builds``, ``--no-objects``, ``--costs-out`` …),
and the old ``--publish``, ``--s3-build``, ``--loaders``, ``--points-layouts`` and ``--score`` switches still run
their benchmark.

The benchmark modules are imported inside each command: importing NumPy before `bench_build.cli` has put the numeric
pin in the environment would compute under another SIMD dispatch.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from bench_build.errors import as_path, refuse_empty_path

bench_app = typer.Typer(add_completion=False, help="Benchmarks: stage costs, scaling over workers, readers, "
                                                   "loaders, layouts, object storage, scoring.")

Frames = Annotated[int, typer.Option(min=1, help="Demo frames to measure on")]
RecipeOpt = Annotated[str, typer.Option(help="The benchmark whose corruptions are measured on its demo data and whose "
                                             "cost table --costs-out writes: a built-in name, name:variant or a "
                                             "recipe .toml (object benchmarks: --frames blocks of 16 shapes)")]
CostsOut = Annotated[Path | None, typer.Option(help="Also write the measured costs as a cost table (JSON) for `plan` "
                                                    "and task sizing (pipeline/plan/cost_tables/); scaled to real task "
                                                    "seconds by the demo build unless --no-builds",
                                                    parser=as_path, callback=refuse_empty_path)]


def refuse(message: str) -> typer.Exit:
    """One line on stderr and exit 2, as every other command refuses bad input (`bench_build.cli.app.fail`)."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code=2)


def check_out_file(path: Path | None, flag: str, *, cost_table: bool = False, recipe: str | None = None) -> None:
    """Refuse, before minutes of measuring, an output file that cannot be written: its folder missing, not a
    folder or not writable, the path itself a folder; with ``cost_table``, an existing file that is not a cost
    table, or the ``runtime`` part of one, of some recipe (JSON of another kind included: it would be replaced,
    or the runtime merged into it), or, with ``recipe``, that holds another benchmark's table (it would be
    replaced)."""
    if path is None:
        return
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise refuse(f"{flag} {path}: is a folder; give a file name")
    if not parent.is_dir():
        raise refuse(f"{flag} {path}: the folder {parent} does not exist" if not parent.exists() else
                     f"{flag} {path}: {parent} is not a folder")
    try:  # by writing, not `os.access`: root may "write" in /proc by its mode bits, and no file is made there
        with tempfile.NamedTemporaryFile(dir=parent, prefix=f".{path.name}.", suffix=".probe"):
            pass
    except OSError as e:
        raise refuse(f"{flag} {path}: cannot write in {parent} ({e.strerror})") from None
    if cost_table and path.is_file():
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise refuse(f"{flag} {path}: exists and is not a cost table (not JSON: {e})") from None
        held = data.get("recipe") if isinstance(data, dict) else None
        if not isinstance(held, str):  # any other JSON (settings, results) would be replaced or merged into
            what = ("object without a \"recipe\" name" if isinstance(data, dict) else
                    {list: "array", str: "string", bool: "boolean"}.get(type(data), "number" if data is not None
                                                                        else "null"))
            raise refuse(f"{flag} {path}: exists and is not a cost table (a JSON {what}); give another file")
        if recipe is not None and held != recipe:
            raise refuse(f"{flag} {path}: holds the cost table of {held}, not {recipe}; give another file")


def check_dir(path: str | None, flag: str) -> None:
    """Refuse a folder argument that does not exist or is not a folder, naming it."""
    if path is not None and not Path(path).is_dir():
        raise refuse(f"{flag} {path}: " + ("not a folder" if Path(path).exists() else "does not exist"))


def stages(frames: int = 4, builds: bool = True, build_rounds: int = 1, objects: bool = True,
           only_objects: bool = False, costs_out: Path | None = None, recipe: str = "kitti-c") -> None:
    from bench_build.bench.objects import run_object_bench
    from bench_build.bench.stages import DEFAULT_RECIPE, run_bench
    from bench_build.manifests.recipe import RecipeError, load_recipe

    try:  # before minutes of measuring: an unknown name lists the built-in ones
        name = load_recipe(recipe).name
    except RecipeError as e:
        raise refuse(f"--recipe: {e}") from None
    if only_objects and (costs_out is not None or recipe != DEFAULT_RECIPE):
        raise refuse(f"{'--costs-out' if costs_out is not None else '--recipe'} with --only-objects: the object "
                     "section measures no recipe's cost table; for one, `bench stages --recipe modelnet-c "
                     "--no-objects --costs-out FILE`")
    check_out_file(costs_out, "--costs-out", cost_table=True, recipe=name)
    if not only_objects:
        default = recipe == DEFAULT_RECIPE  # kitti-c also prints the Robo3D tables and the readers', as always
        run_bench(frames=frames, builds=builds, recipe_name=recipe, costs_out=costs_out, build_rounds=build_rounds,
                  extra_recipes=("robo3d-kitti-c",) if default else (), sources=default)
    if objects or only_objects:
        run_object_bench(builds=builds)


@bench_app.callback(invoke_without_command=True)
def bench(
    ctx: typer.Context,
    *,
    frames: Annotated[int, typer.Option(min=1, help="(no subcommand) as `bench stages --frames`")] = 4,
    builds: Annotated[bool, typer.Option(help="(no subcommand) as `bench stages --builds`")] = True,
    build_rounds: Annotated[int, typer.Option(min=1, help="(no subcommand) as `bench stages --build-rounds`")] = 1,
    objects: Annotated[bool, typer.Option(help="(no subcommand) as `bench stages --objects`")] = True,
    only_objects: Annotated[bool, typer.Option(help="(no subcommand) as `bench stages --only-objects`")] = False,
    costs_out: Annotated[Path | None, typer.Option(help="(no subcommand) as `bench stages --costs-out`",
                                                   parser=as_path, callback=refuse_empty_path)] = None,
    recipe: Annotated[str, typer.Option(help="(no subcommand) as `bench stages --recipe`")] = "kitti-c",
    publish: Annotated[bool, typer.Option(hidden=True)] = False,
    s3_build: Annotated[bool, typer.Option(hidden=True)] = False,
    loaders: Annotated[bool, typer.Option(hidden=True)] = False,
    points_layouts: Annotated[bool, typer.Option(hidden=True)] = False,
    score: Annotated[bool, typer.Option(hidden=True)] = False,
    workers: Annotated[int, typer.Option(min=1, hidden=True)] = 2,
    repeat: Annotated[int, typer.Option(min=1, hidden=True)] = 3,
    isolate_server: Annotated[bool, typer.Option(hidden=True)] = False,
    version_dir: Annotated[str | None, typer.Option(hidden=True, callback=refuse_empty_path)] = None,
    score_partitions: Annotated[int, typer.Option(min=1, hidden=True)] = 4,
) -> None:
    """Benchmarks; with no subcommand, `bench stages` (the old `bench`)."""
    switches = {"--publish": publish, "--s3-build": s3_build, "--loaders": loaders,
                "--points-layouts": points_layouts, "--score": score}
    if ctx.invoked_subcommand is not None:
        given = [k for k, v in switches.items() if v]
        if given:
            typer.echo(f"bench: {given[0]} is the old spelling of a subcommand; give `bench "
                       f"{ctx.invoked_subcommand}` alone (see `bench-build bench --help`)", err=True)
            raise typer.Exit(2)
        return
    # the old switches: each runs its benchmark as before (now also a subcommand of its own)
    if score:
        score_cmd(partitions=score_partitions, workers=workers)
    elif loaders:
        loaders_cmd(version_dir=version_dir, frames=frames)
    elif points_layouts:
        layouts_cmd(frames=frames)
    elif s3_build:
        s3_build_cmd(frames=frames, workers=workers, repeat=repeat, isolate_server=isolate_server)
    elif publish:
        publish_cmd(frames=frames, workers=workers)
    else:
        stages(frames=frames, builds=builds, build_rounds=build_rounds, objects=objects, only_objects=only_objects,
               costs_out=costs_out, recipe=recipe)


@bench_app.command("stages")
def stages_cmd(
    *,
    frames: Frames = 4,
    builds: Annotated[bool, typer.Option(help="Also time whole demo builds at 1 and 2 workers")] = True,
    build_rounds: Annotated[int, typer.Option(min=1, help="Rounds of the 1- and 2-worker demo builds (alternating "
                                                          "which goes first); the speed-up and the task CPU are "
                                                          "medians")] = 1,
    objects: Annotated[bool, typer.Option(help="Also the object benchmarks' stages (ModelNet-C, ModelNet40-E, "
                                               "3DOS) and a ModelNet-C demo build")] = True,
    only_objects: Annotated[bool, typer.Option(help="Only the object benchmarks")] = False,
    costs_out: CostsOut = None,
    recipe: RecipeOpt = "kitti-c",
) -> None:
    """Per-stage cost per example, the Parquet I/O floor, and whole-build examples/s."""
    stages(frames=frames, builds=builds, build_rounds=build_rounds, objects=objects, only_objects=only_objects,
           costs_out=costs_out, recipe=recipe)


@bench_app.command("scale")
def scale_cmd(
    *,
    workers: Annotated[list[int] | None, typer.Option(min=1, help="Worker counts (repeatable; default 1, 2, 4 … "
                                                                  "up to the machine's cores)")] = None,
    frames: Annotated[int | None, typer.Option(min=1, help="Frames to build (default: 2 per worker of the largest "
                                                           "count, at least 8; demo frames are copied under new "
                                                           "ids when more are needed)")] = None,
    frames_per_shard: Annotated[int, typer.Option(min=1, help="Frames per block")] = 2,
    source: Annotated[str | None, typer.Option(help="A KITTI-layout root to copy frames from (default: the demo "
                                                    "frames, generated on first use)",
                                                    callback=refuse_empty_path)] = None,
    control: Annotated[bool, typer.Option(help="First the control: two NumPy loops with no bench-build code "
                                               "(streaming + zstd, in-cache), 1 copy then N at once; their CPU "
                                               "inflation is the hardware's, and which one inflates says why")] = False,
    control_only: Annotated[bool, typer.Option(help="Only the control (no builds; --json-out gets it, as "
                                                    "\"control\")")] = False,
    json_out: Annotated[Path | None, typer.Option("--json-out", help="Write the results as JSON",
                                                  parser=as_path, callback=refuse_empty_path)] = None,
    costs_out: Annotated[Path | None, typer.Option(help="Merge the measured runtime (Ray start, worker start, "
                                                        "finish, CPU inflation at full occupancy) into this cost "
                                                        "table for `plan`",
                                                        parser=as_path, callback=refuse_empty_path)] = None,
    out: Annotated[str | None, typer.Option(help="Directory for the builds (default: the system's temp; "
                                                 "/dev/shm takes the disk out)", callback=refuse_empty_path)] = None,
    rounds: Annotated[int, typer.Option(min=1, help="Build every worker count this many times, in turn, and "
                                                    "report (and store with --costs-out) the medians")] = 1,
) -> None:
    """The same frames built at 1, 2, … N workers: speed-up, utilisation from the ledger, `plan`'s prediction."""

    from bench_build.bench.control import describe, run_control
    from bench_build.bench.scale import run_scale

    cores = os.cpu_count() or 1
    counts = sorted(set(workers or [n for n in (1, 2, 4, 8, 16, 32, 64) if n < cores] + [cores]))
    if control_only and costs_out is not None:  # it was dropped without a word
        raise refuse("--costs-out with --control-only: the control measures no runtime for a cost table; drop "
                     "--control-only to build and measure it")
    check_out_file(json_out, "--json-out")
    check_out_file(costs_out, "--costs-out", cost_table=True)
    check_dir(out, "--out")
    check_dir(source, "--source")
    if control_only:
        control = run_control(max(counts))
        typer.echo(json.dumps(control, indent=1))
        typer.echo(describe(control))
        if json_out is not None:  # under the key a run with --control stores it
            json_out.write_text(json.dumps({"control": control}, indent=1) + "\n")
            typer.echo(f"results written to {json_out}")
        return
    run_scale(counts, frames=frames or max(8, 2 * max(counts)), frames_per_shard=frames_per_shard, source=source,
              out=out, control=control, json_out=json_out, costs_out=costs_out, rounds=rounds)


@bench_app.command("sources")
def sources_cmd(repeat: Annotated[int, typer.Option(min=1, help="Timing repeats")] = 3) -> None:
    """Dataset readers' decode cost per frame and the robo3d-nuscenes-c stages on 32-beam scans."""
    from bench_build.bench.sources import run_bench_sources

    run_bench_sources(repeat=repeat)


@bench_app.command("loaders")
def loaders_cmd(
    *,
    version_dir: Annotated[str | None, typer.Option(help="The version to read (default: build the kitti-c demo "
                                                         "of --frames frames)", callback=refuse_empty_path)] = None,
    frames: Frames = 4,
) -> None:
    """Read examples/s of a version: raw Parquet vs PyTorch DataLoader with 0 and 2 workers."""
    from bench_build.bench.loaders import run_bench_loaders

    run_bench_loaders(version_dir, frames=frames)


@bench_app.command("layouts")
def layouts_cmd(frames: Frames = 4) -> None:
    """Write / read CPU and size of candidate layouts of the points column (for a schema decision)."""
    from bench_build.bench.layouts import run_bench_layouts

    run_bench_layouts(frames=frames)


@bench_app.command("publish")
def publish_cmd(
    *,
    frames: Frames = 8,
    workers: Annotated[int, typer.Option(min=1, help="Ray workers of the build")] = 2,
) -> None:
    """Object-storage throughput (build to s3://, publish, pull, verify) against a throwaway local SeaweedFS."""
    from bench_build.bench.publish import run_bench_publish

    run_bench_publish(frames=frames, workers=workers)


@bench_app.command("s3-build")
def s3_build_cmd(
    *,
    frames: Frames = 8,
    workers: Annotated[int, typer.Option(min=1, help="Ray workers of the builds")] = 2,
    repeat: Annotated[int, typer.Option(min=1, help="Rounds of the three builds")] = 3,
    isolate_server: Annotated[bool, typer.Option(help="SeaweedFS on the last CPU, the builds on the others (as "
                                                      "with a store on another host)")] = False,
) -> None:
    """Demo build to a local directory vs to s3:// with uploads overlapping compute and without; medians."""
    from bench_build.bench.publish import run_bench_s3_build

    run_bench_s3_build(frames=frames, workers=workers, repeat=repeat, isolate_server=isolate_server)


@bench_app.command("score")
def score_cmd(
    *,
    partitions: Annotated[int, typer.Option(min=1, help="Full-size partitions measured")] = 4,
    workers: Annotated[int, typer.Option(min=1, help="Scoring processes")] = 2,
) -> None:
    """Time `score` on full-size synthetic KITTI-C partitions and extrapolate to all 126."""
    from bench_build.bench.score import run_bench_score

    run_bench_score(partitions=partitions, workers=workers)
