"""ROC curve, AUROC and FPR at 95 % TPR without scikit-learn (same values as ``sklearn.metrics``)."""

from __future__ import annotations

import numpy as np

# NumPy 2 renamed trapz to trapezoid (and removed trapz); 1.26 has only trapz. Same arithmetic in both.
_trapezoid = getattr(np, "trapezoid", None) or np.trapz


def roc_curve(scores: np.ndarray, positive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(fpr, tpr) at every distinct threshold, highest first, starting at (0, 0) as scikit-learn's.

    A sample is accepted when its score is ≥ the threshold. Intermediate collinear points are kept
    (scikit-learn drops them); linear interpolation and the trapezoidal area are the same either way.
    """
    scores = np.asarray(scores, np.float64)
    positive = np.asarray(positive, bool)
    order = np.argsort(-scores, kind="mergesort")
    s, p = scores[order], positive[order]
    last_of_group = np.r_[np.nonzero(np.diff(s))[0], len(s) - 1]
    tps = np.cumsum(p)[last_of_group]
    fps = np.cumsum(~p)[last_of_group]
    n_pos, n_neg = int(p.sum()), int((~p).sum())
    tpr = np.r_[0.0, tps / n_pos] if n_pos else np.full(len(tps) + 1, np.nan)
    fpr = np.r_[0.0, fps / n_neg] if n_neg else np.full(len(fps) + 1, np.nan)
    return fpr, tpr


def auroc(scores: np.ndarray, positive: np.ndarray) -> float:
    """Area under the ROC curve; NaN when one class is absent."""
    positive = np.asarray(positive, bool)
    if positive.all() or not positive.any():
        return float("nan")
    fpr, tpr = roc_curve(scores, positive)
    return float(_trapezoid(tpr, fpr))


def fpr_at_tpr(scores: np.ndarray, positive: np.ndarray, tpr_level: float = 0.95) -> float:
    """FPR where the ROC reaches ``tpr_level``, linearly interpolated (3D_OS / ood-metrics ``fpr_at_95_tpr``):
    0 when no threshold reaches it, the smallest FPR among thresholds when all do."""
    positive = np.asarray(positive, bool)
    if positive.all() or not positive.any():
        return float("nan")
    fpr, tpr = roc_curve(scores, positive)
    if np.all(tpr < tpr_level):
        return 0.0
    if np.all(tpr >= tpr_level):
        return float(fpr[tpr >= tpr_level].min())
    return float(np.interp(tpr_level, tpr, fpr))


def fpr_span_at_tpr(scores: np.ndarray, positive: np.ndarray, tpr_level: float = 0.95) -> tuple[float, float] | None:
    """``(lowest, highest)`` FPR of the ROC points whose TPR is exactly ``tpr_level``, when they differ: the ROC runs
    flat there, so "the FPR at that TPR" is a range. `fpr_at_tpr` gives its high end (``np.interp`` on a run of equal
    x values takes the last), as 3D_OS does; the first threshold that reaches the TPR gives the low end. ``None``
    when the ROC is not flat at that TPR (then the two readings agree)."""
    positive = np.asarray(positive, bool)
    if positive.all() or not positive.any():
        return None
    fpr, tpr = roc_curve(scores, positive)
    at = fpr[tpr == tpr_level]
    if len(at) < 2 or at.min() == at.max():
        return None
    return float(at.min()), float(at.max())
