"""Benchmarks of the dataset readers and of the Robo3D stages on 32-beam scans (part of `bench-build bench`).

1. decode cost per frame of each reader on fixtures in the real layouts at full sensor resolution
   (SemanticKITTI HDL-64E 0.09°, nuScenes HDL-32E 0.33°, Waymo TOP 64 × 2650), and of the Waymo range image
   → points conversion alone (target ≤ 20 ms per 64 × 2650 image, one core);
2. the cost per example of every robo3d-nuscenes-c corruption on ray-cast HDL-32E sweeps read by the
   nuScenes reader (32 rings, 0–255 intensity).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from bench_build.bench.timing import stage_table
from bench_build.manifests.recipe import load_recipe
from bench_build.sources.demo.nuscenes import write_nuscenes
from bench_build.sources.demo.semantickitti import write_semantickitti
from bench_build.sources.demo.waymo import synthetic_extrinsic, write_waymo
from bench_build.sources.nuscenes import NuScenesSource
from bench_build.sources.semantickitti import SemanticKittiSource
from bench_build.sources.waymo import WaymoSource, beam_inclinations, range_image_to_points, ray_directions
from bench_build.stages.sensor import waymo_top_elevations

WAYMO_DECODE_TARGET_MS = 20.0


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def waymo_decode_ms(repeat: int = 5, height: int = 64, width: int = 2650) -> float:
    """Best time (ms) of `range_image_to_points` on a full TOP image with ~90 % returns, with the segment's
    ray directions cached (as the reader does: computed once per segment of ~200 frames)."""

    rng = np.random.default_rng(0)
    ri = np.zeros((height, width, 4), np.float32)
    ri[..., 0] = np.where(rng.random((height, width)) < 0.9, rng.uniform(2, 75, (height, width)), -1.0)
    incl = beam_inclinations(np.radians(waymo_top_elevations(height)[::-1]), 0.0, 0.0, height)
    ext = synthetic_extrinsic()
    dirs = ray_directions(ext, incl, width)
    return _best(lambda: range_image_to_points(ri, ext, incl, dirs), repeat) * 1e3


def run_bench_sources(repeat: int = 3, frames32: int = 2) -> dict:

    results: dict = {}
    decode = waymo_decode_ms()
    results["waymo_decode_ms"] = decode
    ok = "yes" if decode <= WAYMO_DECODE_TARGET_MS else "NO"
    print(f"\nWaymo range image → points (64 × 2650, ~152k returns): {decode:.1f} ms "
          f"(target {WAYMO_DECODE_TARGET_MS:.0f} ms) {ok}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sources = {
            "semantickitti": SemanticKittiSource(write_semantickitti(root / "sk", 1)),
            "nuscenes": NuScenesSource(write_nuscenes(root / "nu", max(frames32, 1), train_frames=0)),
            "waymo": WaymoSource(write_waymo(root / "wo", 1, contexts=1, unlabelled_per_context=0)),
        }
        print("reader decode per frame (file → Frame with labels, boxes, sensor; one process):")
        results["readers_ms"] = {}
        for kind, src in sources.items():
            fid = src.list_frames()[0]
            n = len(src.read(fid))
            ms = _best(lambda src=src, fid=fid: src.read(fid), repeat) * 1e3
            results["readers_ms"][kind] = ms
            print(f"  {kind:<14}{ms:>8.1f} ms  ({n:,} points)")
        nus = sources["nuscenes"]
        scans = [nus.read(fid) for fid in nus.list_frames()[:frames32]]
        recipe = load_recipe("robo3d-nuscenes-c")
        print("\n32-beam scans (ray-cast HDL-32E sweeps through the nuScenes reader):", end="")
        results["stages_32beam"] = stage_table(recipe, scans, repeat)
    return results


if __name__ == "__main__":
    run_bench_sources()
