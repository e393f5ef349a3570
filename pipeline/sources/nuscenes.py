"""nuScenes LIDAR_TOP key frames (+ nuScenes-lidarseg labels), read through ``nuscenes-devkit`` (formats.md §2).

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench_build.sources.base import SourceError, require_extra
from bench_build.stages.frame import Boxes, Frame
from bench_build.stages.sensor import HDL32E

VERSIONS = ("v1.0-trainval", "v1.0-mini", "v1.0-test")
TABLES = ("category", "attribute", "visibility", "instance", "sensor", "calibrated_sensor", "ego_pose", "log",
          "scene", "sample", "sample_data", "sample_annotation", "map")
#: category.json ``index`` → fine name of the released lidarseg category table (formats.md §2.4). The reader
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
    from types import SimpleNamespace

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


def read_points(path: Path) -> np.ndarray:
    """N×5 float32 (x, y, z, intensity, ring) of a ``.pcd.bin`` (the devkit's format, ring kept)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise SourceError(path, "point cloud file not found") from None
    if not path.name.endswith(".bin"):
        raise SourceError(path, "LIDAR_TOP file name must end in .bin")
    if size % POINT_BYTES:
        raise SourceError(path, f"size {size} bytes is not a multiple of {POINT_BYTES} (5 float32 per point)")
    pts = np.fromfile(path, dtype="<f4").reshape(-1, 5)
    if not np.isfinite(pts).all():
        raise SourceError(path, "point(s) with NaN/inf values")
    ring = pts[:, 4]
    if len(pts) and (ring.min() < 0 or ring.max() > 31 or np.any(ring != np.round(ring))):
        raise SourceError(path, "ring column (5th value) is not an integer in 0..31")
    return pts


def _find_reference(table_root: Path, token: str) -> Path:
    """The table file that mentions an unknown token (for the error message)."""
    for name in (*TABLES, "lidarseg"):
        p = table_root / f"{name}.json"
        if p.is_file() and token in p.read_text():
            return p
    return table_root


class NuScenesSource:
    """Reads the LIDAR_TOP key frames of a nuScenes split, with lidarseg labels and boxes in the LiDAR frame."""

    kind = "nuscenes"
    columns = ("semantic", "sequence", "timestamp_us")  # optional row columns (pipeline/format/schema.py)
    fields = ("x", "y", "z", "intensity", "ring")
    intensity_scale = "byte"

    def __init__(self, root: str | Path, split: str | None = None) -> None:
        root = Path(root)
        if not root.is_dir():
            raise SourceError(root, "nuScenes root directory not found")
        self.root = root
        self.version, self.split = _parse_split(root, split)
        self.table_root = root / self.version
        self.index: dict[str, dict[str, Any]] = {}
        self.order: list[str] = []
        self.categories: dict[int, str] = {}
        self.learning_map: dict[int, int] = {}
        self.train_classes: list[str] = []
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
            token = str(e.args[0])
            raise SourceError(_find_reference(self.table_root, token),
                              f"refers to unknown token {token!r} (no record with that token)") from None
        except (AssertionError, json.JSONDecodeError) as e:
            raise SourceError(self.table_root, f"the nuScenes devkit cannot load the tables: {e}") from None
        splits = create_splits_scenes()
        if self.split not in splits:
            raise SourceError(self.root, f"unknown split {self.split!r} (devkit splits: {', '.join(sorted(splits))})")
        wanted = set(splits[self.split])
        has_seg = hasattr(nusc, "lidarseg")
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
        points = read_points(pcd)
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

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "root": str(self.root), "version": self.version, "split": self.split,
                "fields": list(self.fields), "intensity_scale": self.intensity_scale, "sensor": HDL32E.describe(),
                "semantic": "raw nuScenes-lidarseg category index (category.json)" if self.categories else None,
                "categories": {str(k): v for k, v in sorted(self.categories.items())},
                "learning_map": {str(k): v for k, v in self.learning_map.items()} or None,
                "learning_map_source": LEARNING_MAP_SOURCE if self.learning_map else None,
                "train_classes": self.train_classes or None}


# ---- fixture writer ------------------------------------------------------------------------------

@dataclass(frozen=True)
class _RealBox:
    center: np.ndarray
    dims: np.ndarray  # l, w, h
    heading: float


def _tok(*parts: object) -> str:
    import hashlib

    return hashlib.md5("/".join(map(str, parts)).encode()).hexdigest()


def _quat_yaw(yaw: float) -> list[float]:
    return [float(np.cos(yaw / 2)), 0.0, 0.0, float(np.sin(yaw / 2))]


def write_nuscenes(root: str | Path, frames: int, *, version: str = "v1.0-mini", seed: int | None = None,
                   azimuth_step_deg: float = 0.33, lidarseg: bool = True, train_frames: int = 1,
                   real: list[dict] | None = None) -> Path:
    """Write a minimal table set the devkit loads, with ``frames`` ray-cast HDL-32E key frames in the two
    ``mini_val`` scenes and ``train_frames`` more in a ``mini_train`` scene (the val split must skip them).

    Points are in firing order (all 32 rings at each azimuth step, ring 0 lowest), intensity 0–255, ring
    as a float; lidarseg labels are category indices (`FINE_CLASSES`); annotations are the scene's objects
    in global coordinates through a non-trivial ego pose and LiDAR mounting. ``real`` replaces the first
    frames by recorded ones (the sweep of ../shared/real): dicts with ``points`` (N×5), ``lidar2ego`` and
    ``ego2global`` (4×4) and ``boxes`` (LiDAR frame: category, x, y, z, l, w, h, yaw, num_lidar_pts), written
    back into the tables (global annotations, calibrated sensor, ego pose) the way the released data has them.
    """
    from bench_build.sources.demo import DEMO_SEED
    from bench_build.sources.synthetic import GENERIC_CLASSES, cast_scan, spinning_azimuths

    # the devkit's own dependencies: a demo that its reader then cannot open would only fail later
    Quaternion = require_extra("pyquaternion", "nuscenes", "nuScenes", root).Quaternion
    cv2 = require_extra("cv2", "nuscenes", "nuScenes", root)
    seed = DEMO_SEED if seed is None else seed
    root = Path(root)
    tables = root / version
    for d in (tables, root / "samples" / "LIDAR_TOP", root / "maps", root / "lidarseg" / version):
        d.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(root / "maps" / "semantic_prior.png"), np.zeros((4, 4), np.uint8))
    lut = np.array([FINE_INDEX[SYNTHETIC_TO_FINE[c]] for c in GENERIC_CLASSES], dtype=np.uint8)
    log_token, sensor_token = _tok("log"), _tok("sensor", "LIDAR_TOP")
    cs_token = _tok("cs")
    cs_t, cs_r = [0.943713, 0.0, 1.84023], _quat_yaw(-np.pi / 2 + 0.01)  # LIDAR_TOP mounting (≈ real)
    scenes = [("scene-0103", frames - frames // 2), ("scene-0916", frames // 2), ("scene-0061", train_frames)]
    t = {name: [] for name in (*TABLES, "lidarseg")}
    t["category"] = [{"token": _tok("cat", n), "name": n, "description": n, "index": i}
                     for i, n in enumerate(FINE_CLASSES)]
    t["sensor"] = [{"token": sensor_token, "channel": "LIDAR_TOP", "modality": "lidar"}]
    t["calibrated_sensor"] = [{"token": cs_token, "sensor_token": sensor_token, "translation": cs_t,
                               "rotation": cs_r, "camera_intrinsic": []}]
    t["log"] = [{"token": log_token, "logfile": "synthetic", "vehicle": "n015", "date_captured": "2018-07-24",
                 "location": "singapore-onenorth"}]
    t["map"] = [{"token": _tok("map"), "log_tokens": [log_token], "category": "semantic_prior",
                 "filename": "maps/semantic_prior.png"}]
    az = spinning_azimuths(azimuth_step_deg)
    cs_q = Quaternion(cs_r)
    frame_no = 0
    for s_i, (scene_name, n) in enumerate(scenes):
        if n <= 0:
            continue
        tokens = [_tok("sample", scene_name, k) for k in range(n)]
        t["scene"].append({"token": _tok("scene", scene_name), "name": scene_name, "description": "synthetic",
                           "log_token": log_token, "nbr_samples": n, "first_sample_token": tokens[0],
                           "last_sample_token": tokens[-1]})
        for k, token in enumerate(tokens):
            ts = 1532402927647951 + 10_000_000 * s_i + 500_000 * k
            sd_token, ego_token = _tok("sd", token), _tok("ego", token)
            ego_t, ego_yaw = [600.0 + 3.0 * k, 1600.0 - 2.0 * s_i, 0.0], 0.3 + 0.1 * k
            ego_q = Quaternion(_quat_yaw(ego_yaw))
            rec = real[frame_no] if real is not None and frame_no < len(real) else None
            frame_cs, q_cs, t_cs = cs_token, cs_q, cs_t
            if rec is not None:  # the recorded poses
                l2e, e2g = np.asarray(rec["lidar2ego"], float), np.asarray(rec["ego2global"], float)
                frame_cs, q_cs, t_cs = _tok("cs", token), Quaternion(matrix=l2e[:3, :3], atol=1e-6), l2e[:3, 3].tolist()
                ego_q, ego_t = Quaternion(matrix=e2g[:3, :3], atol=1e-6), e2g[:3, 3].tolist()
                t["calibrated_sensor"].append({"token": frame_cs, "sensor_token": sensor_token, "translation": t_cs,
                                               "rotation": list(q_cs.elements), "camera_intrinsic": []})
            t["sample"].append({"token": token, "timestamp": ts, "scene_token": _tok("scene", scene_name),
                                "prev": tokens[k - 1] if k else "", "next": tokens[k + 1] if k + 1 < n else ""})
            t["ego_pose"].append({"token": ego_token, "translation": ego_t, "rotation": list(ego_q.elements),
                                  "timestamp": ts})
            fname = f"samples/LIDAR_TOP/n015-2018-07-24-11-22-45+0800__LIDAR_TOP__{ts}.pcd.bin"
            t["sample_data"].append({"token": sd_token, "sample_token": token, "ego_pose_token": ego_token,
                                     "calibrated_sensor_token": frame_cs, "filename": fname, "fileformat": "pcd",
                                     "width": 0, "height": 0, "timestamp": ts, "is_key_frame": True,
                                     "prev": "", "next": ""})
            scan = None
            objects: list[tuple[Any, str]] = []
            if rec is not None:  # a recorded sweep: no point labels of ours fit it
                pts = np.asarray(rec["points"], dtype="<f4")
                seg = np.full(len(pts), FINE_INDEX["static.manmade"], np.uint8)
                objects = [(_RealBox(np.array([b["x"], b["y"], b["z"]]), np.array([b["l"], b["w"], b["h"]]), b["yaw"]),
                            DETECTION_TO_FINE.get(b["category"], "static.other")) for b in rec.get("boxes", [])]
            else:
                scan = cast_scan(frame_no, HDL32E.elevations, az, seed=seed)
                hit = scan.hit.T  # firing order: every ring at each azimuth step
                xyz = np.transpose(scan.xyz(), (1, 0, 2))[hit]
                ring = np.broadcast_to(np.arange(32)[None, :], hit.shape)[hit]
                inten = np.round(scan.intensity.T[hit] * 255.0)
                pts = np.concatenate([xyz, inten[:, None], ring[:, None]], axis=1).astype("<f4")
                seg = lut[scan.cls.T[hit]]
                objects = [(o, SYNTHETIC_TO_FINE[g]) for o, g in zip(scan.objects, scan.object_classes, strict=True)]
            pts.tofile(root / fname)
            if lidarseg:
                seg_name = f"lidarseg/{version}/{sd_token}_lidarseg.bin"
                seg.astype(np.uint8).tofile(root / seg_name)
                t["lidarseg"].append({"token": sd_token, "sample_data_token": sd_token, "filename": seg_name})
            for j, (obj, name) in enumerate(objects):
                inst = _tok("inst", token, j)
                centre_ego = q_cs.rotate(obj.center) + np.array(t_cs)
                centre = ego_q.rotate(centre_ego) + np.array(ego_t)
                rot = ego_q * q_cs * Quaternion(_quat_yaw(obj.heading))
                ann = _tok("ann", token, j)
                t["instance"].append({"token": inst, "category_token": _tok("cat", name), "nbr_annotations": 1,
                                      "first_annotation_token": ann, "last_annotation_token": ann})
                t["sample_annotation"].append({
                    "token": ann, "sample_token": token, "instance_token": inst, "attribute_tokens": [],
                    "visibility_token": "", "translation": [float(v) for v in centre],
                    "size": [float(obj.dims[1]), float(obj.dims[0]), float(obj.dims[2])],
                    "rotation": [float(v) for v in rot.elements], "num_lidar_pts": 0, "num_radar_pts": 0,
                    "prev": "", "next": ""})
            frame_no += 1
    for name, rows in t.items():
        if name == "lidarseg" and not lidarseg:
            continue
        (tables / f"{name}.json").write_text(json.dumps(rows, indent=0))
    return root
