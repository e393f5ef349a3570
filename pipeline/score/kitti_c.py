"""Li et al. KITTI-C metrics (paper 001 §IV, Eq. 2–3): OA, CE_AP and mCE_AP.

OA of a partition = mean of the Easy/Moderate/Hard AP of a class (IoU 0.7 Car, 0.5 Pedestrian and
Cyclist). ``CE_{c,s} = OA_clean − OA_{c,s}``: the absolute AP drop in AP points, with no baseline
normaliser; the per-corruption CE_AP of Table VI is the mean over the 5 severities and
``mCE_AP = Σ_s Σ_c CE_{c,s} / (5·C)`` over the C corruptions (25 in the full benchmark). Computed for
every class and for 3D and BEV AP with 40 recall points; Table VI is Car, 3D.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from bench_build.score.validate import ScoreError


def overall_accuracy(ap: Mapping[str, Mapping[str, float]]) -> float:
    """Mean over the three difficulties of ``{"easy": {"AP_R40": …}, …}``."""
    return float(np.mean([ap[d]["AP_R40"] for d in ("easy", "moderate", "hard")]))


def kitti_c_metrics(oa: Mapping[tuple[str, int], float]) -> dict[str, Any]:
    """CE per corruption × severity, CE_AP per corruption and mCE_AP from per-partition OA (AP points)."""
    if ("clean", 0) not in oa:
        raise ScoreError("KITTI-C metrics need the clean partition")
    clean = oa[("clean", 0)]
    ce = {(c, s): clean - v for (c, s), v in oa.items() if c != "clean"}
    if not ce:
        raise ScoreError("KITTI-C metrics need at least one corrupted partition")
    corruptions = sorted({c for c, _ in ce})
    per = {c: {"CE_AP": float(np.mean([v for (cc, _), v in ce.items() if cc == c])),
               "OA": float(np.mean([oa[k] for k in ce if k[0] == c])),
               "CE_by_severity": {s: ce[(cc, s)] for (cc, s) in sorted(ce) if cc == c}} for c in corruptions}
    return {"OA_clean": clean, "per_corruption": per, "mCE_AP": float(np.mean(list(ce.values()))),
            "corruptions": len(corruptions)}
