"""`bench-build bench` on object benchmarks: the per-shape cost of every ModelNet-C / ModelNet40-E corruption
and of the 3DOS preprocessing on demo objects, and examples/s of a ModelNet-C demo build at 1 and 2 workers."""

from __future__ import annotations

import tempfile
import time
from dataclasses import replace

import numpy as np

from bench_build.bench.timing import TARGET_MS, one_thread, stage_table, timeit
from bench_build.build.run import run_build
from bench_build.manifests.recipe import load_recipe
from bench_build.plan.tasks import example_key, example_rng
from bench_build.sources.demo.objects import ensure_demo_objects
from bench_build.sources.modelnet import ModelNet40H5Source
from bench_build.sources.shapenet import ShapeNetCoreSource
from bench_build.stages.registry import get_stage
from bench_build.stages.whole_shape.sensor_noise import pca_normals


@one_thread
def run_object_bench(shapes: int = 32, builds: bool = True, repeat: int = 3) -> dict:
    """Object stages on demo ModelNet40 shapes (as the recipes preprocess them), then a ModelNet-C demo build."""

    root = ensure_demo_objects(("modelnet40", "shapenet"))
    src = ModelNet40H5Source(root, "test")
    full = [src.read(i) for i in src.list_frames()[:shapes]]
    results: dict = {"stages": {}}
    t = time.perf_counter()

    pca_normals(full[0].xyz.astype(np.float64), 10)  # numba kernels: loaded from the on-disk cache (or compiled)
    first_ms = (time.perf_counter() - t) * 1e3
    prepared = {}
    for name in ("modelnet-c", "modelnet40-e"):
        recipe = load_recipe(name)
        demo = full
        if recipe.preprocess is not None:
            pre = get_stage(recipe.preprocess.stage)
            demo = [pre.apply(f, recipe.preprocess.params[0],
                              example_rng(recipe.seed, example_key(name, f.frame_id, "clean", 0))) for f in full]
        prepared[name] = demo
        print(f"\n(object shapes of {name}: {len(demo[0])} points each, best of {repeat}, CPU time of this "
              "process: shapes are small, so wall time on a shared machine mostly measures the neighbours)")
        results["stages"][name] = stage_table(recipe, demo, repeat, clock=time.process_time)
    # ModelNet40-E per shape: one severity with the normals computed from scratch (a fresh frame has no
    # cached normals), what `TARGET_MS` bounds; further severities of the same shape reuse the normals
    recipe = load_recipe("modelnet40-e")
    noise = recipe.corruptions[0]
    stage = get_stage(noise.stage)
    scratch = []
    for s in range(1, recipe.severities + 1):
        def fresh(s=s):
            for f in prepared["modelnet40-e"]:
                stage.apply(replace(f), noise.params_for(s), example_rng(recipe.seed, example_key(
                    recipe.name, f.frame_id, noise.name, s)))
        scratch.append(timeit(fresh, repeat, time.process_time) / len(full) * 1e3)
    normals_ms = timeit(lambda: [pca_normals(f.xyz.astype(np.float64), 10) for f in prepared["modelnet40-e"]],
                         repeat, time.process_time) / len(full) * 1e3
    per_sev = max(results["stages"]["modelnet40-e"]["noise"])
    target = TARGET_MS["sensor_noise"]
    results["sensor_noise_normals_ms"] = normals_ms
    results["sensor_noise_from_scratch_ms"] = scratch
    results["numba_first_call_ms"] = first_ms
    print("modelnet40-e per shape, normals from scratch + noise at one severity: "
          + " / ".join(f"{v:.2f}" for v in scratch) + f" ms CPU (s1 / s2 / s3; target {target:.0f} ms: "
          f"{'ok' if max(scratch) <= target else 'NO'}); of which normals {normals_ms:.2f} ms (grid 11-NN + "
          f"covariances + eigenvectors); a shape's other severities reuse them: ≤ {per_sev:.2f} ms each, "
          f"{(normals_ms + 3 * per_sev) / 3:.2f} ms per example on average. First call in this process "
          f"(numba kernels from the on-disk cache, or compiled once): {first_ms:.0f} ms")
    sn = ShapeNetCoreSource(root, "test")
    sn.read(sn.list_frames()[0])  # imports trimesh/open3d once, outside the timing
    t = time.process_time()
    clouds = [sn.read(i) for i in sn.list_frames()[1:9]]
    read_ms = (time.process_time() - t) / len(clouds) * 1e3
    recipe = load_recipe("3dos")
    pre = get_stage(recipe.preprocess.stage)
    ms = timeit(lambda: [pre.apply(c, recipe.preprocess.params[0], example_rng(1, c.frame_id)) for c in clouds],
                 repeat, time.process_time) / len(clouds) * 1e3
    results["3dos"] = {"mesh_to_fps4096_ms": read_ms, "object_sample_ms": ms}
    print(f"\n3dos: ShapeNet mesh → 16,384 area-weighted samples → FPS 4,096: {read_ms:.1f} ms CPU per shape "
          f"(reader); seeded 1,024 + unit sphere: {ms:.2f} ms CPU per example")
    if builds:

        print("\nModelNet-C demo build (80 test shapes × 36 examples, Ray start-up included):")
        results["builds"] = {}
        for workers in (1, 2):
            with tempfile.TemporaryDirectory() as tmp:
                t = time.perf_counter()
                res = run_build("modelnet-c", out=tmp, workers=workers, progress=False)
                dt = time.perf_counter() - t
                n = res.manifest["counts"]["examples_stored"] if res.manifest else 0
                results["builds"][workers] = n / dt
                print(f"  workers={workers}: {n} examples in {dt:.1f} s = {n / dt:.1f} examples/s")
    return results
