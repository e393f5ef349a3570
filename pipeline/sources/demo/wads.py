"""The WADS fixture writer: synthetic snowfall scans in WADS's on-disk layout (SemanticKITTI-like
``sequences/<seq>/velodyne/*.bin`` and ``labels/*.label``), so the reader's tests always run without the data."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench_build.sources.wads import ACCUMULATED_SNOW, FALLING_SNOW


def write_wads(root: str | Path, frames: int, *, sequence: str = "36", seed: int = 0, points: int = 4000,
               snow_share: float = 0.07, duplicate_share: float = 0.4, start: int = 0) -> Path:
    """Write ``frames`` synthetic scans in WADS's on-disk layout under ``root`` (for tests that must always run).

    Each scan: a ground ring and walls (class 40 road / 50 building, intensity 5..60 of 255), accumulated snow
    on the ground near the car (111, intensity 10..40), and ``snow_share`` of falling snow (110) 2..12 m away
    with intensity 0 — the shape of the real scan, not its numbers. ``duplicate_share`` of the rows are then
    exact copies of other rows (label included), appended after them, as raw WADS scans repeat rows.
    """
    d = Path(root) / "sequences" / sequence
    (d / "velodyne").mkdir(parents=True, exist_ok=True)
    (d / "labels").mkdir(parents=True, exist_ok=True)
    for i in range(start, start + frames):
        rng = np.random.default_rng([seed, i])
        n_snow = round(snow_share * points)
        n_acc = points // 5
        n_scene = points - n_snow - n_acc
        az = rng.uniform(-np.pi, np.pi, points)
        r = np.concatenate([rng.uniform(5.0, 60.0, n_scene), rng.uniform(3.0, 15.0, n_acc),
                            rng.uniform(2.0, 12.0, n_snow)])
        z = np.concatenate([np.where(rng.random(n_scene) < 0.5, -1.8, rng.uniform(-1.5, 6.0, n_scene)),
                            rng.uniform(-1.8, -1.6, n_acc), rng.uniform(-1.0, 3.0, n_snow)])
        inten = np.concatenate([rng.integers(5, 61, n_scene), rng.integers(10, 41, n_acc), np.zeros(n_snow)])
        cls = np.concatenate([np.where(z[:n_scene] <= -1.8, 40, 50), np.full(n_acc, ACCUMULATED_SNOW),
                              np.full(n_snow, FALLING_SNOW)]).astype(np.uint32)
        pts = np.stack([r * np.cos(az), r * np.sin(az), z, inten], axis=1).astype("<f4")
        dup = rng.choice(points, size=round(duplicate_share * points), replace=True)
        pts = np.concatenate([pts, pts[dup]])
        cls = np.concatenate([cls, cls[dup]])
        pts.tofile(d / "velodyne" / f"{i:06d}.bin")
        cls.astype("<u4").tofile(d / "labels" / f"{i:06d}.label")
    return Path(root)
