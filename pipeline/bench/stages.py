"""Benchmarks (a script, not a test): `bench-build bench` or `python -m bench_build.bench.stages`.

Prints, on demo scans (full resolution, ≈130k points):
1. the one-off per-frame preparation shared by all stages (KD-tree, points-in-box index, ring ids);
2. the cost per example of every corruption of a recipe at every severity;
3. the I/O floor: committing the clean examples, and each partition's own output, to Parquet as a task does;
4. examples/s of a whole demo build at 1 and 2 workers (including Ray start-up), the speed-up, where the driver's
   serial time goes (its phases), the CPU time full KITTI-C needs (from the parts, from the build's tasks, and
   from the cost table scaled by their ratio).
5. (`bench_build.bench.sources`) the dataset readers' decode cost per frame (Waymo range image → points, target
   ≤ 20 ms per 64 × 2650 image) and the robo3d-nuscenes-c stages on 32-beam scans.
6. object benchmarks (`bench.objects.run_object_bench`): per-shape cost of every ModelNet-C / ModelNet40-E
   corruption and of the 3DOS preprocessing on demo objects, and examples/s of a ModelNet-C demo build at 1 and 2
   workers.

What it measures the cost table with, and checks the table against, is in `bench.costs`.
"""

from __future__ import annotations

import datetime
import json
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from bench_build.bench.costs import (
    bench_examples,
    build_cache,
    cache_needs,
    derived_costs,
    full_frames,
    model_cpu_hours,
    model_ms_per_example,
    speed_probe,
    task_cpu_per_example,
    write_costs,
)
from bench_build.bench.sources import run_bench_sources
from bench_build.bench.timing import FOV_TARGET_MS, one_thread, stage_table, timeit
from bench_build.build.run import run_build
from bench_build.manifests.recipe import load_recipe
from bench_build.plan.costs import CACHES, CostTable
from bench_build.render import View, contact_sheet
from bench_build.sources.kitti import camera_fov_mask
from bench_build.stages.kernels.column_knn import CellGrid

DEFAULT_RECIPE = "kitti-c"  # what `bench stages` measures without --recipe, with the Robo3D and reader tables


def _ms(x: float) -> float:
    """A cost as the table stores it: 0.01 ms from 1 ms up, three significant digits below (object stages cost
    0.03–0.4 ms per shape)."""
    return round(x, 2) if x >= 1 else float(f"{x:.3g}")


@one_thread
def run_bench(frames: int = 4, builds: bool = True, recipe_name: str = DEFAULT_RECIPE, repeat: int = 2,
              extra_recipes: tuple[str, ...] = ("robo3d-kitti-c",), costs_out: Path | None = None,
              build_rounds: int = 1, sources: bool = True) -> dict:
    """... and with ``costs_out``, the cost table of ``recipe_name`` (a built-in benchmark, ``name:variant`` or a
    recipe file) for `plan` and task sizing, measured on its demo data as a task holds it (`bench_examples`) as CPU
    time of this process (what a worker pays; wall time grows when other processes share the cores).
    ``extra_recipes``: more per-corruption tables, printed only; ``sources``: the readers' table.
    ``build_rounds``: how many times the 1- and 2-worker demo builds run, alternating which goes first; the
    speed-up, the builds' examples/s and the task CPU per example are medians (one round is noise here)."""

    results: dict = {"stages": {}}
    recipe = load_recipe(recipe_name)
    clock = time.process_time  # CPU time of this process: robust to other jobs on a shared machine
    examples = bench_examples(recipe, frames, repeat, clock)
    demo, what = examples.frames, examples.what
    if what == "shapes":  # 0.03–2 ms per shape: more repeats, still a fraction of a second each
        repeat = max(repeat, 5)
    n_pts = np.mean([len(f) for f in demo])
    print(f"bench-build benchmark of {recipe.name} on {len(demo)} demo {what} (mean {n_pts:,.0f} points), best of "
          f"{repeat}")
    results["speed_probe_ms"] = [speed_probe()]
    print(f"speed probe (a fixed CPU workload, to compare absolute numbers across runs and machines): "
          f"{results['speed_probe_ms'][0]:.0f} ms")


    times = []
    for f in demo:
        t = time.process_time()
        for cache in CACHES:  # once per frame, shared by its corruptions
            build_cache(f, cache)
        times.append(time.process_time() - t)
    # the first frame also pays one-offs of the process (imports, numba's cached machine code): a worker pays
    # them once, not per frame
    if len(demo) == 1:  # one frame: time it again on a copy with empty caches, now that the one-offs are paid
        again = replace(demo[0])
        t = time.process_time()
        for cache in CACHES:
            build_cache(again, cache)
        times.append(time.process_time() - t)
    prep = float(np.mean(times[1:]))
    results["frame_prep_ms"] = prep * 1e3
    results["frame_prep_first_ms"] = times[0] * 1e3
    print(f"\nshared per-frame preparation (KD-tree + box index + deletion grid + ring recovery): {prep * 1e3:.1f} ms "
          "CPU per frame "
          f"(once per frame; the process's first frame: {times[0] * 1e3:.0f} ms, with one-off imports and loads)")

    prep_ms = {}
    for cache in CACHES:  # each cache on fresh copies, so one's cost never hides in the other's
        fresh = [replace(f) for f in demo]
        t = clock()
        for f in fresh:
            build_cache(f, cache)
        prep_ms[cache] = (clock() - t) / len(demo) * 1e3
    results["prep_ms"] = prep_ms
    results["read_ms"] = examples.read_ms
    results["needs"] = cache_needs(recipe, demo[0])
    reader = ("KITTI .bin, labels, calib" if recipe.source == "kitti" else
              f"the {recipe.source} reader" + (f" and [preprocess] {recipe.preprocess.stage}" if recipe.preprocess
                                                else ""))
    print(f"  of which {', '.join(f'{k} {v:.1f} ms' for k, v in prep_ms.items())} (rebuilt by every task that needs "
          f"it); reading + decoding a {what[:-1]} ({reader}): {results['read_ms']:.2f} ms per frame")

    # CPU time of this process: a stage's own cost, robust to other jobs on a shared machine
    for rec in (recipe, *(load_recipe(r) for r in extra_recipes if r != recipe_name)):
        results["stages"][rec.name] = stage_table(rec, demo, repeat, time.process_time) if rec.corruptions else {}
        if rec is recipe:
            results["derived_ms"] = derived_costs(recipe, demo, results["needs"], results["stages"][rec.name],
                                                  repeat, clock)
            if results["derived_ms"]:
                print("  kept on the frame for a corruption's other severities (Frame.derived), once per frame: "
                      + ", ".join(f"{k.split(':', 1)[1]} {v:.2f} ms" for k, v in results["derived_ms"].items()))
        if any(c.stage == "upsample" for c in rec.corruptions):

            grid_ms = timeit(lambda: [CellGrid(f.points, value_col=f.fields.index("intensity")) for f in demo],
                              repeat, time.process_time) / len(demo) * 1e3
            results[f"{rec.name} upsample_grid_ms"] = grid_ms
            print(f"  upsample's 5-NN search grid: {grid_ms:.1f} ms CPU once per frame (cached on the frame and shared "
                  "by its severities, like the KD-tree; not in the row above)")
    if "robo3d-kitti-c" in extra_recipes and recipe.source == "kitti":

        rec = load_recipe("robo3d-kitti-c")
        fov = [f.take(camera_fov_mask(f)) for f in demo]
        results["stages"]["robo3d-kitti-c camera-FOV"] = stage_table(
            rec, fov, repeat, time.process_time, only=tuple(FOV_TARGET_MS), targets=FOV_TARGET_MS,
            title="robo3d-kitti-c, camera-FOV crop (CPU time of this process)")


    if sources:
        results["sources"] = run_bench_sources(repeat=repeat)

    floor, write_by, size = write_costs(recipe, demo, max(repeat, 3), clock, rows_per_file=examples.rows_per_file,
                                      source=examples.source)
    results["io_floor_ms_per_example"] = floor
    results["write_ms_by"] = write_by
    raw = sum(f.points.nbytes for f in demo) / len(demo)
    files = (f"files of {examples.rows_per_file} {what}, a demo block's" if examples.rows_per_file else
             "a Parquet file")
    corrupted = (f"; corrupted outputs {min(min(r) for r in write_by.values()):.2f}–"
                 f"{max(max(r) for r in write_by.values()):.2f} ms (more points, or noise that compresses worse), per "
                 "partition in the cost table's write_ms_by" if write_by else "")
    print(f"\nI/O floor: {floor:.2f} ms CPU per clean example to commit it to {files} as a task does "
          f"(encode, compress, write, fsync, sha256, rename; {raw / floor / 1e3:.0f} MB/s of raw points; "
          f"{size / 1e6:.2f} MB per example on disk, {size / raw:.0%} of raw){corrupted}")

    if what == "scans":
        results["render_s_per_panel"] = _render_bench(demo[0], recipe)

    command = " ".join(["bench-build bench stages", *(["--recipe", recipe_name] if recipe_name != DEFAULT_RECIPE
                                                      else []),
                        f"--frames {frames}", *([] if builds else ["--no-builds"]), "--costs-out"])
    cores = os.cpu_count() or 1
    blocks = (f" ({frames} block{'s' * (frames != 1)} of {examples.rows_per_file}, written a block a file)"
              if examples.rows_per_file else "")
    table = CostTable(recipe=recipe.name, read_ms=_ms(results["read_ms"]),
                          write_ms=_ms(results["io_floor_ms_per_example"]),
                          write_ms_by={c: tuple(_ms(x) for x in row) for c, row in results["write_ms_by"].items()},
                          prep_ms={k: _ms(v) for k, v in {**prep_ms, **results["derived_ms"]}.items()},
                          stage_ms={c: tuple(_ms(x) for x in row)
                                    for c, row in results["stages"][recipe.name].items()},
                          needs={c: n for c, n in results["needs"].items() if n},
                          measured=f"{command} on {cores} core{'s' * (cores != 1)}, {datetime.date.today()}: "
                                   f"{len(demo)} demo {what}{blocks}, mean {n_pts:,.0f} points, CPU time of one "
                                   f"process; stages best of {repeat}, writes median of {max(repeat, 3)}; "
                                   + ("scale from the 1-worker demo build's tasks" if builds else
                                      "no scale (--no-builds: the parts as timed alone)"))
    full = full_frames(recipe)
    if full is not None:
        results["full_cpu_hours_model"] = model_cpu_hours(recipe, table)
        print(f"\nfull {recipe.name} ({full:,} frames, {recipe.examples_stored(full):,} stored examples), from the "
              f"costs above (read + per-frame caches once + every stage + Parquet, one task per block, each part as "
              f"timed alone): {results['full_cpu_hours_model']:.2f} CPU-hours")
    target = " (target ≤ 5)" if recipe.name == DEFAULT_RECIPE else ""

    if builds:

        print(f"\nwhole {recipe.name} demo build (every corruption × severity, Ray start-up included"
              + (f"; {build_rounds} rounds, alternating which goes first; medians" if build_rounds > 1 else "") + "):")
        results["builds"], walls, rates, warmups = {}, {1: [], 2: []}, [], []
        for r in range(build_rounds):
            for workers in ((1, 2) if r % 2 == 0 else (2, 1)):
                with tempfile.TemporaryDirectory() as tmp:
                    t = time.perf_counter()
                    res = run_build(recipe_name, out=tmp, workers=workers, progress=False)
                    dt = time.perf_counter() - t
                    n = res.manifest["counts"]["examples_stored"] if res.manifest else 0
                    walls[workers].append(dt)
                    phases = ", ".join(f"{k} {v:.1f}" for k, v in res.phases.items())
                    print(f"  workers={workers}: {n} examples in {dt:.1f} s = {n / dt:.1f} examples/s (driver phases, "
                          f"s: {phases})")
                    if workers == 1 and res.manifest:
                        measured, warmup = task_cpu_per_example(res.version_dir, res.shards_built)
                        rates.append(measured)
                        warmups.append(warmup)
                        if "model_ms_per_example_demo" not in results:  # the same tasks every round
                            results["model_ms_per_example_demo"] = model_ms_per_example(
                                res.version_dir, res.shards_built, table)
        wall = {w: float(np.median(v)) for w, v in walls.items()}
        results["builds"] = {w: (n / wall[w] if n else 0.0) for w in wall}
        if rates:
            measured = float(np.median(rates))
            results["task_cpu_ms_per_example"] = measured * 1e3
            results["worker_warmup_cpu_s"] = float(np.median(warmups))
            if full is not None:
                results["full_cpu_hours_measured"] = measured * recipe.examples_stored(full) / 3600
        results["speedup_2_vs_1"] = wall[1] / wall[2]
        per_round = ", ".join(f"{a / b:.2f}" for a, b in zip(walls[1], walls[2], strict=True))
        print(f"  speed-up 2 vs 1 workers: {wall[1] / wall[2]:.2f}×" + (" (target ≥ 1.8)" if target else "")
              + (f"; per round {per_round}" if build_rounds > 1 else ""))
        if rates:
            warm = (f"; each worker process's first task also paid {results['worker_warmup_cpu_s']:.1f} s of one-off "
                    "warm-up (imports, numba's cached code), a cost per process like Ray start and the driver, "
                    "not per example" if results["worker_warmup_cpu_s"] else
                    "; Ray start and the driver are fixed costs, not per example")
            if "full_cpu_hours_measured" in results:
                print(f"  full {recipe.name} from the 1-worker build's tasks (their CPU time, "
                      f"{results['task_cpu_ms_per_example']:.1f} ms per stored example{warm}): "
                      f"{results['full_cpu_hours_measured']:.2f} CPU-hours{target}")
            else:
                print(f"  the 1-worker build's tasks: {results['task_cpu_ms_per_example']:.2f} ms CPU per stored "
                      f"example{warm}")
            pred = results["model_ms_per_example_demo"]
            ratio = results["task_cpu_ms_per_example"] / pred
            print(f"  the parts above predict {pred:.1f} ms per stored example for these same tasks (their frames and "
                  f"partitions): measured/predicted = {ratio:.2f}, the cost table's scale (its parts are each timed "
                  "alone on hot caches; a task pays for them interleaved)")
            if 0.2 <= ratio <= 5.0:
                table = replace(table, scale=round(ratio, 3))
                results["cost_scale"] = table.scale
                if full is not None:
                    results["full_cpu_hours_model_scaled"] = model_cpu_hours(recipe, table)
                    print(f"  full {recipe.name} from the scaled cost table (what `plan` and task sizing use): "
                          f"{results['full_cpu_hours_model_scaled']:.2f} CPU-hours{target}")
    results["speed_probe_ms"].append(speed_probe())
    print(f"\nspeed probe at the end: {results['speed_probe_ms'][1]:.0f} ms (at the start "
          f"{results['speed_probe_ms'][0]:.0f}): absolute costs above carry that spread")
    if costs_out is not None:
        table = replace(table, extra={**table.extra, "speed_probe_ms": [round(x) for x in results["speed_probe_ms"]],
                                      **kept_runtime(costs_out)})
        Path(costs_out).write_text(table.to_json() + "\n")
        print(f"\ncost table written to {costs_out}" + ("" if table.scale != 1.0 else
              " (scale 1.0: no build measured it; run without --no-builds for a table in real task seconds)"))
    return results


def kept_runtime(path: str | Path) -> dict[str, Any]:
    """The ``runtime`` of the cost table already at ``path`` (`bench scale --costs-out` measured it on this machine,
    and re-measuring the stages does not re-measure it), said when kept; {} when there is none."""
    p = Path(path)
    try:
        runtime = json.loads(p.read_text()).get("runtime") if p.is_file() else None
    except (OSError, ValueError, AttributeError):
        runtime = None
    if not isinstance(runtime, dict):
        return {}
    print(f"keeping the runtime of {p} ({runtime.get('measured', 'measured earlier')}); `bench scale --costs-out` "
          "re-measures it")
    return {"runtime": runtime}


def _render_bench(frame, recipe, target_s: float = 0.5) -> float:
    """Seconds per contact-sheet panel (raster + matplotlib Agg + PNG) for a full sheet of ``recipe``."""

    tags = frame.point_tag.astype(np.uint8)
    views = [View("clean", 0, frame.points[:, :3], tags, frame.boxes, False)]
    views += [View(c.name, s, frame.points[:, :3], tags, frame.boxes, False)
              for c in recipe.corruptions for s in range(1, recipe.severities + 1)]
    _, per_panel = contact_sheet(views, frame_id=frame.frame_id)
    print(f"\ncontact sheet: {len(views)} panels of {len(frame):,} points, {per_panel:.3f} s per panel "
          f"(target ≤ {target_s} s)")
    return per_panel


if __name__ == "__main__":
    import typer

    typer.run(run_bench)
