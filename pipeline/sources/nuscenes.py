"""nuScenes LIDAR_TOP key frames (+ nuScenes-lidarseg labels), read through ``nuscenes-devkit``.

Layout (``ROOT`` is the devkit's ``dataroot``)::

    ROOT/v1.0-trainval/*.json                 the 13 tables (+ lidarseg.json with the lidarseg expansion)
    ROOT/samples/LIDAR_TOP/<…>.pcd.bin        float32 × 5 per point: x, y, z, intensity 0–255, ring 0–31
    ROOT/lidarseg/v1.0-trainval/<sd>_lidarseg.bin   uint8 per point: category.json ``index`` (0–31)
    ROOT/maps/<…>.png                         (the devkit checks they exist)

The table version is ``v1.0-trainval`` when present, else ``v1.0-mini`` (or name it in ``split`` as
``VERSION:SPLIT``, e.g. ``v1.0-mini:mini_val``). ``split`` is a scene list of the devkit's
``create_splits_scenes`` (default ``val``: 150 scenes, 6,019 key frames; on v1.0-mini ``val`` means
``mini_val``). Frames are the split's samples, ordered by scene name then timestamp, with the sample
token as frame id.

`NuScenesSource` loads the tables once, in the driver, with ``NuScenes(version, dataroot)``, and keeps for
each sample only what reading it needs (file names, lidarseg file, calibrated-sensor and ego poses, its
annotations); workers get that index, not the devkit object (the trainval tables take ~1 GB). Points
are the devkit's ``.pcd.bin`` format with its fifth column (ring) kept — ``LidarPointCloud.from_file``
drops it and beam missing / cross-sensor need it. Boxes are built with the devkit's ``Box`` and moved to
the LiDAR frame exactly as ``NuScenes.get_sample_data`` does (global → ego → sensor). The ``semantic``
label column holds the raw lidarseg index; `describe` records category.json's index → name map and the
``learning_map`` index → class of the nuScenes-lidarseg benchmark (16 classes, 0 = ignore), which is what
Robo3D's and the lidarseg challenge's mIoU are over and what `bench-build score` maps ground truth through.
The map is the devkit's own (`lidarseg_learning_map`), taken at run time, not a copy.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from bench_build.sources.base import SourceError, regular_file, require_extra
from bench_build.stages.frame import Boxes, Frame
from bench_build.stages.sensor import HDL32E

VERSIONS = ("v1.0-trainval", "v1.0-mini", "v1.0-test")
TABLES = ("category", "attribute", "visibility", "instance", "sensor", "calibrated_sensor", "ego_pose", "log",
          "scene", "sample", "sample_data", "sample_annotation", "map")
#: category.json ``index`` → fine name of the released lidarseg category table (v1.0 category.json). The reader
#: takes the mapping from the dataset's own category.json; this is for the fixture writer and the card.
FINE_CLASSES = (
    "noise", "animal", "human.pedestrian.adult", "human.pedestrian.child", "human.pedestrian.construction_worker",
    "human.pedestrian.personal_mobility", "human.pedestrian.police_officer", "human.pedestrian.stroller",
    "human.pedestrian.wheelchair", "movable_object.barrier", "movable_object.debris",
    "movable_object.pushable_pullable", "movable_object.trafficcone", "static_object.bicycle_rack", "vehicle.bicycle",
    "vehicle.bus.bendy", "vehicle.bus.rigid", "vehicle.car", "vehicle.construction", "vehicle.emergency.ambulance",
    "vehicle.emergency.police", "vehicle.motorcycle", "vehicle.trailer", "vehicle.truck", "flat.driveable_surface",
    "flat.other", "flat.sidewalk", "flat.terrain", "static.manmade", "static.other", "static.vegetation",
    "vehicle.ego")
FINE_INDEX = {name: i for i, name in enumerate(FINE_CLASSES)}
#: generic synthetic classes → fine category name (fixture writer)
SYNTHETIC_TO_FINE = {"unlabelled": "noise", "road": "flat.driveable_surface", "sidewalk": "flat.sidewalk",
                     "building": "static.manmade", "pole": "static.manmade", "car": "vehicle.car",
                     "car_moving": "vehicle.car", "truck": "vehicle.truck", "bus": "vehicle.bus.rigid",
                     "pedestrian": "human.pedestrian.adult", "bicyclist": "vehicle.bicycle"}
#: detection class → a fine category name (writing recorded boxes back into tables)
DETECTION_TO_FINE = {"car": "vehicle.car", "truck": "vehicle.truck", "bus": "vehicle.bus.rigid",
                     "trailer": "vehicle.trailer", "construction_vehicle": "vehicle.construction",
                     "pedestrian": "human.pedestrian.adult", "motorcycle": "vehicle.motorcycle",
                     "bicycle": "vehicle.bicycle", "traffic_cone": "movable_object.trafficcone",
                     "barrier": "movable_object.barrier"}
#: fields of each table that the devkit's loader or this reader reads (besides ``token``): a record without one
#: is named in the error even when every record of the table lacks it
FIELDS = {"scene": ("name", "first_sample_token"), "sample": ("timestamp", "next", "data", "anns"),
          "sample_data": ("sample_token", "filename", "is_key_frame", "calibrated_sensor_token", "ego_pose_token"),
          "calibrated_sensor": ("sensor_token", "translation", "rotation"), "ego_pose": ("translation", "rotation"),
          "sample_annotation": ("instance_token", "translation", "size", "rotation"),
          "instance": ("category_token",), "sensor": ("channel", "modality"), "category": ("name",),
          "lidarseg": ("sample_data_token", "filename")}
POINT_BYTES = 20  # 5 float32
LEARNING_MAP_SOURCE = ("nuscenes-devkit nuscenes.eval.lidarseg.utils.LidarsegClassMapper (nuScenes-lidarseg "
                       "challenge: 16 classes, 0 = ignore)")


def lidarseg_learning_map(name_to_index: dict[str, int]) -> tuple[dict[int, int], list[str]]:
    """(category index → lidarseg benchmark class id, the 17 class names in id order, 0 = ``ignore``), from the
    devkit's ``LidarsegClassMapper``: the official 32 → 16 mapping (e.g. adult/child/police/construction-worker
    → pedestrian, bendy/rigid bus → bus; noise, animal, ambulance, debris, static.other, ego … → 0).

    The mapper wants a ``NuScenes`` object but reads only its ``lidarseg_name2idx_mapping`` (category name →
    category.json index; devkit 1.2.0), so a build records the map from the tables it read, and `score` can
    derive it from the index → name map an older build recorded."""
    LidarsegClassMapper = require_extra("nuscenes.eval.lidarseg.utils", "nuscenes", "nuScenes-lidarseg",
                                        "nuscenes-devkit").LidarsegClassMapper

    mapper = LidarsegClassMapper(SimpleNamespace(lidarseg_name2idx_mapping=dict(name_to_index)))  # type: ignore[arg-type]
    coarse = mapper.coarse_name_2_coarse_idx_mapping
    names = [n for n, _ in sorted(coarse.items(), key=lambda kv: kv[1])]
    return {int(k): int(v) for k, v in sorted(mapper.fine_idx_2_coarse_idx_mapping.items())}, names


def _parse_split(root: Path, split: str | None, default: str = "val") -> tuple[str, str]:
    version, _, name = (split or "").rpartition(":")
    name = name or default
    if not version:
        found = [v for v in VERSIONS if (root / v).is_dir()]
        if not found:
            raise SourceError(root, f"no nuScenes table folder ({', '.join(VERSIONS)}) found")
        version = found[0]
    if version.endswith("mini") and name in ("val", "train"):
        name = f"mini_{name}"
    return version, name


def split_problem(root: Path | None, split: str) -> str | None:
    """Why ``split`` (``SPLIT`` or ``VERSION:SPLIT``) names none of the devkit's splits (``create_splits_scenes``), or
    None: the registry's check of a recipe's split (or ``--split``), run before the tables are read, so the error
    names where the split came from. The splits are the devkit's whatever the data; the table folder is checked
    when the reader opens it. None without the devkit too: the reader then says how to install it."""
    name = split.rpartition(":")[2]
    try:
        from nuscenes.utils.splits import create_splits_scenes
    except ImportError:
        return None
    splits = sorted(create_splits_scenes())
    if not name or name in splits:  # an empty name is the default, val
        return None
    return f"is not a nuScenes split (it takes VERSION:SPLIT or a devkit split: {', '.join(splits)})"


def read_points(path: Path, *, allow_empty: bool = False) -> np.ndarray:
    """N×5 float32 (x, y, z, intensity, ring) of a ``.pcd.bin`` (the devkit's format, ring kept); not empty unless
    ``allow_empty`` (a 0-byte sweep is a damaged download: a real LIDAR_TOP sweep always has returns)."""
    size = regular_file(path, "point cloud file", missing="point cloud file not found").st_size
    if not path.name.endswith(".bin"):
        raise SourceError(path, "LIDAR_TOP file name must end in .bin")
    if size == 0 and not allow_empty:
        raise SourceError(path, "empty sweep (0 bytes, no points); if the dataset really has empty sweeps, "
                                "pass --allow-empty-frames")
    if size % POINT_BYTES:
        raise SourceError(path, f"size {size} bytes is not a multiple of {POINT_BYTES} (5 float32 per point)")
    pts = np.fromfile(path, dtype="<f4").reshape(-1, 5)
    if not np.isfinite(pts).all():
        raise SourceError(path, "point(s) with NaN/inf values")
    ring = pts[:, 4]
    if len(pts) and (ring.min() < 0 or ring.max() > 31 or np.any(ring != np.round(ring))):
        raise SourceError(path, "ring column (5th value) is not an integer in 0..31")
    return pts


def _unparsable_table(table_root: Path) -> Path:
    """The first table of ``table_root`` that is not valid JSON (the devkit's error does not say which); parsed
    again only on this error path, so a good dataset is read once."""
    for path in sorted(table_root.glob("*.json")):
        try:
            json.loads(path.read_bytes())
        except json.JSONDecodeError:
            return path
    return table_root


def _key_error(table_root: Path, key: str) -> SourceError:
    """The error for a ``KeyError(key)`` of the devkit or of indexing: a record that lacks field ``key`` (the
    table named), else a table that refers to ``key`` as a token no record has. Tables are parsed again only
    on this error path, so a good dataset is read once."""
    tables = []
    for name in (*TABLES, "lidarseg"):
        p = table_root / f"{name}.json"
        try:
            rows = json.loads(p.read_bytes()) if p.is_file() else []
        except ValueError:
            rows = []
        tables.append((name, p, [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []))
    for name, p, rows in tables:  # a field the table must have, or one only some of its records lack
        lacking = [r for r in rows if key not in r]
        if lacking and (key == "token" or key in FIELDS.get(name, ()) or len(lacking) < len(rows)):
            which = f"record {lacking[0]['token']!r}" if "token" in lacking[0] else f"record {rows.index(lacking[0])}"
            return SourceError(p, f"{which} has no {key!r} field ({len(lacking)} of {len(rows)} records lack it)")
    for _, p, rows in tables:
        if any(key in r.values() for r in rows):
            return SourceError(p, f"refers to unknown token {key!r} (no record with that token)")
    return SourceError(table_root, f"a table record lacks {key!r} or refers to it as an unknown token")


def _check_finite(path: Path, token: str, **values: Any) -> None:
    """Pose / box numbers of one record: numbers, all finite (the devkit's ``Box`` asserts on NaN)."""
    for field, v in values.items():
        try:
            ok = bool(np.isfinite(np.asarray(v, dtype=np.float64)).all())
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise SourceError(path, f"record {token!r}: {field} is not all finite numbers ({v!r})")


class NuScenesSource:
    """Reads the LIDAR_TOP key frames of a nuScenes split, with lidarseg labels and boxes in the LiDAR frame."""

    kind = "nuscenes"
    columns = ("semantic", "sequence", "timestamp_us")  # optional row columns (pipeline/format/schema.py)
    fields = ("x", "y", "z", "intensity", "ring")
    intensity_scale = "byte"

    def __init__(self, root: str | Path, split: str | None = None, *, allow_empty: bool = False) -> None:
        root = Path(root)
        if not root.is_dir():
            raise SourceError(root, "nuScenes root directory not found")
        self.root = root
        self.allow_empty = allow_empty  # 0-byte sweeps are an error unless the dataset really has empty ones
        self.version, self.split = _parse_split(root, split)
        self.table_root = root / self.version
        self.index: dict[str, dict[str, Any]] = {}
        self.order: list[str] = []
        self.categories: dict[int, str] = {}
        self.learning_map: dict[int, int] = {}
        self.train_classes: list[str] = []
        self.has_lidarseg = False
        self._load()

    def _load(self) -> None:
        NuScenes = require_extra("nuscenes.nuscenes", "nuscenes", "nuScenes", self.root).NuScenes
        create_splits_scenes = require_extra("nuscenes.utils.splits", "nuscenes", "nuScenes",
                                             self.root).create_splits_scenes

        for name in TABLES:
            if not (self.table_root / f"{name}.json").is_file():
                raise SourceError(self.table_root / f"{name}.json", "nuScenes table missing")
        try:
            nusc = NuScenes(version=self.version, dataroot=str(self.root), verbose=False)
        except KeyError as e:
            raise _key_error(self.table_root, str(e.args[0])) from None
        except json.JSONDecodeError as e:
            raise SourceError(_unparsable_table(self.table_root), f"not valid JSON: {e}") from None
        except AssertionError as e:
            raise SourceError(self.table_root, f"the nuScenes devkit cannot load the tables: {e}") from None
        try:
            self._index(nusc, create_splits_scenes())
        except KeyError as e:  # a sample's next / data / anns, or a pose, that names no record; a missing field
            raise _key_error(self.table_root, str(e.args[0])) from None

    def _index(self, nusc: Any, splits: dict[str, list[str]]) -> None:
        """Fill ``index`` and ``order`` with the split's samples (what reading a frame needs)."""
        if self.split not in splits:
            raise SourceError(self.root, f"unknown split {self.split!r} (devkit splits: {', '.join(sorted(splits))})")
        wanted = set(splits[self.split])
        has_seg = self.has_lidarseg = hasattr(nusc, "lidarseg")
        if has_seg:
            self.categories = {int(c["index"]): c["name"] for c in nusc.category}
            # (the devkit already refuses a category name outside its 32, so the mapper knows every one)
            self.learning_map, self.train_classes = lidarseg_learning_map(nusc.lidarseg_name2idx_mapping)
        rows = []
        for scene in nusc.scene:
            if scene["name"] not in wanted:
                continue
            token = scene["first_sample_token"]
            while token:
                sample = nusc.get("sample", token)
                rows.append((scene["name"], sample["timestamp"], token))
                token = sample["next"]
        for scene_name, _, token in sorted(rows):
            sample = nusc.get("sample", token)
            if "LIDAR_TOP" not in sample["data"]:
                raise SourceError(self.table_root / "sample_data.json", f"sample {token} has no LIDAR_TOP key frame")
            sd = nusc.get("sample_data", sample["data"]["LIDAR_TOP"])
            cs = nusc.get("calibrated_sensor", sd["calibrated_sensor_token"])
            ego = nusc.get("ego_pose", sd["ego_pose_token"])
            anns = [nusc.get("sample_annotation", a) for a in sample["anns"]]
            _check_finite(self.table_root / "calibrated_sensor.json", cs["token"], translation=cs["translation"],
                          rotation=cs["rotation"])
            _check_finite(self.table_root / "ego_pose.json", ego["token"], translation=ego["translation"],
                          rotation=ego["rotation"])
            for a in anns:
                _check_finite(self.table_root / "sample_annotation.json", a["token"], translation=a["translation"],
                              size=a["size"], rotation=a["rotation"])
            seg = None
            if has_seg:
                try:
                    seg = nusc.get("lidarseg", sd["token"])["filename"]
                except KeyError:
                    seg = None
            self.index[token] = {
                "scene": scene_name, "timestamp": int(sample["timestamp"]), "sd_token": sd["token"],
                "filename": sd["filename"], "lidarseg": seg,
                "cs": (cs["translation"], cs["rotation"]), "ego": (ego["translation"], ego["rotation"]),
                "anns": [(a["translation"], a["size"], a["rotation"], a["category_name"], a["token"])
                         for a in anns],
            }
            self.order.append(token)

    def list_frames(self) -> list[str]:
        return list(self.order)

    def boxes(self, frame_id: str) -> Boxes:
        """The sample's annotations as boxes in the LIDAR_TOP frame (devkit ``Box`` transforms)."""
        from nuscenes.utils.data_classes import Box
        from pyquaternion import Quaternion

        rec = self.index[frame_id]
        if not rec["anns"]:
            return Boxes.empty()
        (cs_t, cs_r), (ego_t, ego_r) = rec["cs"], rec["ego"]
        centers, dims, heads, names = [], [], [], []
        for translation, size, rotation, name, token in rec["anns"]:
            box = Box(translation, size, Quaternion(rotation), name=name, token=token)
            box.translate(-np.array(ego_t))
            box.rotate(Quaternion(ego_r).inverse)
            box.translate(-np.array(cs_t))
            box.rotate(Quaternion(cs_r).inverse)
            w, length, h = box.wlh
            v = box.orientation.rotate(np.array([1.0, 0.0, 0.0]))
            centers.append(box.center)
            dims.append((length, w, h))
            heads.append(np.arctan2(v[1], v[0]))
            names.append(name)
        m = len(names)
        return Boxes(center=np.array(centers, dtype=np.float64), dims=np.array(dims, dtype=np.float64),
                     heading=np.array(heads, dtype=np.float64), cls=np.array(names, dtype=object),
                     truncated=np.zeros(m), occluded=np.zeros(m, dtype=np.int64), alpha=np.zeros(m),
                     bbox2d=np.zeros((m, 4)))

    def read(self, frame_id: str) -> Frame:
        rec = self.index.get(frame_id)
        if rec is None:
            raise SourceError(self.table_root / "sample.json",
                              f"unknown sample token {frame_id!r} (not a sample of split {self.split})")
        pcd = self.root / rec["filename"]
        points = read_points(pcd, allow_empty=self.allow_empty)
        labels = {}
        if rec["lidarseg"] is not None:
            seg_path = self.root / rec["lidarseg"]
            if not seg_path.is_file():
                raise SourceError(seg_path, "lidarseg label file missing")
            seg = np.fromfile(seg_path, dtype=np.uint8)
            if len(seg) != len(points):
                raise SourceError(seg_path, f"{len(seg)} labels but {pcd.name} has {len(points)} points "
                                            "(counts must match)")
            if self.categories and seg.size and int(seg.max()) not in self.categories:
                raise SourceError(seg_path, f"label {int(seg.max())} is not a category index of category.json")
            labels["semantic"] = seg.astype(np.uint32)
        return Frame(frame_id=frame_id, points=points, fields=self.fields, intensity_scale=self.intensity_scale,
                     labels=labels, boxes=self.boxes(frame_id), sensor=HDL32E,
                     attrs={"sequence": rec["scene"], "timestamp_us": rec["timestamp"]})

    def unlabelled(self) -> str | None:
        """What lacks lidarseg labels among the listed key frames (the whole expansion, or some frames), or None."""
        if not self.has_lidarseg:
            return (f"{self.table_root} has no lidarseg.json (the nuScenes-lidarseg expansion): unpack it into "
                    f"{self.root}")
        bare = [t for t in self.order if self.index[t]["lidarseg"] is None]
        if not bare:
            return None
        return (f"{len(bare)} of the {len(self.order)} key frames of {self.table_root} have no lidarseg.json "
                f"record, e.g. sample {bare[0]}")

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "root": str(self.root), "version": self.version, "split": self.split,
                "fields": list(self.fields), "intensity_scale": self.intensity_scale, "sensor": HDL32E.describe(),
                "semantic": "raw nuScenes-lidarseg category index (category.json)" if self.categories else None,
                "categories": {str(k): v for k, v in sorted(self.categories.items())},
                "learning_map": {str(k): v for k, v in self.learning_map.items()} or None,
                "learning_map_source": LEARNING_MAP_SOURCE if self.learning_map else None,
                "train_classes": self.train_classes or None}
