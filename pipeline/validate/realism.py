"""Per-point realism of simulated snow against labelled real snowfall (WADS), beside the classifier's verdict.

The classifier answers "does a whole scan look snowy?"; this answers what a researcher asks first: does the
simulated snow sit where real snow sits, and is it as dark? For every snow-like corruption of a build
(stage `snow` or `snow_lisa`, or any partition whose points are tagged ``SCATTER_SNOW``) and each severity,
against WADS's falling-snow points (class 110):

- **share** of the scan that is falling snow (simulated: ``point_tag == SCATTER_SNOW``; real: label 110);
- **range** (3-D, m) and **elevation** (deg) of those points, 5th / 50th / 95th percentile;
- **intensity relative to the scene**: each snow point's intensity ÷ the median intensity of the same scan's
  other points (both on [0, 1] after the source's declared scale), so the sensors' intensity scales cancel;
  also the share of snow points with intensity exactly 0;
- **local density**: other falling-snow points within `DENSITY_RADIUS` of each one — raw, and per 100k
  points of the scan (a sensor that fires more beams samples the same snow more densely);
- **two-sample distances** between simulated and real snow points — Wasserstein-1 and Kolmogorov–Smirnov
  (``scipy.stats``) on range, elevation and relative intensity — computed only on the **range bins both
  sensors see** (1 m bins holding ≥ `SEEN_SHARE` of each side's points) and the elevation band both cover.

Sensor dependence is never silent: each side's sensor (name, beams), its nearest return (blind zone), its
elevation span and declared intensity scale are in the report, and every quantity carries whether it was
normalised, restricted to the common band, or is flagged as sensor-dependent.

Accumulated snow (WADS 111) has no counterpart in the simulators (they scatter beams in the air; snow on the
ground is a different corruption), so it is reported for the real side only.

The report's PNG, its summary.md section and its terminal line are drawn by `realism_report`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy.spatial import cKDTree
from scipy.stats import ks_2samp, wasserstein_distance

from bench_build.format.checked import CheckedParquetFile
from bench_build.format.compact import materialize
from bench_build.format.schema import decode_points, file_metadata
from bench_build.sources.wads import VLS128, duplicate_first
from bench_build.stages.frame import INTENSITY_SCALES, PointTag
from bench_build.validate.extract import read_wads

SNOW_STAGES = ("snow", "snow_lisa")
DENSITY_RADIUS = 1.0  # m
SEEN_SHARE = 5e-4  # a range bin is "seen" by a sensor when ≥ 0.05 % of its points fall in it
RANGE_BIN = 1.0  # m
MAX_RANGE_BIN = 120.0  # m
MAX_SCANS = 50  # scans per side (real) / per severity (simulated), a seeded subset
MAX_DISTANCE_POINTS = 20000  # snow points per side for the two-sample tests, a seeded subset
EXTENT_POINTS = 20000  # points per scan kept (evenly strided) to find the ranges / elevations a sensor sees
QUANTITIES = {"range": "range (m)", "elevation": "elevation (deg)", "intensity_rel": "intensity ÷ scene median"}
#: the build source's sensor when its manifest does not name one (source kind → name, beams)
SOURCE_SENSORS = {"kitti": ("velodyne-hdl64e", 64), "semantickitti": ("velodyne-hdl64e", 64),
                  "nuscenes": ("velodyne-hdl32e", 32), "waymo": ("waymo-top", 64)}


def snow_like_corruptions(manifest: dict[str, Any]) -> list[str]:
    """Corruptions of a build whose stage simulates falling snow."""
    return [c["name"] for c in manifest["recipe"]["corruptions"] if c.get("stage") in SNOW_STAGES]


def scan_quantities(points: np.ndarray, intensity_col: int, scale: str, snow: np.ndarray) -> dict[str, Any]:
    """One scan's facts and its falling-snow points' per-point quantities (``snow`` is a boolean mask). Rows at
    exactly (0, 0, 0) are not returns (LISA keeps a lost return's row there, `keep_lost_rows`): left out of every
    quantity, or the simulated sensor would seem to see down to 0 m and its shares would be diluted."""

    returned = np.any(points[:, :3] != 0, axis=1)
    n_lost = int(len(points) - returned.sum())
    points, snow = points[returned], snow[returned]
    xyz = points[:, :3].astype(np.float64)
    rng_all = np.linalg.norm(xyz, axis=1)
    elev_all = np.degrees(np.arctan2(xyz[:, 2], np.hypot(xyz[:, 0], xyz[:, 1])))
    inten = points[:, intensity_col].astype(np.float64) / INTENSITY_SCALES[scale]
    rest = ~snow
    median = float(np.median(inten[rest])) if rest.any() else float("nan")
    n_snow = int(snow.sum())
    if n_snow > 1:
        tree = cKDTree(xyz[snow])
        density = tree.query_ball_point(xyz[snow], DENSITY_RADIUS, return_length=True).astype(np.float64) - 1
    else:
        density = np.zeros(n_snow)
    rel = inten[snow] / median if median > 0 else np.full(n_snow, np.nan)
    # the whole scan only says where the sensor sees: an evenly strided subset keeps memory flat on big builds
    stride = np.unique(np.linspace(0, len(points) - 1, min(len(points), EXTENT_POINTS)).astype(np.int64))
    return {"n_points": len(points), "n_lost": n_lost, "n_snow": n_snow, "scene_median_intensity": median,
            "range": rng_all[snow], "elevation": elev_all[snow], "intensity": inten[snow], "intensity_rel": rel,
            "density": density, "density_per_100k": density * 1e5 / max(len(points), 1),
            "nearest": float(rng_all.min()) if len(points) else float("nan"),
            "range_all": rng_all[stride].astype(np.float32), "elevation_all": elev_all[stride].astype(np.float32)}


def _pcts(v: np.ndarray) -> list[float] | None:
    v = v[np.isfinite(v)]
    return [round(float(x), 4) for x in np.percentile(v, [5, 50, 95])] if v.size else None


def summarise(scans: list[dict[str, Any]]) -> dict[str, Any]:
    """Aggregate per-scan quantities of one side (real, or one simulated severity)."""
    share = np.array([s["n_snow"] / max(s["n_points"], 1) for s in scans])
    cat = {k: np.concatenate([s[k] for s in scans]) if scans else np.zeros(0)
           for k in ("range", "elevation", "intensity", "intensity_rel", "density", "density_per_100k")}
    rng_all = np.concatenate([s["range_all"] for s in scans]) if scans else np.zeros(0)
    elev_all = np.concatenate([s["elevation_all"] for s in scans]) if scans else np.zeros(0)
    rel = cat["intensity_rel"][np.isfinite(cat["intensity_rel"])]
    return {
        "scans": len(scans), "snow_points": int(sum(s["n_snow"] for s in scans)),
        "share": {"min": float(share.min()) if share.size else None, "max": float(share.max()) if share.size else None,
                  "mean": float(share.mean()) if share.size else None},
        "range_p5_p50_p95": _pcts(cat["range"]), "range_min": float(cat["range"].min()) if cat["range"].size else None,
        "elevation_p5_p50_p95": _pcts(cat["elevation"]),
        "intensity_rel_mean": float(rel.mean()) if rel.size else None,
        "intensity_rel_p5_p50_p95": _pcts(rel),
        "intensity_zero_share": float((cat["intensity"] == 0).mean()) if cat["intensity"].size else None,
        "scene_median_intensity": float(np.median([s["scene_median_intensity"] for s in scans])) if scans else None,
        "density_median": float(np.median(cat["density"])) if cat["density"].size else None,
        "density_per_100k_median": float(np.median(cat["density_per_100k"])) if cat["density"].size else None,
        "sensor_extent": {"nearest_return_p01": float(np.percentile(rng_all, 1)) if rng_all.size else None,
                          "nearest_return": float(min(s["nearest"] for s in scans)) if scans else None,
                          "elevation_p0_5": float(np.percentile(elev_all, 0.5)) if elev_all.size else None,
                          "elevation_p99_5": float(np.percentile(elev_all, 99.5)) if elev_all.size else None},
    }


def seen_bins(range_all: np.ndarray) -> np.ndarray:
    """Boolean per `RANGE_BIN` bin over [0, `MAX_RANGE_BIN`): does this side's sensor return points there?"""
    hist, _ = np.histogram(range_all, bins=np.arange(0.0, MAX_RANGE_BIN + RANGE_BIN, RANGE_BIN))
    return hist >= SEEN_SHARE * max(len(range_all), 1)


def _in_bins(r: np.ndarray, bins: np.ndarray) -> np.ndarray:
    idx = np.floor(r / RANGE_BIN).astype(np.int64)
    ok = (idx >= 0) & (idx < len(bins))
    out = np.zeros(len(r), dtype=bool)
    out[ok] = bins[idx[ok]]
    return out


def _subsample(n: int, k: int, seed: int, salt: int) -> np.ndarray:
    if n <= k:
        return np.arange(n)
    return np.sort(np.random.default_rng([seed, salt]).choice(n, size=k, replace=False))


def distances(real: list[dict[str, Any]], sim: list[dict[str, Any]], seed: int) -> dict[str, Any]:
    """Wasserstein-1 and KS between simulated and real snow points, on the range bins and elevation band both
    sensors see."""

    def cat(scans, k):
        return np.concatenate([s[k] for s in scans]) if scans else np.zeros(0)

    both = seen_bins(cat(real, "range_all")) & seen_bins(cat(sim, "range_all"))
    lo = max(float(np.percentile(cat(side, "elevation_all"), 0.5)) for side in (real, sim))
    hi = min(float(np.percentile(cat(side, "elevation_all"), 99.5)) for side in (real, sim))
    edges = np.flatnonzero(both)
    band = {"range_bins_m": [[float(a * RANGE_BIN), float(b * RANGE_BIN)] for a, b in _runs(edges)],
            "elevation_deg": [round(lo, 3), round(hi, 3)], "bin_width_m": RANGE_BIN, "seen_share": SEEN_SHARE}
    out: dict[str, Any] = {"common_band": band, "quantities": {}}
    masks = []
    for side in (real, sim):
        r, e = cat(side, "range"), cat(side, "elevation")
        masks.append(_in_bins(r, both) & (e >= lo) & (e <= hi))
    for salt, (q, what) in enumerate(QUANTITIES.items()):
        a, b = cat(sim, q)[masks[1]], cat(real, q)[masks[0]]
        a, b = a[np.isfinite(a)], b[np.isfinite(b)]
        if a.size < 2 or b.size < 2:
            out["quantities"][q] = {"what": what, "n_simulated": int(a.size), "n_real": int(b.size),
                                    "skipped": "fewer than 2 snow points on one side in the common band"}
            continue
        a = a[_subsample(a.size, MAX_DISTANCE_POINTS, seed, 500 + salt)]
        b = b[_subsample(b.size, MAX_DISTANCE_POINTS, seed, 600 + salt)]
        ks = ks_2samp(a, b)
        out["quantities"][q] = {"what": what, "wasserstein": float(wasserstein_distance(a, b)),
                                "ks_statistic": float(ks.statistic), "ks_p_value": float(ks.pvalue),
                                "n_simulated": int(a.size), "n_real": int(b.size)}
    return out


def _runs(idx: np.ndarray) -> list[Any]:
    """Contiguous runs of bin indices as (first, last+1) pairs, for a readable common band."""
    if idx.size == 0:
        return []
    splits = np.flatnonzero(np.diff(idx) > 1) + 1
    return [(int(r[0]), int(r[-1]) + 1) for r in np.split(idx, splits)]


# ---- the two sides ------------------------------------------------------------------------------------

def real_wads_scans(root: Path, files: list[Path], duplicates: str, seed: int) -> list[dict[str, Any]]:
    """Per-scan quantities of (a seeded subset of) WADS scans, falling snow = label 110."""

    out = []
    for i in _subsample(len(files), MAX_SCANS, seed, 700):
        pts, labels = read_wads(files[i], "keep")
        first = duplicate_first(pts, labels)
        if duplicates == "drop":
            pts, labels = pts[first], labels[first]
        q = scan_quantities(pts, 3, "byte", (labels & 0xFFFF) == 110)
        q["accumulated"] = int(((labels & 0xFFFF) == 111).sum())
        q["raw_rows"], q["duplicate_rows"] = len(first), int(len(first) - first.sum())
        out.append(q)
    return out


def simulated_scans(files: list[Path | str], frames: list[str] | None, seed: int) -> dict[int, list[dict[str, Any]]]:
    """Per-scan quantities of a snow corruption's files, by severity; falling snow = ``SCATTER_SNOW`` tags."""


    by_sev: dict[int, list[dict[str, Any]]] = {}
    for path in files:  # page checksums on: a damaged page is an IntegrityError naming the file, not snow numbers
        pf = CheckedParquetFile.local(path)
        meta = file_metadata(pf.schema_arrow)
        fields, scale = list(meta["fields"]), meta["intensity_scale"]
        cols = ["frame_id", "points", "point_tag"]
        compact = "point_ref" in pf.schema_arrow.names
        table = pf.read(columns=cols + (["point_ref"] if compact else []))
        if frames is not None:
            table = table.filter(pc.is_in(table["frame_id"], value_set=pa.array(sorted(frames))))
        if table.num_rows == 0:
            continue
        points = decode_points(table["points"].combine_chunks(), writable=False)
        if compact:
            cpath = Path(path).parents[2] / "corruption=clean" / "severity=0" / Path(path).name
            ct = CheckedParquetFile.local(cpath).read(columns=["frame_id", "points"])
            clean = dict(zip(ct["frame_id"].to_pylist(), decode_points(ct["points"], writable=False), strict=True))
            points = [p if r is None else materialize(np.asarray(r, np.int32), p, clean[f])
                      for p, r, f in zip(points, table["point_ref"].to_pylist(), table["frame_id"].to_pylist(),
                                         strict=True)]
        tags = table["point_tag"].to_pylist()
        sev = int(meta["severity"])
        for pts, tag in zip(points, tags, strict=True):
            snow = np.asarray(tag, dtype=np.uint8) == PointTag.SCATTER_SNOW
            by_sev.setdefault(sev, []).append(scan_quantities(pts, fields.index("intensity"), scale, snow))
    for sev, scans in by_sev.items():
        by_sev[sev] = [scans[i] for i in _subsample(len(scans), MAX_SCANS, seed, 800 + sev)]
    return dict(sorted(by_sev.items()))


def build_sensor(manifest: dict[str, Any]) -> dict[str, Any]:
    src = manifest.get("source", {})
    kind = src.get("kind", "?")
    if isinstance(src.get("sensor"), dict):
        name, beams = src["sensor"].get("name", "?"), src["sensor"].get("beams")
    else:
        name, beams = SOURCE_SENSORS.get(kind, ("unknown", None))
    demo = " — generated demo scans (ray-cast), not a real recording" if src.get("demo") else ""
    return {"name": f"{name}{demo}", "beams": beams, "source_kind": kind,
            "intensity_scale": manifest.get("intensity_scale")}


def realism_report(manifest: dict[str, Any], corruption_files: dict[str, list[Path | str]], frames: list[str] | None,
                   real_root: Path, real_files: list[Path], duplicates: str, seed: int) -> dict[str, Any]:
    """The realism section of report.json (plus the per-point arrays the plots need, under ``_arrays``)."""

    real = real_wads_scans(real_root, real_files, duplicates, seed)
    real_summary = summarise(real)
    real_summary["accumulated_share_mean"] = float(np.mean([s["accumulated"] / max(s["n_points"], 1) for s in real]))
    real_summary["raw_rows"] = int(sum(s["raw_rows"] for s in real))
    real_summary["duplicate_rows"] = int(sum(s["duplicate_rows"] for s in real))
    sensors = {"real": {"name": f"{VLS128.name} (WADS's 128-beam Velodyne)", "beams": VLS128.beams,
                        "dataset": "WADS", "intensity_scale": "byte",
                        "duplicates": duplicates},
               "simulated": build_sensor(manifest)}
    out: dict[str, Any] = {
        "real": {"dir": str(real_root), "classes": {"falling_snow": 110, "accumulated_snow": 111},
                 **real_summary},
        "sensors": sensors, "flags": [],
        "method": {"falling_snow_simulated": "point_tag == SCATTER_SNOW", "falling_snow_real": "WADS label 110",
                   "intensity_rel": "snow point intensity ÷ median intensity of the scan's non-snow points, "
                                    "both on [0, 1] after each side's declared intensity scale",
                   "density": f"other falling-snow points within {DENSITY_RADIUS:g} m; per 100k points of the scan",
                   "distances": "Wasserstein-1 and two-sample Kolmogorov–Smirnov (scipy.stats) on snow points in "
                                "the range bins and elevation band both sensors see",
                   "scans_per_side": MAX_SCANS, "points_per_test": MAX_DISTANCE_POINTS},
        "corruptions": {}, "_arrays": {"real": real, "simulated": {}},
    }
    for name, files in corruption_files.items():
        sims = simulated_scans(files, frames, seed)
        out["corruptions"][name] = {str(s): {**summarise(scans), "distances": distances(real, scans, seed)}
                                    for s, scans in sims.items()}
        out["_arrays"]["simulated"][name] = sims
    pooled = [scan for sims in out["_arrays"]["simulated"].values() for scans in sims.values() for scan in scans]
    out["flags"] = _flags(sensors, real_summary, summarise(pooled))
    return out


def _flags(sensors: dict[str, Any], real_summary: dict[str, Any], sim_summary: dict[str, Any]) -> list[str]:
    """What differs between the two sensors, and how each difference is handled (said, never silent)."""
    b_real, b_sim = sensors["real"]["beams"], sensors["simulated"]["beams"]
    re, se = real_summary["sensor_extent"], sim_summary["sensor_extent"]

    def span(e: dict[str, Any]) -> str:
        return "n/a" if e["elevation_p0_5"] is None else f"{e['elevation_p0_5']:.1f}..{e['elevation_p99_5']:.1f} deg"

    def near(e: dict[str, Any]) -> str:  # the minimum can be a no-return placeholder: the 1st percentile too
        if e["nearest_return"] is None:
            return "n/a"
        return f"{e['nearest_return']:.2f} m (1st percentile {e['nearest_return_p01']:.2f} m)"

    return [
        f"beam count: real {b_real}, simulated {b_sim or 'unknown'} — share of the scan and raw density depend on "
        "how many beams sample the snow; density is also given per 100k points of the scan (normalised), the raw "
        "share is sensor-dependent and shown as measured",
        f"blind zone: nearest return real {near(re)}, simulated {near(se)}; distances use only the range bins "
        "both sensors see (common_band)",
        f"elevation: observed vertical field of view (0.5-99.5 percentile) real {span(re)}, simulated {span(se)}; "
        "elevation distances use only the band both cover",
        f"intensity scale: real {sensors['real']['intensity_scale']} (0..255), simulated "
        f"{sensors['simulated']['intensity_scale']}; intensities are compared relative to each scan's own median "
        "(sensor calibration differs, raw values are never compared)",
    ]
