"""Robo3D metrics (Kong et al., ICCV 2023, §3.3 Eq. 3–4; Appendix §9): CE/mCE against a baseline model,
RR/mRR against the model's own clean accuracy, and mIoU for segmentation.

Accuracies are in percent (mIoU for segmentation, AP for KITTI-C detection, NDS for nuScenes-C
detection). With 3 levels, ``CE_i = Σ_l (1 − Acc_il) / Σ_l (1 − Acc^base_il)`` and the paper's
baseline tables give the level average, so the denominator is ``3 · (1 − base_i)``;
``RR_i = Σ_l Acc_il / (3 · Acc_clean)``. Both are reported in percent, rounded to 2 decimals as the
paper's tables are (unrounded values are kept under ``*_exact``). Baselines (MinkUNet-18 for
segmentation, CenterPoint / CenterPoint-PP for detection) are the data file ``baselines/robo3d.json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from bench_build.score.baselines import robo3d_baseline
from bench_build.score.validate import ScoreError


def robo3d_metrics(acc: Mapping[tuple[str, int], float], table: str) -> dict[str, Any]:
    """mCE/mRR from per-partition accuracy in percent: ``{("clean", 0): 68.7, ("fog", 1): 55.0, …}``.

    Every corruption of the baseline ``table`` must be present with the same number of levels.
    """
    base = robo3d_baseline(table)["values"]
    if ("clean", 0) not in acc:
        raise ScoreError("Robo3D metrics need the clean accuracy (severity 0)")
    clean = float(acc[("clean", 0)])
    corruptions = [c for c in base if c != "clean"]
    per: dict[str, dict[str, float]] = {}
    levels_seen = set()
    for c in corruptions:
        levels = sorted((s, float(v)) for (cc, s), v in acc.items() if cc == c)
        if not levels:
            raise ScoreError(f"Robo3D {table}: no accuracy for corruption {c}")
        levels_seen.add(tuple(s for s, _ in levels))
        vals = np.array([v for _, v in levels]) / 100.0
        ce = float(np.sum(1 - vals) / (len(vals) * (1 - base[c] / 100.0)))
        rr = float(np.sum(vals) / (len(vals) * clean / 100.0)) if clean > 0 else float("nan")
        per[c] = {"acc": round(float(np.mean(vals)) * 100, 2), "CE": round(ce * 100, 2), "RR": round(rr * 100, 2),
                  "CE_exact": ce * 100, "RR_exact": rr * 100}
    if len(levels_seen) > 1:
        raise ScoreError(f"Robo3D {table}: corruptions have different severity levels: {sorted(levels_seen)}")
    extra = sorted({c for c, _ in acc} - set(corruptions) - {"clean"})
    if extra:
        raise ScoreError(f"Robo3D {table}: corruptions without a baseline: {', '.join(extra)}")
    m_ce = float(np.mean([per[c]["CE_exact"] for c in corruptions]))
    m_rr = float(np.mean([per[c]["RR_exact"] for c in corruptions]))
    out = {"clean": clean, "per_corruption": per, "mCE": round(m_ce, 2), "mRR": round(m_rr, 2),
           "mCE_exact": m_ce, "mRR_exact": m_rr, "baseline": robo3d_baseline(table)["model"]}
    if not clean > 0:  # said, not a bare nan beside mCE
        out["note"] = (f"no RR/mRR (nan): the clean accuracy is {clean:g} and RR divides by it "
                       "(RR_i = Σ_l Acc_il / (3 · Acc_clean)); mCE compares with the baseline and stands")
    return out


def confusion(gt: np.ndarray, pred: np.ndarray, num_classes: int, ignore_label: int | None) -> np.ndarray:
    """``num_classes × num_classes`` counts (rows = ground truth) of one example's points."""
    gt = np.asarray(gt, dtype=np.int64)
    pred = np.asarray(pred, dtype=np.int64)
    keep = np.ones(len(gt), bool) if ignore_label is None else gt != ignore_label
    return np.bincount(gt[keep] * num_classes + pred[keep], minlength=num_classes * num_classes).reshape(
        num_classes, num_classes)


def miou(conf: np.ndarray, ignore_label: int | None = None) -> tuple[float, np.ndarray]:
    """(mIoU in percent, per-class IoU) from a confusion matrix; classes absent from both ground truth
    and predictions (union 0) are NaN and left out of the mean (mmdet3d's ``nanmean``)."""
    tp = np.diag(conf).astype(np.float64)
    union = conf.sum(0) + conf.sum(1) - tp
    with np.errstate(invalid="ignore", divide="ignore"):
        iou = np.where(union > 0, tp / np.maximum(union, 1), np.nan)
    if ignore_label is not None and 0 <= ignore_label < len(iou):
        iou[ignore_label] = np.nan
    return float(np.nanmean(iou) * 100) if np.isfinite(iou).any() else float("nan"), iou
