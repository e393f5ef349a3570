"""The one unit convention of `score` outputs, checked on every benchmark's report (tests of each metric call it)."""

from __future__ import annotations

import math
from typing import Any

from bench_build.score.run import PERCENT, unit_of

# relative to a baseline or to clean: may leave 0–100 (worse than the baseline, better than clean, negative change)
RELATIVE = ("CE", "RCE", "CR_", "mCE", "RmCE", "RR", "mRR", "CE_AP", "mCE_AP")


def assert_units(report: Any) -> None:
    """Every row (a `ScoreReport` or its written JSON) names its unit, the one `unit_of` gives; a percentage that
    is not relative lies in [0, 100]; counts are whole numbers."""
    rows = report["rows"] if isinstance(report, dict) else report.rows
    assert rows, "no rows"
    for r in rows:
        assert r["unit"] == unit_of(r["metric"]), r
        v = r["value"]
        if not isinstance(v, int | float) or (isinstance(v, float) and not math.isfinite(v)):
            continue
        last = r["metric"].rpartition("/")[2]
        if r["unit"] == PERCENT and not last.startswith(RELATIVE):
            assert -1e-9 <= v <= 100 + 1e-9, r
        if r["unit"] == "count":
            assert float(v).is_integer() and v >= 0, r
    if isinstance(report, dict):
        assert "percent" in report["units"]
