"""The SemanticKITTI fixture writer: ray-cast HDL-64E scans of the demo street in the real SemanticKITTI layout
(``sequences/<seq>/velodyne/*.bin``, ``labels/*.label``, ``calib.txt``, ``times.txt``, ``poses.txt``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench_build.sources.demo.cache import DEMO_SEED, mark_demo
from bench_build.sources.demo.kitti import demo_calib
from bench_build.sources.demo.synthetic import GENERIC_CLASSES, cast_scan, spinning_azimuths
from bench_build.sources.semantickitti import SYNTHETIC_TO_RAW
from bench_build.stages.sensor import HDL64E


def _fmt12(m: np.ndarray) -> str:
    return " ".join(f"{v:.12e}" for v in np.asarray(m, dtype=np.float64).ravel()[:12])


def write_semantickitti(root: str | Path, frames: int, *, sequence: str = "08", seed: int | None = None,
                        azimuth_step_deg: float = 0.09, start: int = 0) -> Path:
    """Write ``frames`` ray-cast HDL-64E scans as SemanticKITTI sequence ``sequence`` under ``root``.

    Points are in raw KITTI order (ring by ring from the top laser, each a counter-clockwise sweep from
    azimuth 0), remission in [0, 1], labels ``instance << 16 | raw id`` (`SYNTHETIC_TO_RAW`); calib.txt
    has P0..P3 and Tr (the demo's KITTI calibration), times.txt 0.1 s steps, poses.txt identities.
    """
    seed = DEMO_SEED if seed is None else seed
    d = Path(root) / "sequences" / sequence
    (d / "velodyne").mkdir(parents=True, exist_ok=True)
    (d / "labels").mkdir(parents=True, exist_ok=True)
    lut = np.array([SYNTHETIC_TO_RAW[c] for c in GENERIC_CLASSES], dtype=np.uint32)
    az = spinning_azimuths(azimuth_step_deg)
    for i in range(start, start + frames):
        scan = cast_scan(i, HDL64E.elevations, az, seed=seed)
        hit = scan.hit  # row-major over (ring, azimuth): KITTI's raw order
        xyz = scan.xyz()[hit]
        pts = np.concatenate([xyz, scan.intensity[hit][:, None]], axis=1).astype("<f4")
        pts.tofile(d / "velodyne" / f"{i:06d}.bin")
        label = (scan.instance[hit].astype(np.uint32) << 16) | lut[scan.cls[hit]]
        label.astype("<u4").tofile(d / "labels" / f"{i:06d}.label")
    calib = demo_calib()
    tr = calib.velo_to_rect[:3]  # rectified cam0 frame, as KITTI Odometry's Tr
    (d / "calib.txt").write_text("".join(f"P{k}: {_fmt12(calib.P[k])}\n" for k in range(4)) + f"Tr: {_fmt12(tr)}\n")
    n = start + frames
    (d / "times.txt").write_text("".join(f"{0.1 * k:.6e}\n" for k in range(n)))
    (d / "poses.txt").write_text("1 0 0 0 0 1 0 0 0 0 1 0\n" * n)
    return Path(root)


def write_demo(root: Path, frames: int, seed: int = DEMO_SEED) -> Path:
    """The demo data of the ``semantickitti`` source kind: ``frames`` scans of sequence 08."""
    mark_demo(root)
    return write_semantickitti(root, frames, seed=seed)
