"""KITTI 3D object detection evaluation (3D and BEV AP, 40 and 11 recall points), CPU only.

A re-implementation of the official KITTI devkit's ``evaluate_object_3d_offline`` logic as used by
OpenPCDet / mmdetection3d (``kitti_object_eval_python/eval.py``): the same difficulty filters
(min 2D box height 40/25/25 px, max occlusion 0/1/2, max truncation 0.15/0.30/0.50), the same
"neighbouring class" rule (Van is ignored for Car, Person_sitting for Pedestrian), the same greedy
matching per ground-truth box, score thresholds picked at recall steps of 1/40, and precision
interpolated as the maximum precision at any higher threshold. AP_R40 averages the 40 recall
points 1/40 … 1; AP_R11 the 11 points 0, 0.1, … 1.

Overlaps are computed in the rectified camera frame as the devkit does: BEV polygons in the x–z
plane (shapely), and for 3D the BEV intersection times the overlap along camera y (boxes extend
from y − h to y). The overlaps of all frames are computed in one batch (`frame_overlaps`) and the
per-frame matching loop runs in numba (compiled once, cached).

``DontCare`` regions only matter for the 2D image-box metric, which is not computed here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np
import shapely

from bench_build.errors import BenchBuildError

CLASSES = ("Car", "Pedestrian", "Cyclist")
#: IoU thresholds of the official "moderate" setting (Li et al. and Robo3D use these)
MIN_OVERLAP = {"Car": 0.7, "Pedestrian": 0.5, "Cyclist": 0.5}
DIFFICULTIES = ("easy", "moderate", "hard")
MIN_HEIGHT = (40.0, 25.0, 25.0)
MAX_OCCLUSION = (0, 1, 2)
MAX_TRUNCATION = (0.15, 0.3, 0.5)
N_SAMPLE_PTS = 41
NEIGHBOUR = {"car": "van", "pedestrian": "person_sitting"}


class KittiFormatError(BenchBuildError, ValueError):
    pass


@dataclass(frozen=True)
class KittiObjects:
    """The objects of one frame in KITTI ``label_2`` convention (rectified camera frame)."""

    name: np.ndarray  # (M,) str
    truncated: np.ndarray  # (M,)
    occluded: np.ndarray  # (M,)
    alpha: np.ndarray  # (M,)
    bbox: np.ndarray  # (M, 4) left, top, right, bottom
    hwl: np.ndarray  # (M, 3) height, width, length
    location: np.ndarray  # (M, 3) bottom centre x, y, z
    rotation_y: np.ndarray  # (M,)
    score: np.ndarray  # (M,) (ground truth: 0)

    def __len__(self) -> int:
        return len(self.name)


def parse_kitti_objects(text: str, where: str, *, need_score: bool) -> KittiObjects:
    """Parse ``label_2`` / result text (15 fields, 16 with a score). Errors name ``where`` and the line."""
    rows: list[list[str]] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) not in (15, 16) or (need_score and len(parts) != 16):
            want = "16 (15 label fields + score)" if need_score else "15 or 16"
            raise KittiFormatError(f"{where}: line {lineno}: {len(parts)} fields, expected {want}")
        rows.append(parts)
    if not rows:
        z = np.zeros(0)
        return KittiObjects(np.zeros(0, dtype=object), z, z, z, np.zeros((0, 4)), np.zeros((0, 3)),
                            np.zeros((0, 3)), z, z)
    try:
        num = np.array([[float(v) for v in r[1:]] + ([0.0] if len(r) == 15 else []) for r in rows])
    except ValueError as e:
        raise KittiFormatError(f"{where}: non-numeric field: {e}") from None
    bad = ~np.isfinite(num).all(axis=1)
    if bad.any():
        raise KittiFormatError(f"{where}: line {int(np.nonzero(bad)[0][0]) + 1}: NaN/inf value")
    return KittiObjects(
        name=np.array([r[0] for r in rows], dtype=object), truncated=num[:, 0], occluded=num[:, 1],
        alpha=num[:, 2], bbox=num[:, 3:7], hwl=num[:, 7:10], location=num[:, 10:13], rotation_y=num[:, 13],
        score=num[:, 14],
    )


def read_kitti_objects(path: Path, *, need_score: bool) -> KittiObjects:
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise KittiFormatError(f"{path}: not UTF-8 text (byte {e.start}); KITTI result files are text") from None
    return parse_kitti_objects(text, str(path), need_score=need_score)


# ---- overlaps -----------------------------------------------------------------------------------

def bev_polygons(obj: KittiObjects) -> np.ndarray:
    """Footprints in the camera x–z plane (length along x at rotation_y = 0, width along z)."""
    w, length = obj.hwl[:, 1], obj.hwl[:, 2]
    xc = np.stack([length, length, -length, -length], 1) / 2
    zc = np.stack([w, -w, -w, w], 1) / 2
    c, s = np.cos(obj.rotation_y)[:, None], np.sin(obj.rotation_y)[:, None]
    x = obj.location[:, 0:1] + c * xc + s * zc
    z = obj.location[:, 2:3] - s * xc + c * zc
    return shapely.polygons(np.stack([x, z], axis=-1))


def box_overlaps(dt: KittiObjects, gt: KittiObjects, metric: str) -> np.ndarray:
    """IoU matrix (detections × ground truth), ``metric`` ``bev`` or ``3d``."""
    if len(dt) == 0 or len(gt) == 0:
        return np.zeros((len(dt), len(gt)))
    pd, pg = bev_polygons(dt), bev_polygons(gt)
    inter = shapely.area(shapely.intersection(pd[:, None], pg[None, :]))
    area_d = dt.hwl[:, 1] * dt.hwl[:, 2]
    area_g = gt.hwl[:, 1] * gt.hwl[:, 2]
    if metric == "bev":
        union = area_d[:, None] + area_g[None, :] - inter
    elif metric == "3d":
        yd, yg = dt.location[:, 1], gt.location[:, 1]
        hd, hg = dt.hwl[:, 0], gt.hwl[:, 0]
        iw = np.minimum(yd[:, None], yg[None, :]) - np.maximum((yd - hd)[:, None], (yg - hg)[None, :])
        inter = inter * np.clip(iw, 0, None)
        union = (area_d * hd)[:, None] + (area_g * hg)[None, :] - inter
    else:
        raise ValueError(f"metric must be 'bev' or '3d', not {metric!r}")
    with np.errstate(invalid="ignore", divide="ignore"):
        iou = np.where(union > 0, inter / union, 0.0)
    return iou


def concat_objects(frames: Sequence[KittiObjects]) -> KittiObjects:
    """All frames' objects as one `KittiObjects` (frame boundaries are the cumulative lengths)."""
    if not frames:
        return parse_kitti_objects("", "", need_score=False)
    return KittiObjects(*(np.concatenate([getattr(f, k) for f in frames])
                          for k in KittiObjects.__dataclass_fields__))


@dataclass(frozen=True)
class FrameOverlaps:
    """The IoU matrices (detections × ground truth) of every frame, flattened frame after frame, each matrix
    row-major; frame ``f``'s is ``flat[off[f]:off[f + 1]].reshape(n_dt[f], n_gt[f])``."""

    flat: np.ndarray
    off: np.ndarray


def frame_overlaps(dt: Sequence[KittiObjects], gt: Sequence[KittiObjects],
                   metrics: Sequence[str] = ("3d", "bev")) -> dict[str, FrameOverlaps]:
    """`box_overlaps` of every frame pair at once, for each of ``metrics``.

    Elementwise the same arithmetic as `box_overlaps` (the same shapely intersection per pair, the same union
    expressions; a test checks the results are bit-identical), batched over all frames so a 7,481-frame
    partition is a few array operations instead of 7,481 small ones, and the BEV intersection is computed once
    for both metrics. Pairs whose footprints' axis-aligned bounding boxes are apart cannot intersect: they get
    the exact 0 the intersection would give and skip GEOS.
    """
    return _overlaps(concat_objects(dt), concat_objects(gt), np.array([len(d) for d in dt], np.int64),
                     np.array([len(g) for g in gt], np.int64), metrics)


def pair_index(n_dt: np.ndarray, n_gt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For every entry of a `FrameOverlaps`' ``flat``: its detection and ground-truth box, as indices into all
    frames' objects concatenated (frame ``f`` has ``n_dt[f]`` detections and ``n_gt[f]`` boxes)."""
    sizes = n_dt * n_gt
    off = np.r_[0, np.cumsum(sizes)].astype(np.int64)
    d_off = np.r_[0, np.cumsum(n_dt)].astype(np.int64)
    g_off = np.r_[0, np.cumsum(n_gt)].astype(np.int64)
    frame = np.repeat(np.arange(len(sizes)), sizes)
    local = np.arange(int(off[-1]), dtype=np.int64) - off[frame]
    return d_off[frame] + local // n_gt[frame], g_off[frame] + local % n_gt[frame]


def _half_extents(obj: KittiObjects) -> tuple[np.ndarray, np.ndarray]:
    c, s = np.abs(np.cos(obj.rotation_y)), np.abs(np.sin(obj.rotation_y))
    w, length = np.abs(obj.hwl[:, 1]), np.abs(obj.hwl[:, 2])
    return (c * length + s * w) / 2, (s * length + c * w) / 2


def _overlaps(d: KittiObjects, g: KittiObjects, n_dt: np.ndarray, n_gt: np.ndarray,
              metrics: Sequence[str]) -> dict[str, FrameOverlaps]:
    for m in metrics:
        if m not in ("bev", "3d"):
            raise ValueError(f"metric must be 'bev' or '3d', not {m!r}")
    sizes = n_dt * n_gt
    off = np.r_[0, np.cumsum(sizes)].astype(np.int64)
    total = int(off[-1])
    if total == 0:
        return {m: FrameOverlaps(np.zeros(0), off) for m in metrics}
    di, gi = pair_index(n_dt, n_gt)
    # a relative and an absolute margin keep the rounding of the extents on the safe (GEOS) side
    exd, ezd = _half_extents(d)
    exg, ezg = _half_extents(g)
    near = ((np.abs(d.location[di, 0] - g.location[gi, 0]) <= (exd[di] + exg[gi]) * (1 + 1e-9) + 1e-9)
            & (np.abs(d.location[di, 2] - g.location[gi, 2]) <= (ezd[di] + ezg[gi]) * (1 + 1e-9) + 1e-9))
    inter_bev = np.zeros(total)
    if near.any():
        ud, id_ = np.unique(di[near], return_inverse=True)
        ug, ig = np.unique(gi[near], return_inverse=True)
        pd, pg = bev_polygons(_take(d, ud)), bev_polygons(_take(g, ug))
        inter_bev[near] = shapely.area(shapely.intersection(pd[id_], pg[ig]))
    area_d = d.hwl[:, 1] * d.hwl[:, 2]
    area_g = g.hwl[:, 1] * g.hwl[:, 2]
    out = {}
    for m in metrics:
        if m == "bev":
            inter = inter_bev
            union = area_d[di] + area_g[gi] - inter
        else:
            yd, yg = d.location[di, 1], g.location[gi, 1]
            hd, hg = d.hwl[di, 0], g.hwl[gi, 0]
            iw = np.minimum(yd, yg) - np.maximum(yd - hd, yg - hg)
            inter = inter_bev * np.clip(iw, 0, None)
            union = (area_d * d.hwl[:, 0])[di] + (area_g * g.hwl[:, 0])[gi] - inter
        with np.errstate(invalid="ignore", divide="ignore"):
            out[m] = FrameOverlaps(np.where(union > 0, inter / union, 0.0), off)
    return out


def _take(obj: KittiObjects, idx: np.ndarray) -> KittiObjects:
    return KittiObjects(*(getattr(obj, k)[idx] for k in KittiObjects.__dataclass_fields__))


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
        overlaps = _overlaps(d_all, g_all, np.diff(dt_off), np.diff(gt_off), metrics)
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
