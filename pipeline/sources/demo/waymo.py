"""The Waymo Open Dataset v2 fixture writer: ray-cast TOP range images of the demo street as the official v2
Parquet components (``lidar``, ``lidar_calibration``, ``lidar_segmentation``, ``lidar_box``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench_build.sources.demo.cache import DEMO_SEED, mark_demo
from bench_build.sources.demo.synthetic import GENERIC_CLASSES, cast_scan
from bench_build.sources.waymo import (
    BOX_COLUMNS,
    EXTRINSIC,
    INCL_MAX,
    INCL_MIN,
    INCL_VALUES,
    KEY_CONTEXT,
    KEY_LASER,
    KEY_OBJECT,
    KEY_TIME,
    MAX_RANGE,
    RI1_SHAPE,
    RI1_VALUES,
    RI2_SHAPE,
    RI2_VALUES,
    SEG1_SHAPE,
    SEG1_VALUES,
    SEG2_SHAPE,
    SEG2_VALUES,
    SYNTHETIC_TO_SEG,
    TOP,
    beam_inclinations,
)
from bench_build.stages.sensor import waymo_top_elevations


def _schemas():
    shape = pa.list_(pa.int32(), 3)
    lidar = pa.schema([(KEY_CONTEXT, pa.string()), (KEY_TIME, pa.int64()), (KEY_LASER, pa.int8()),
                       (RI1_VALUES, pa.list_(pa.float32())), (RI1_SHAPE, shape),
                       (RI2_VALUES, pa.list_(pa.float32())), (RI2_SHAPE, shape)])
    calib = pa.schema([(KEY_CONTEXT, pa.string()), (KEY_LASER, pa.int8()), (EXTRINSIC, pa.list_(pa.float64(), 16)),
                       (INCL_MIN, pa.float64()), (INCL_MAX, pa.float64()), (INCL_VALUES, pa.list_(pa.float64()))])
    seg = pa.schema([(KEY_CONTEXT, pa.string()), (KEY_TIME, pa.int64()), (KEY_LASER, pa.int8()),
                     (SEG1_VALUES, pa.list_(pa.int32())), (SEG1_SHAPE, shape),
                     (SEG2_VALUES, pa.list_(pa.int32())), (SEG2_SHAPE, shape)])
    box = pa.schema([(KEY_CONTEXT, pa.string()), (KEY_TIME, pa.int64()), (KEY_OBJECT, pa.string()),
                     *[(c, pa.float64()) for c in BOX_COLUMNS[:-1]], (BOX_COLUMNS[-1], pa.int8())])
    return lidar, calib, seg, box


def synthetic_extrinsic() -> np.ndarray:
    """TOP mounting of the fixtures: 1.73 m up (ground at vehicle z = 0), 1.43 m forward, yawed 0.0125 rad."""
    yaw = 0.0125
    e = np.eye(4)
    e[:2, :2] = [[np.cos(yaw), -np.sin(yaw)], [np.sin(yaw), np.cos(yaw)]]
    e[:3, 3] = [1.43, 0.0, 1.73]
    return e


def write_waymo(root: str | Path, frames: int, *, contexts: int = 2, width: int = 2650, height: int = 64,
                split: str = "validation", seed: int | None = None, unlabelled_per_context: int = 1) -> Path:
    """Write ``frames`` ray-cast TOP range images as Waymo v2 Parquet under ``root/split``.

    Frames are spread over ``contexts`` segments; in each segment the last ``unlabelled_per_context``
    frames get no ``lidar_segmentation`` row (like the real data, where only some frames are labelled).
    Calibration: explicit, non-uniform inclinations for TOP (stored lowest first, as the official
    convention implies) plus a FRONT row with only min/max; the extrinsic is `synthetic_extrinsic`.
    The raw intensity is ``atanh`` of the synthetic [0, 1) value, so the reader's tanh gives it back.
    """
    seed = DEMO_SEED if seed is None else seed
    lidar_s, calib_s, seg_s, box_s = _schemas()
    data = Path(root) / split
    for tag in ("lidar", "lidar_calibration", "lidar_segmentation", "lidar_box"):
        (data / tag).mkdir(parents=True, exist_ok=True)
    ext = synthetic_extrinsic()
    elev_top_first = waymo_top_elevations(height)
    values = np.radians(elev_top_first[::-1])  # stored order: lowest beam first
    incl = beam_inclinations(values, 0.0, 0.0, height)
    az = (2.0 * (width - np.arange(width) - 0.5) / width - 1.0) * np.pi - np.arctan2(ext[1, 0], ext[0, 0])
    lut = np.array([SYNTHETIC_TO_SEG[c] for c in GENERIC_CLASSES], dtype=np.int32)
    box_type = {"pedestrian": 2, "bicyclist": 4}
    per_ctx = [frames // contexts + (1 if c < frames % contexts else 0) for c in range(contexts)]
    frame_no = 0
    for c, n in enumerate(per_ctx):
        ctx = f"{1000000000000000000 + 7919 * c}_{1000 + c}_000_{1020 + c}_000"
        lidar_rows, seg_rows, box_rows = [], [], []
        for k in range(n):
            ts = 1_550_000_000_000_000 + 100_000 * k + 10_000_000 * c
            scan = cast_scan(frame_no, np.degrees(incl), az, seed=seed, max_range=MAX_RANGE)
            hit = scan.hit
            ri = np.zeros((height, width, 4), np.float32)
            ri[..., 0] = np.where(hit, scan.range, -1.0)
            ri[..., 1] = np.where(hit, np.arctanh(np.clip(scan.intensity, 0.0, 0.999)), 0.0)
            ri[..., 2] = np.where(hit, 0.05 + 0.2 * (1.0 - scan.intensity), 0.0)
            ri[..., 3] = -1.0
            empty = np.full((height, width, 4), -1.0, np.float32)
            lidar_rows.append({KEY_CONTEXT: ctx, KEY_TIME: ts, KEY_LASER: TOP, RI1_VALUES: ri.ravel(),
                               RI1_SHAPE: [height, width, 4], RI2_VALUES: empty.ravel(),
                               RI2_SHAPE: [height, width, 4]})
            if k < n - unlabelled_per_context:
                seg = np.zeros((height, width, 2), np.int32)
                seg[..., 0] = np.where(hit, scan.instance, 0)
                seg[..., 1] = np.where(hit, lut[scan.cls], 0)
                seg_rows.append({KEY_CONTEXT: ctx, KEY_TIME: ts, KEY_LASER: TOP, SEG1_VALUES: seg.ravel(),
                                 SEG1_SHAPE: [height, width, 2], SEG2_VALUES: np.zeros(height * width * 2, np.int32),
                                 SEG2_SHAPE: [height, width, 2]})
            for j, (obj, gcls) in enumerate(zip(scan.objects, scan.object_classes, strict=True)):
                centre = ext[:3, :3] @ obj.center + ext[:3, 3]
                box_rows.append({KEY_CONTEXT: ctx, KEY_TIME: ts, KEY_OBJECT: f"obj{frame_no}_{j}",
                                 **dict(zip(BOX_COLUMNS[:3], centre.tolist(), strict=True)),
                                 **dict(zip(BOX_COLUMNS[3:6], obj.dims.tolist(), strict=True)),
                                 BOX_COLUMNS[6]: float(obj.heading + np.arctan2(ext[1, 0], ext[0, 0])),
                                 BOX_COLUMNS[7]: box_type.get(gcls, 1)})
            frame_no += 1
        pq.write_table(pa.Table.from_pylist(lidar_rows, schema=lidar_s), data / "lidar" / f"{ctx}.parquet")
        pq.write_table(pa.Table.from_pylist(seg_rows, schema=seg_s), data / "lidar_segmentation" / f"{ctx}.parquet")
        pq.write_table(pa.Table.from_pylist(box_rows, schema=box_s), data / "lidar_box" / f"{ctx}.parquet")
        calib_rows = [{KEY_CONTEXT: ctx, KEY_LASER: TOP, EXTRINSIC: ext.ravel().tolist(), INCL_MIN: float(values[0]),
                       INCL_MAX: float(values[-1]), INCL_VALUES: values.tolist()},
                      {KEY_CONTEXT: ctx, KEY_LASER: 2, EXTRINSIC: np.eye(4).ravel().tolist(),
                       INCL_MIN: -1.57, INCL_MAX: 0.52, INCL_VALUES: None}]
        pq.write_table(pa.Table.from_pylist(calib_rows, schema=calib_s), data / "lidar_calibration" / f"{ctx}.parquet")
    return Path(root)


def write_demo(root: Path, frames: int, seed: int = DEMO_SEED) -> Path:
    """The demo data of the ``waymo`` source kind: ``frames`` labelled frames in two segments."""
    mark_demo(root)
    return write_waymo(root, frames, seed=seed, unlabelled_per_context=0)
