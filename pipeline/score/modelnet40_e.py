"""ModelNet40-E metrics (paper 003; the authors' ``metrics.py``): accuracy, ECE, AUROC of error
detection and the Pearson correlation of the shape's mean noise σ with the predicted uncertainty.

- accuracy: argmax of the probabilities vs the label;
- ECE: 10 equal-width confidence bins on [0, 1] (confidence = max probability), the first bin
  [0, 0.1] closed, the others (lo, hi]; ``Σ n_i/N · |mean conf_i − mean acc_i|``, empty bins skipped;
- AUROC: positive = misclassified example, score = 1 − p_max (``roc_auc_score(errors, 1 − p_max)``);
  NaN when all examples are right or all wrong;
- Pearson: as the authors compute it — both series standardised with the unbiased std, then the
  mean of the products, i.e. (n − 1)/n times the textbook r; NaN for n < 2 or a std below 1e-6.
  "all" over every example, "correct" over the correctly classified ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bench_build.score.rank import auroc


def accuracy(probs: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(np.argmax(probs, axis=1) == labels))


def ece(probs: np.ndarray, labels: np.ndarray, n_bins: int = 10) -> float:
    conf = probs.max(axis=1)
    correct = (probs.argmax(axis=1) == labels).astype(np.float64)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    # bin i holds (edges[i], edges[i+1]]; bin 0 also holds exactly 0
    idx = np.clip(np.searchsorted(edges, conf, side="left") - 1, 0, n_bins - 1)
    total = 0.0
    n = len(labels)
    for i in range(n_bins):
        m = idx == i
        k = int(m.sum())
        if k:
            total += k / n * abs(float(conf[m].mean()) - float(correct[m].mean()))
    return total


def error_auroc(probs: np.ndarray, labels: np.ndarray) -> float:
    errors = probs.argmax(axis=1) != labels
    return auroc(1.0 - probs.max(axis=1), errors)


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    x = np.asarray(x, np.float64).ravel()
    y = np.asarray(y, np.float64).ravel()
    if len(x) < 2:
        return float("nan")
    sx, sy = x.std(ddof=1), y.std(ddof=1)
    if sx < 1e-6 or sy < 1e-6:
        return float("nan")
    return float(np.mean((x - x.mean()) / sx * (y - y.mean()) / sy))


def modelnet40_e_metrics(probs: np.ndarray, labels: np.ndarray, sigma_mean: np.ndarray | None) -> dict[str, Any]:
    """Metrics of one set of examples (a level, or the noisy levels pooled)."""
    probs = np.asarray(probs, np.float64)
    labels = np.asarray(labels, np.int64)
    out: dict[str, Any] = {"n": len(labels), "accuracy": accuracy(probs, labels), "ECE": ece(probs, labels),
                           "AUROC_error": error_auroc(probs, labels)}
    if sigma_mean is not None:
        unc = 1.0 - probs.max(axis=1)
        correct = probs.argmax(axis=1) == labels
        out["pearson_all"] = pearson(sigma_mean, unc)
        out["pearson_correct"] = pearson(np.asarray(sigma_mean)[correct], unc[correct]) if correct.any() \
            else float("nan")
    return out
