"""How long `bench-build score` takes on full KITTI-C (a script, not a test): `bench-build bench score`.

Full KITTI-C is 126 partitions (clean + 25 corruptions × 5 severities) of 7,481 frames: 942,606 frames whose
ground truth and detections are scored for AP (3D and BEV, 3 classes × 3 difficulties) and Li et al.'s bug
rates. A real build of that size is 1.1 M examples of points; scoring reads none of them, only each frame's
``frame_id``, ``boxes`` and ``calib`` columns and a result file per frame. So this writes a version with
exactly those columns in the real row schema (one point per example) and KITTI result files, at full size
per partition, runs the real `score_version` on ``partitions`` of them (all 7,481 frames each) and
extrapolates the wall time linearly to 126 partitions — partitions are independent and all the same size,
so the time is per partition times the number of rounds the worker processes need.

Synthetic data at KITTI's density: ground-truth boxes per frame at the rates of KITTI's 7,481 training label
files (Car 3.84, Pedestrian 0.60, Cyclist 0.22, Van 0.39, Truck 0.15, Tram 0.07, Misc 0.13,
Person_sitting 0.03, DontCare 1.51; Poisson), placed 5–60 m ahead in the camera frame; detections as a
detector writes them after its score threshold: 85 % of the Car/Pedestrian/Cyclist boxes found with small
position and heading errors, plus ``FALSE_POSITIVES`` stray boxes per frame — about 11 detections a frame,
in line with OpenPCDet KITTI models at their ``SCORE_THRESH`` of 0.1.
"""

from __future__ import annotations

import json
import os
import resource
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench_build.format.schema import encode_rows, schema_with_metadata
from bench_build.manifests.manifest import MANIFEST_VERSION
from bench_build.score import score_version
from bench_build.sources.demo.kitti import demo_calib
from bench_build.sources.kitti import read_labels
from bench_build.stages.frame import Frame

KITTI_FRAMES = 7481
KITTI_C_PARTITIONS = 126
TARGET_MINUTES = 15.0
RATES = {"Car": 3.84, "Pedestrian": 0.60, "Cyclist": 0.22, "Van": 0.39, "Truck": 0.15, "Tram": 0.07,
         "Misc": 0.13, "Person_sitting": 0.03}
DONTCARE_RATE = 1.51
#: mean height, width, length (m) per class
DIMS = {"Car": (1.53, 1.63, 3.88), "Pedestrian": (1.76, 0.66, 0.84), "Cyclist": (1.74, 0.60, 1.76),
        "Van": (2.21, 1.90, 5.08), "Truck": (3.25, 2.59, 10.11), "Tram": (3.53, 2.54, 16.09),
        "Misc": (1.91, 1.51, 3.58), "Person_sitting": (1.27, 0.59, 0.80)}
RECALL = 0.85
FALSE_POSITIVES = 6.0
FOCAL, CX, CY = 721.5, 609.6, 172.9  # KITTI P2


def _line(name: str, hwl, x: float, y: float, z: float, ry: float, trunc: float, occ: int,
          score: float | None = None) -> str:
    h, w, length = hwl
    half_w, half_h = FOCAL * max(w, length) / z / 2, FOCAL * h / z / 2
    u, v = CX + FOCAL * x / z, CY + FOCAL * (y - h / 2) / z
    s = (f"{name} {trunc:.2f} {occ} -10 {u - half_w:.2f} {v - half_h:.2f} {u + half_w:.2f} {v + half_h:.2f} "
         f"{h:.2f} {w:.2f} {length:.2f} {x:.2f} {y:.2f} {z:.2f} {ry:.2f}")
    return s if score is None else f"{s} {score:.4f}"


def synthetic_frame(rng: np.random.Generator) -> tuple[str, str]:
    """``(label_2 text, result text)`` of one frame at KITTI's label density."""
    gt, dt = [], []
    for name, rate in RATES.items():
        for _ in range(rng.poisson(rate)):
            hwl = np.array(DIMS[name]) * rng.uniform(0.9, 1.1, 3)
            x, z, y = rng.uniform(-15, 15), rng.uniform(5, 60), 1.65 + rng.normal(0, 0.1)
            ry = rng.uniform(-np.pi, np.pi)
            gt.append(_line(name, hwl, x, y, z, ry, float(rng.choice([0.0, 0.0, 0.2, 0.4])), int(rng.integers(0, 3))))
            if name in ("Car", "Pedestrian", "Cyclist") and rng.random() < RECALL:
                e = rng.normal(0, 0.15, 3)
                dt.append(_line(name, hwl, x + e[0], y, z + e[1], ry + e[2], 0, 0, rng.uniform(0.3, 1.0)))
    gt += ["DontCare -1 -1 -10 500.00 170.00 550.00 200.00 -1 -1 -1 -1000 -1000 -1000 -10"] * rng.poisson(
        DONTCARE_RATE)
    for _ in range(rng.poisson(FALSE_POSITIVES)):
        name = str(rng.choice(["Car", "Pedestrian", "Cyclist"], p=[0.6, 0.25, 0.15]))
        dt.append(_line(name, DIMS[name], rng.uniform(-20, 20), 1.65, rng.uniform(5, 70), rng.uniform(-3, 3), 0, 0,
                        rng.uniform(0.1, 0.5)))
    return "".join(line + "\n" for line in gt), "".join(line + "\n" for line in dt)


def write_synthetic_version(root: Path, partitions: int, frames: int = KITTI_FRAMES,
                            seed: int = 0) -> tuple[Path, Path, dict[str, float]]:
    """A kitti-c version of ``partitions`` partitions × ``frames`` frames (boxes and calibration in the real
    row schema, one point per example) and its result files; returns (version dir, result root, density)."""

    rng = np.random.default_rng(seed)
    calib = demo_calib()
    version, preds = root / "kitti-c" / "bench", root / "pred"
    texts = [synthetic_frame(rng) for _ in range(frames)]
    label = root / "label.txt"
    base = Frame(frame_id="", points=np.zeros((1, 4), np.float32), calib=calib)
    rows = []
    for i, (gt, _) in enumerate(texts):
        label.write_text(gt)
        rows.append(replace(base, frame_id=f"{i:06d}", boxes=read_labels(label, calib)))
    names = ["clean", "gaussian_rad", "snow", "fog", "beam_del", "shear"]
    parts = [("clean", 0)] + [(names[1 + (p - 1) % 5], 1 + (p - 1) // 5) for p in range(1, partitions)]
    shards = []
    for corruption, severity in parts:
        rel = f"data/corruption={corruption}/severity={severity}/part-00000-of-00001.parquet"
        (version / rel).parent.mkdir(parents=True, exist_ok=True)
        batch = encode_rows([(f"kitti-c/{f.frame_id}/{corruption}/{severity}", corruption, severity, f) for f in rows])
        pq.write_table(pa.Table.from_batches([batch], schema=schema_with_metadata(
            {"fields": list(base.fields), "intensity_scale": "unit"})), version / rel)
        shards.append({"path": rel, "corruption": corruption, "severity": severity, "rows": frames})
        d = preds / ("clean" if corruption == "clean" else f"{corruption}/{severity}")
        d.mkdir(parents=True)
        for f, (_, det) in zip(rows, texts, strict=True):
            (d / f"{f.frame_id}.txt").write_text(det)
    (version / "manifest.json").write_text(json.dumps({
        "manifest_version": MANIFEST_VERSION, "dataset": "kitti-c", "version": "bench", "source": {"kind": "kitti"},
        "recipe": {"name": "kitti-c", "severity_names": []}, "shards": shards}))
    density = {"gt_per_frame": float(np.mean([t[0].count("\n") for t in texts])),
               "dets_per_frame": float(np.mean([t[1].count("\n") for t in texts]))}
    return version, preds, density


def bench_score(partitions: int = 4, workers: int = 2, frames: int = KITTI_FRAMES) -> dict[str, float]:
    """Time `score_version` on ``partitions`` full-size partitions at ``workers`` processes; extrapolate to
    full KITTI-C."""

    with tempfile.TemporaryDirectory(prefix="bench-score-") as tmp:
        t = time.perf_counter()
        version, preds, density = write_synthetic_version(Path(tmp), partitions, frames)
        setup = time.perf_counter() - t
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        report = score_version(version, preds, workers=workers)
        wall = time.perf_counter() - t
        own2, kids2 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = sum(getattr(b, f) - getattr(a, f) for a, b in ((own, own2), (kids, kids2))
              for f in ("ru_utime", "ru_stime"))
    used = max(1, min(workers, partitions))
    rounds_measured = -(-partitions // used)
    rounds_full = -(-KITTI_C_PARTITIONS // used)
    full = wall / rounds_measured * rounds_full
    return {"partitions": partitions, "frames": frames, "workers": used, "setup_s": setup, "wall_s": wall,
            "cpu_s": cpu, "cpu_s_per_partition": cpu / partitions, "full_wall_s": full,
            "full_cpu_s": cpu / partitions * KITTI_C_PARTITIONS, "rows": len(report.rows), **density}


def run_bench_score(partitions: int = 4, workers: int = 2) -> dict[str, float]:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"score on full KITTI-C ({KITTI_C_PARTITIONS} partitions × {KITTI_FRAMES:,} frames): measured on "
          f"{partitions} synthetic partitions of {KITTI_FRAMES:,} frames at {workers} worker processes "
          f"({cpus} CPUs here), extrapolated linearly to {KITTI_C_PARTITIONS}")
    r = bench_score(partitions, workers)
    print(f"  density: {r['gt_per_frame']:.2f} ground-truth boxes and {r['dets_per_frame']:.2f} detections a frame "
          f"(setup {r['setup_s']:.0f} s, not counted)")
    print(f"  measured: {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU for {r['partitions']} partitions "
          f"({r['cpu_s_per_partition']:.2f} s CPU a partition: truth from Parquet, result files, AP 3D+BEV, "
          "bug rates)")
    idle = r["full_cpu_s"] / r["workers"]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"  full KITTI-C (extrapolated): {r['full_cpu_s'] / 60:.1f} CPU-min, i.e. {idle / 60:.1f} min wall on "
          f"{r['workers']} otherwise idle cores; the wall time measured here extrapolates to "
          f"{r['full_wall_s'] / 60:.1f} min (load average {load:.1f}: other processes share these CPUs)")
    print(f"  target ≤ {TARGET_MINUTES:.0f} min on 2 cores: {'met' if idle <= TARGET_MINUTES * 60 else 'MISSED'} "
          "(judged on CPU time, which other processes do not inflate)")
    return r
