"""Printing a `ScoreReport` as tables (rich)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from bench_build.score.bug_rates import BUGS
from bench_build.score.robo3d_det import PRINTED  # Robo3D nuScenes-C / WOD-C detection: the means, not per class
from bench_build.score.run import PERCENT, ScoreReport, unit_of


def _fmt(v: Any) -> str:
    if v is None:  # not computed (e.g. NDS without ground-truth velocities)
        return "—"
    if isinstance(v, float):
        return "nan" if v != v else f"{v:.4g}" if abs(v) < 1 else f"{v:.2f}"
    return str(v)


def print_report(report: ScoreReport, console: Console) -> None:
    """Per-partition metrics (one column per metric), then the headline numbers. Into a file or a pipe (a CI log,
    ``> scores.txt``) the tables keep their natural width: Rich's 80 columns would cut every header and value."""
    if not console.is_terminal:
        console = Console(file=console.file, width=10_000, soft_wrap=True, color_system=None)
    if report.metric == "3dos":
        _print_open_set(report, console)
    else:
        _print_partitions(report, console)
    for note in report.notes:
        console.print(f"note: {note}", highlight=False)


def _print_partitions(report: ScoreReport, console: Console) -> None:
    metrics = list(dict.fromkeys(r["metric"] for r in report.rows))
    oa = [m for m in metrics if m.endswith("/OA")]  # Li et al.: OA per class and AP kind; APs are in the files
    shown = oa or [m for m in metrics if not m.endswith(("/easy/AP_R40", "/hard/AP_R40", "/AP_R11"))][:10]

    shown = [m for m in PRINTED[report.metric] if m in metrics] if report.metric in PRINTED else shown
    units = sorted({f"{m} in {unit_of(m)}" for m in shown if unit_of(m) not in (PERCENT, "count")})
    table = Table(title=f"{report.dataset} {report.version}: {report.metric} (values in %"
                        + "".join(f"; {u}" for u in units) + ")")
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
    bugs = ("/N_det", *(f"/{k}_{b}" for k in ("BR", "CR") for b in BUGS))  # in the bug-rate table below
    hidden = [m for m in metrics if m not in shown and not m.endswith(bugs)]
    if hidden:
        console.print(f"({len(hidden)} more metric{'s' * (len(hidden) != 1)} per partition, e.g. {hidden[0]}: in "
                      "--out's CSV and JSON)", highlight=False)
    if "note" in report.summary:  # why a mean is missing (e.g. no clean partition in a partial pull)
        console.print(f"note: {report.summary['note']}", markup=False, highlight=False)
    headline = _headline(report.summary)
    if headline:
        console.print("  ".join(f"[bold]{k}[/bold] {_fmt(v)}" for k, v in headline.items()))
    if any(m.endswith("/BR_TD") for m in metrics):
        _print_bug_rates(report, console)


def _print_bug_rates(report: ScoreReport, console: Console) -> None:
    """Li et al.'s bug rates: one row per partition and detected class, BR (%) and CR against clean, then mCR."""

    classes = list(dict.fromkeys(r["metric"].rpartition("/")[0] for r in report.rows
                                 if r["metric"].endswith("/BR_TD")))
    table = Table(title="bug rates (%): TD true detection, FC false classification, FD false detection, "
                        "MD missed detection; CR = BR − BR_clean")
    for col in ("corruption", "severity", "class", "N_det", *(f"BR_{b}" for b in BUGS), *(f"CR_{b}" for b in BUGS)):
        table.add_column(col, justify="left" if col in ("corruption", "class") else "right")
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for r in report.rows:
        cells.setdefault((r["corruption"], str(r["severity"])), {})[r["metric"]] = r["value"]
    for (c, s), vals in cells.items():
        for cls in classes:
            if f"{cls}/N_det" not in vals:
                continue
            table.add_row(c, s, cls, str(vals[f"{cls}/N_det"]),
                          *(_rate(vals.get(f"{cls}/{kind}_{b}")) for kind in ("BR", "CR") for b in BUGS))
    console.print(table)
    for cls, r in (report.summary.get("bug_rates") or {}).items():
        console.print(f"[bold]{cls}[/bold] " + "  ".join(f"mCR_{b} {_rate(r[f'mCR_{b}'])}" for b in BUGS))


def _rate(v: Any) -> str:
    return "" if v is None else "nan" if v != v else f"{v:.2f}"


def _headline(summary: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    keys = ("mCE", "RmCE", "mOA", "mRR", "mCE_AP", "OA_clean", "AUROC", "FPR95")
    out: dict[str, Any] = {}
    for k, v in summary.items():
        if k in keys and isinstance(v, int | float):
            out[prefix + k] = v
        elif isinstance(v, dict) and k != "per_corruption" and not prefix:
            out.update(_headline(v, f"{k} "))
    return out


def _print_open_set(report: ScoreReport, console: Console) -> None:
    """3DOS: one row per scenario × unknown set (and their union)."""
    table = Table(title=f"{report.dataset} {report.version}: known (positive) vs unknown (AUROC, FPR95 in %)")
    for col in ("scenario", "unknown", "AUROC", "FPR95", "known", "unknown n"):
        table.add_column(col, justify="left" if col in ("scenario", "unknown") else "right")
    by_scenario = report.summary if all(isinstance(v, dict) and "AUROC" not in v
                                        for v in report.summary.values()) else {"—": report.summary}
    for sc, sets in by_scenario.items():
        for name, v in sets.items():
            table.add_row(sc, name, _fmt(v["AUROC"]), _fmt(v["FPR95"]), str(v["n_known"]), str(v["n_unknown"]))
    console.print(table)
