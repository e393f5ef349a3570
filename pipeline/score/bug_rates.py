"""Li et al.'s detection bug rates (paper 001 §IV-B, Eq. 4–6; Tables XI, XII, XV–XVII).

Every detected box is put in exactly one of four categories by its overlap with the frame's
ground-truth boxes (the paper's Table XI rows sum to 100 %, so the four partition the detections):

- **TD** (true detection): the ground-truth box it overlaps most has its class and the IoU exceeds the
  class's KITTI threshold (0.7 Car, 0.5 Pedestrian / Cyclist — the thresholds §IV-B uses for true positives);
- **FD** (false detection): maximum IoU > 0, with a box of its own class, at or below that threshold;
- **FC** (false classification): maximum IoU > 0, with a box of another class;
- **MD** (missed detection): maximum IoU = 0 (it overlaps no ground-truth box at all).

``BR_* = N_* / N_det`` per partition (corruption × severity, clean included) and per detected class, in
percent; ``CR_{*,c,s} = BR_{*,c,s} − BR_{*,clean}`` (percentage points); the per-corruption CR of Tables
XV–XVII is the mean over severities and ``mCR_* = Σ_s Σ_c CR_{*,c,s} / (S·C)`` (Eq. 6) over every corrupted
partition present. A class without detections in a partition has no rate (NaN, ``null`` in the JSON), and
any mean that includes it is NaN too.

The paper leaves choices open and the released code (``Castiel-Lee/robustness_pc_detector``) holds only the
corruption generators, no bug-rate evaluation, so these are ours:

- **IoU in 3D** — the overlaps of the KITTI evaluator (`kitti_boxes.frame_overlaps`, rotated BEV footprint ×
  vertical overlap in the camera frame), because Li et al.'s accuracy tables are 3D AP; ``metric="bev"`` is
  available. "Exceeds the threshold" is strict (``>``), as the devkit's true-positive test is.
- **Maximum over all ground-truth boxes**, whatever their class: the class of the box giving the maximum
  decides FD vs FC ("maximum IoU > 0 with correct / false classification"); on an exact tie a box of the
  detection's own class wins. Van, Truck, Tram, Misc and Person_sitting boxes are ground truth of another
  class (a Car detection on a Van is a false classification).
- **DontCare** regions are not ground-truth boxes here: KITTI gives them no 3D box (−1 sizes at
  −1000 m), so they could not overlap anyway; they are dropped explicitly.
- **No score threshold and no difficulty filter**: N_det is "the number of detected objects", i.e. every
  box in the result files — OpenPCDet, whose detectors the paper evaluates, already drops boxes below its
  ``POST_PROCESSING.SCORE_THRESH`` (0.1 in its KITTI configs) before writing them. ``min_score`` raises the
  bar if a model writes every anchor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from bench_build.score.kitti_boxes import FrameOverlaps, KittiObjects, concat_objects, pair_index
from bench_build.score.kitti_eval import CLASSES, MIN_OVERLAP, lower_names
from bench_build.score.validate import ScoreError

BUGS = ("TD", "FC", "FD", "MD")
TD, FC, FD, MD = range(4)
ALL = "all"  # the detections of every scored class pooled


def classify(dt: Sequence[KittiObjects], gt: Sequence[KittiObjects], overlaps: FrameOverlaps,
             min_overlap: Mapping[str, float] | None = None) -> np.ndarray:
    """The category (`TD`, `FC`, `FD`, `MD`) of every detection, frames concatenated.

    ``overlaps`` are `frame_overlaps` of the same frames (detections × every ground-truth box).
    """
    thr = {k.lower(): v for k, v in {**MIN_OVERLAP, **(min_overlap or {})}.items()}
    n_dt = np.array([len(d) for d in dt], np.int64)
    n_gt = np.array([len(g) for g in gt], np.int64)
    d, g = concat_objects(dt), concat_objects(gt)
    d_names, g_names = lower_names(d), lower_names(g)
    out = np.full(len(d), MD, np.int8)
    if not len(overlaps.flat):
        return out
    di, gi = pair_index(n_dt, n_gt)
    iou = np.where(g_names[gi] == "dontcare", 0.0, overlaps.flat)
    same = d_names[di] == g_names[gi]
    # pairs are grouped by detection; within a detection the last after sorting by (IoU, same class) is its
    # maximum, a same-class box winning a tie
    order = np.lexsort((same, iou, di))
    last = order[np.r_[di[order][1:] != di[order][:-1], True]]
    det, best, best_same = di[last], iou[last], same[last]
    thr_of = np.array([thr.get(n, np.inf) for n in d_names[det]])
    cat = np.where(best <= 0, MD, np.where(~best_same, FC, np.where(best > thr_of, TD, FD)))
    out[det] = cat
    return out


def bug_rates(dt: Sequence[KittiObjects], gt: Sequence[KittiObjects], overlaps: FrameOverlaps, *,
              classes: Sequence[str] = CLASSES, min_score: float = 0.0,
              min_overlap: Mapping[str, float] | None = None) -> dict[str, dict[str, float]]:
    """``{cls: {"N_det", "N_TD", …, "BR_TD", "BR_FC", "BR_FD", "BR_MD"}}`` (rates in percent) for each of
    ``classes`` and `ALL` of them pooled."""
    cat = classify(dt, gt, overlaps, min_overlap)
    d = concat_objects(dt)
    names = lower_names(d)
    keep = d.score >= min_score
    out: dict[str, dict[str, float]] = {}
    for cls in (*classes, ALL):
        sel = keep & (np.isin(names, [c.lower() for c in classes]) if cls == ALL else names == cls.lower())
        counts = np.bincount(cat[sel], minlength=len(BUGS))
        n = int(sel.sum())
        row: dict[str, float] = {"N_det": n}
        for k, b in enumerate(BUGS):
            row[f"N_{b}"] = int(counts[k])
        for k, b in enumerate(BUGS):
            row[f"BR_{b}"] = float(counts[k] / n * 100) if n else float("nan")
        out[cls] = row
    return out


def corruption_risk(br: Mapping[tuple[str, int], Mapping[str, Mapping[str, float]]]) -> dict[str, Any]:
    """CR per corrupted partition, per corruption (mean over severities) and mCR, for every class of ``br``
    (``{(corruption, severity): bug_rates(...)}``, the clean partition ``("clean", 0)`` included)."""
    if ("clean", 0) not in br:
        raise ScoreError("bug-rate corruption risk needs the clean partition")
    clean = br[("clean", 0)]
    parts = sorted(k for k in br if k[0] != "clean")
    out: dict[str, Any] = {}
    for cls in clean:
        cr = {p: {f"CR_{b}": br[p][cls][f"BR_{b}"] - clean[cls][f"BR_{b}"] for b in BUGS} for p in parts}
        per = {}
        for c in dict.fromkeys(c for c, _ in parts):
            sev = {s: cr[(cc, s)] for cc, s in parts if cc == c}
            per[c] = {**{f"CR_{b}": float(np.mean([v[f"CR_{b}"] for v in sev.values()])) for b in BUGS},
                      "CR_by_severity": sev}
        out[cls] = {"BR_clean": {f"BR_{b}": clean[cls][f"BR_{b}"] for b in BUGS}, "per_corruption": per,
                    **{f"mCR_{b}": float(np.mean([v[f"CR_{b}"] for v in cr.values()])) if cr else float("nan")
                       for b in BUGS}}
    return out
