"""The snow realism section of a validation report (`realism.realism_report`'s result, shown three ways): the
histograms PNG, the summary.md section and the terminal line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bench_build.storage import atomic_write_with
from bench_build.validate.realism import QUANTITIES


def plot_realism(path: Path, corruption: str, section: dict[str, Any], arrays: dict[str, Any]) -> None:
    """Side-by-side histograms of range, elevation and relative intensity: real snow vs each severity."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt


    real = arrays["real"]
    sims = arrays["simulated"][corruption]
    # overlaid per quantity (real filled, each severity a line), the three quantities side by side
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), dpi=100)
    sens = section["sensors"]
    band = section["corruptions"][corruption][str(next(iter(sims)))]["distances"]["common_band"] if sims else None
    for ax, (q, what) in zip(axes, QUANTITIES.items(), strict=True):
        groups = {"real": np.concatenate([s[q] for s in real])} | {
            s: np.concatenate([x[q] for x in scans]) if scans else np.zeros(0) for s, scans in sims.items()}
        groups = {k: v[np.isfinite(v)] for k, v in groups.items()}
        every = np.concatenate(list(groups.values()))
        top = float(np.percentile(every, 99)) if every.size else 1.0
        lo_hi = {"range": (0.0, max(20.0, top)), "elevation": (-26.0, 16.0), "intensity_rel": (0.0, max(1.0, top))}[q]
        bins = np.linspace(*lo_hi, 61)
        ax.hist(groups.pop("real"), bins=bins, density=True, histtype="stepfilled", alpha=0.35, color="#d62728",
                label=f"real (WADS, {sens['real']['beams']} beams)")
        for s, v in groups.items():
            ax.hist(v, bins=bins, density=True, histtype="step", linewidth=1.4, label=f"{corruption} sev {s}")
        if band is not None and q in ("range", "elevation"):
            spans = band["range_bins_m"] if q == "range" else [band["elevation_deg"]]
            spans = [(max(a, lo_hi[0]), min(b, lo_hi[1])) for a, b in spans if a < lo_hi[1] and b > lo_hi[0]]
            for i, (a, b) in enumerate(spans):
                ax.axvspan(a, b, color="grey", alpha=0.08, label="seen by both" if i == 0 else None)
        ax.set_xlim(*lo_hi)
        ax.set_xlabel(what)
        ax.set_ylabel("density")
        ax.legend(fontsize=7)
    fig.suptitle(f"falling snow: real WADS ({sens['real']['name']}) vs simulated {corruption} "
                 f"({sens['simulated']['name']})", fontsize=9)
    fig.tight_layout()
    atomic_write_with(path, lambda tmp: fig.savefig(tmp, format="png"))
    plt.close(fig)


def console_line(section: dict[str, Any]) -> str:
    """One line for the terminal: falling-snow share and median range, real vs each simulated severity."""
    def snow(x: dict[str, Any]) -> str:
        p50 = x["range_p5_p50_p95"][1] if x["range_p5_p50_p95"] else float("nan")
        return f"{100 * (x['share']['mean'] or 0.0):.1f} % of the scan, range p50 {p50:.1f} m"

    sims = "; ".join(f"{c} {s}: {snow(v)}" for c, sevs in section["corruptions"].items() for s, v in sevs.items())
    return f"  falling snow — real WADS: {snow(section['real'])}; {sims}"


def render_realism(section: dict[str, Any]) -> list[str]:
    """The summary.md section (the real-vs-simulated snow table, regenerated, plus the distances)."""
    if "skipped" in section:
        if not section.get("snow_like"):
            return []
        return ["## Snow realism against labelled real snow", "", f"Skipped: {section['skipped']}.", ""]
    sens = section["sensors"]
    dup = "kept" if sens["real"]["duplicates"] == "keep" else "dropped"
    dup += f" ({section['real']['duplicate_rows']:,} of {section['real']['raw_rows']:,} raw rows)"

    def row(label: str, s: dict[str, Any]) -> str:
        sh = s["share"]
        share = "n/a" if sh["min"] is None else f"{100 * sh['min']:.1f}–{100 * sh['max']:.1f} %"
        rp = s["range_p5_p50_p95"]
        ep = s["elevation_p5_p50_p95"]
        rel = "n/a" if s["intensity_rel_mean"] is None else f"{s['intensity_rel_mean']:.2f}"
        z = "n/a" if s["intensity_zero_share"] is None else f"{100 * s['intensity_zero_share']:.1f} %"
        dens = "n/a" if s["density_median"] is None else \
            f"{s['density_median']:.0f} ({s['density_per_100k_median']:.2f})"
        return (f"| {label} | {s['scans']} | {share} | {' / '.join(f'{v:.1f}' for v in rp) if rp else 'n/a'} | "
                f"{' / '.join(f'{v:.1f}' for v in ep) if ep else 'n/a'} | {rel} | {z} | {dens} |")

    lines = ["## Snow realism against labelled real snow (WADS)", "",
             f"Real: WADS falling snow (label 110) from `{section['real']['dir']}`, sensor {sens['real']['name']} "
             f"({sens['real']['beams']} beams), exact duplicate rows {dup}. Simulated: points tagged "
             f"SCATTER_SNOW, sensor {sens['simulated']['name']} ({sens['simulated']['beams'] or '?'} beams).", "",
             "| falling snow | scans | share of the scan | range p5 / p50 / p95 (m) | elevation p5 / p50 / p95 (°) | "
             "intensity ÷ scene median (mean) | intensity = 0 | density within 1 m, median (per 100k pts) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |",
             row("real WADS", section["real"])]
    for c, sevs in section["corruptions"].items():
        for s, summ in sevs.items():
            lines.append(row(f"{c} severity {s}", summ))
    lines += ["", f"Accumulated snow (WADS 111, no simulated counterpart): "
                  f"{100 * section['real']['accumulated_share_mean']:.1f} % of the real scans.", "",
              "Two-sample distances, simulated vs real snow points, on the range bins and elevation band both "
              "sensors see:", "",
              "| corruption | severity | common range band (m) | quantity | Wasserstein-1 | KS statistic | "
              "KS p-value | n sim / real |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c, sevs in section["corruptions"].items():
        for s, summ in sevs.items():
            d = summ["distances"]
            band = ", ".join(f"{a:g}–{b:g}" for a, b in d["common_band"]["range_bins_m"]) or "none"
            for r in d["quantities"].values():
                if "skipped" in r:
                    lines.append(f"| {c} | {s} | {band} | {r['what']} | — | — | — | {r['skipped']} |")
                else:
                    lines.append(f"| {c} | {s} | {band} | {r['what']} | {r['wasserstein']:.4g} | "
                                 f"{r['ks_statistic']:.3f} | {r['ks_p_value']:.3g} | "
                                 f"{r['n_simulated']} / {r['n_real']} |")
    lines += ["", "Sensor dependence (read before comparing):", "", *[f"- {f}" for f in section["flags"]], ""]
    for c in section["corruptions"]:
        lines += [f"![{c}: simulated vs real WADS falling snow](realism_{c}.png)", ""]
    return lines
