"""Benchmarks (a script, not a test): `bench-build bench` or `python -m pipeline.bench`.

Prints, on demo scans (full resolution, ≈130k points):
1. the one-off per-frame preparation shared by all stages (KD-tree, points-in-box index);
2. the cost per example of every corruption of a recipe at every severity;
3. the I/O floor: encoding + writing the same clean examples as Parquet with the build's options;
4. examples/s of a whole demo build at 1 and 2 workers (including Ray start-up).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np


def _timeit(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def run_bench(frames: int = 4, builds: bool = True, recipe_name: str = "kitti-c", repeat: int = 2) -> dict:
    from manifests.recipe import load_recipe
    from pipeline.plan import example_key, example_rng
    from pipeline.schema import encode_rows, schema_with_metadata
    from pipeline.shard import PARQUET_OPTIONS
    from pipeline.sources.demo import generate_frame
    from stages.registry import get_stage

    results: dict = {"stages": {}}
    recipe = load_recipe(recipe_name)
    # as the KITTI source reads them: x, y, z, intensity (the generator's ring column is not in a .bin)
    demo = [replace(f, points=np.ascontiguousarray(f.points[:, :4]), fields=f.fields[:4])
            for f in (generate_frame(i) for i in range(frames))]
    n_pts = np.mean([len(f) for f in demo])
    print(f"bench-build benchmark on {frames} demo frames (mean {n_pts:,.0f} points), best of {repeat}")

    t = time.perf_counter()
    for f in demo:
        _ = f.kdtree, f.box_index
    prep = (time.perf_counter() - t) / frames
    results["frame_prep_ms"] = prep * 1e3
    print(f"\nshared per-frame preparation (KD-tree + box index): {prep * 1e3:.1f} ms per frame (once per build)")

    sev = range(1, recipe.severities + 1)
    print(f"\n{'corruption':<14}{'stage':<14}" + "".join(f"{'s' + str(s) + ' ms':>10}" for s in sev) + f"{'mean':>10}")
    for c in recipe.corruptions:
        stage = get_stage(c.stage)
        row = []
        for s in sev:
            params = c.params_for(s)

            def once(params=params, s=s, stage=stage, c=c):
                for f in demo:
                    stage.apply(f, params, example_rng(recipe.seed, example_key(recipe.name, f.frame_id, c.name, s)))

            row.append(_timeit(once, repeat) / frames * 1e3)
        results["stages"][c.name] = row
        print(f"{c.name:<14}{c.stage:<14}" + "".join(f"{v:>10.1f}" for v in row) + f"{np.mean(row):>10.1f}")

    import pyarrow.parquet as pq

    examples = [(example_key(recipe.name, f.frame_id, "clean", 0), "clean", 0, f) for f in demo]
    schema = schema_with_metadata({"fields": list(demo[0].fields)})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "floor.parquet"

        def write():
            with pq.ParquetWriter(path, schema, **PARQUET_OPTIONS) as w:
                w.write_batch(encode_rows(examples))

        floor = _timeit(write, repeat)
        size = path.stat().st_size
    results["io_floor_ms_per_example"] = floor / frames * 1e3
    raw = sum(f.points.nbytes for f in demo)
    print(f"\nI/O floor: {floor / frames * 1e3:.1f} ms per example to encode + write Parquet "
          f"({raw / floor / 1e6:.0f} MB/s of raw points; {size / frames / 1e6:.2f} MB per example on disk, "
          f"{size / raw:.0%} of raw)")

    if builds:
        from pipeline.build import run_build

        print("\nwhole demo build (8 frames, every corruption × severity, Ray start-up included):")
        results["builds"] = {}
        for workers in (1, 2):
            with tempfile.TemporaryDirectory() as tmp:
                t = time.perf_counter()
                res = run_build(recipe_name, out=tmp, workers=workers, progress=False)
                dt = time.perf_counter() - t
                n = res.manifest["counts"]["examples_stored"] if res.manifest else 0
                results["builds"][workers] = n / dt
                print(f"  workers={workers}: {n} examples in {dt:.1f} s = {n / dt:.1f} examples/s")
    return results


if __name__ == "__main__":
    import typer

    typer.run(run_bench)
