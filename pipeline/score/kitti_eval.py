"""KITTI 3D object detection evaluation (3D and BEV AP, 40 and 11 recall points), CPU only.

A re-implementation of the official KITTI devkit's ``evaluate_object_3d_offline`` logic as used by
OpenPCDet / mmdetection3d (``kitti_object_eval_python/eval.py``): the same difficulty filters
(min 2D box height 40/25/25 px, max occlusion 0/1/2, max truncation 0.15/0.30/0.50), the same
"neighbouring class" rule (Van is ignored for Car, Person_sitting for Pedestrian), the same greedy
matching per ground-truth box, score thresholds picked at recall steps of 1/40, and precision
interpolated as the maximum precision at any higher threshold. AP_R40 averages the 40 recall
points 1/40 … 1; AP_R11 the 11 points 0, 0.1, … 1.

Boxes and their overlaps (parsing, 3D and BEV IoU of all frames in one batch) are `kitti_boxes`; the
per-frame matching loop here runs in numba (compiled once, cached).

``DontCare`` regions only matter for the 2D image-box metric, which is not computed here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numba
import numpy as np

from bench_build.score.kitti_boxes import FrameOverlaps, KittiObjects, batched_overlaps, concat_objects

CLASSES = ("Car", "Pedestrian", "Cyclist")
#: IoU thresholds of the official "moderate" setting (Li et al. and Robo3D use these)
MIN_OVERLAP = {"Car": 0.7, "Pedestrian": 0.5, "Cyclist": 0.5}
DIFFICULTIES = ("easy", "moderate", "hard")
MIN_HEIGHT = (40.0, 25.0, 25.0)
MAX_OCCLUSION = (0, 1, 2)
MAX_TRUNCATION = (0.15, 0.3, 0.5)
N_SAMPLE_PTS = 41
NEIGHBOUR = {"car": "van", "pedestrian": "person_sitting"}


# ---- matching (numba) -----------------------------------------------------------------------------

NO_DETECTION = -10000000.0


@numba.njit(cache=True)
def _match_frame(ov, ignored_gt, ignored_det, scores, min_overlap, thresh, compute_fp, tp_scores):
    """One frame of the devkit's ``compute_statistics``: returns (tp, fp, fn, n_tp_scores)."""
    n_det = ignored_det.shape[0]
    n_gt = ignored_gt.shape[0]
    assigned = np.zeros(n_det, np.bool_)
    below = np.zeros(n_det, np.bool_)
    if compute_fp:
        for j in range(n_det):
            if scores[j] < thresh:
                below[j] = True
    tp = 0
    fp = 0
    fn = 0
    n_thr = 0
    for i in range(n_gt):
        if ignored_gt[i] == -1:
            continue
        det_idx = -1
        valid = NO_DETECTION
        max_overlap = 0.0
        assigned_ignored = False
        for j in range(n_det):
            if ignored_det[j] == -1 or assigned[j] or below[j]:
                continue
            overlap = ov[j, i]
            if (not compute_fp) and overlap > min_overlap and scores[j] > valid:
                det_idx = j
                valid = scores[j]
            elif compute_fp and overlap > min_overlap and (overlap > max_overlap or assigned_ignored) \
                    and ignored_det[j] == 0:
                max_overlap = overlap
                det_idx = j
                valid = 1.0
                assigned_ignored = False
            elif compute_fp and overlap > min_overlap and valid == NO_DETECTION and ignored_det[j] == 1:
                det_idx = j
                valid = 1.0
                assigned_ignored = True
        if valid == NO_DETECTION and ignored_gt[i] == 0:
            fn += 1
        elif valid != NO_DETECTION and (ignored_gt[i] == 1 or ignored_det[det_idx] == 1):
            assigned[det_idx] = True
        elif valid != NO_DETECTION:
            tp += 1
            tp_scores[n_thr] = scores[det_idx]
            n_thr += 1
            assigned[det_idx] = True
    if compute_fp:
        for j in range(n_det):
            if not (assigned[j] or ignored_det[j] == -1 or ignored_det[j] == 1 or below[j]):
                fp += 1
    return tp, fp, fn, n_thr


@numba.njit(cache=True)
def _tp_scores(ov_flat, ov_off, gt_off, dt_off, ignored_gt, ignored_det, scores, min_overlap):
    out = np.zeros(gt_off[-1] + 1)
    buf = np.zeros(gt_off[-1] + 1)
    n = 0
    for f in range(len(gt_off) - 1):
        g0, g1, d0, d1 = gt_off[f], gt_off[f + 1], dt_off[f], dt_off[f + 1]
        ov = ov_flat[ov_off[f]:ov_off[f + 1]].reshape(d1 - d0, g1 - g0)
        _, _, _, k = _match_frame(ov, ignored_gt[g0:g1], ignored_det[d0:d1], scores[d0:d1], min_overlap, 0.0,
                                  False, buf)
        out[n:n + k] = buf[:k]
        n += k
    return out[:n]


@numba.njit(cache=True)
def _pr_counts(ov_flat, ov_off, gt_off, dt_off, ignored_gt, ignored_det, scores, min_overlap, thresholds):
    pr = np.zeros((len(thresholds), 3), np.int64)
    buf = np.zeros(gt_off[-1] + 1)
    for f in range(len(gt_off) - 1):
        g0, g1, d0, d1 = gt_off[f], gt_off[f + 1], dt_off[f], dt_off[f + 1]
        ov = ov_flat[ov_off[f]:ov_off[f + 1]].reshape(d1 - d0, g1 - g0)
        for t in range(len(thresholds)):
            tp, fp, fn, _ = _match_frame(ov, ignored_gt[g0:g1], ignored_det[d0:d1], scores[d0:d1], min_overlap,
                                         thresholds[t], True, buf)
            pr[t, 0] += tp
            pr[t, 1] += fp
            pr[t, 2] += fn
    return pr


def get_thresholds(tp_scores: np.ndarray, num_gt: int, num_sample_pts: int = N_SAMPLE_PTS) -> np.ndarray:
    """Score thresholds at recall steps of 1/(num_sample_pts − 1), as the devkit picks them."""
    scores = np.sort(tp_scores)[::-1]
    current = 0.0
    out = []
    for i, score in enumerate(scores):
        l_recall = (i + 1) / num_gt
        r_recall = (i + 2) / num_gt if i < len(scores) - 1 else l_recall
        if (r_recall - current) < (current - l_recall) and i < len(scores) - 1:
            continue
        out.append(score)
        current += 1 / (num_sample_pts - 1.0)
    return np.array(out, dtype=np.float64)


# ---- per class / difficulty -----------------------------------------------------------------------

def _ignore_flags(gt: KittiObjects, dt: KittiObjects, gt_names: np.ndarray, dt_names: np.ndarray, cls: str,
                  difficulty: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The devkit's ``clean_data`` flags of (any number of frames') objects: 0 counted, 1 ignored, −1 other class.

    Per object, so one call over all frames concatenated equals the per-frame calls concatenated."""
    name = cls.lower()
    height = gt.bbox[:, 3] - gt.bbox[:, 1]
    valid = np.where(gt_names == name, 1, np.where(gt_names == NEIGHBOUR.get(name, "\0"), 0, -1))
    ignore = ((gt.occluded > MAX_OCCLUSION[difficulty]) | (gt.truncated > MAX_TRUNCATION[difficulty])
              | (height <= MIN_HEIGHT[difficulty]))
    ignored_gt = np.where((valid == 1) & ~ignore, 0, np.where((valid == 0) | (ignore & (valid == 1)), 1, -1))
    dt_height = np.abs(dt.bbox[:, 3] - dt.bbox[:, 1])
    ignored_dt = np.where(dt_height < MIN_HEIGHT[difficulty], 1, np.where(dt_names == name, 0, -1))
    return ignored_gt.astype(np.int64), ignored_dt.astype(np.int64), int((ignored_gt == 0).sum())


def lower_names(obj: KittiObjects) -> np.ndarray:
    return np.array([str(n).lower() for n in obj.name], dtype=object)


def evaluate(gt: Sequence[KittiObjects], dt: Sequence[KittiObjects], *,
             classes: Sequence[str] = CLASSES, metrics: Sequence[str] = ("3d", "bev"),
             min_overlap: dict[str, float] | None = None,
             overlaps: dict[str, FrameOverlaps] | None = None) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """AP of frame-aligned ground truth and detections.

    ``overlaps`` may pass `frame_overlaps` of the same frames (computed once when the caller needs them too).
    Returns ``{cls: {metric: {difficulty: {"AP_R40": %, "AP_R11": %}}}}`` (percent).
    """
    if len(gt) != len(dt):
        raise ValueError(f"{len(gt)} ground-truth frames but {len(dt)} detection frames")
    thresholds_iou = {**MIN_OVERLAP, **(min_overlap or {})}
    gt_off = np.r_[0, np.cumsum([len(g) for g in gt])].astype(np.int64)
    dt_off = np.r_[0, np.cumsum([len(d) for d in dt])].astype(np.int64)
    g_all, d_all = concat_objects(gt), concat_objects(dt)
    scores = d_all.score
    g_names, d_names = lower_names(g_all), lower_names(d_all)
    if overlaps is None or any(m not in overlaps for m in metrics):
        overlaps = batched_overlaps(d_all, g_all, np.diff(dt_off), np.diff(gt_off), metrics)
    out: dict = {}
    for metric in metrics:
        ov_flat, ov_off = overlaps[metric].flat, overlaps[metric].off
        for cls in classes:
            for di, diff in enumerate(DIFFICULTIES):
                ignored_gt, ignored_dt, num_gt = _ignore_flags(g_all, d_all, g_names, d_names, cls, di)
                ov_min = thresholds_iou[cls]
                tps = _tp_scores(ov_flat, ov_off, gt_off, dt_off, ignored_gt, ignored_dt, scores, ov_min)
                thr = get_thresholds(tps, num_gt) if num_gt else np.zeros(0)
                prec = np.zeros(N_SAMPLE_PTS)
                if len(thr):
                    pr = _pr_counts(ov_flat, ov_off, gt_off, dt_off, ignored_gt, ignored_dt, scores, ov_min, thr)
                    p = pr[:, 0] / (pr[:, 0] + pr[:, 1])
                    prec[:len(p)] = np.maximum.accumulate(p[::-1])[::-1]
                out.setdefault(cls, {}).setdefault(metric, {})[diff] = {
                    "AP_R40": float(prec[1:].sum() / 40 * 100),
                    "AP_R11": float(prec[::4].sum() / 11 * 100),
                    "num_gt": num_gt,
                }
    return out
