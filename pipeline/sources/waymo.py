"""Waymo Open Dataset v2 (Parquet per component), TOP LiDAR, read with pyarrow.

Layout (``ROOT`` is the dataset folder holding the split folders, or one split folder itself: the split named, by
its folder name, or any when no split is named; `split_folder`; `describe` records the split read, `split_read`)::

    ROOT/validation/lidar/<context>.parquet               range images, one row per (frame, laser)
    ROOT/validation/lidar_calibration/<context>.parquet   extrinsic + beam inclinations, one row per laser
    ROOT/validation/lidar_segmentation/<context>.parquet  (optional) per-pixel instance + semantic class
    ROOT/validation/lidar_box/<context>.parquet           (optional) 3D boxes in the vehicle frame

Column names and types are those of the official v2 components (``waymo_open_dataset/v2/perception/
lidar.py``, ``context.py``, ``segmentation.py``, ``box.py``): keys ``key.segment_context_name``,
``key.frame_timestamp_micros``, ``key.laser_name``; values ``[LiDARComponent].range_image_return1.values``
(row-major ``[H, W, 4]``: range, intensity, elongation, no-label-zone flag) with its ``.shape``, etc.

Range image → points (the official convention of ``v2/perception/utils/lidar_utils.py`` and
``utils/range_image_utils.py``, re-implemented vectorised in NumPy, `range_image_to_points`):
row inclinations are the calibration's ``beam_inclination.values`` if present, else uniform
``min + (i + 0.5)/H · (max − min)``; the vector is then *reversed* so row 0 is the top beam; column j has
azimuth ``(2·(W − j − 0.5)/W − 1)·π − atan2(E[1,0], E[0,0])``; ``x = r cos(az) cos(incl)``, ``y = r sin(az)
cos(incl)``, ``z = r sin(incl)`` in the LiDAR frame, then ``E`` (row-major 4×4, LiDAR → vehicle) takes them
to the vehicle frame; pixels with range > 0 are kept, in row-major order.

What is read: the TOP laser (``laser_name`` 1), first return. Points are in the vehicle frame without per-pixel
motion compensation; the frame's `Sensor.origin` is ``E``'s translation (where the laser is in that frame), which a
recipe's ``origin = "lidar"`` measures ranges and angles from (WOD-C's weather). Columns: x, y, z, intensity =
tanh(raw intensity) (Waymo's raw intensity is unbounded; tanh is the usual normalisation, declared as the ``tanh``
scale), ring = range-image row (0 = top beam), elongation = tanh(raw elongation). Frame ids are
``<context>-<timestamp>``. With a ``lidar_segmentation`` folder the frames are those whose TOP laser is labelled
(WOD-C corrupts the 5,976 labelled validation frames), and ``semantic`` holds the class of ``Segmentation.Type`` (0
undefined, 1 car, … 22 sidewalk) and ``instance`` the label's instance id; each example records its ``sequence``
(context) and ``timestamp_us``; without it, every TOP frame of the ``lidar`` files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench_build.sources.base import SourceError
from bench_build.stages.frame import Boxes, Frame
from bench_build.stages.sensor import Sensor

TOP = 1
KEY_CONTEXT = "key.segment_context_name"
KEY_TIME = "key.frame_timestamp_micros"
KEY_LASER = "key.laser_name"
KEY_OBJECT = "key.laser_object_id"
LIDAR = "[LiDARComponent]"
CALIB = "[LiDARCalibrationComponent]"
SEG = "[LiDARSegmentationLabelComponent]"
BOX = "[LiDARBoxComponent]"
RI1_VALUES, RI1_SHAPE = f"{LIDAR}.range_image_return1.values", f"{LIDAR}.range_image_return1.shape"
RI2_VALUES, RI2_SHAPE = f"{LIDAR}.range_image_return2.values", f"{LIDAR}.range_image_return2.shape"
EXTRINSIC = f"{CALIB}.extrinsic.transform"
INCL_MIN, INCL_MAX, INCL_VALUES = (f"{CALIB}.beam_inclination.min", f"{CALIB}.beam_inclination.max",
                                   f"{CALIB}.beam_inclination.values")
SEG1_VALUES, SEG1_SHAPE = f"{SEG}.range_image_return1.values", f"{SEG}.range_image_return1.shape"
SEG2_VALUES, SEG2_SHAPE = f"{SEG}.range_image_return2.values", f"{SEG}.range_image_return2.shape"
BOX_FIELDS = ("center.x", "center.y", "center.z", "size.x", "size.y", "size.z", "heading")
BOX_COLUMNS = (*(f"{BOX}.box.{f}" for f in BOX_FIELDS), f"{BOX}.type")
LIDAR_COLUMNS = (KEY_CONTEXT, KEY_TIME, KEY_LASER, RI1_VALUES, RI1_SHAPE)
CALIB_COLUMNS = (KEY_CONTEXT, KEY_LASER, EXTRINSIC, INCL_MIN, INCL_MAX, INCL_VALUES)
SEG_COLUMNS = (KEY_CONTEXT, KEY_TIME, KEY_LASER, SEG1_VALUES, SEG1_SHAPE)
#: ``BoxType`` of box.py
BOX_TYPES = {0: "Unknown", 1: "Vehicle", 2: "Pedestrian", 3: "Sign", 4: "Cyclist"}
#: ``Segmentation.Type`` of segmentation.proto
SEG_CLASSES = ("undefined", "car", "truck", "bus", "other_vehicle", "motorcyclist", "bicyclist", "pedestrian", "sign",
               "traffic_light", "pole", "construction_cone", "bicycle", "motorcycle", "building", "vegetation",
               "tree_trunk", "curb", "road", "lane_marker", "other_ground", "walkable", "sidewalk")
#: generic synthetic classes → Segmentation.Type (fixture writer)
SYNTHETIC_TO_SEG = {"unlabelled": 0, "road": 18, "sidewalk": 22, "building": 14, "pole": 10, "car": 1,
                    "car_moving": 1, "truck": 2, "bus": 3, "pedestrian": 7, "bicyclist": 6}
MAX_RANGE = 75.0  # m, the TOP laser's range
#: the split folders of the v2 release: a split folder given as ``ROOT`` with no split named is recorded as its name
SPLITS = ("training", "validation", "testing")


def beam_inclinations(values: np.ndarray | None, lo: float, hi: float, height: int) -> np.ndarray:
    """Per range-image row (row 0 = top), the inclination in radians (official convention, see module doc)."""
    if values is not None:
        incl = np.asarray(values, dtype=np.float64)
        if len(incl) != height:
            raise ValueError(f"{len(incl)} beam inclinations for a range image of {height} rows")
    else:
        incl = lo + (np.arange(height, dtype=np.float64) + 0.5) / height * (hi - lo)
    return incl[::-1]


def ray_directions(extrinsic: np.ndarray, inclination: np.ndarray, width: int) -> np.ndarray:
    """(H·W, 3) float32 unit direction of every pixel's ray in the vehicle frame (the extrinsic's rotation
    applied), row-major: the per-segment part of the conversion, computed once and reused for every frame."""
    e = np.asarray(extrinsic, dtype=np.float64).reshape(4, 4)
    az = (2.0 * (width - np.arange(width, dtype=np.float64) - 0.5) / width - 1.0) * np.pi - np.arctan2(e[1, 0],
                                                                                                        e[0, 0])
    incl = np.asarray(inclination, dtype=np.float64)[:, None]
    local = np.stack(np.broadcast_arrays(np.cos(incl) * np.cos(az), np.cos(incl) * np.sin(az), np.sin(incl)), -1)
    return (local.reshape(-1, 3) @ e[:3, :3].T).astype(np.float32)


def range_image_to_points(ri: np.ndarray, extrinsic: np.ndarray, inclination: np.ndarray,
                          directions: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(points N×3 float32 in the vehicle frame, flat pixel index) of the pixels with range > 0, row-major.

    ``ri`` is ``[H, W, C]`` (channel 0 = range), ``extrinsic`` the 4×4 LiDAR → vehicle transform and
    ``inclination`` the per-row inclination with row 0 the top beam (`beam_inclinations`); ``directions``
    is `ray_directions` of the same calibration when the caller caches it. A point is
    ``range · (E_rot · d_local) + E_trans``, i.e. ``E · (range · d_local)``.
    """
    w = ri.shape[1]
    if directions is None:
        directions = ray_directions(extrinsic, inclination, w)
    rng = ri[..., 0].reshape(-1)
    idx = np.flatnonzero(rng > 0)
    t = np.asarray(extrinsic, dtype=np.float64).reshape(4, 4)[:3, 3].astype(np.float32)
    return directions[idx] * rng[idx, None] + t, idx


def _require(path: Path, names: tuple[str, ...]) -> None:

    if not path.is_file():
        raise SourceError(path, "file not found")
    try:
        have = set(pq.read_schema(path).names)
    except Exception as e:
        raise SourceError(path, f"not a readable Parquet file: {e}") from None
    missing = [n for n in names if n not in have]
    if missing:
        raise SourceError(path, f"missing column(s) {missing} (Waymo v2 schema)")


def _read_rows(path: Path, columns: tuple[str, ...], timestamp: int | None, laser: int | None):
    _require(path, columns)
    expr = None
    if timestamp is not None:
        expr = pc.field(KEY_TIME) == timestamp
    if laser is not None:
        e2 = pc.field(KEY_LASER) == laser
        expr = e2 if expr is None else expr & e2
    import pyarrow.dataset as ds  # ≈ 0.13 s with pandas: every worker imports the readers, few read Waymo

    return ds.dataset(path, format="parquet").to_table(columns=list(columns), filter=expr)


class _FrameRows:
    """Rows of one component file by frame: the file's key columns are read once, then only the row groups
    holding a frame are decoded, and the last ones are kept — a shard's frames are consecutive frames of a
    segment, so a worker decodes each row group once instead of the whole file once per frame."""

    def __init__(self, path: Path, columns: tuple[str, ...]) -> None:

        _require(path, columns)
        self.path, self.columns = path, list(columns)
        self.file = pq.ParquetFile(path)
        keys = [KEY_TIME] + ([KEY_LASER] if KEY_LASER in self.file.schema_arrow.names else [])
        k = self.file.read(columns=keys)
        self.time = np.asarray(k.column(KEY_TIME).to_numpy())
        self.laser = np.asarray(k.column(KEY_LASER).to_numpy()) if KEY_LASER in keys else None
        sizes = [self.file.metadata.row_group(i).num_rows for i in range(self.file.num_row_groups)]
        self.starts = np.concatenate([[0], np.cumsum(sizes)])
        self._groups: dict[int, Any] = {}

    def rows(self, timestamp: int, laser: int | None):

        hit = self.time == timestamp
        if laser is not None and self.laser is not None:
            hit &= self.laser == laser
        rows = np.flatnonzero(hit)
        if len(rows) == 0:
            return self.file.schema_arrow.empty_table().select(self.columns)
        groups = np.searchsorted(self.starts, rows, side="right") - 1
        parts = []
        for g in np.unique(groups):
            if g not in self._groups:
                self._groups = {g: self.file.read_row_group(int(g), columns=self.columns), **{
                    k: v for k, v in list(self._groups.items())[-1:]}}  # keep the previous group too
            sel = rows[groups == g] - self.starts[g]
            parts.append(self._groups[g].take(sel))
        return pa.concat_tables(parts)


def _image(path: Path, table, values: str, shape: str, channels: int) -> np.ndarray:
    flat = table.column(values)[0].values.to_numpy(zero_copy_only=False)
    shp = tuple(int(v) for v in table.column(shape)[0].as_py())
    if len(shp) != 3 or shp[2] != channels or int(np.prod(shp)) != len(flat):
        raise SourceError(path, f"range image of {len(flat)} values does not match its shape {list(shp)} "
                                f"(expected [H, W, {channels}])")
    return flat.reshape(shp)


def split_read(root: Path, data: Path, split: str | None) -> tuple[str | None, str | None]:
    """(split, note) that `describe` records for the folder ``data`` that `split_folder` chose: the split named;
    else ``validation`` for ``root/validation``; else, ``root`` being a split folder itself, its name when it is
    one of `SPLITS`, or no split and a note that the folder was read as given (its name says nothing Waymo
    defines)."""
    if split is not None:
        return split, None
    if data != root:
        return data.name, None
    if root.name in SPLITS:
        return root.name, None
    return None, f"folder {root.name} read as given, not a Waymo split ({', '.join(SPLITS)})"


def split_folder(root: Path, split: str | None) -> Path:
    """The folder of the split's components: ``root/<split>`` (split default: validation), or ``root`` itself when
    it is a split folder (holds ``lidar/``) and either its name is the split or no split was named. A split named
    that is neither is an error naming it and the root: ``root`` is then another split's folder (read as the split
    named, a wrong split built other frames under its name) or holds other splits."""
    name = split or "validation"
    if (root / name / "lidar").is_dir():
        return root / name
    if (root / "lidar").is_dir():
        if split is None or root.name == split:
            return root
        raise SourceError(root, f"split {split!r} not found: no {root / split / 'lidar'}, and {root} is the split "
                                f"folder {root.name!r} (pass the folder that holds {split}/, or split "
                                f"{root.name!r} to build this one)")
    others = sorted(p.parent.name for p in root.glob("*/lidar") if p.is_dir())
    if others:
        raise SourceError(root, f"split {name!r}{' (the default)' if split is None else ''} not found: no "
                                f"{root / name / 'lidar'} (the split folders there: {', '.join(others)})")
    raise SourceError(root, f"no Waymo v2 'lidar' component folder (looked in {root / name} and {root})")


class WaymoSource:
    """Reads TOP-laser first returns of Waymo v2 frames (with semantic labels and boxes when present)."""

    kind = "waymo"
    columns = ("semantic", "instance", "sequence", "timestamp_us")  # optional row columns (pipeline/format/schema.py)
    fields = ("x", "y", "z", "intensity", "ring", "elongation")
    intensity_scale = "tanh"

    def __init__(self, root: str | Path, split: str | None = None) -> None:
        root = Path(root)
        self.data = split_folder(root, split)
        #: the split actually read (None: a split folder of another name, read as given; ``split_note`` says so)
        self.split, self.split_note = split_read(root, self.data, split)
        self.root = root
        self._calib: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._directions: dict[tuple[str, int], np.ndarray] = {}
        self._rows: dict[tuple[str, str], _FrameRows] = {}

    def __getstate__(self) -> dict[str, Any]:  # caches stay with the process that filled them
        return {**self.__dict__, "_directions": {}, "_rows": {}}

    def _frame_rows(self, tag: str, ctx: str, columns: tuple[str, ...], timestamp: int, laser: int | None):
        key = (tag, ctx)
        if key not in self._rows:
            # one segment at a time per component: frames come in order
            self._rows = {k: v for k, v in self._rows.items() if k[0] != tag}
            self._rows[key] = _FrameRows(self.component(tag, ctx), columns)
        return self._rows[key].rows(timestamp, laser)

    def component(self, tag: str, context: str) -> Path:
        return self.data / tag / f"{context}.parquet"

    @property
    def labelled(self) -> bool:
        return (self.data / "lidar_segmentation").is_dir()

    def unlabelled(self) -> str | None:
        """None when frames are listed from ``lidar_segmentation`` (only labelled ones are), else what is missing."""
        if self.labelled:
            return None
        return (f"{self.data} has no lidar_segmentation component folder (the per-point labels of the labelled "
                "frames)")

    def list_frames(self) -> list[str]:
        ids = []
        for path in sorted((self.data / "lidar").glob("*.parquet")):
            ctx = path.stem
            _require(path, (KEY_CONTEXT, KEY_TIME, KEY_LASER))
            keys = pq.read_table(path, columns=[KEY_TIME, KEY_LASER])
            ts = np.asarray(keys.column(KEY_TIME).to_numpy())[np.asarray(keys.column(KEY_LASER).to_numpy()) == TOP]
            if self.labelled:
                seg = self.component("lidar_segmentation", ctx)
                if not seg.is_file():
                    continue
                _require(seg, (KEY_TIME, KEY_LASER))
                st = pq.read_table(seg, columns=[KEY_TIME, KEY_LASER])
                top = np.asarray(st.column(KEY_LASER).to_numpy()) == TOP
                labelled = np.asarray(st.column(KEY_TIME).to_numpy())[top]
                ts = ts[np.isin(ts, labelled)]
            ids.extend(f"{ctx}-{int(t)}" for t in np.unique(ts))
        return ids

    def calibration(self, ctx: str, height: int) -> tuple[np.ndarray, np.ndarray]:
        """(4×4 extrinsic, per-row inclination with row 0 on top) of the TOP laser of a segment."""
        if ctx not in self._calib:
            path = self.component("lidar_calibration", ctx)
            t = _read_rows(path, CALIB_COLUMNS, None, TOP)
            if t.num_rows == 0:
                raise SourceError(path, f"no calibration row for the TOP laser (laser_name {TOP})")
            ext = np.asarray(t.column(EXTRINSIC)[0].as_py(), dtype=np.float64)
            if ext.shape != (16,) or not np.isfinite(ext).all():
                raise SourceError(path, "extrinsic.transform must be 16 finite numbers (row-major 4×4)")
            vals = t.column(INCL_VALUES)[0].as_py()
            try:
                incl = beam_inclinations(None if vals is None else np.asarray(vals), t.column(INCL_MIN)[0].as_py(),
                                         t.column(INCL_MAX)[0].as_py(), height)
            except ValueError as e:
                raise SourceError(path, str(e)) from None
            self._calib[ctx] = (ext.reshape(4, 4), incl)
        ext, incl = self._calib[ctx]
        if len(incl) != height:
            raise SourceError(self.component("lidar_calibration", ctx),
                              f"{len(incl)} beam inclinations for a range image of {height} rows")
        return ext, incl

    def read(self, frame_id: str) -> Frame:
        ctx, _, ts_text = frame_id.rpartition("-")
        if not ctx or not ts_text.isdigit():
            raise SourceError(self.data / "lidar", f"frame id {frame_id!r} is not <context>-<timestamp>")
        ts = int(ts_text)
        path = self.component("lidar", ctx)
        t = self._frame_rows("lidar", ctx, LIDAR_COLUMNS, ts, TOP)
        if t.num_rows != 1:
            raise SourceError(path, f"{t.num_rows} TOP rows for timestamp {ts} (expected 1)")
        ri = _image(path, t, RI1_VALUES, RI1_SHAPE, 4)
        h, w = ri.shape[:2]
        # a pixel with range ≤ 0 has no return (its other channels are never read); any other pixel becomes a
        # point, so a NaN/inf range, intensity or elongation there is damage, not a point to write
        bad = ~(ri[..., 0] <= 0) & ~np.isfinite(ri[..., :3]).all(axis=-1)
        if bad.any():
            row, col = (int(v) for v in np.argwhere(bad)[0])
            raise SourceError(path, f"range image of timestamp {ts}: {int(bad.sum())} pixel(s) with NaN/inf range, "
                                    f"intensity or elongation (first at row {row}, column {col})")
        ext, incl = self.calibration(ctx, h)
        key = (ctx, w)
        if key not in self._directions:
            self._directions = {key: ray_directions(ext, incl, w)}  # one segment at a time: frames come in order
        xyz, idx = range_image_to_points(ri, ext, incl, self._directions[key])
        feats = ri.reshape(-1, ri.shape[2])[idx]
        points = np.column_stack([xyz, np.tanh(feats[:, 1]), idx // w, np.tanh(feats[:, 2])]).astype(np.float32)
        labels = {}
        seg_path = self.component("lidar_segmentation", ctx)
        if seg_path.is_file():
            st = self._frame_rows("lidar_segmentation", ctx, SEG_COLUMNS, ts, TOP)
            if st.num_rows:
                seg = _image(seg_path, st, SEG1_VALUES, SEG1_SHAPE, 2)
                if seg.shape[:2] != ri.shape[:2]:
                    raise SourceError(seg_path, f"label image {list(seg.shape[:2])} does not match the range image "
                                                f"{list(ri.shape[:2])} of {path.name}")
                labels["semantic"] = seg[..., 1].reshape(-1)[idx].astype(np.uint32)
                labels["instance"] = seg[..., 0].reshape(-1)[idx].astype(np.uint32)
        origin = np.asarray(ext, dtype=np.float64).reshape(4, 4)[:3, 3]  # the TOP laser, in the vehicle frame
        sensor = Sensor("waymo-top", tuple(float(v) for v in np.degrees(incl)), max_range=MAX_RANGE,
                        origin=(float(origin[0]), float(origin[1]), float(origin[2])))
        return Frame(frame_id=frame_id, points=points, fields=self.fields, intensity_scale=self.intensity_scale,
                     labels=labels, boxes=self.boxes(ctx, ts), sensor=sensor,
                     attrs={"sequence": ctx, "timestamp_us": ts})

    def boxes(self, ctx: str, ts: int) -> Boxes | None:
        path = self.component("lidar_box", ctx)
        if not path.is_file():
            return None
        t = self._frame_rows("lidar_box", ctx, (KEY_TIME, *BOX_COLUMNS), ts, None)
        m = t.num_rows
        if m == 0:
            return Boxes.empty()
        v = {c: np.asarray(t.column(c).to_numpy(), dtype=np.float64) for c in BOX_COLUMNS[:-1]}
        # a NaN/inf centre, size or heading is damage, not a box to write (as a NaN/inf range-image pixel)
        bad = ~np.isfinite(np.stack([v[c] for c in BOX_COLUMNS[:-1]], 1))
        if bad.any():
            row, col = (int(i) for i in np.argwhere(bad)[0])
            raise SourceError(path, f"boxes of timestamp {ts}: {int(bad.any(axis=1).sum())} of {m} with NaN/inf "
                                    f"values (first: box {row}, {BOX_FIELDS[col]})")
        if (nulls := t.column(BOX_COLUMNS[-1]).null_count) > 0:  # a box without its class: damage, not "Unknown"
            raise SourceError(path, f"boxes of timestamp {ts}: {nulls} of {m} without a {BOX_COLUMNS[-1]} value")
        kind = np.asarray(t.column(BOX_COLUMNS[-1]).to_numpy())
        return Boxes(center=np.stack([v[BOX_COLUMNS[i]] for i in range(3)], 1),
                     dims=np.stack([v[BOX_COLUMNS[i]] for i in range(3, 6)], 1), heading=v[BOX_COLUMNS[6]],
                     cls=np.array([BOX_TYPES.get(int(k), "Unknown") for k in kind], dtype=object),
                     truncated=np.zeros(m), occluded=np.zeros(m, np.int64), alpha=np.zeros(m), bbox2d=np.zeros((m, 4)))

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "root": str(self.root), "split": self.split,
                **({"split_note": self.split_note} if self.split_note else {}), "fields": list(self.fields),
                "intensity_scale": self.intensity_scale, "laser": "TOP", "returns": [1],
                "frame": "vehicle", "labelled_only": self.labelled,
                "semantic": "Waymo Segmentation.Type" if self.labelled else None,
                "classes": list(SEG_CLASSES)}
