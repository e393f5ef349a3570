"""SemanticKITTI: KITTI Odometry scans with per-point semantic labels (Behley et al., ICCV 2019).

Layout (``ROOT`` is the folder that holds ``sequences/``)::

    ROOT/sequences/NN/velodyne/000000.bin   float32 little-endian x, y, z, remission ∈ [0, 1]
    ROOT/sequences/NN/labels/000000.label   uint32 per point: low 16 bits raw semantic id, high 16 instance
    ROOT/sequences/NN/calib.txt             P0..P3, Tr (velodyne → cam0), 12 numbers each
    ROOT/sequences/NN/times.txt             one timestamp (s) per scan
    ROOT/sequences/NN/poses.txt             optional (camera-frame poses; not needed here)

The sequence is opened with pykitti's ``odometry`` class (file list, calibration, timestamps); scans and
labels are read and validated here. Frame ids are ``NN_FFFFFF`` (sequence, scan). ``split``: ``val``
(sequence 08, the default and Robo3D's SemanticKITTI-C), ``train`` (00–07, 09, 10), ``test`` (11–21, no
labels), or sequence numbers, e.g. ``08`` or ``00,01``. Every other sequence must have its ``labels/`` folder.

Per point, the ``semantic`` label column holds the raw SemanticKITTI id (``label & 0xFFFF``; e.g. 10 car,
40 road, 252 moving-car) and ``instance`` the upper half (``label >> 16``), so the released ``.label`` value
is ``instance << 16 | semantic``; each example records its ``sequence``. The 19-class
``learning_map`` (raw → train id) is `LEARNING_MAP` and is recorded in the dataset card. Scans are kept in
raw file order (ring by ring), which the azimuth-wrap ring recovery of beam missing / cross-sensor needs.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import numpy as np

from bench_build.sources.base import SourceError, read_text, require_extra
from bench_build.sources.kitti import read_velodyne
from bench_build.stages.frame import Calib, Frame
from bench_build.stages.sensor import HDL64E

SPLITS = {"train": ("00", "01", "02", "03", "04", "05", "06", "07", "09", "10"), "val": ("08",),
          "test": tuple(f"{i:02d}" for i in range(11, 22))}
#: raw id → name (`config/semantic-kitti.yaml` of the SemanticKITTI API)
LABEL_NAMES = {0: "unlabeled", 1: "outlier", 10: "car", 11: "bicycle", 13: "bus", 15: "motorcycle", 16: "on-rails",
               18: "truck", 20: "other-vehicle", 30: "person", 31: "bicyclist", 32: "motorcyclist", 40: "road",
               44: "parking", 48: "sidewalk", 49: "other-ground", 50: "building", 51: "fence",
               52: "other-structure", 60: "lane-marking", 70: "vegetation", 71: "trunk", 72: "terrain", 80: "pole",
               81: "traffic-sign", 99: "other-object", 252: "moving-car", 253: "moving-bicyclist",
               254: "moving-person", 255: "moving-motorcyclist", 256: "moving-on-rails", 257: "moving-bus",
               258: "moving-truck", 259: "moving-other-vehicle"}
#: raw id → 19-class train id (0 = ignored)
LEARNING_MAP = {0: 0, 1: 0, 10: 1, 11: 2, 13: 5, 15: 3, 16: 5, 18: 4, 20: 5, 30: 6, 31: 7, 32: 8, 40: 9, 44: 10,
                48: 11, 49: 12, 50: 13, 51: 14, 52: 0, 60: 9, 70: 15, 71: 16, 72: 17, 80: 18, 81: 19, 99: 0,
                252: 1, 253: 7, 254: 6, 255: 8, 256: 5, 257: 5, 258: 4, 259: 5}
TRAIN_CLASSES = ("unlabeled", "car", "bicycle", "motorcycle", "truck", "other-vehicle", "person", "bicyclist",
                 "motorcyclist", "road", "parking", "sidewalk", "other-ground", "building", "fence", "vegetation",
                 "trunk", "terrain", "pole", "traffic-sign")
#: generic synthetic classes (`bench_build.sources.synthetic`) → raw SemanticKITTI id, for the fixture writer
SYNTHETIC_TO_RAW = {"unlabelled": 0, "road": 40, "sidewalk": 48, "building": 50, "pole": 80, "car": 10,
                    "car_moving": 252, "truck": 18, "bus": 13, "pedestrian": 30, "bicyclist": 31}


def parse_split(split: str | None) -> tuple[str, ...]:
    split = split or "val"
    if split in SPLITS:
        return SPLITS[split]
    seqs = tuple(s.strip() for s in split.split(",") if s.strip())
    if not seqs or not all(s.isdigit() for s in seqs):
        raise ValueError(f"SemanticKITTI split {split!r}: expected train, val, test or sequence numbers like 08,09")
    return tuple(f"{int(s):02d}" for s in seqs)


def read_label_file(path: Path, n_points: int, scan: Path) -> np.ndarray:
    """uint32 labels of a ``.label`` file, one per point of ``scan`` (validated)."""
    size = path.stat().st_size
    if size % 4:
        raise SourceError(path, f"size {size} bytes is not a multiple of 4 (one uint32 per point)")
    if size // 4 != n_points:
        raise SourceError(path, f"{size // 4} labels but {scan.name} has {n_points} points (counts must match)")
    return np.fromfile(path, dtype="<u4")


def check_numeric_lines(path: Path, count: int, what: str) -> None:
    """Every line of ``path`` holds ``count`` finite numbers (times.txt: 1 per scan; poses: 12 per scan), checked
    before pykitti parses it: pykitti's ValueError names no file, and one from times.txt or the poses would
    otherwise be taken for calib.txt's."""
    for lineno, line in enumerate(read_text(path).splitlines(), 1):
        try:
            nums = [float(v) for v in line.split()]
        except ValueError:
            nums = None
        if nums is None or len(nums) != count or not np.isfinite(nums).all():
            raise SourceError(path, f"line {lineno}: expected {what}, got {line[:40]!r}")


def _calib_from_pykitti(calib: Any) -> Calib:
    p = tuple(np.asarray(getattr(calib, f"P_rect_{i}0"), dtype=np.float64) for i in range(4))
    return Calib(P=p, R0_rect=np.eye(3), Tr_velo_to_cam=np.asarray(calib.T_cam0_velo, dtype=np.float64)[:3])


class SemanticKittiSource:
    """Reads SemanticKITTI scans + labels of the sequences of ``split`` (default ``val`` = sequence 08)."""

    kind = "semantickitti"
    columns = ("semantic", "instance", "sequence")  # optional row columns (pipeline/format/schema.py)
    fields = ("x", "y", "z", "intensity")
    intensity_scale = "unit"

    def __init__(self, root: str | Path, split: str | None = None, *, allow_empty: bool = False) -> None:
        root = Path(root)
        if not (root / "sequences").is_dir():
            raise SourceError(root / "sequences", "sequences directory not found (is this a SemanticKITTI root?)")
        self.root = root
        self.allow_empty = allow_empty  # 0-byte scans are an error unless the dataset really has empty frames
        self.split = split or "val"
        try:
            self.sequences = parse_split(self.split)
        except ValueError as e:
            raise SourceError(root, str(e)) from None
        self._odometry: dict[str, Any] = {}

    def __getstate__(self) -> dict[str, Any]:  # pykitti's calibration namedtuple is not picklable
        return {**self.__dict__, "_odometry": {}}

    def sequence_dir(self, seq: str) -> Path:
        return self.root / "sequences" / seq

    def odometry(self, seq: str) -> Any:
        """pykitti's ``odometry`` of a sequence (file list, calibration, timestamps), validated and cached."""
        if seq not in self._odometry:
            pykitti = require_extra("pykitti", "semantickitti", "SemanticKITTI", self.root)
            d = self.sequence_dir(seq)
            if not (d / "velodyne").is_dir():
                raise SourceError(d / "velodyne", f"velodyne directory of sequence {seq} not found")
            for name in ("calib.txt", "times.txt"):
                if not (d / name).is_file():
                    raise SourceError(d / name, f"missing (sequence {seq} needs it)")
            # only the test sequences are released without labels; elsewhere a missing labels/ folder (a separate
            # download) would build scans with no labels, which a segmentation benchmark cannot score
            if seq not in SPLITS["test"] and not (d / "labels").is_dir():
                raise SourceError(d / "labels", f"labels directory of sequence {seq} not found (sequences 00-10 "
                                                "are labelled: unpack data_odometry_labels.zip into the same root)")
            check_numeric_lines(d / "times.txt", 1, "one timestamp in seconds per line")
            poses = self.root / "poses" / f"{seq}.txt"  # pykitti reads KITTI odometry's poses if present (unused)
            if poses.is_file():
                check_numeric_lines(poses, 12, "a 3×4 pose (12 numbers) per line")
            try:
                with contextlib.redirect_stdout(io.StringIO()):  # pykitti prints when poses are absent
                    od = pykitti.odometry(str(self.root), seq)
            except KeyError as e:
                raise SourceError(d / "calib.txt", f"missing calibration row {e.args[0]}") from None
            except ValueError as e:
                raise SourceError(d / "calib.txt", f"malformed calibration ({e}); expected 'KEY: 12 numbers'") \
                    from None
            if len(od.timestamps) != len(od.velo_files):
                raise SourceError(d / "times.txt", f"{len(od.timestamps)} timestamps for "
                                                   f"{len(od.velo_files)} scans")
            self._odometry[seq] = od
        return self._odometry[seq]

    def unlabelled(self) -> str | None:
        """The split's sequences released without labels (the test sequences 11-21), or None."""
        bare = [s for s in self.sequences if not (self.sequence_dir(s) / "labels").is_dir()]
        if not bare:
            return None
        return (f"sequence{'s' if len(bare) > 1 else ''} {', '.join(bare)} of {self.root} "
                f"{'have' if len(bare) > 1 else 'has'} no labels/ folder (SemanticKITTI releases 11-21 without "
                "labels): build a labelled split, e.g. --split val (08), train, or sequence numbers 00-10")

    def list_frames(self) -> list[str]:
        ids = []
        for seq in self.sequences:
            ids.extend(f"{seq}_{Path(p).stem}" for p in self.odometry(seq).velo_files)
        return ids

    def paths(self, frame_id: str) -> dict[str, Path]:
        seq, _, scan = frame_id.partition("_")
        d = self.sequence_dir(seq)
        return {"velodyne": d / "velodyne" / f"{scan}.bin", "label": d / "labels" / f"{scan}.label"}

    def read(self, frame_id: str) -> Frame:
        seq = frame_id.partition("_")[0]
        p = self.paths(frame_id)
        points = read_velodyne(p["velodyne"], allow_empty=self.allow_empty, name="semantickitti")
        labels = {}
        if p["label"].is_file():
            raw = read_label_file(p["label"], len(points), p["velodyne"])
            labels["semantic"] = (raw & 0xFFFF).astype(np.uint32)
            labels["instance"] = (raw >> 16).astype(np.uint32)
        elif seq not in SPLITS["test"] and (self.sequence_dir(seq) / "labels").is_dir():
            raise SourceError(p["label"], f"label file missing for scan {p['velodyne'].name}")
        return Frame(frame_id=frame_id, points=points, fields=self.fields, intensity_scale=self.intensity_scale,
                     labels=labels, calib=_calib_from_pykitti(self.odometry(seq).calib), sensor=HDL64E,
                     attrs={"sequence": seq})

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "root": str(self.root), "split": self.split, "sequences": list(self.sequences),
                "fields": list(self.fields), "intensity_scale": self.intensity_scale, "sensor": HDL64E.describe(),
                "semantic": "raw SemanticKITTI id (label & 0xFFFF)",
                "learning_map": {str(k): v for k, v in LEARNING_MAP.items()},
                "train_classes": list(TRAIN_CLASSES)}
