"""nuScenes-C (Det3D) scoring: the nuScenes detection metrics (NDS, mAP, mATE, mASE, mAOE, mAVE, mAAE) of
every partition of a robo3d-nuscenes-c build, computed by the nuScenes devkit's own evaluation
(``nuscenes.eval.detection``: ``add_center_dist``, ``filter_eval_boxes``, ``accumulate``, ``calc_ap``,
``calc_tp`` and ``DetectionMetrics`` through ``DetectionEval.evaluate``, config ``detection_cvpr_2019``) on
the build's own boxes, so the numbers are the devkit's by construction.

Predictions are nuScenes results JSON, the file mmdetection3d / OpenPCDet write (``results_nusc.json``)::

    {"meta": {...}, "results": {<sample token>: [{"sample_token", "translation", "size", "rotation",
                                                 "velocity", "detection_name", "detection_score",
                                                 "attribute_name"}, ...]}}

one file per partition, found as ``PRED/clean/`` (or ``PRED/clean/0/``) and ``PRED/<corruption>/<severity>/``
(severity as a number or the recipe's name: ``light``, …), each directory holding ``results_nusc.json`` or
exactly one ``*.json``. A version with one partition may be given the file itself. The build keys frames by
sample token (``frame_id``), so the results' keys are the devkit's: every frame of the partition must be a
key (an empty list = nothing detected) and no other token may be.

Coordinate frame: ``meta.frame`` = ``"global"`` (the default: what the frameworks write, the boxes
moved by the sample's ego pose and LIDAR_TOP calibration) or ``"lidar"`` (the build's LiDAR frame, the frame
of the points a model reads from the build). Evaluation runs in the predictions' frame.

What the build stores and what the devkit's ground truth has, and how the difference is closed:

- boxes (centre, size, yaw, fine category) in the LiDAR frame: the build's, as float32;
- poses (``ego_pose``, ``calibrated_sensor``), velocities (``box_velocity``), attributes and
  ``num_lidar_pts + num_radar_pts``: **not stored**. They are read from the nuScenes tables the build was
  made from (the manifest's source root, or ``--source-root``), matched to the build's boxes by annotation
  order (the source writes ``sample["anns"]`` in order; the count and the category of every box are checked).
  With the tables the metrics equal ``DetectionEval`` on the original data whenever the build's boxes are the
  tables' boxes (all of Robo3D's corruptions are point-level).
- without the tables, only ``meta.frame = "lidar"`` can be scored; the point filter counts the clean
  partition's LiDAR points in each box (radar points unknown: a box seen only by radar is dropped, the
  devkit keeps it), the class-range filter measures from the LiDAR origin instead of the ego origin (about
  0.9 m forward of it on nuScenes), and velocity and attribute errors, NDS and mCE/mRR are not computed
  (the summary says why), while mAP, mATE, mASE and mAOE are.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench_build.score.detection import one_place, partition_candidates, unread_folders, unread_note
from bench_build.score.predictions import FIRST, PredictionError, loads
from bench_build.score.truth import Partition, manifest_of, read_build
from bench_build.score.validate import ScoreError, finite_number, shown
from bench_build.sources.base import require_extra

CONFIG = "detection_cvpr_2019"
RESULT_NAME = "results_nusc.json"
TP_NAMES = {"trans_err": "mATE", "scale_err": "mASE", "orient_err": "mAOE", "vel_err": "mAVE", "attr_err": "mAAE"}
BIKE_RACK = "static_object.bicycle_rack"


@dataclass
class SampleTables:
    """What the build does not store about one sample, from the nuScenes tables."""

    cs_rotation: Any  # pyquaternion.Quaternion, LIDAR_TOP → ego
    cs_translation: np.ndarray
    ego_rotation: Any  # ego → global
    ego_translation: np.ndarray
    categories: list[str] = field(default_factory=list)  # per annotation, sample["anns"] order
    velocity: list[np.ndarray] = field(default_factory=list)  # global (vx, vy), NaN when not estimable
    attribute: list[str] = field(default_factory=list)
    num_pts: list[int] = field(default_factory=list)  # num_lidar_pts + num_radar_pts


def read_tables(root: str | Path, version: str, tokens: list[str]) -> dict[str, SampleTables]:
    """Poses and per-annotation facts of ``tokens`` from the devkit's tables at ``root``."""
    from nuscenes.nuscenes import NuScenes
    from pyquaternion import Quaternion

    try:
        nusc = NuScenes(version=version, dataroot=str(root), verbose=False)
    except (AssertionError, KeyError, OSError, json.JSONDecodeError) as e:
        raise ScoreError(f"{root}: the nuScenes devkit cannot load the {version} tables: {e}") from None
    attributes = {a["token"]: a["name"] for a in nusc.attribute}
    out = {}
    for token in tokens:
        try:
            sample = nusc.get("sample", token)
        except KeyError:
            raise ScoreError(f"{root}/{version}: sample token {token} of the build is not in the tables "
                             "(another nuScenes version?); pass the build's --source-root") from None
        sd = nusc.get("sample_data", sample["data"]["LIDAR_TOP"])
        cs = nusc.get("calibrated_sensor", sd["calibrated_sensor_token"])
        ego = nusc.get("ego_pose", sd["ego_pose_token"])
        rec = SampleTables(Quaternion(cs["rotation"]), np.asarray(cs["translation"], float),
                           Quaternion(ego["rotation"]), np.asarray(ego["translation"], float))
        for ann_token in sample["anns"]:
            ann = nusc.get("sample_annotation", ann_token)
            if len(ann["attribute_tokens"]) > 1:  # the devkit's load_gt refuses these too
                raise ScoreError(f"{root}/{version}: annotation {ann_token} has more than one attribute")
            rec.categories.append(ann["category_name"])
            rec.velocity.append(np.asarray(nusc.box_velocity(ann_token)[:2], float))
            rec.attribute.append(attributes[ann["attribute_tokens"][0]] if ann["attribute_tokens"] else "")
            rec.num_pts.append(int(ann["num_lidar_pts"] + ann["num_radar_pts"]))
        out[token] = rec
    return out


class _Records:
    """The few table lookups ``add_center_dist`` and ``filter_eval_boxes`` make (``sample``, ``sample_data``,
    ``ego_pose``, ``sample_annotation``), answered from the build's boxes in the evaluation frame, so the
    devkit's own functions run unchanged on a build."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[str, dict[str, Any]]] = {
            "sample": {}, "sample_data": {}, "ego_pose": {}, "sample_annotation": {}}

    def add(self, token: str, ego_origin: np.ndarray, racks: list[dict[str, Any]]) -> None:
        ids = [f"{token}/rack/{i}" for i in range(len(racks))]
        self.tables["sample"][token] = {"anns": ids, "data": {"LIDAR_TOP": token}}
        self.tables["sample_data"][token] = {"ego_pose_token": token}
        self.tables["ego_pose"][token] = {"translation": [float(v) for v in ego_origin]}
        for i, rec in zip(ids, racks, strict=True):
            self.tables["sample_annotation"][i] = {"category_name": BIKE_RACK, **rec}

    def get(self, table: str, token: str) -> dict[str, Any]:
        return self.tables[table][token]


def _yaw_quaternion(yaw: float):
    from pyquaternion import Quaternion

    return Quaternion(axis=[0.0, 0.0, 1.0], radians=float(yaw))


def ground_truth(frames: Mapping[str, list[dict[str, Any]] | None], frame: str,
                 tables: Mapping[str, SampleTables] | None, counts: Mapping[str, list[int]], where: str):
    """(devkit ``EvalBoxes`` of the build's boxes in ``frame``, the ``_Records`` the filters read)."""
    from nuscenes.eval.common.data_classes import EvalBoxes
    from nuscenes.eval.detection.data_classes import DetectionBox
    from nuscenes.eval.detection.utils import category_to_detection_name

    gt, records = EvalBoxes(), _Records()
    for token, rows in frames.items():
        rows = rows or []
        t = tables.get(token) if tables is not None else None
        if tables is not None and t is None:
            raise ScoreError(f"{where}: no table record for sample {token}")
        if t is not None and [r["cls"] for r in rows] != t.categories:
            raise ScoreError(f"{where}: sample {token}: the build's {len(rows)} boxes are not the tables' "
                             f"{len(t.categories)} annotations in order (another dataset version?)")
        boxes, racks = [], []
        for j, r in enumerate(rows):
            centre = np.array([r["x"], r["y"], r["z"]], np.float64)
            q = _yaw_quaternion(r["heading"])
            vel = t.velocity[j] if t is not None else np.full(2, np.nan)
            if t is not None:  # the tables' velocity is global; rotate it into the LiDAR frame
                v3 = (t.ego_rotation * t.cs_rotation).inverse.rotate(np.array([vel[0], vel[1], 0.0]))
                vel = v3[:2] if frame == "lidar" else vel
            if frame == "global":
                assert t is not None
                centre = t.ego_rotation.rotate(t.cs_rotation.rotate(centre) + t.cs_translation) + t.ego_translation
                q = t.ego_rotation * t.cs_rotation * q
            size = [float(r["dy"]), float(r["dx"]), float(r["dz"])]  # nuScenes size is w, l, h
            if r["cls"] == BIKE_RACK:
                racks.append({"translation": centre.tolist(), "size": size, "rotation": list(q.elements)})
            name = category_to_detection_name(r["cls"])
            if name is None:
                continue
            n = t.num_pts[j] if t is not None else counts[token][j]
            boxes.append(DetectionBox(sample_token=token, translation=tuple(centre.tolist()), size=tuple(size),
                                      rotation=tuple(q.elements.tolist()), velocity=tuple(float(v) for v in vel),
                                      num_pts=int(n), detection_name=name,
                                      attribute_name=t.attribute[j] if t is not None else ""))
        gt.add_boxes(token, boxes)
        if frame == "global":
            origin = t.ego_translation
        elif t is not None:  # the ego origin seen from the LiDAR
            origin = -t.cs_rotation.inverse.rotate(t.cs_translation)
        else:
            origin = np.zeros(3)
        records.add(token, origin, racks)
    return gt, records


def read_results(path: Path, tokens: list[str], max_boxes: int) -> tuple[Any, dict[str, Any]]:
    """(devkit ``EvalBoxes``, meta) of a results JSON, every sample of ``tokens`` and nothing else."""
    from nuscenes.eval.common.data_classes import EvalBoxes
    from nuscenes.eval.detection.data_classes import DetectionBox

    try:
        data = loads(path, path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PredictionError(f"{path}: not a readable JSON file: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict):
        raise PredictionError(f"{path}: no 'results' object: not a nuScenes results file")
    meta = data.get("meta") or {}
    if not isinstance(meta, dict):
        raise PredictionError(f"{path}: 'meta' must be an object")
    results = data["results"]
    missing = [t for t in tokens if t not in results]
    if missing:
        raise PredictionError(f"{path}: {len(missing)} of {len(tokens)} samples of this partition have no "
                              f"results entry (an empty list means nothing detected), e.g. "
                              + ", ".join(missing[:FIRST]))
    foreign = sorted(set(results) - set(tokens))
    if foreign:
        raise PredictionError(f"{path}: {len(foreign)} sample tokens are not frames of this version (another "
                              "split or benchmark?): " + ", ".join(foreign[:FIRST]))
    out = EvalBoxes()
    for token in tokens:
        items = results[token]
        if not isinstance(items, list):
            raise PredictionError(f"{path}: results[{token!r}] must be a list of boxes")
        if len(items) > max_boxes:
            raise PredictionError(f"{path}: results[{token!r}] has {len(items)} boxes; the nuScenes evaluation "
                                  f"allows at most {max_boxes} per sample")
        boxes = []
        for i, b in enumerate(items):
            boxes.append(_result_box(path, token, i, b, DetectionBox))
        out.add_boxes(token, boxes)
    return out, meta


def _result_box(path: Path, token: str, i: int, b: Any, box_cls):
    where = f"{path}: results[{token!r}][{i}]"
    if not isinstance(b, dict):
        raise PredictionError(f"{where}: not an object")
    if b.get("sample_token", token) != token:
        raise PredictionError(f"{where}: sample_token {b.get('sample_token')!r} is not the key it is under")
    for key, n in (("translation", 3), ("size", 3), ("rotation", 4), ("velocity", 2)):
        v = b.get(key)
        if not isinstance(v, list) or len(v) != n:
            raise PredictionError(f"{where}: {key} must be a list of {n} numbers")
        for k, x in enumerate(v):  # a velocity may be NaN (the devkit's "not estimated"), never a huge integer
            if not (finite_number(x) or (key == "velocity" and isinstance(x, float))):
                raise PredictionError(f"{where}: {key}[{k}] is {shown(x)}, not a finite number")
    s = b.get("detection_score")
    if not finite_number(s):
        raise PredictionError(f"{where}: detection_score is {shown(s)}, not a finite number")
    try:
        return box_cls(sample_token=token, translation=tuple(float(x) for x in b["translation"]),
                       size=tuple(float(x) for x in b["size"]), rotation=tuple(float(x) for x in b["rotation"]),
                       velocity=tuple(float(x) for x in b["velocity"]), detection_name=b.get("detection_name"),
                       detection_score=float(s), attribute_name=b.get("attribute_name", ""))
    except AssertionError as e:  # the devkit's own checks (class and attribute names)
        raise PredictionError(f"{where}: {str(e).removeprefix('Error: ')}") from None


def evaluate(gt, pred, records: _Records) -> Any:
    """The devkit's ``DetectionMetrics`` of boxes already in one frame (its center distance, filters and
    evaluation loop, ``detection_cvpr_2019``)."""
    from nuscenes.eval.common.loaders import add_center_dist, filter_eval_boxes
    from nuscenes.eval.detection.config import config_factory
    from nuscenes.eval.detection.evaluate import DetectionEval

    cfg = config_factory(CONFIG)
    pred = filter_eval_boxes(records, add_center_dist(records, pred), cfg.class_range)  # type: ignore[arg-type]
    gt = filter_eval_boxes(records, add_center_dist(records, gt), cfg.class_range)  # type: ignore[arg-type]
    # DetectionEval.__init__ only loads files and the tables; its evaluate() is the whole metric
    ev = DetectionEval.__new__(DetectionEval)
    ev.cfg, ev.gt_boxes, ev.pred_boxes, ev.verbose = cfg, gt, pred, False
    metrics, _ = ev.evaluate()
    return metrics


def metric_values(metrics: Any, *, motion_known: bool) -> dict[str, float | None]:
    """NDS, mAP and per-class AP in percent (the paper's unit), TP errors as the devkit reports them; without
    ground-truth velocities/attributes mAVE, mAAE and NDS are ``None``."""
    tp = metrics.tp_errors
    out: dict[str, float | None] = {"NDS": 100 * metrics.nd_score if motion_known else None,
                                    "mAP": 100 * metrics.mean_ap}
    for name, short in TP_NAMES.items():
        v = float(tp[name])
        out[short] = None if (not motion_known and name in ("vel_err", "attr_err")) or not math.isfinite(v) else v
    for cls, ap in metrics.mean_dist_aps.items():  # the devkit's per-class AP (mean over the 4 distances)
        out[f"{cls}/AP"] = 100 * float(ap)
    return out


def find_results(root: Path, part: Partition, severity_names: list[str]) -> Path:
    """The results file of ``part``; one in two of the accepted folders (``clean/`` and ``clean/0/``, ``fog/1/``
    and ``fog/light/``) is refused, as scoring one would silently ignore the other."""
    dirs = partition_candidates(root, part, severity_names)
    results = []
    for d in dirs:
        folder = next((p for p in [d / RESULT_NAME, *sorted(d.glob("*.json"))] if p.is_dir()), None)
        if folder is not None:
            raise _folder(folder)
        found = [d / RESULT_NAME] if (d / RESULT_NAME).is_file() else sorted(d.glob("*.json")) if d.is_dir() else []
        if len(found) > 1:
            raise PredictionError(f"{d}: {len(found)} JSON files and no {RESULT_NAME}: which one holds the "
                                  "results is ambiguous")
        results += found
    if results:
        return one_place(root, part, results, "results")
    raise PredictionError(f"{root}: no nuScenes results file for {part.corruption}/{part.severity} "
                          f"(looked for {RESULT_NAME} or one *.json in {', '.join(str(d) for d in dirs)})")


def _folder(path: Path) -> PredictionError:
    return PredictionError(f"{path}: is a directory where a file was expected; nuScenes predictions are one results "
                           f"JSON file per partition (<corruption>/<severity>/{RESULT_NAME})")


def score_nuscenes(version_dir: str | Path, predictions: str | Path, *, severity_names: list[str],
                   source_root: str | Path | None = None) -> tuple[dict[Partition, dict[str, float | None]],
                                                                    list[str]]:
    """Per partition the devkit's metrics (``NDS``, ``mAP``, ``mATE`` … ``mAAE``), and notes on what was
    not computable."""

    # NDS is the devkit's own evaluation: without the nuscenes extra, say which one to install (exit 2)
    config_factory = require_extra("nuscenes.eval.detection.config", "nuscenes", "nuScenes-C detection score",
                                   "nuscenes-devkit").config_factory
    manifest = manifest_of(version_dir)
    src = manifest.get("source") or {}
    root = Path(source_root) if source_root is not None else Path(src["root"]) if src.get("root") else None
    have_tables = root is not None and (root / str(src.get("version", ""))).is_dir()
    if source_root is not None and not have_tables:
        raise ScoreError(f"{source_root}: no nuScenes table folder {src.get('version')!r} there")
    build, counts = read_build(version_dir, count_points=not have_tables)  # the tables have the counts
    parts = {p: {fid: rows for fid, (rows, _) in frames.items()} for p, frames in build.items()}
    if not parts:
        raise ScoreError(f"{version_dir}: the version has no partitions")
    if any(any(r is None for r in frames.values()) for frames in parts.values()):
        raise ScoreError(f"{version_dir}: examples without boxes: the build's source recorded no annotations")
    pred_root = Path(predictions)
    if pred_root.is_dir() and pred_root.suffix == ".json":  # named as a results file: not a folder of them
        raise _folder(pred_root)
    if pred_root.is_file() and len(parts) != 1:
        raise PredictionError(f"{pred_root}: this version has {len(parts)} partitions: give a directory with one "
                              "results file per partition (<corruption>/<severity>/results_nusc.json)")
    tables = None
    notes = []
    if have_tables:
        assert root is not None
        tokens = sorted({t for frames in parts.values() for t in frames})
        tables = read_tables(root, str(src["version"]), tokens)
    else:
        notes.append("the nuScenes tables the build was made from were not found (pass --source-root): ground "
                     "truth has no velocities, attributes or radar point counts, so mAVE, mAAE, NDS and mCE/mRR "
                     "are not computed; point counts are the clean frame's LiDAR points in each box")
    cfg = config_factory(CONFIG)
    out = {}
    for part in sorted(parts, key=lambda p: (p.corruption != "clean", p.corruption, p.severity)):
        path = pred_root if pred_root.is_file() else find_results(pred_root, part, severity_names)
        frames = parts[part]
        pred, meta = read_results(path, list(frames), cfg.max_boxes_per_sample)
        frame = meta.get("frame", "global")
        if frame not in ("global", "lidar"):
            raise PredictionError(f"{path}: meta.frame is {frame!r}; use 'global' (the default) or 'lidar'")
        if frame == "global" and tables is None:
            raise PredictionError(f"{path}: boxes in the global frame need the nuScenes tables for the poses: "
                                  "pass --source-root NUSCENES_DATAROOT, or write the boxes in the build's LiDAR "
                                  "frame with meta.frame = 'lidar'")
        gt, records = ground_truth(frames, frame, tables, {fid: counts.get((part, fid), []) for fid in frames},
                                   str(version_dir))
        out[part] = metric_values(evaluate(gt, pred, records), motion_known=tables is not None)
    if pred_root.is_dir() and (unread := unread_folders(pred_root, parts, severity_names, data=False)):
        notes.append(unread_note(pred_root, unread))
    return out, notes
