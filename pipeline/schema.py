"""The public row schema: one Parquet row per example (stable; documented in the README).

| column      | type                         | meaning                                                    |
|-------------|------------------------------|------------------------------------------------------------|
| key         | string                       | ``benchmark/frame_id/corruption/severity``                 |
| frame_id    | string                       | source frame id                                            |
| corruption  | string                       | corruption name; ``clean`` for severity 0                  |
| severity    | int32                        | 0 (clean) … S                                              |
| num_points  | int32                        | N                                                          |
| points      | list<float32>                | row-major N×C; C and the field names in the schema metadata |
| point_tag   | list<uint8>                  | per-point provenance (`stages.frame.PointTag`), length N   |
| semantic    | list<uint32>, nullable       | per-point semantic labels when the source has them         |
| boxes       | list<struct>, nullable       | 3D boxes in the LiDAR frame + KITTI label fields           |
| calib       | struct, nullable             | KITTI calibration (row-major matrices)                     |
| info        | string (JSON), nullable      | per-example facts stages record (ring method, drawn α, …)  |

File metadata key ``bench_build`` holds JSON: schema version, point fields, intensity scale,
benchmark, version, recipe fingerprint, shard name, corruption, severity, stage, stage version and
the stage parameters of that severity.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa

from stages.frame import Boxes, Calib, Frame

SCHEMA_VERSION = 1
METADATA_KEY = b"bench_build"

BOX_TYPE = pa.struct(
    [
        ("cls", pa.string()),
        ("x", pa.float32()), ("y", pa.float32()), ("z", pa.float32()),
        ("dx", pa.float32()), ("dy", pa.float32()), ("dz", pa.float32()),
        ("heading", pa.float32()),
        ("truncated", pa.float32()),
        ("occluded", pa.int8()),
        ("alpha", pa.float32()),
        ("bbox2d", pa.list_(pa.float32(), 4)),
    ]
)
CALIB_KEYS = ("P0", "P1", "P2", "P3", "R0_rect", "Tr_velo_to_cam", "Tr_imu_to_velo")
CALIB_TYPE = pa.struct([(k, pa.list_(pa.float64())) for k in CALIB_KEYS])

ROW_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("frame_id", pa.string()),
        ("corruption", pa.string()),
        ("severity", pa.int32()),  # int32: what hive partition discovery infers
        ("num_points", pa.int32()),
        ("points", pa.list_(pa.float32())),
        ("point_tag", pa.list_(pa.uint8())),
        ("semantic", pa.list_(pa.uint32())),
        ("boxes", pa.list_(BOX_TYPE)),
        ("calib", CALIB_TYPE),
        ("info", pa.string()),
    ]
)


def schema_with_metadata(meta: dict[str, Any]) -> pa.Schema:
    return ROW_SCHEMA.with_metadata({METADATA_KEY: json.dumps({"schema_version": SCHEMA_VERSION, **meta},
                                                              sort_keys=True).encode()})


def file_metadata(schema: pa.Schema) -> dict[str, Any]:
    raw = (schema.metadata or {}).get(METADATA_KEY)
    return json.loads(raw) if raw else {}


def encode_rows(examples: list[tuple[str, str, int, Frame]]) -> pa.RecordBatch:
    """A record batch of examples ``(key, corruption, severity, frame)`` — vectorised, no per-point loops."""
    n = len(examples)
    frames = [e[3] for e in examples]
    counts = np.array([len(f) for f in frames], dtype=np.int64)
    widths = {f.points.shape[1] for f in frames}
    if len(widths) > 1:
        raise ValueError(f"examples of one file must share their point fields, got widths {sorted(widths)}")
    width = widths.pop() if widths else 4
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts * width, out=offsets[1:])
    points = pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.concatenate([f.points.ravel() for f in frames])
                                                                   if n else np.zeros(0, np.float32)))
    tag_offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=tag_offsets[1:])
    tags = pa.ListArray.from_arrays(pa.array(tag_offsets), pa.array(
        np.concatenate([f.point_tag.astype(np.uint8) for f in frames]) if n else np.zeros(0, np.uint8)))
    semantic = [None if "semantic" not in f.labels else f.labels["semantic"].astype(np.uint32) for f in frames]
    return pa.RecordBatch.from_arrays(
        [
            pa.array([e[0] for e in examples], pa.string()),
            pa.array([f.frame_id for f in frames], pa.string()),
            pa.array([e[1] for e in examples], pa.string()),
            pa.array([e[2] for e in examples], pa.int32()),
            pa.array(counts.astype(np.int32)),
            points,
            tags,
            pa.array(semantic, pa.list_(pa.uint32())),
            pa.array([_boxes_to_py(f.boxes) for f in frames], pa.list_(BOX_TYPE)),
            pa.array([None if f.calib is None else _calib_to_py(f.calib) for f in frames], CALIB_TYPE),
            pa.array([json.dumps(dict(f.info), sort_keys=True) if f.info else None for f in frames], pa.string()),
        ],
        schema=ROW_SCHEMA,
    )


def _boxes_to_py(boxes: Boxes | None) -> list[dict[str, Any]] | None:
    if boxes is None:
        return None
    return [
        {
            "cls": str(boxes.cls[j]),
            "x": boxes.center[j, 0], "y": boxes.center[j, 1], "z": boxes.center[j, 2],
            "dx": boxes.dims[j, 0], "dy": boxes.dims[j, 1], "dz": boxes.dims[j, 2],
            "heading": boxes.heading[j],
            "truncated": boxes.truncated[j],
            "occluded": int(boxes.occluded[j]),
            "alpha": boxes.alpha[j],
            "bbox2d": [float(v) for v in boxes.bbox2d[j]],
        }
        for j in range(len(boxes))
    ]


def _calib_to_py(calib: Calib) -> dict[str, list[float] | None]:
    d = calib.as_dict()
    return {k: d.get(k) for k in CALIB_KEYS}


def decode_points(column: pa.ChunkedArray | pa.ListArray, width: int) -> list[np.ndarray]:
    """Per-row N×C float32 arrays from a ``points`` column (views into Arrow buffers, no copies)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    out: list[np.ndarray] = []
    for chunk in chunks:
        flat = chunk.values.to_numpy(zero_copy_only=True)
        offsets = chunk.offsets.to_numpy()
        for i in range(len(chunk)):
            out.append(flat[offsets[i]: offsets[i + 1]].reshape(-1, width))
    return out


def decode_boxes(rows: list[dict[str, Any]] | None) -> Boxes | None:
    if rows is None:
        return None
    if not rows:
        return Boxes.empty()
    return Boxes(
        center=np.array([[r["x"], r["y"], r["z"]] for r in rows], dtype=np.float64),
        dims=np.array([[r["dx"], r["dy"], r["dz"]] for r in rows], dtype=np.float64),
        heading=np.array([r["heading"] for r in rows], dtype=np.float64),
        cls=np.array([r["cls"] for r in rows], dtype=object),
        truncated=np.array([r["truncated"] for r in rows], dtype=np.float64),
        occluded=np.array([r["occluded"] for r in rows], dtype=np.int64),
        alpha=np.array([r["alpha"] for r in rows], dtype=np.float64),
        bbox2d=np.array([r["bbox2d"] for r in rows], dtype=np.float64),
    )


def decode_calib(row: dict[str, Any] | None) -> Calib | None:
    if row is None:
        return None
    return Calib.from_dict({k: v for k, v in row.items() if v is not None})
