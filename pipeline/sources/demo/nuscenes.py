"""The nuScenes fixture writer: a minimal table set the devkit loads, with ray-cast HDL-32E key frames of the
demo street (``samples/LIDAR_TOP/*.pcd.bin``, lidarseg labels, annotations through ego pose and mounting)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench_build.sources.base import require_extra
from bench_build.sources.demo.cache import DEMO_SEED, mark_demo
from bench_build.sources.demo.synthetic import GENERIC_CLASSES, cast_scan, spinning_azimuths
from bench_build.sources.nuscenes import DETECTION_TO_FINE, FINE_CLASSES, FINE_INDEX, SYNTHETIC_TO_FINE, TABLES
from bench_build.stages.sensor import HDL32E


@dataclass(frozen=True)
class _RealBox:
    center: np.ndarray
    dims: np.ndarray  # l, w, h
    heading: float


def _tok(*parts: object) -> str:
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
    frames by recorded ones (e.g. a sweep of the released data): dicts with ``points`` (N×5), ``lidar2ego`` and
    ``ego2global`` (4×4) and ``boxes`` (LiDAR frame: category, x, y, z, l, w, h, yaw, num_lidar_pts), written
    back into the tables (global annotations, calibrated sensor, ego pose) the way the released data has them.
    """
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


def write_demo(root: Path, frames: int, seed: int = DEMO_SEED) -> Path:
    """The demo data of the ``nuscenes`` source kind: ``frames`` key frames, all in the val split."""
    mark_demo(root)
    return write_nuscenes(root, frames, seed=seed, train_frames=0)
