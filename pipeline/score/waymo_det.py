"""WOD-C (Det3D) scoring: Waymo's heading-weighted average precision (APH) at difficulty LEVEL_2, the accuracy
of Robo3D's Tab. 23–25, re-implemented in NumPy from the published definition and the metric source of
``waymo-research/waymo-open-dataset`` (``metrics/detection_metrics.cc``, ``metrics_utils.cc``,
``matcher.cc``, ``tools/compute_detection_metrics_main.cc``), configured as that tool configures it:

- classes Vehicle, Pedestrian, Cyclist; upright 3D boxes; a prediction can match a ground-truth box of its
  own class with 3D IoU ≥ 0.7 (Vehicle) or ≥ 0.5 (Pedestrian, Cyclist);
- per frame and class, at each score cutoff 0, 0.01, …, 0.99, 1.0 the predictions scoring ≥ the cutoff are
  matched to the ground truth by the Hungarian algorithm maximising the summed IoU of admissible pairs;
- ground-truth boxes with no LiDAR point are dropped; a box with ≤ 5 points is LEVEL_2, otherwise LEVEL_1.
  LEVEL_2 counts every unmatched box as a miss, LEVEL_1 only the LEVEL_1 ones (a match to a LEVEL_2 box is a
  true positive at both levels); an unmatched prediction is a false positive;
- a true positive's heading accuracy is ``1 − min(|Δθ|, 2π − |Δθ|)/π``; at each cutoff precision is
  TP/(TP+FP), the heading-weighted precision Σ accuracy/(TP+FP), recall TP/(TP+FN) (precision 1 where
  recall is 0);
- AP is the area under the PR curve after making precision the maximum precision at any higher recall, with
  (recall 0, precision 1) added and points inserted so that consecutive recalls are at most 0.05 apart
  (trapezoids); APH the same on the heading-weighted precisions. mAPH/L2 is the mean over the classes.

Differences from the official tool, all of them consequences of what the build stores: point counts are the
build's clean TOP-LiDAR points in each box (the official ``num_lidar_points_in_box`` counts all five LiDARs,
so a few boxes seen only by the side LiDARs are dropped here), the labels' own ``detection_difficulty_level``
is not stored (only the point rule applies), there are no no-label zones, and a class with nothing to recall
at a level in a partition is left out of that level's mean (the tool reports 0 for it). Scores are compared
with the cutoffs in float32 as the tool does; the rest is float64 (the tool's float32: differences ~1e-5 AP
points).

Checked against ``waymo-open-dataset-tf-2-12-0`` 1.6.7's ``detection_metrics`` op (Python 3.10, TF 2.13, outside
this project's environment) on 150 seeded cases of 5 frames with all three classes, both levels, flipped
headings and false positives: every AP and APH agreed within 2.4e-5 AP points.

Predictions: JSON Lines or Parquet, one row per example of the version (`bench_build.score.predictions`)::

    {"key": "robo3d-wod-c/<context>-<timestamp>/<corruption>/<severity>",
     "boxes": [[x, y, z, length, width, height, heading], ...],   # the build's vehicle frame (its box columns)
     "scores": [0.93, ...],                                       # in [0, 1]
     "types": ["Vehicle", ...]}                                   # or Waymo Label.Type ids 1, 2, 4

Every example needs a row (empty lists = nothing detected).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import shapely
from scipy.optimize import linear_sum_assignment

from bench_build.score.kitti_boxes import KittiObjects, bev_polygons
from bench_build.score.predictions import PredictionError, check_keys, read_predictions
from bench_build.score.truth import Partition, manifest_of, read_build
from bench_build.score.validate import ScoreError, finite_number, shown

CLASSES = ("Vehicle", "Pedestrian", "Cyclist")
TYPE_IDS = {1: "Vehicle", 2: "Pedestrian", 4: "Cyclist"}
IOU_THRESHOLD = {"Vehicle": 0.7, "Pedestrian": 0.5, "Cyclist": 0.5}
#: compared in float32, as the metric library stores scores and cutoffs (a score of 0.7 is kept at cutoff 0.70)
SCORE_CUTOFFS = np.array([i * 0.01 for i in range(100)] + [1.0], np.float32)
LEVEL_2_MAX_POINTS = 5
RECALL_DELTA = 0.05


@dataclass
class FrameBoxes:
    """One frame's boxes of one class: (N, 7) x, y, z, length, width, height, heading."""

    gt: np.ndarray
    gt_level: np.ndarray  # (G,) 1 or 2
    pred: np.ndarray
    score: np.ndarray


def iou_3d(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(len(a), len(b)) IoU of upright 3D boxes (x, y, z centre, length, width, height, heading about +z).

    Footprints are the KITTI evaluator's rotated rectangles (`kitti_boxes.bev_polygons`, a camera-style box
    whose x–z plane is our x–y plane: rotation_y = −heading); only pairs whose bounding circles meet are
    intersected (a frame has thousands of pairs, a few dozen touch)."""

    a, b = np.asarray(a, float).reshape(-1, 7), np.asarray(b, float).reshape(-1, 7)
    out = np.zeros((len(a), len(b)))
    if len(a) == 0 or len(b) == 0:
        return out
    ra, rb = np.hypot(a[:, 3], a[:, 4]) / 2, np.hypot(b[:, 3], b[:, 4]) / 2
    dist = np.hypot(a[:, None, 0] - b[None, :, 0], a[:, None, 1] - b[None, :, 1])
    dz = (np.minimum(a[:, None, 2] + a[:, None, 5] / 2, b[None, :, 2] + b[None, :, 5] / 2)
          - np.maximum(a[:, None, 2] - a[:, None, 5] / 2, b[None, :, 2] - b[None, :, 5] / 2))
    ia, ib = np.nonzero((dist < ra[:, None] + rb[None, :]) & (dz > 0))
    if not len(ia):
        return out

    def footprints(x: np.ndarray) -> np.ndarray:
        n, z = len(x), np.zeros(len(x))
        return bev_polygons(KittiObjects(name=np.full(n, "box", dtype=object), truncated=z, occluded=z, alpha=z,
                                          bbox=np.zeros((n, 4)), hwl=x[:, [5, 4, 3]],
                                          location=np.stack([x[:, 0], z, x[:, 1]], 1), rotation_y=-x[:, 6],
                                          score=z))


    inter = shapely.area(shapely.intersection(footprints(a[ia]), footprints(b[ib]))) * dz[ia, ib]
    union = a[ia, 3] * a[ia, 4] * a[ia, 5] + b[ib, 3] * b[ib, 4] * b[ib, 5] - inter
    out[ia, ib] = np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)
    return out


def heading_accuracy(pred: np.ndarray, gt: np.ndarray) -> np.ndarray:
    d = np.abs(_wrap(pred) - _wrap(gt))
    d = np.where(d > np.pi, 2 * np.pi - d, d)
    return np.clip(1.0 - d / np.pi, 0.0, 1.0)


def _wrap(a: np.ndarray) -> np.ndarray:
    """Angles to [−π, π)."""
    return (np.asarray(a, float) + np.pi) % (2 * np.pi) - np.pi


def _match(iou: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(prediction rows, ground-truth cols) of the Hungarian matching maximising the summed IoU of the
    admissible pairs ``ok`` (IoU ≥ the class threshold); other pairs never count as matches."""

    r_any, c_any = np.flatnonzero(ok.any(1)), np.flatnonzero(ok.any(0))
    if not len(r_any):
        return np.zeros(0, int), np.zeros(0, int)
    sub = ok[np.ix_(r_any, c_any)]
    if (sub.sum(1) == 1).all() and (sub.sum(0) == 1).all():  # no two pairs compete: the pairs are the matching
        rows, cols = np.nonzero(sub)
        return r_any[rows], c_any[cols]
    # only rows and columns with an admissible pair can be matched: solve that (usually tiny) block
    rows, cols = linear_sum_assignment(np.where(sub, iou[np.ix_(r_any, c_any)], 0.0), maximize=True)
    keep = sub[rows, cols]
    return r_any[rows[keep]], c_any[cols[keep]]


def measurements(frames: Sequence[FrameBoxes], threshold: float) -> dict[str, np.ndarray]:
    """Per score cutoff, summed over frames: ``tp``, ``fp``, ``fn1``, ``fn2`` (misses at LEVEL_1/LEVEL_2) and
    ``ha`` (summed heading accuracy of the true positives)."""
    k = len(SCORE_CUTOFFS)
    out = {name: np.zeros(k) for name in ("tp", "fp", "fn1", "fn2", "ha")}
    for f in frames:
        order = np.argsort(-f.score, kind="stable")
        pred, score = f.pred[order], f.score[order]
        iou = iou_3d(pred, f.gt)
        ok = iou >= threshold
        # the predictions kept at a cutoff are a prefix of the score-sorted list, and a prediction without an
        # admissible pair never changes the matching: match once per number of admissible predictions kept
        adm = np.flatnonzero(ok.any(1))
        kept = len(score) - np.searchsorted(np.sort(score.astype(np.float32)), SCORE_CUTOFFS, side="left")
        n_adm = np.searchsorted(adm, kept, side="left")
        cache: dict[int, tuple[int, int, int, float]] = {}
        for i, (n, m) in enumerate(zip(kept, n_adm, strict=True)):
            if m not in cache:
                rows = adm[:m]
                r, c = _match(iou[rows], ok[rows])
                matched = np.zeros(len(f.gt), bool)
                matched[c] = True
                ha = float(heading_accuracy(pred[rows[r], 6], f.gt[c, 6]).sum()) if len(r) else 0.0
                cache[m] = (len(r), int(np.sum(~matched & (f.gt_level == 1))), int(np.sum(~matched)), ha)
            tp, fn1, fn2, ha = cache[m]
            out["tp"][i] += tp
            out["fp"][i] += n - tp
            out["fn1"][i] += fn1
            out["fn2"][i] += fn2
            out["ha"][i] += ha
    return out


def average_precision(precision: np.ndarray, recall: np.ndarray, max_recall_delta: float = RECALL_DELTA) -> float:
    """Area under the PR curve the way Waymo's metric computes it (module docstring)."""
    best: dict[float, float] = {0.0: 1.0}
    for p, r in zip(precision, recall, strict=True):
        best[float(r)] = max(best.get(float(r), 0.0), float(p))
    if len(best) == 1:  # every operating point has recall 0: nothing under the curve
        return 0.0
    curve: list[tuple[float, float]] = []  # (precision, recall), recall descending
    last = max(best)
    running = 0.0
    for r in sorted(best, reverse=True):
        while last - r > max_recall_delta + 1e-6:
            last -= max_recall_delta
            curve.append((running, last))
        running = max(running, best[r])
        curve.append((running, r))
        last = r
    curve[-1] = (curve[-2][0], curve[-1][1])  # the recall-0 point takes the precision next to it
    return float(sum(0.5 * (curve[i - 1][1] - curve[i][1]) * (curve[i - 1][0] + curve[i][0])
                     for i in range(1, len(curve))))


def ap_aph(m: dict[str, np.ndarray], level: int) -> tuple[float, float]:
    """(AP, APH) in [0, 1] from `measurements` at LEVEL_1 or LEVEL_2."""
    tp, fp, ha = m["tp"], m["fp"], m["ha"]
    fn = m["fn1"] if level == 1 else m["fn2"]
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.where(tp + fp > 0, tp / np.maximum(tp + fp, 1), 0.0)
        precision_ha = np.where(tp + fp > 0, ha / np.maximum(tp + fp, 1), 0.0)
        recall = np.where(tp + fn > 0, tp / np.maximum(tp + fn, 1), 0.0)
    precision = np.where(recall == 0, 1.0, precision)
    precision_ha = np.where(recall == 0, 1.0, precision_ha)
    return average_precision(precision, recall), average_precision(precision_ha, recall)


def waymo_metrics(frames: dict[str, Sequence[FrameBoxes]]) -> dict[str, float | None]:
    """Per class AP/APH at both levels and their means, in percent; ``frames`` maps class → frames. Where a
    level has nothing to recall (no box of the class; at LEVEL_1 also no prediction matching a LEVEL_2 box) the
    value is ``None`` and left out of that level's mean (the metric library reports 0 there)."""
    out: dict[str, float | None] = {}
    per: dict[str, list[float]] = {}
    for cls in CLASSES:
        fs = frames.get(cls, [])
        m = measurements(fs, IOU_THRESHOLD[cls])
        for level in (1, 2):
            # nothing to recall at this level (no box, and at LEVEL_1 no match to a LEVEL_2 box either)
            recallable = bool(np.any(m["tp"] + m["fn1" if level == 1 else "fn2"] > 0))
            ap, aph = ap_aph(m, level) if recallable else (None, None)
            out[f"{cls}/AP/L{level}"] = None if ap is None else 100 * ap
            out[f"{cls}/APH/L{level}"] = None if aph is None else 100 * aph
            if ap is not None and aph is not None:
                per.setdefault(f"mAP/L{level}", []).append(100 * ap)
                per.setdefault(f"mAPH/L{level}", []).append(100 * aph)
    head = {name: (float(np.mean(per[name])) if per.get(name) else None)
            for name in ("mAPH/L2", "mAP/L2", "mAPH/L1", "mAP/L1")}
    return {**head, **out}


def ground_truth(rows: list[dict[str, Any]], counts: list[int]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """class → (boxes (G, 7), levels) of one frame, boxes with no point dropped."""
    out = {}
    for cls in CLASSES:
        idx = [j for j, r in enumerate(rows) if r["cls"] == cls and counts[j] > 0]
        boxes = np.array([[rows[j][k] for k in ("x", "y", "z", "dx", "dy", "dz", "heading")] for j in idx],
                         float).reshape(-1, 7)
        levels = np.array([2 if counts[j] <= LEVEL_2_MAX_POINTS else 1 for j in idx], int)
        out[cls] = (boxes, levels)
    return out


def read_boxes(path: str | Path, row: dict[str, Any], key: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """class → (boxes (P, 7), scores) of one prediction row, every value checked (the key and index named)."""
    where = f"{path}: key {key!r}"
    boxes, scores, types = row.get("boxes"), row.get("scores"), row.get("types")
    for name, v in (("boxes", boxes), ("scores", scores), ("types", types)):
        if not isinstance(v, list):
            raise PredictionError(f"{where}: no '{name}' list")
    assert isinstance(boxes, list) and isinstance(scores, list) and isinstance(types, list)
    if not len(boxes) == len(scores) == len(types):
        raise PredictionError(f"{where}: {len(boxes)} boxes, {len(scores)} scores and {len(types)} types "
                              "(one of each per box)")
    arr = np.zeros((len(boxes), 7))
    for i, b in enumerate(boxes):
        if not isinstance(b, list) or len(b) != 7:
            raise PredictionError(f"{where}: boxes[{i}] must be [x, y, z, length, width, height, heading]")
        for k, v in enumerate(b):
            if not finite_number(v):
                raise PredictionError(f"{where}: boxes[{i}][{k}] is {shown(v)}, not a finite number")
        if min(b[3:6]) <= 0:
            raise PredictionError(f"{where}: boxes[{i}] has a non-positive size {b[3:6]}")
        arr[i] = b
    sc = np.zeros(len(scores))
    for i, s in enumerate(scores):
        if isinstance(s, bool) or not isinstance(s, int | float) or not 0.0 <= s <= 1.0:
            raise PredictionError(f"{where}: scores[{i}] is {shown(s)}, not a number in [0, 1] (Waymo's score "
                                  "cutoffs are 0, 0.01, …, 1)")
        sc[i] = s
    names = []
    for i, t in enumerate(types):
        name = TYPE_IDS.get(t) if isinstance(t, int) and not isinstance(t, bool) else t
        if name not in CLASSES:
            raise PredictionError(f"{where}: types[{i}] is {t!r}; use Vehicle, Pedestrian, Cyclist (or 1, 2, 4)")
        names.append(name)
    cls = np.array(names, dtype=object)
    return {c: (arr[cls == c], sc[cls == c]) for c in CLASSES}


def score_waymo(version_dir: str | Path, predictions: str | Path) -> tuple[dict[Partition, dict[str, float | None]],
                                                                       list[str]]:
    """mAPH/L2 (and the rest of `waymo_metrics`) of every partition of a WOD-C build."""
    manifest = manifest_of(version_dir)
    dataset = manifest["dataset"]
    parts, counts = read_build(version_dir)
    if any(r is None for frames in parts.values() for r, _ in frames.values()):
        raise ScoreError(f"{version_dir}: examples without boxes: the build was made without the lidar_box "
                         "component, so it is not a detection benchmark")
    preds = read_predictions(predictions)
    keys = [k for frames in parts.values() for _, k in frames.values()]
    check_keys(predictions, preds, keys, dataset)
    notes = []
    if not any(p.corruption == "clean" for p in parts):
        notes.append("no clean partition: point counts (LEVEL_1/LEVEL_2, empty boxes) are each frame's own")
    out = {}
    for part in sorted(parts, key=lambda p: (p.corruption != "clean", p.corruption, p.severity)):
        by_class: dict[str, list[FrameBoxes]] = {c: [] for c in CLASSES}
        for fid, (rows, key) in parts[part].items():
            gt = ground_truth(rows, counts[(part, fid)])
            pd = read_boxes(predictions, preds[key], key)
            for c in CLASSES:
                by_class[c].append(FrameBoxes(gt[c][0], gt[c][1], pd[c][0], pd[c][1]))
        out[part] = waymo_metrics(by_class)
    return out, notes

