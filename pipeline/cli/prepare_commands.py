"""Before a build: list, warm, demo-data, demo-objects, plan, repro-check."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

from bench_build.cli.app import PANEL_BUILD, PANEL_MACHINE, app, counted, fail, out_console
from bench_build.errors import as_path, refuse_empty_path


def _threedos_classes(sc) -> str:
    from bench_build.manifests.threedos import SN_SETS, SR_SCANOBJECTNN

    def n(sets):
        return sum(len(SN_SETS[s]) if s in SN_SETS else len(SR_SCANOBJECTNN[s]) for s in sets)

    return f" ({n(sc.known)} known / {n(sc.unknown)} unknown categories)"


@app.command("list", rich_help_panel=PANEL_BUILD)
def list_benchmarks() -> None:
    """Built-in benchmarks: corruptions × severities and example counts."""
    from bench_build.manifests.recipe import builtin_recipes, load_recipe
    from bench_build.sources import OBJECT_KINDS

    for name in sorted(builtin_recipes()):
        r = load_recipe(name)
        unit = "shape" if r.source in OBJECT_KINDS else "frame"  # an object benchmark's "frames" are shapes
        names = f" ({', '.join(r.severity_names)})" if r.severity_names else ""
        if not r.corruptions:  # clean-only benchmark (3dos): its examples are (scenario, shape) pairs
            out_console.print(f"[bold]{name}[/bold] {r.version}: source {r.source}, no corruptions; one example per "
                              "scenario × shape")
        else:
            n_corr = counted(len(r.corruptions), "corruption")
            split = f" ({r.split} split)" if r.split else ""
            out_console.print(f"[bold]{name}[/bold] {r.version}: source {r.source}{split}, {n_corr} "
                              f"× severities 0–{r.severities}{names}; per {unit} {r.examples_defined(1)} examples "
                              f"defined, {r.examples_stored(1)} stored (clean once)")
            out_console.print("  " + ", ".join(c.name for c in r.corruptions))
        if r.paper_frames:
            n, c, s = r.paper_frames, len(r.corruptions), r.severities
            clean = "scans" if unit == "frame" else "shapes"
            out_console.print(f"  full size: {n:,} {unit}s × {c} × {s} = {n * c * s:,} corrupted examples "
                              f"({r.examples_stored(n):,} stored with the clean {clean})")
        if r.source == "3dos":
            from bench_build.manifests.threedos import SCENARIOS

            for sc in SCENARIOS:
                out_console.print(f"  {sc.track} {sc.name}: known {'+'.join(sc.known)}, unknown {'+'.join(sc.unknown)}"
                                  f"{_threedos_classes(sc)}")
        if r.variants:
            out_console.print("  variants: " + ", ".join(f"{name}:{v}" for v in r.variants))


@app.command(rich_help_panel=PANEL_MACHINE)
def warm(
    benchmarks: Annotated[list[str] | None, typer.Argument(
        help="Built-in benchmark names or recipe .toml files (default: every built-in benchmark)")] = None,
) -> None:
    """Compile (or load) the numba kernels of these benchmarks' builds once, so the Ray workers this machine
    starts later load them instead of each compiling them in its first task (the image runs this at build)."""
    from bench_build.build.warm import numba_cache_dir
    from bench_build.build.warm import warm as warm_kernels
    from bench_build.errors import UsageError
    from bench_build.manifests.recipe import RecipeError, builtin_recipes
    from bench_build.sources import SourceError

    names = benchmarks or sorted(builtin_recipes())
    total = 0.0

    def done(row: dict) -> None:
        nonlocal total
        total += row["cpu_seconds"]
        out_console.print(f"{row['benchmark']}: {row['cpu_seconds']:.1f} s CPU (one demo frame, "
                          f"{row['examples']} examples, nothing kept)")

    try:
        warm_kernels(names, on_done=done)
    except (RecipeError, SourceError, UsageError) as e:
        raise fail(e) from None
    out_console.print(f"{counted(len(names), 'benchmark')} in {total:.1f} s CPU; numba kernels cached in "
                      f"{numba_cache_dir()}")


@app.command("demo-data", rich_help_panel=PANEL_MACHINE)
def demo_data(
    out: Annotated[Path, typer.Argument(help="Directory to write the KITTI-layout demo dataset to",
                                        parser=as_path, callback=refuse_empty_path)],
    *,
    frames: Annotated[int, typer.Option(min=1, help="Number of frames")] = 8,
    seed: Annotated[int, typer.Option(min=0, help="Generator seed")] = 1729,
) -> None:
    """Write the deterministic demo dataset (ray-cast HDL-64E-like scans) in KITTI layout."""
    from bench_build.sources.demo.cache import write_demo_root
    from bench_build.sources.demo.kitti import write_demo_dataset

    write_demo_root(out, "demo-data", lambda folder: write_demo_dataset(folder, frames, seed=seed))
    out_console.print(f"wrote {counted(frames, 'frame')} to {out}")


@app.command("demo-objects", rich_help_panel=PANEL_MACHINE)
def demo_objects(
    out: Annotated[Path, typer.Argument(help="Directory to write the demo object datasets to",
                                        parser=as_path, callback=refuse_empty_path)],
    *,
    per_class: Annotated[int, typer.Option(min=1, help="Shapes per class and split")] = 2,
) -> None:
    """Write the demo objects in the real formats: ModelNet40 h5 + OFF, ScanObjectNN h5, ShapeNetCore v2 OBJ."""
    from bench_build.sources.demo.cache import write_demo_root
    from bench_build.sources.demo.objects import write_demo_objects

    n = per_class
    write_demo_root(out, "demo-objects", lambda folder: write_demo_objects(
        folder, modelnet={"train": n, "test": n}, scanobjectnn={"training": n + 1, "test": n},
        shapenet={"train": n, "test": n}))
    out_console.print(f"wrote modelnet40_ply_hdf5_2048/, ModelNet40/, ScanObjectNN/ and ShapeNetCore.v2/ to {out}")


@app.command(rich_help_panel=PANEL_BUILD)
def plan(
    benchmark: Annotated[str, typer.Argument(help="Built-in benchmark name or a recipe .toml file")],
    *,
    source: Annotated[str | None, typer.Option(help="Source dataset root (its frames are listed, not read)",
                                               callback=refuse_empty_path)]
    = None,
    frames: Annotated[int | None, typer.Option(min=1, help="Plan for N frames without a source (e.g. 7481 = KITTI)")]
    = None,
    split: Annotated[str | None, typer.Option(help="training, testing, or an ImageSets list (train, val)")] = None,
    workers: Annotated[list[int] | None, typer.Option(min=1, help="Worker counts to simulate (repeatable)")] = None,
    frames_per_shard: Annotated[int | None, typer.Option(min=1, help="Frames per block (default: the recipe's)")] \
        = None,
    groups: Annotated[int | None, typer.Option(min=1, help="Task groups per block (default: sized from the costs)")]
    = None,
    costs: Annotated[Path | None, typer.Option(help="Cost table JSON (default: the shipped one)",
                                               parser=as_path, callback=refuse_empty_path)] = None,
    worker_start: Annotated[float | None, typer.Option(min=0, max=3600,  # inf: "infh", and Infinity in --json
        help="Seconds from a worker's start to its first task at full speed (process, imports, numba kernels "
             "loaded from the cache; default: the cost table's measurement, else 1.4; add ≈ 11 where workers "
             "compile them)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
) -> None:
    """Tasks, per-task cost, and expected makespan/utilisation on N workers, from measured stage costs; builds
    nothing."""
    from bench_build.bench.costs import other_machine_note
    from bench_build.build.run import DEMO_FRAMES, default_frames_per_shard
    from bench_build.errors import UsageError
    from bench_build.manifests.recipe import RecipeError, load_recipe, refuse_output_folder
    from bench_build.plan.costs import DEFAULT_STAGE_MS, DEFAULTS_MEASURED, CostTableError, load_costs
    from bench_build.plan.scale import plan_build
    from bench_build.sources import OBJECT_KINDS, SourceError, open_source

    try:
        refuse_output_folder(Path(benchmark), "plan", with_out=False)
        recipe = load_recipe(benchmark)
        if frames is not None and source is not None:
            raise UsageError("give --source or --frames, not both")
        if frames is not None and split is not None:
            raise UsageError("--split picks a source's frames; with --frames there is no source to pick from")
        table = load_costs(recipe, costs)  # before the demo data: a wrong table is said at once
        if frames is not None:
            frame_ids, fps = [f"{i:06d}" for i in range(frames)], frames_per_shard or recipe.frames_per_shard
        else:
            src = open_source(recipe, source, split=split, demo_frames=DEMO_FRAMES)
            frame_ids = src.list_frames()
            if not frame_ids:  # `run` refuses it too: no frames, no tasks to plan
                raise UsageError(f"source {src.describe()} has no frames")
            fps = frames_per_shard or default_frames_per_shard(recipe, demo=source is None)
        report = plan_build(recipe, frame_ids, frames_per_shard=fps, workers=workers or [2, 16, 64, 256],
                            groups=groups, costs=table, worker_start_s=worker_start)
    except (RecipeError, SourceError, UsageError, CostTableError) as e:
        raise fail(e) from None
    if as_json:
        out_console.print_json(json.dumps(report))
        return
    z = report["sized"]
    # prose, wrapped at words to the terminal (the console keeps long lines whole for everything else); a word
    # longer than a line (a path in a command to copy) stays whole rather than broken by a newline
    def say(text: str) -> None:
        for line in word_lines(Text.from_markup(text), out_console.width):
            out_console.print(line)

    n_blocks, fps_ = report["blocks"], report["frames_per_shard"]
    unit = "shape" if recipe.source in OBJECT_KINDS else "frame"  # an object benchmark's "frames" are shapes
    say(f"{report['recipe']}: {report['frames']:,} {'demo ' if frames is None and source is None else ''}"
        f"{unit}{'s' * (report['frames'] != 1)} in {counted(n_blocks, 'block')} of {fps_}; "
        f"{report['examples_stored']:,} examples stored ({report['examples_defined']:,} defined); "
        f"{cpu_hours(report['cpu_hours_one_task_per_block'])} as one task per block")
    if frames is None and source is None:
        say(f"(no --source: the demo data's {unit}s, made in the cache if absent; --source DIR or --frames N plans "
            "a real dataset)")
    g = z["groups_per_block"]
    say(f"cost-sized split (`run --address` default): {counted(g, 'group')} per block = "
        f"[bold]{z['tasks']}[/bold] task{'s' * (z['tasks'] != 1)} of {z['task_seconds']['min']:.1f}–"
        f"{z['task_seconds']['max']:.1f} CPU-s (mean {z['task_seconds']['mean']:.1f}), "
        f"{cpu_hours(z['cpu_hours'])} (each group rebuilds the per-frame caches it needs)")
    if groups is not None and any(r["groups_per_block"] < groups for r in [z, *report["schedule"]]):
        say(f"note: --groups {groups}: a block is cut into {counted(g, 'group')} at most; more would not make "
            "its costliest task cheaper, which is then one corruption × severity alone")
    rt = report["runtime"]
    if report["costs"].startswith(DEFAULTS_MEASURED):
        say(f"[yellow]costs: not measured for {report['recipe']}[/yellow] (no cost table shipped or given): every "
            f"corruption is taken to cost {DEFAULT_STAGE_MS:g} ms per example, so the CPU-hours and times below are "
            f"placeholders, not predictions; `bench-build bench stages --recipe {benchmark} --no-builds --no-objects "
            "--costs-out FILE` measures a table on the demo data for --costs FILE (pipeline/bench/README.md)")
    else:
        say(f"costs: {report['costs']}")
        if note := other_machine_note(table, benchmark):
            say(f"[yellow]note:[/yellow] {note}")
    cores = rt["cores_measured"]
    say(f"runtime: every worker starts {report['worker_start_s']:g} s before its first task (--worker-start) "
        f"and each task adds {report['overhead_s_per_task']:g} s of scheduling; the driver starts in "
        f"{rt['driver_start_s']:g} s (plan, Ray), finishes in {rt['finish_s']:g} s + {rt['finish_s_per_task']:g} s "
        f"per task, plus what of the contact sheet's {rt['sheet_s']:g} s (drawn once block 0's tasks end) outlasts "
        "the last task; " + (f"a task costs ×{rt['inflation_full']:g} CPU with all {cores} cores busy "
                         if cores > 1 else "tasks are taken to cost the same at any occupancy ")
        + f"({'measured by `bench scale`' if rt['measured'] else 'not measured: defaults'})")
    # fits an 80-column terminal: no vertical rules, one space between columns, nothing truncated
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1), collapse_padding=True,
                  caption="best split for N workers; wall = driver start + span + finish; * cost-sized")
    for col in ("workers", "groups", "tasks", "task s", "span", "wall", "util", "CPU-h", "span*", "util*"):
        table.add_column(col, justify="right", no_wrap=True, min_width=len(col))

    def span(m: float) -> str:
        return f"{m / 3600:.2f}h" if m >= 3600 else f"{m / 60:.1f}m" if m >= 60 else f"{m:.1f}s"

    for row in report["schedule"]:
        table.add_row(str(row["workers"]), str(row["groups_per_block"]), str(row["tasks"]),
                      f"{row['task_seconds']['mean']:.1f}", span(row["makespan_s"]), span(row["wall_s"]),
                      f"{row['wall_utilisation']:.1%}",
                      f"{row['cpu_hours']:.2f}", span(row["sized"]["makespan_s"]),
                      f"{row['sized']['wall_utilisation']:.1%}")
    out_console.print(table)


def word_lines(text: Text, width: int) -> list[Text]:
    """``text`` wrapped at spaces to ``width`` cells; a word longer than a line (a path in a command to copy) stands
    whole on its own line, where rich's wrapping would break it with a newline."""
    offsets, col = [], 0
    for m in re.finditer(r"\S+\s*", text.plain):
        if col and col + cell_len(m.group().rstrip()) > width:
            offsets.append(m.start())
            col = 0
        col += cell_len(m.group())
    lines = text.divide(offsets)
    for line in lines:
        line.rstrip()
    return list(lines)


def cpu_hours(h: float) -> str:
    """CPU time as a person reads it: hours from one up, else minutes, else seconds (0.00 CPU-hours said nothing)."""
    return f"{h:.2f} CPU-hours" if h >= 1 else f"{h * 60:.1f} CPU-minutes" if h * 60 >= 1 else f"{h * 3600:.1f} CPU-s"


@app.command("repro-check", rich_help_panel=PANEL_MACHINE)
def repro_check(
    *,
    out: Annotated[Path | None, typer.Option(help="Write this machine's battery (hashes, numeric profile) here",
                                             parser=as_path, callback=refuse_empty_path)]
    = None,
    compare: Annotated[Path | None, typer.Option(help="Another machine's battery JSON: list what differs "
                                                     "(exit 1 if any partition's bytes or probe differ)",
                                                     parser=as_path, callback=refuse_empty_path)] = None,
    recipes: Annotated[str | None, typer.Option(help="Comma-separated recipes (default: every built-in and "
                                                     "variant)")] = None,
    probe: Annotated[bool, typer.Option(help="Also hash the float64 results of NumPy's CPU-dependent functions "
                                             "per example (slower; sees what one frame's stored bytes hide)")] = False,
) -> None:
    """This machine's numeric profile and the bytes every recipe's partitions get for one demo frame: run it on
    each kind of node (pinned, as builds run) and compare (README: Reproducibility across machines)."""
    from bench_build.build.repro_check import battery, compare_files, load_battery, summary
    from bench_build.errors import UsageError
    from bench_build.manifests.recipe import RecipeError
    from bench_build.sources import SourceError
    from bench_build.storage import StorageError, refuse_unwritable

    try:  # the arguments first: the battery takes minutes
        other = load_battery(compare) if compare is not None else None
        if out is not None:
            if out.is_dir():
                raise UsageError(f"--out {out}: is a folder; give a file name (e.g. {out / 'node-a.json'})")
            refuse_unwritable(out.parent, "the folder of --out")
        names = None
        if recipes is not None:  # "kitti-c," or "a, b": blanks around the commas are no recipe ("" read as ".")
            names = [r.strip() for r in recipes.split(",") if r.strip()]
            if not names:
                raise UsageError(f"--recipes {recipes!r}: names no recipe (comma-separated names or .toml files)")
        res = battery(names, probe=probe)
    except (RecipeError, SourceError, UsageError, StorageError) as e:
        raise fail(e) from None
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)  # checked above: a folder, or one that can be made
        out.write_text(json.dumps(res, indent=1, sort_keys=True))
    out_console.print(summary(res), highlight=False)
    if compare is not None:
        text, differs = compare_files(compare, res, other)
        out_console.print(text, highlight=False)
        if differs:
            raise typer.Exit(code=1)
