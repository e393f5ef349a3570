"""ModelNet-C metrics (Ren et al., ICML 2022, §3.2 Eq. 1–4), computed exactly as the authors' ``eval.py``.

Per corruption the OA of the 5 levels is averaged and rounded to 3 decimals; the clean OA is rounded
to 3 decimals; ``CE = (1 − OA_c) / (1 − DGCNN_c)`` and ``RCE = (OA_clean − OA_c) / (DGCNN_clean − DGCNN_c)``
use those rounded OAs and are rounded to 3 decimals each; mCE, RmCE and mOA are the means of the
rounded per-corruption values over the 7 corruptions, rounded again. Python's ``round`` (half to even
on the binary value) is used, as in ``eval.py``. DGCNN's normalisers are the data file
``baselines/modelnet_c_dgcnn.json``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bench_build.score.baselines import dgcnn_oa
from bench_build.score.validate import ScoreError

CORRUPTIONS = ("scale", "jitter", "rotate", "dropout_global", "dropout_local", "add_global", "add_local")
#: names a recipe may use for eval.py's corruptions
ALIASES = {"drop_global": "dropout_global", "drop_local": "dropout_local"}


def canonical(name: str) -> str:
    return ALIASES.get(name, name)


def modelnet_c_metrics(oa: Mapping[tuple[str, int], float]) -> dict[str, Any]:
    """Metrics from per-partition OA: ``{("clean", 0): 0.93, ("jitter", 1): 0.9, …}`` (levels 1…5).

    Returns ``{"OA_clean", "per_corruption": {c: {"OA", "CE", "RCE"}}, "mCE", "RmCE", "mOA"}``.
    """
    base = dgcnn_oa()
    if ("clean", 0) not in oa:
        raise ScoreError("ModelNet-C metrics need the clean OA (severity 0)")
    oa_clean = round(oa[("clean", 0)], 3)
    by_corruption: dict[str, list[float]] = {}
    for (c, s), v in oa.items():
        if c != "clean":
            by_corruption.setdefault(canonical(c), []).append((s, v))  # type: ignore[arg-type]
    missing = [c for c in CORRUPTIONS if c not in by_corruption]
    if missing:
        raise ScoreError(f"ModelNet-C metrics need all 7 corruptions; missing {', '.join(missing)}")
    unknown = sorted(set(by_corruption) - set(CORRUPTIONS))
    if unknown:
        raise ScoreError(f"not ModelNet-C corruptions: {', '.join(unknown)}")
    per: dict[str, dict[str, float]] = {}
    for c in CORRUPTIONS:
        levels = sorted(by_corruption[c])  # type: ignore[arg-type]
        if [s for s, _ in levels] != [1, 2, 3, 4, 5]:
            raise ScoreError(f"ModelNet-C corruption {c}: need levels 1–5, got {[s for s, _ in levels]}")
        mean_oa = round(sum(v for _, v in levels) / len(levels), 3)
        ce = round((1 - mean_oa) / (1 - base[c]), 3)
        rce = round((oa_clean - mean_oa) / (base["clean"] - base[c]), 3)
        per[c] = {"OA": mean_oa, "CE": ce, "RCE": rce}
    return {
        "OA_clean": oa_clean,
        "per_corruption": per,
        "mCE": _mean3([per[c]["CE"] for c in CORRUPTIONS]),
        "RmCE": _mean3([per[c]["RCE"] for c in CORRUPTIONS]),
        "mOA": _mean3([per[c]["OA"] for c in CORRUPTIONS]),
    }


def _mean3(values: Sequence[float]) -> float:
    return round(sum(values) / len(values), 3)
