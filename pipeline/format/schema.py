"""The public row schema, layout v2: one Parquet row per example (guide: pipeline/format/schema.md).

Core columns (every file of every build)::

| column      | type                                  | meaning                                                |
|-------------|---------------------------------------|--------------------------------------------------------|
| key         | string                                | ``benchmark/frame_id/corruption/severity``             |
| frame_id    | string                                | source frame (or object) id                            |
| num_points  | int32                                 | N                                                      |
| points      | list<fixed_size_list<float32, C>>     | N×C; C = len(fields) (x, y, z, intensity[, ring, …])   |
| point_tag   | list<uint8>                           | per-point provenance (`stages.frame.PointTag`)       , len N  |
| boxes       | list<struct>, nullable                | 3D boxes, LiDAR frame, OpenPCDet ``gt_boxes_lidar``    |
| calib       | struct, nullable                      | KITTI calibration (row-major matrices)                 |
| info        | string (JSON), nullable               | per-example facts stages record (ring method, drawn α) |

``corruption`` (string, ``clean`` for severity 0) and ``severity`` (int) are **not** in the files: they
are the hive partition keys ``data/corruption=<c>/severity=<s>/``, so each reader's discovery gives them
exactly one type (pyarrow.dataset: string/int32; pandas: category; DuckDB: VARCHAR/BIGINT) and there is
never a second, disagreeing copy. ``key`` carries both for a file read on its own.

Optional columns are declared by the source (``Source.columns``: per point or per example) and, per point
only, by the recipe's stages (``@stage(..., columns=...)``: label columns of the frames they return); they are
then present in every file of the build (so all files share one schema and DuckDB/pyarrow unify them), absent
otherwise. A stage's per-example facts are not columns: they go in ``info`` (``Frame.with_info``).

- per point (``list<T>`` of length N, from ``Frame.labels[name]``): ``semantic`` uint32 (raw label id of
  the source, e.g. SemanticKITTI's), ``instance`` uint32, ``sigma`` / ``mu`` float32 (ModelNet40-E's
  per-point noise σ and mean μ), ``mask`` uint8 (ScanObjectNN's per-point object/background mask);
- per example (from ``Frame.attrs[name]``, the source's facts, which stages carry through unchanged):
  ``class_name`` string, ``class_id`` int32, ``split`` string, ``track`` string (3DOS), ``scenario`` string,
  ``known`` bool (open-set known class), ``sequence`` string (drive / segment / scene), ``timestamp_us`` int64,
  ``synset`` / ``model_id`` string (ShapeNetCore), ``unknown_set`` string (3DOS: the unknown set an unknown
  example belongs to), ``domain`` string (``synthetic`` / ``real``).

A frame carrying a per-point label or a source attribute that is not a declared column is refused (it would
otherwise be lost without a word). What a new column needs, and the compatibility rule of ``SCHEMA_VERSION``:
schema.md, "Changing the schema".

A null value means "not known for this example". Box convention (``gt_boxes_lidar`` of OpenPCDet):
``x, y, z`` the box's geometric centre in the LiDAR frame (m), ``dx, dy, dz`` = length, width, height (m),
``heading`` the yaw about +z in radians, 0 = facing +x, counter-clockwise positive. ``truncated``,
``occluded``, ``alpha``, ``bbox2d`` are KITTI's image-side fields; ``track_id``, ``vx``, ``vy`` (m/s) are for
sources with tracks/velocities; all of these are null when the source has no such field.

File metadata key ``bench_build`` holds JSON: schema version, point fields, intensity scale, optional
columns, encoding, benchmark, shard name, corruption, severity, stage, stage version, the stage parameters of
that severity (the same per-partition table is in the manifest and card) and the partition fingerprint
(`bench_build.build.shard.partition_fingerprint`). Not the version nor the whole build's fingerprint: a partition a new
version did not change is then the same file, byte for byte, and can be shared (`bench_build.build.reuse`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from bench_build.format.compact import encode_refs
from bench_build.manifests.manifest import SCHEMA_VERSION
from bench_build.stages.frame import Boxes, Calib, Frame

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
        ("track_id", pa.string()),
        ("vx", pa.float32()), ("vy", pa.float32()),
    ]
)
CALIB_KEYS = ("P0", "P1", "P2", "P3", "R0_rect", "Tr_velo_to_cam", "Tr_imu_to_velo")
CALIB_TYPE = pa.struct([(k, pa.list_(pa.float64())) for k in CALIB_KEYS])

#: Optional per-point columns: name → NumPy element type (written as that, never `to_pandas_dtype`: it imports
#: pandas, ≈ 0.2 s in every worker).
POINT_DTYPES: dict[str, type[np.generic]] = {
    "semantic": np.uint32, "instance": np.uint32, "sigma": np.float32, "mu": np.float32, "mask": np.uint8,
}
#: Optional per-point columns: name → element type (the column is ``list<type>``, one value per point).
POINT_COLUMNS: dict[str, pa.DataType] = {c: pa.from_numpy_dtype(d) for c, d in POINT_DTYPES.items()}
#: Optional per-example columns: name → type (the value comes from ``Frame.attrs[name]``, the source's facts).
EXAMPLE_COLUMNS: dict[str, pa.DataType] = {
    "class_name": pa.string(), "class_id": pa.int32(), "split": pa.string(), "track": pa.string(),
    "scenario": pa.string(), "known": pa.bool_(), "sequence": pa.string(), "timestamp_us": pa.int64(),
    "synset": pa.string(), "model_id": pa.string(), "unknown_set": pa.string(),
    "domain": pa.string(),
}
OPTIONAL_COLUMNS = (*POINT_COLUMNS, *EXAMPLE_COLUMNS)


def points_type(width: int) -> pa.DataType:
    return pa.list_(pa.list_(pa.float32(), width))


def canonical_columns(columns: Sequence[str]) -> tuple[str, ...]:
    """Declared optional columns in canonical order; an unknown name is an error (a typo would lose data)."""
    unknown = sorted(set(columns) - set(OPTIONAL_COLUMNS))
    if unknown:
        raise ValueError(f"unknown optional column(s) {unknown}; known: {', '.join(OPTIONAL_COLUMNS)}")
    return tuple(c for c in OPTIONAL_COLUMNS if c in set(columns))


def row_schema(fields: Sequence[str] = ("x", "y", "z", "intensity"), columns: Sequence[str] = (),
               compact: bool = False) -> pa.Schema:
    """The Arrow schema of a build whose points have ``fields`` and whose source and stages declare ``columns``;
    ``compact`` adds ``point_ref`` (pipeline/format/compact.py: ``points`` then holds only the unreferenced rows)."""
    cols = canonical_columns(columns)
    return pa.schema(
        [
            ("key", pa.string()),
            ("frame_id", pa.string()),
            ("num_points", pa.int32()),
            pa.field("points", points_type(len(fields)), metadata={b"fields": ",".join(fields).encode()}),
            *([("point_ref", pa.list_(pa.int32()))] if compact else []),
            ("point_tag", pa.list_(pa.uint8())),
            *[(c, pa.list_(POINT_COLUMNS[c])) for c in cols if c in POINT_COLUMNS],
            ("boxes", pa.list_(BOX_TYPE)),
            ("calib", CALIB_TYPE),
            *[(c, EXAMPLE_COLUMNS[c]) for c in cols if c in EXAMPLE_COLUMNS],
            ("info", pa.string()),
        ]
    )


def schema_with_metadata(meta: dict[str, Any], fields: Sequence[str] | None = None,
                         columns: Sequence[str] | None = None) -> pa.Schema:
    """The row schema with the ``bench_build`` footer JSON (``fields``/``columns`` default to ``meta``'s)."""
    fields = tuple(fields if fields is not None else meta.get("fields", ("x", "y", "z", "intensity")))
    columns = canonical_columns(columns if columns is not None else meta.get("columns", ()))
    body = {"schema_version": SCHEMA_VERSION, **meta, "fields": list(fields), "columns": list(columns)}
    compact = meta.get("encoding") == "compact"
    return row_schema(fields, columns, compact).with_metadata({METADATA_KEY: json.dumps(body, sort_keys=True).encode()})


def file_metadata(schema: pa.Schema) -> dict[str, Any]:
    raw = (schema.metadata or {}).get(METADATA_KEY)
    return json.loads(raw) if raw else {}


def _list_array(counts: np.ndarray, values: pa.Array) -> pa.ListArray:
    offsets = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), values)


#: (key, corruption, severity, frame[, clean frame])
ExampleRow = tuple[str, str, int, Frame] | tuple[str, str, int, Frame, Frame | None]


def encode_rows(examples: list[ExampleRow], schema: pa.Schema | None = None) -> pa.RecordBatch:
    """A record batch of examples ``(key, corruption, severity, frame[, clean frame])`` in ``schema`` (default:
    derived from the first frame's fields, no optional column) — vectorised, no per-point loops. Corruption
    and severity are the file's partition, not columns. With a ``point_ref`` column (compact encoding) an
    example given its clean frame is stored as references into it plus its other rows (pipeline/format/compact.py)."""
    frames = [e[3] for e in examples]
    if schema is None:
        schema = row_schema(frames[0].fields if frames else ("x", "y", "z", "intensity"))
    width = schema.field("points").type.value_type.list_size
    columns = [n for n in schema.names if n in OPTIONAL_COLUMNS]
    for f in frames:
        if f.points.shape[1] != width:
            raise ValueError(f"frame {f.frame_id}: {f.points.shape[1]} point fields {f.fields}, the build's files "
                             f"have {width}")
        extra = sorted(set(f.labels) - {"point_tag"} - set(columns))
        if extra:
            raise ValueError(f"frame {f.frame_id}: per-point label(s) {extra} are not columns of this build "
                             f"(declared: {columns or 'none'}); declare them in the source's `columns`")
        extra = sorted(set(f.attrs) - set(columns))
        if extra:
            raise ValueError(f"frame {f.frame_id}: source attribute(s) {extra} are not columns of this build "
                             f"(declared: {columns or 'none'}); declare them in the source's `columns`")
    counts = np.array([len(f) for f in frames], dtype=np.int64)
    rows = [f.points for f in frames]
    refs: list[np.ndarray | None] = [None] * len(frames)
    if "point_ref" in schema.names:

        for i, e in enumerate(examples):
            clean = e[4] if len(e) > 4 else None
            if clean is not None:
                refs[i], rows[i] = encode_refs(frames[i].points, clean.points)
    flat = np.concatenate([r.ravel() for r in rows]) if frames else np.zeros(0, np.float32)
    points = _list_array(np.array([len(r) for r in rows], dtype=np.int64),
                         pa.FixedSizeListArray.from_arrays(pa.array(flat, pa.float32()), width))
    tags = _list_array(counts, pa.array(np.concatenate([f.point_tag.astype(np.uint8) for f in frames])
                                        if frames else np.zeros(0, np.uint8)))
    arrays: dict[str, pa.Array] = {
        "key": pa.array([e[0] for e in examples], pa.string()),
        "frame_id": pa.array([f.frame_id for f in frames], pa.string()),
        "num_points": pa.array(counts.astype(np.int32)),
        "points": points,
        "point_ref": pa.array(refs, pa.list_(pa.int32())),
        "point_tag": tags,
        "boxes": pa.array([_boxes_to_py(f.boxes) for f in frames], pa.list_(BOX_TYPE)),
        "calib": pa.array([None if f.calib is None else _calib_to_py(f.calib) for f in frames], CALIB_TYPE),
    }
    for c in columns:
        if c in POINT_COLUMNS:
            arrays[c] = pa.array([None if c not in f.labels else np.asarray(f.labels[c]).astype(POINT_DTYPES[c])
                                  for f in frames], pa.list_(POINT_COLUMNS[c]))
        else:
            arrays[c] = pa.array([f.attrs.get(c) for f in frames], EXAMPLE_COLUMNS[c])
    arrays["info"] = pa.array([json.dumps(dict(f.info), sort_keys=True) if f.info else None for f in frames],
                              pa.string())
    return pa.RecordBatch.from_arrays([arrays[n] for n in schema.names], schema=schema)


def _boxes_to_py(boxes: Boxes | None) -> list[dict[str, Any]] | None:
    if boxes is None:
        return None
    track = getattr(boxes, "track_id", None)
    velocity = getattr(boxes, "velocity", None)
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
            "track_id": None if track is None else str(track[j]),
            "vx": None if velocity is None else float(velocity[j, 0]),
            "vy": None if velocity is None else float(velocity[j, 1]),
        }
        for j in range(len(boxes))
    ]


def _calib_to_py(calib: Calib) -> dict[str, list[float] | None]:
    d = calib.as_dict()
    return {k: d.get(k) for k in CALIB_KEYS}


def decode_points(column: pa.ChunkedArray | pa.ListArray, *, writable: bool = True) -> list[np.ndarray]:
    """Per-row N×C (``list<fixed_size_list>``) or N (``list<T>``) arrays of a list column.

    One copy of the whole column's values when ``writable`` (so the rows are writable views into it, and
    ``torch.from_numpy`` does not warn); zero-copy read-only views into the Arrow buffers otherwise."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    out: list[np.ndarray] = []
    for chunk in chunks:
        if not len(chunk):
            continue
        values = chunk.flatten()  # this chunk's elements only (respects a slice's offset)
        offsets = chunk.offsets.to_numpy()
        offsets = offsets - offsets[0]
        if pa.types.is_fixed_size_list(values.type):
            flat = values.flatten().to_numpy(zero_copy_only=False).reshape(-1, values.type.list_size)
        else:
            flat = values.to_numpy(zero_copy_only=False)
        base = np.array(flat, copy=True) if writable else flat
        out.extend(base[offsets[i]: offsets[i + 1]] for i in range(len(chunk)))
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
        truncated=np.array([np.nan if r["truncated"] is None else r["truncated"] for r in rows], dtype=np.float64),
        occluded=np.array([-1 if r["occluded"] is None else r["occluded"] for r in rows], dtype=np.int64),
        alpha=np.array([np.nan if r["alpha"] is None else r["alpha"] for r in rows], dtype=np.float64),
        bbox2d=np.array([[np.nan] * 4 if r["bbox2d"] is None else r["bbox2d"] for r in rows], dtype=np.float64),
    )


def decode_calib(row: dict[str, Any] | None) -> Calib | None:
    if row is None:
        return None
    return Calib.from_dict({k: v for k, v in row.items() if v is not None})
