"""Ground plane and noise-floor helpers shared by the wet-ground and snowfall stages (Hahner et al., CVPR 2022:
RANSAC ground plane, laser power and the noise-level estimator of the released snowfall / wet-ground code).

- `fit_ground_plane`: RANSAC fit of z = a·x + b·y + h on the candidate strip in front of the sensor,
  vectorised (trials evaluated in batches), deterministic from the caller's generator. Like the released
  scripts it fits whenever the strip holds more than 4 candidates (``MIN_CANDIDATES``); how many *ground*
  points the plane then has is the caller's gate (``MIN_GROUND_POINTS``, as in the released code).
- `GroundPlane`: w = (a, b, −1)/‖(a, b, −1)‖ (unit normal pointing down) and the raw intercept h, as the
  reference uses them: ``w·p + h`` is ≈ 0 on the ground, ``w·p/|p|`` is the cosine of the incidence angle.
- `fit_line`, `noise_level_line`, `fit_floor_quadratic`: the laser-power and noise-level fits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

GROUND_BAND = 0.5  # m, |w·p + h| < δ_g is ground
MIN_GROUND_POINTS = 1000  # ground points |w·p + h| < δ_g, counted after the fit
MIN_CANDIDATES = 5  # the references fit from more than 4 candidates (KITTI's 4-column array: > 4 rows)
RANGE_BINS = (10.0, 70.0, 50)  # noise-level histogram: 50 range bins over 10–70 m
LEVEL_BINS = 2555  # and 2555 bins of normalised intensity over [floor_const, max n]


@dataclass(frozen=True, eq=False)
class GroundPlane:
    w: np.ndarray  # (3,) unit normal (a, b, −1)/norm, pointing down
    h: float  # raw intercept of z = a·x + b·y + h (not normalised, as in the reference)

    def offset(self, xyz: np.ndarray) -> np.ndarray:
        """w·p + h for every point (≈ signed height below the plane, 0 on the ground)."""
        return np.asarray(xyz, dtype=np.float64) @ self.w + self.h

    def mask(self, xyz: np.ndarray, band: float = GROUND_BAND) -> np.ndarray:
        return np.abs(self.offset(xyz)) < band

    def cos_incidence(self, xyz: np.ndarray, eps: float = 1e-6) -> np.ndarray:
        """cos θ = w·p/|p|, clipped to [eps, 1] (θ the angle between the beam and the plane normal)."""
        xyz = np.asarray(xyz, dtype=np.float64)
        r = np.sqrt(np.einsum("ij,ij->i", xyz, xyz))
        c = np.divide(xyz @ self.w, r, out=np.zeros_like(r), where=r > 0)
        return np.minimum(np.maximum(c, eps), 1.0)


def flat_ground_plane(sensor_height: float) -> GroundPlane:
    """The plane z = −sensor_height with the fitted planes' sign convention (w = (0, 0, −1), h = −H)."""
    return GroundPlane(w=np.array([0.0, 0.0, -1.0]), h=-float(sensor_height))


def ground_candidates(xyz: np.ndarray) -> np.ndarray:
    """Candidate strip of the released ground fit: −1.86 − 0.01x < z < −1.55, 10 < x < 70, |y| < 3."""
    x, y, z = (np.asarray(xyz[:, k], dtype=np.float64) for k in range(3))
    return (z > -1.86 - 0.01 * x) & (z < -1.55) & (x > 10.0) & (x < 70.0) & (np.abs(y) < 3.0)


def _dynamic_max_trials(n_inliers: int, n_samples: int, min_samples: int, probability: float) -> float:
    """Trials needed to draw one all-inlier sample with ``probability`` (sklearn's RANSAC rule)."""
    ratio = n_inliers / n_samples
    denom = 1.0 - ratio**min_samples
    if denom <= 0:
        return 1.0
    if denom >= 1:
        return math.inf
    return abs(math.ceil(math.log(1.0 - probability) / math.log(denom)))


def ransac_plane(
    xyz: np.ndarray,
    rng: np.random.Generator,
    *,
    max_trials: int = 1000,
    stop_probability: float = 0.99,
    min_threshold: float = 1e-3,
    batch: int = 64,
    squared_loss: bool = False,
) -> tuple[np.ndarray, np.ndarray] | None:
    """RANSAC fit of z = a x + b y + h to ``xyz``: returns ((a, b, h), inlier mask) or None.

    Like sklearn's RANSACRegressor with LinearRegression and its defaults: minimal samples of 3 distinct
    points, inlier threshold = median absolute deviation of z, MAD (floored at ``min_threshold`` so an
    exactly flat synthetic ground is not a degenerate 0-threshold), best model = most inliers (first one on
    ties), trials stopped by the dynamic bound for ``stop_probability``, final model refitted by least
    squares on the best inlier set. Trials are drawn and scored ``batch`` at a time.

    Inlier rule: sklearn compares the *loss* with the threshold. ``squared_loss`` = True is the released
    scripts' ``loss='squared_loss'`` (scikit-learn ≤ 1.1): inlier when r² ≤ MAD, i.e. |r| ≤ √MAD, a wider
    band than |r| ≤ MAD while MAD < 1 m. False: the absolute loss, |r| ≤ MAD (sklearn's default).
    """
    xyz = np.asarray(xyz, dtype=np.float64)
    n = len(xyz)
    if n < 3:
        return None
    a_full = np.column_stack([xyz[:, 0], xyz[:, 1], np.ones(n)])  # (n, 3)
    z = xyz[:, 2]
    threshold = max(float(np.median(np.abs(z - np.median(z)))), min_threshold)
    if squared_loss:  # r² ≤ MAD  ⇔  |r| ≤ √MAD
        threshold = math.sqrt(threshold)
    best_count, best_mask = 0, None
    done, needed = 0, float(max_trials)
    while done < min(max_trials, needed):
        t = int(min(batch, max_trials - done))
        idx = rng.integers(0, n, size=(t, 3))
        done += t
        ok = (idx[:, 0] != idx[:, 1]) & (idx[:, 0] != idx[:, 2]) & (idx[:, 1] != idx[:, 2])
        a_s = a_full[idx[ok]]  # (t, 3, 3)
        ok_det = np.abs(np.linalg.det(a_s)) > 1e-9
        if not ok_det.any():
            continue
        coef = np.linalg.solve(a_s[ok_det], z[idx[ok][ok_det]][..., None])[..., 0]  # (t', 3)
        inl = np.abs(coef @ a_full.T - z) <= threshold  # (t', n)
        counts = inl.sum(axis=1)
        k = int(np.argmax(counts))
        if counts[k] > best_count:
            best_count, best_mask = int(counts[k]), inl[k]
            needed = _dynamic_max_trials(best_count, n, 3, stop_probability)
    if best_mask is None or best_count < 3:
        return None
    coef, *_ = np.linalg.lstsq(a_full[best_mask], z[best_mask], rcond=None)
    return coef, best_mask


def fit_ground_plane(
    xyz: np.ndarray,
    rng: np.random.Generator,
    *,
    min_candidates: int = MIN_CANDIDATES,
    max_trials: int = 1000,
    squared_loss: bool = False,
) -> GroundPlane | None:
    """RANSAC ground plane from the candidate strip; None if fewer than ``min_candidates`` candidates
    (or no consensus set). The caller decides the fallback (unchanged scan, or `flat_ground_plane`) and
    applies the ≥ 1,000 ground-point gate to the fitted plane's band. ``squared_loss``: see `ransac_plane`."""
    cand = ground_candidates(xyz)
    if int(cand.sum()) < max(min_candidates, 3):
        return None
    fit = ransac_plane(np.asarray(xyz, dtype=np.float64)[cand], rng, max_trials=max_trials, squared_loss=squared_loss)
    if fit is None:
        return None
    (a, b, h), _ = fit
    w = np.array([a, b, -1.0])
    return GroundPlane(w=w / np.linalg.norm(w), h=float(h))


def fit_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares line y ≈ slope·x + intercept (slope 0 for a degenerate x)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if len(x) == 0:
        return 0.0, 0.0
    xm, ym = x.mean(), y.mean()
    var = float(((x - xm) ** 2).sum())
    slope = float(((x - xm) * (y - ym)).sum() / var) if var > 0 else 0.0
    return slope, float(ym - slope * xm)


def noise_level_line(
    d: np.ndarray,
    n: np.ndarray,
    *,
    floor_const: float,
    method: str,
    fallback: tuple[float, float],
) -> tuple[float, float]:
    """Straight line over range of the per-range-bin noise level of normalised intensities.

    Range bins: 50 over 10–70 m. ``method``:
    - "rarest" (reference): 2-D histogram with 2555 levels over [floor_const, max n]; empty cells count as
      the number of points; per range bin, the level (lower bin edge) of ``np.argpartition(counts, 2)[0]``,
      i.e. one of the two rarest cells, not the lowest;
    - "lowest" (deterministic, physical): per range bin, the smallest n above ``floor_const``.
    Levels ≤ floor_const are dropped; with 3 or fewer bins left (or no n above the floor) the
    ``fallback`` line (the laser-power fit) is returned.
    """
    lo, hi, nb = RANGE_BINS
    d = np.asarray(d, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    in_range = (d >= lo) & (d <= hi)
    centres = lo + (np.arange(nb) + 0.5) * (hi - lo) / nb
    rbin = np.minimum(((d - lo) / (hi - lo) * nb).astype(np.int64), nb - 1)
    if method == "rarest":
        n_max = float(n.max()) if len(n) else -math.inf
        if not n_max > floor_const:
            return fallback
        sel = in_range & (n >= floor_const) & (n <= n_max)
        width = (n_max - floor_const) / LEVEL_BINS
        lbin = np.minimum(((n[sel] - floor_const) / width).astype(np.int64), LEVEL_BINS - 1)
        counts = np.bincount(rbin[sel] * LEVEL_BINS + lbin, minlength=nb * LEVEL_BINS).reshape(nb, LEVEL_BINS)
        counts[counts == 0] = len(n)
        pick = np.argpartition(counts, 2, axis=1)[:, 0]
        levels = floor_const + pick * width
        keep = levels > floor_const
    elif method == "lowest":
        sel = in_range & (n > floor_const)
        levels = np.full(nb, np.inf)
        np.minimum.at(levels, rbin[sel], n[sel])
        keep = np.isfinite(levels)
    else:
        raise ValueError(f"noise_level_line: unknown method {method!r}")
    if int(keep.sum()) <= 3:
        return fallback
    return fit_line(centres[keep], levels[keep])


def fit_floor_quadratic(r_ground: np.ndarray, threshold_ground: np.ndarray) -> np.ndarray:
    """Quadratic in range through (|p|, T_g) of the ground points (snow noise floor); np.polyval coefficients."""
    r_ground = np.asarray(r_ground, dtype=np.float64)
    if len(r_ground) < 3:
        return np.array([0.0, 0.0, float(np.mean(threshold_ground)) if len(r_ground) else 0.0])
    return np.polyfit(r_ground, np.asarray(threshold_ground, dtype=np.float64), 2)
