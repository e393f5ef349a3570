"""KITTI 3D object detection: ``velodyne/*.bin``, ``label_2/*.txt``, ``calib/*.txt``, ``ImageSets``.

Layout (``ROOT`` may be the dataset root or its ``training``/``testing`` folder)::

    ROOT/training/velodyne/000000.bin   float32 little-endian x, y, z, reflectance ∈ [0, 1]
    ROOT/training/label_2/000000.txt    15 fields per object, camera frame (KITTI devkit)
    ROOT/training/calib/000000.txt      P0..P3, R0_rect, Tr_velo_to_cam, Tr_imu_to_velo
    ROOT/ImageSets/{train,val,test}.txt optional frame lists (``split``)

Labels are converted to the LiDAR frame with the frame's own calibration:
X_rect = R0_rect · Tr_velo_to_cam · X_velo, the label location is the bottom centre of the box; the
LiDAR box centre is rect→LiDAR(location) + h/2 on LiDAR z, as OpenPCDet's ``gt_boxes_lidar``.
The writers here are the exact inverse and are used by the demo source and label export.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bench_build.manifests.names import frame_id_message, name_problem
from bench_build.sources.base import SourceError, read_text, regular_file
from bench_build.sources.records import check_points
from bench_build.stages.frame import DONT_CARE, Boxes, Calib, Frame
from bench_build.stages.geometry import IMAGE_SIZE, lidar_heading_to_rot_y, rot_y_to_lidar_heading
from bench_build.stages.sensor import HDL64E

LABEL_FIELDS = 15  # a 16th (score) is allowed: detection results use the same format
CALIB_KEYS = {"P0": 12, "P1": 12, "P2": 12, "P3": 12, "R0_rect": 9, "Tr_velo_to_cam": 12, "Tr_imu_to_velo": 12}
REQUIRED_CALIB = ("P0", "P1", "P2", "P3", "R0_rect", "Tr_velo_to_cam")


#: what an empty scan's error advises a build (`run --allow-empty-frames`); other readers of the record pass their own
EMPTY_ADVICE = "if the dataset really has empty frames, pass --allow-empty-frames"


def read_velodyne(path: Path, *, allow_empty: bool = False, empty_advice: str = EMPTY_ADVICE,
                  name: str = "kitti") -> np.ndarray:
    """N×4 float32 points of a KITTI ``.bin`` (``name``: the dataset whose scan it is, for the errors), validated
    (size, finiteness, values a LiDAR returns: `check_points`; not empty unless ``allow_empty``, else an error
    ending in ``empty_advice``)."""
    size = regular_file(path, "scan file", missing="file not found").st_size
    if size == 0 and not allow_empty:
        raise SourceError(path, f"empty scan (0 bytes, no points); {empty_advice}")
    if size % 16:
        raise SourceError(path, f"size {size} bytes is not a multiple of 16 (4 float32 per point)")
    return check_points(path, np.fromfile(path, dtype="<f4").reshape(-1, 4), 4, name)


def read_calib(path: Path) -> Calib:
    if not path.is_file():
        raise SourceError(path, "calibration file not found")
    values: dict[str, np.ndarray] = {}
    for lineno, line in enumerate(read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        key, sep, rest = line.partition(":")
        key = key.strip()
        if not sep:
            raise SourceError(path, f"line {lineno}: expected 'KEY: values', got {line[:40]!r}")
        if key not in CALIB_KEYS:
            continue  # e.g. Tr_cam_to_road in some tools; not needed
        try:
            nums = np.array([float(v) for v in rest.split()], dtype=np.float64)
        except ValueError:
            raise SourceError(path, f"line {lineno}: {key} has a non-numeric value") from None
        if nums.size != CALIB_KEYS[key]:
            raise SourceError(path, f"line {lineno}: {key} has {nums.size} values, expected {CALIB_KEYS[key]}")
        if not np.isfinite(nums).all():
            raise SourceError(path, f"line {lineno}: {key} has NaN/inf values")
        values[key] = nums
    missing = [k for k in REQUIRED_CALIB if k not in values]
    if missing:
        raise SourceError(path, f"missing calibration entries {missing}")
    imu = values.get("Tr_imu_to_velo")
    calib = Calib(
        P=tuple(values[f"P{i}"].reshape(3, 4) for i in range(4)),
        R0_rect=values["R0_rect"].reshape(3, 3),
        Tr_velo_to_cam=values["Tr_velo_to_cam"].reshape(3, 4),
        Tr_imu_to_velo=None if imu is None else imu.reshape(3, 4),
    )
    if abs(np.linalg.det(calib.velo_to_rect)) < 1e-9:
        raise SourceError(path, "R0_rect · Tr_velo_to_cam is singular")
    return calib


def read_labels(path: Path, calib: Calib | None) -> Boxes:
    """Boxes of a ``label_2`` file, converted to the LiDAR frame with ``calib``."""
    rows: list[list[str]] = []
    for lineno, line in enumerate(read_text(path).splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) not in (LABEL_FIELDS, LABEL_FIELDS + 1):
            raise SourceError(path, f"line {lineno}: {len(parts)} fields, expected {LABEL_FIELDS} (or 16 with score)")
        rows.append(parts)
    if not rows:
        return Boxes.empty()
    if calib is None:
        raise SourceError(path, "has labels but the frame has no calibration file to convert them to the LiDAR frame")
    try:
        num = np.array([[float(v) for v in r[1:LABEL_FIELDS]] for r in rows], dtype=np.float64)
    except ValueError as e:
        raise SourceError(path, f"non-numeric label field: {e}") from None
    if not np.isfinite(num).all():
        raise SourceError(path, "label has NaN/inf values")
    cls = np.array([r[0] for r in rows], dtype=object)
    h, w, length = num[:, 7], num[:, 8], num[:, 9]
    loc, rot_y = num[:, 10:13], num[:, 13]
    care = cls != DONT_CARE
    center = np.full((len(rows), 3), -1000.0)
    heading = np.full(len(rows), -10.0)
    dims = np.stack([length, w, h], axis=1)
    if care.any():
        # OpenPCDet's gt_boxes_lidar (and Li et al.'s released generator): the bottom centre in the LiDAR
        # frame, raised by h/2 along LiDAR z (not the midpoint of the transformed bottom and top centres,
        # which tilts with the calibration by ~1 cm)
        center[care] = calib.rect_to_lidar(loc[care])
        center[care, 2] += h[care] / 2
        heading[care] = rot_y_to_lidar_heading(rot_y[care], calib)
    return Boxes(
        center=center,
        dims=dims,
        heading=heading,
        cls=cls,
        truncated=num[:, 0],
        occluded=num[:, 1].astype(np.int64),
        alpha=num[:, 2],
        bbox2d=num[:, 3:7],
    )


def format_labels(boxes: Boxes, calib: Calib) -> str:
    """KITTI ``label_2`` text for LiDAR-frame boxes (the inverse of `read_labels`)."""
    lines = []
    # the exact inverse of read_labels: down by h/2 along LiDAR z, then to the rectified camera frame
    # (going down along camera y instead would drift by ~1 cm per write→read cycle on a tilted calibration)
    lidar_bottom = boxes.center.astype(np.float64)
    lidar_bottom[:, 2] -= boxes.dims[:, 2] / 2
    rect_bottom = calib.lidar_to_rect(lidar_bottom)
    rot_y = lidar_heading_to_rot_y(boxes.heading, calib)
    for j in range(len(boxes)):
        left, top, right, bottom = boxes.bbox2d[j]
        if boxes.cls[j] == DONT_CARE:
            lines.append(f"{DONT_CARE} -1 -1 -10 {left:.2f} {top:.2f} {right:.2f} {bottom:.2f} "
                         "-1 -1 -1 -1000 -1000 -1000 -10")
            continue
        length, width, height = boxes.dims[j]
        x, y, z = rect_bottom[j]
        lines.append(
            f"{boxes.cls[j]} {boxes.truncated[j]:.2f} {int(boxes.occluded[j])} {boxes.alpha[j]:.2f} "
            f"{left:.2f} {top:.2f} {right:.2f} {bottom:.2f} {height:.2f} {width:.2f} {length:.2f} "
            f"{x:.2f} {y:.2f} {z:.2f} {rot_y[j]:.2f}"
        )
    return "\n".join(lines) + ("\n" if lines else "")


def format_calib(calib: Calib) -> str:
    d = calib.as_dict()
    return "".join(f"{k}: {' '.join(f'{v:.12e}' for v in d[k])}\n" for k in CALIB_KEYS if k in d)


def write_frame(root: Path, frame: Frame, *, split_dir: str = "training") -> None:
    """Write one frame in KITTI layout (velodyne .bin with x, y, z, intensity; label_2; calib)."""
    base = Path(root) / split_dir
    for sub in ("velodyne", "label_2", "calib"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    cols = [frame.fields.index(f) for f in ("x", "y", "z", "intensity")]
    np.ascontiguousarray(frame.points[:, cols], dtype="<f4").tofile(base / "velodyne" / f"{frame.frame_id}.bin")
    if frame.calib is not None:
        (base / "calib" / f"{frame.frame_id}.txt").write_text(format_calib(frame.calib))
        if frame.boxes is not None:
            (base / "label_2" / f"{frame.frame_id}.txt").write_text(format_labels(frame.boxes, frame.calib))


class KittiSource:
    """Reads KITTI object-detection frames; ``split`` is ``training``/``testing`` or an ImageSets list name."""

    kind = "kitti"
    fields = ("x", "y", "z", "intensity")
    intensity_scale = "unit"
    sensor = HDL64E  # Velodyne HDL-64E (an S2); scans store no laser id

    def __init__(self, root: str | Path, split: str | None = None, *, allow_empty: bool = False) -> None:
        root = Path(root)
        self.allow_empty = allow_empty  # 0-byte scans are an error unless the dataset really has empty frames
        if not root.is_dir():
            raise SourceError(root, "is a file, not a KITTI root directory" if root.exists()
                              else "KITTI root directory not found")
        split = split or "training"
        if root.name in ("training", "testing") and (root / "velodyne").is_dir():
            self.data_dir, self.root = root, root.parent
        else:
            folder = "testing" if split in ("testing", "test") else "training"
            self.data_dir, self.root = root / folder, root
        if not (self.data_dir / "velodyne").is_dir():
            raise SourceError(self.data_dir / "velodyne", "velodyne directory not found (is this a KITTI root?)")
        self.split = split

    def list_frames(self) -> list[str]:
        if self.split in ("training", "testing"):
            return sorted(p.stem for p in (self.data_dir / "velodyne").glob("*.bin"))
        if (why := name_problem(self.split)) is not None:  # a list name, never a path: "../../x" stays out
            raise SourceError(self.root / "ImageSets", f"split {self.split!r} {why}; it names ImageSets/<split>.txt")
        listing = self.root / "ImageSets" / f"{self.split}.txt"
        if not listing.is_file():
            raise SourceError(listing, f"split list for --split {self.split} not found")
        try:
            lines = listing.read_bytes().decode("utf-8").splitlines()
        except UnicodeDecodeError as e:
            raise SourceError(listing, f"split list is not UTF-8 text (byte {e.start})") from None
        # each id is a file stem (velodyne/<id>.bin): one safe name, refused here, before any work, rather than
        # used as a path ("../../etc/passwd") or split into folders ("a/b")
        for lineno, line in enumerate(lines, 1):
            if line.strip() and (why := name_problem(line.strip())) is not None:
                raise SourceError(listing, f"line {lineno}: {frame_id_message(line.strip(), why)}")
        return sorted({ln.strip() for ln in lines if ln.strip()})

    def paths(self, frame_id: str) -> dict[str, Path]:
        return {
            "velodyne": self.data_dir / "velodyne" / f"{frame_id}.bin",
            "label": self.data_dir / "label_2" / f"{frame_id}.txt",
            "calib": self.data_dir / "calib" / f"{frame_id}.txt",
        }

    def read(self, frame_id: str) -> Frame:
        p = self.paths(frame_id)
        points = read_velodyne(p["velodyne"], allow_empty=self.allow_empty)
        # optional files, but something else in their place is damage, not absence
        regular_file(p["calib"], "calibration file")
        regular_file(p["label"], "label file")
        calib = read_calib(p["calib"]) if p["calib"].is_file() else None
        boxes = None
        if p["label"].is_file():
            if calib is None and p["label"].stat().st_size > 0:
                raise SourceError(p["calib"], f"calibration missing for frame {frame_id}, which has labels")
            boxes = read_labels(p["label"], calib)
        return Frame(frame_id=frame_id, points=points, fields=self.fields, intensity_scale=self.intensity_scale,
                     boxes=boxes, calib=calib, sensor=self.sensor)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "root": str(self.root), "split": self.split,
                "fields": list(self.fields), "intensity_scale": self.intensity_scale}


def camera_fov_mask(frame: Frame) -> np.ndarray:
    """Points that project into the left colour image through P2 with depth ≥ 0: what KITTI's
    object-detection tools keep of a scan (≈ 18k of ≈ 130k points). Needs the frame's calibration."""
    if frame.calib is None:
        raise ValueError(f"frame {frame.frame_id}: camera_fov_mask needs the KITTI calibration")
    rect = frame.calib.lidar_to_rect(frame.xyz)
    uv = frame.calib.project_rect(rect)
    w, h = IMAGE_SIZE
    return (rect[:, 2] >= 0) & (uv[:, 0] >= 0) & (uv[:, 0] < w) & (uv[:, 1] >= 0) & (uv[:, 1] < h)
