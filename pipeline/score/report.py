"""Printing a `ScoreReport` as tables (rich)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from pipeline.score.run import ScoreReport


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return "nan" if v != v else f"{v:.4g}" if abs(v) < 1 else f"{v:.2f}"
    return str(v)


def print_report(report: ScoreReport, console: Console) -> None:
    """Per-partition metrics (one column per metric), then the headline numbers."""
    metrics = list(dict.fromkeys(r["metric"] for r in report.rows))
    oa = [m for m in metrics if m.endswith("/OA")]  # Li et al.: OA per class and AP kind; APs are in the files
    shown = oa or [m for m in metrics if not m.endswith(("/easy/AP_R40", "/hard/AP_R40"))][:10]
    table = Table(title=f"{report.dataset} {report.version}: {report.metric}")
    table.add_column("corruption")
    table.add_column("severity", justify="right")
    for m in shown:
        table.add_column(m, justify="right")
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for r in report.rows:
        cells.setdefault((r["corruption"], str(r["severity"])), {})[r["metric"]] = r["value"]
    for (c, s), vals in cells.items():
        table.add_row(c, s, *[_fmt(vals.get(m, "")) for m in shown])
    console.print(table)
    if "note" in report.summary:
        console.print(report.summary["note"])
    headline = _headline(report.summary)
    if headline:
        console.print("  ".join(f"[bold]{k}[/bold] {_fmt(v)}" for k, v in headline.items()))


def _headline(summary: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    keys = ("mCE", "RmCE", "mOA", "mRR", "mCE_AP", "OA_clean", "AUROC", "FPR95")
    out: dict[str, Any] = {}
    for k, v in summary.items():
        if k in keys and isinstance(v, int | float):
            out[prefix + k] = v
        elif isinstance(v, dict) and k != "per_corruption" and not prefix:
            out.update(_headline(v, f"{k} "))
    return out
