"""3DOS metrics (Alliegro et al., NeurIPS 2022 D&B; ``utils/ood_metrics.py`` of 3D_OS): AUROC and
FPR95 of known (in-distribution, **positive**) vs unknown examples from a per-example normality
score (higher = more likely known: MSP, max logit, energy, …).

FPR95 is the fraction of unknown examples accepted at the threshold that accepts 95 % of the known
ones, linearly interpolated on the ROC (``np.interp(0.95, tpr, fpr)``). Reported for the known test
set vs each unknown set and vs their union ("big target"). Where the ROC runs flat at exactly 95 % TPR (the 95th
percentile of the known scores falls in a gap between them, with unknown scores in the gap), that form gives the
FPR at the flat stretch's far end; the value is kept, for parity with the published numbers, and the stretch is
returned so that the caller can say so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from bench_build.score.rank import auroc, fpr_at_tpr, fpr_span_at_tpr
from bench_build.score.validate import ScoreError


def open_set_metrics(known_scores: np.ndarray, unknown_scores: Mapping[str, np.ndarray],
                     flat: dict[str, tuple[float, float]] | None = None) -> dict[str, Any]:
    """``{"<unknown set>": {"AUROC", "FPR95", "n_known", "n_unknown"}, …, "union": {…}}`` (fractions). ``flat``, when
    given, receives ``{"<unknown set>": (low, high)}`` for each set whose ROC is flat at exactly 95 % TPR."""
    known = np.asarray(known_scores, np.float64)
    if len(known) == 0:
        raise ScoreError("3DOS metrics need known (in-distribution) examples")
    out: dict[str, Any] = {}
    sets = {name: np.asarray(s, np.float64) for name, s in unknown_scores.items() if len(s)}
    if not sets:
        raise ScoreError("3DOS metrics need unknown (out-of-distribution) examples")
    if len(sets) > 1:
        sets["union"] = np.concatenate(list(sets.values()))
    for name, unk in sets.items():
        scores = np.r_[known, unk]
        positive = np.r_[np.ones(len(known), bool), np.zeros(len(unk), bool)]
        out[name] = {"AUROC": auroc(scores, positive), "FPR95": fpr_at_tpr(scores, positive, 0.95),
                     "n_known": len(known), "n_unknown": len(unk)}
        span = fpr_span_at_tpr(scores, positive, 0.95) if flat is not None else None
        if span is not None:
            flat[name] = span
    return out
