"""The snowfall simulator of Hahner et al. (CVPR 2022), from the paper and its released code: a particle field
per laser channel, the occlusion of each beam by the flakes in it, and the received power that decides where
the point ends up. The stage that applies it to a scan (modes, focal calibration, noise floor) is
`bench_build.stages.weather.snow`.

Every point is a hard target at range R₀ whose beam (an azimuth wedge of divergence δ = 3 mrad in the
scan plane of its laser channel) may be partly occluded by snowflakes:

1. Particle field. Area occupancy ν = ρ_w·S/(3.6e6·ρ_s·v_t) from the rate S (mm/h), the terminal
   velocity v_t (m/s) and the snow density ρ_s; rain-equivalent rate R_eq = (S/(487·ρ_s·D_s·v_t))^1.5;
   flake diameters D ~ Exp(mean 10/Λ mm), Λ = 25.5·R_eq^−0.48 cm⁻¹ (Gunn–Marshall; Sekhon–Srivastava
   22.9·R_eq^−0.45), redrawn while D > 20 mm. Dart throwing in a disk of 80 m around the sensor: centre
   radius √U(0, 80²), angle U(0, 2π); the sphere is cut by the scan plane at h ~ U(−D/2, D/2), giving a
   disk of radius √(D²/4 − h²); disks containing the origin or overlapping an accepted disk are
   rejected; stop once Σπr² ≥ ν·π·80². Candidates are drawn in batches and accepted in draw order, each
   against the accepted disks before it on a uniform grid (`beams.reject_overlaps`: the sequential rule).
2. Pool. ``particle_pool`` sets are drawn once per (rate, v_t, ρ_s, distribution, pool, pool_seed) from
   ``SeedSequence([pool_seed, set])`` and cached (functools.lru_cache). Per example the example's
   generator assigns a set to each of the 64 channels (a permutation when pool ≥ channels, like the
   reference's shuffle of its 64 sets; with replacement otherwise) and a uniform rotation about the
   sensor axis (the disk field's distribution is rotation invariant, so a small pool still gives every
   channel a different field).
3. Occlusion, 2-D per channel: flake j (distance d_j, azimuth φ_j, radius r_j) spans the angles
   φ_j ± asin(r_j/d_j); it is a candidate for a beam if d_j < R₀ (d_j read as slant range along the
   beam, compared with the 3-D R₀) and its interval meets the wedge [φ − δ/2, φ + δ/2] (wrap handled).
   Each elementary piece of the wedge goes to the nearest candidate covering it; q_j = its share of δ,
   the rest q₀ belongs to the hard target. Candidates are found by a compiled loop over beams
   (`bench_build.stages.kernels.beams`): flakes are binned by distance (√2-geometric bands) and sorted by
   azimuth per set, each beam searches only the bands nearer than its R₀ over its wedge, galloping from
   where its set's last search ended (the few very wide flakes right at the sensor are checked against
   every beam); the occlusion shares are then added up per beam, piece by piece.
4. Received power: each element (flakes, then the hard target) adds
   c_j·sin²(π(R_k − r_j)/cτ_H) to the range bins k ∈ [⌈10 r_j⌉, ⌊10(r_j + cτ_H)⌋] (cτ_H = 2.998 m,
   τ_H = 10 ns), c_j = A_j·q_j·ξ(r_j)/r_j², ξ the fog crossover (0 below 0.9 m, 1 above 1.0 m); flakes
   have A_j = 0.9·i_max,ch. The peak k* gives d_max = R(k*) − cτ_H/2 and i_max. |d_max − R₀| < 0.2 m:
   ATTENUATED (position kept, intensity i_new); else SCATTER_SNOW (moved to d_max along its ray). Beams
   without candidates (or whose candidates all get q = 0) are unchanged. The signal is evaluated only
   at the bins of the elements' own windows (it is 0 elsewhere), so no 1230-bin array is built, and
   there only where bounds of sin² leave a bin a chance to hold the peak (the bins around it).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from bench_build.stages.kernels import beams

C_LIGHT = 299_792_458.0
TAU_H = 10e-9  # s, HDL-64 S1 half-power pulse width
C_TAU = C_LIGHT * TAU_H  # 2.998 m
XI_R1, XI_R2 = 0.9, 1.0  # m, linear crossover ξ (as for fog)
REF_SCALE = 255.0  # the reference's intensity scale
FLAKE_REFLECTIVITY = 0.9
PAPER_MAX_RANGE = 120.0
PAPER_BINS = 1230  # 0.1 m bins up to 120 + cτ_H
ATTENUATED_TOLERANCE = 0.2  # m
DISK_RADIUS = 80.0  # m, particle field
MAX_DIAMETER_MM = 20.0
RHO_WATER = 1.0  # g/cm³
SNOWFLAKE_DIAMETER = 0.003  # m, D_s of the rain-equivalent rate
DISTRIBUTIONS = {"gunn_marshall": (25.5, -0.48), "sekhon_srivastava": (22.9, -0.45)}
_WIDE = 1e-3  # rad: flakes subtending more than this half-angle are checked against every beam
_BAND_EDGES = np.concatenate([[0.0], 2.0 ** (np.arange(14) / 2.0)])  # 0, 1, 1.41, …, 90.5 m
_KEY_STRIDE = 8.0  # sets are laid out as key = 8·set + φ, φ ∈ [0, 2π)
_GRID_STEP = (PAPER_MAX_RANGE + C_TAU) / (PAPER_BINS - 1)  # m per bin of the reference's range grid


# ---- particle field --------------------------------------------------------------------------------


def area_occupancy(rate: float, terminal_velocity: float, snow_density: float = 0.1) -> float:
    """ν = ρ_w·S / (3.6e6·ρ_s·v_t): fraction of a plane covered by snow."""
    return RHO_WATER * rate / (3.6e6 * snow_density * terminal_velocity)


def rain_equivalent_rate(rate: float, terminal_velocity: float, snow_density: float = 0.1) -> float:
    """R_eq = (S / (487·ρ_s·D_s·v_t))^{3/2} in mm/h."""
    return (rate / (487.0 * snow_density * SNOWFLAKE_DIAMETER * terminal_velocity)) ** 1.5


def slope_parameter(r_eq: float, distribution: str = "gunn_marshall") -> float:
    """Λ (cm⁻¹) of the exponential diameter distribution N(D) ∝ exp(−ΛD)."""
    a, b = DISTRIBUTIONS[distribution]
    return a * r_eq**b


def expected_particle_area(lam: float) -> float:
    """E[πr²] (m²) of a plane cut through a sphere with D ~ Exp(mean 10/Λ mm) truncated at 20 mm:
    E[r²] = E[D²/4 − h²] = E[D²]/6 with h ~ U(−D/2, D/2)."""
    a = lam / 10.0  # mm⁻¹
    t = MAX_DIAMETER_MM
    e = math.exp(-a * t)
    ed2 = (2 / a**2 - e * (t * t + 2 * t / a + 2 / a**2)) / (1 - e)  # mm²
    return math.pi * ed2 / 6.0 * 1e-6


def sample_diameters_mm(rng: np.random.Generator, n: int, lam: float) -> np.ndarray:
    d = rng.exponential(10.0 / lam, size=n)
    bad = d > MAX_DIAMETER_MM
    while bad.any():
        d[bad] = rng.exponential(10.0 / lam, size=int(bad.sum()))
        bad = d > MAX_DIAMETER_MM
    return d


def sample_particle_set(
    rng: np.random.Generator, nu: float, lam: float, radius: float = DISK_RADIUS
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One channel's flakes by dart throwing: (distance d, azimuth φ ∈ [0, 2π), disk radius r), m."""
    target = nu * math.pi * radius**2
    mean_area = expected_particle_area(lam)
    xy = np.zeros((0, 2))
    rr = np.zeros(0)
    area = 0.0
    while area < target:
        m = int(1.1 * (target - area) / mean_area) + 64
        rho = np.sqrt(rng.uniform(0.0, radius**2, m))
        ang = rng.uniform(0.0, 2 * np.pi, m)
        dia = sample_diameters_mm(rng, m, lam) * 1e-3
        h = rng.uniform(-0.5, 0.5, m) * dia
        r = np.sqrt(np.maximum(dia * dia / 4 - h * h, 0.0))
        new_xy = np.stack([rho * np.cos(ang), rho * np.sin(ang)], axis=1)
        ok = (rho > r) & (r > 0)  # reject disks containing the origin (and degenerate cuts)
        n_old = len(rr)
        accepted = np.concatenate([np.ones(n_old, dtype=bool), ok])
        beams.reject_overlaps(np.concatenate([xy, new_xy]), np.concatenate([rr, r]), accepted, n_old)
        ok = accepted[n_old:]
        cum = area + np.cumsum(np.where(ok, np.pi * r * r, 0.0))
        stop = int(np.searchsorted(cum, target))  # first index where the accepted area reaches ν·π·R²
        if stop < m:
            ok[stop + 1 :] = False
            area = float(cum[stop])
        else:
            area = float(cum[-1])
        xy = np.concatenate([xy, new_xy[ok]])
        rr = np.concatenate([rr, r[ok]])
    d = np.hypot(xy[:, 0], xy[:, 1])
    phi = np.mod(np.arctan2(xy[:, 1], xy[:, 0]), 2 * np.pi)
    return d, phi, rr


@dataclass(frozen=True, eq=False)
class ParticleIndex:
    """Pool of particle sets, indexed for wedge queries: distance bands of azimuth-sorted flakes plus the few
    wide flakes (half-angle > 1 mrad) that every beam of the set checks, the last band. Every flake's
    ``key`` = 8·set + φ, ``dist`` and ``half_width`` = asin(r/d), band by band (band i from ``band_off[i]``), sorted
    by key within a band; per band and set the first index (relative to the band) and the number of flakes."""

    n_sets: int
    n_particles: np.ndarray  # per set
    key: np.ndarray
    dist: np.ndarray
    half_width: np.ndarray
    band_lo: np.ndarray  # lower distance edge of each searched band (a beam searches it when R₀ > lo)
    band_wmax: np.ndarray  # largest half-width in each searched band
    band_off: np.ndarray  # (searched bands + 1,)
    band_start: np.ndarray  # (searched bands + 1, n_sets)
    band_count: np.ndarray  # (searched bands + 1, n_sets)


def build_index(sets: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> ParticleIndex:
    n_sets = len(sets)
    sid = np.concatenate([np.full(len(s[0]), k, dtype=np.int64) for k, s in enumerate(sets)])
    d = np.concatenate([s[0] for s in sets]).astype(np.float64)
    phi = np.concatenate([s[1] for s in sets]).astype(np.float64)
    r = np.concatenate([s[2] for s in sets]).astype(np.float64)
    w = np.arcsin(np.clip(r / np.maximum(d, 1e-300), 0.0, 1.0))
    key = _KEY_STRIDE * sid + phi

    wide = w > _WIDE
    bands, lows = [], []
    for lo, hi in itertools.pairwise(_BAND_EDGES):
        sel = ~wide & (d >= lo) & (d < hi)
        if hi == _BAND_EDGES[-1]:
            sel |= ~wide & (d >= hi)
        if sel.any():
            bands.append(sel)
            lows.append(float(lo))
    order = [np.flatnonzero(sel)[np.argsort(key[sel], kind="stable")] for sel in (*bands, wide)]
    idx = np.concatenate(order)
    sizes = np.array([len(o) for o in order])
    starts, counts = [], []
    for o in order:
        s = sid[o]
        starts.append(np.searchsorted(s, np.arange(n_sets), side="left"))
        counts.append(np.searchsorted(s, np.arange(n_sets), side="right") - starts[-1])
    arrays = [key[idx], d[idx], w[idx], np.array(lows), np.array([w[o].max() for o in order[:-1]]),
              np.cumsum(sizes) - sizes, np.array(starts), np.array(counts)]
    for a in arrays:
        a.setflags(write=False)
    return ParticleIndex(n_sets, np.array([len(s[0]) for s in sets]), *arrays)


@lru_cache(maxsize=8)
def particle_pool(
    rate: float, terminal_velocity: float, snow_density: float, distribution: str, n_sets: int, pool_seed: int
) -> ParticleIndex:
    """The cached pool of ``n_sets`` particle sets, set k drawn from SeedSequence([pool_seed, k])."""
    nu = area_occupancy(rate, terminal_velocity, snow_density)
    lam = slope_parameter(rain_equivalent_rate(rate, terminal_velocity, snow_density), distribution)
    sets = [
        sample_particle_set(np.random.default_rng(np.random.SeedSequence([pool_seed, k])), nu, lam)
        for k in range(n_sets)
    ]
    return build_index(sets)


def assign_channels(rng: np.random.Generator, n_sets: int, n_channels: int) -> tuple[np.ndarray, np.ndarray]:
    """(set index, rotation in rad) per channel, from the example's generator."""
    if n_sets >= n_channels:
        sets = rng.permutation(n_sets)[:n_channels]
    else:
        sets = rng.integers(0, n_sets, size=n_channels)
    return sets.astype(np.int64), rng.uniform(0.0, 2 * np.pi, size=n_channels)


# ---- occlusion -------------------------------------------------------------------------------------


def _candidates(index: ParticleIndex, set_id, phi, r0, half: float):
    """All (beam, d, a, b) with the flake nearer than R₀ and its clipped interval [a, b] ⊂ [−δ/2, δ/2] non-empty
    (angles relative to the beam's azimuth), sorted by beam, then distance."""
    return beams.wedge_candidates(index.key, index.dist, index.half_width, index.band_lo, index.band_wmax,
                                  index.band_off, index.band_start, index.band_count, set_id.astype(np.int64),
                                  phi.astype(np.float64), r0.astype(np.float64), half, _KEY_STRIDE)


# ---- received power ----------------------------------------------------------------------------------


def _xi(r: np.ndarray) -> np.ndarray:
    return np.clip((r - XI_R1) / (XI_R2 - XI_R1), 0.0, 1.0)


def _peak(owner: np.ndarray, r: np.ndarray, coef: np.ndarray, n_owner: int, sampling: bool):
    """Peak of the summed waveform per owner (beam). Elements are flat arrays sorted by (owner, r).

    Returns (max value, bin of the first maximum) per owner (−inf and `beams.BIG` for owners without elements).
    The range of bin k is the reference's rounded k·(120 + cτ_H)/1229 with ``sampling``, else k/10. The pulses'
    sines are NumPy's, at the pairs `beams.peak_bins` chooses; the first maximum (smallest bin) wins ties, as
    np.argmax over the reference's bin array does."""
    elem, k, phase = beams.peak_bins(owner, r, coef, C_TAU, sampling, _GRID_STEP)
    return beams.peak_of_beams(owner, elem, k, np.sin(phase, out=phase), coef, n_owner)


def _signal_at(kq: np.ndarray, owner: np.ndarray, r: np.ndarray, coef: np.ndarray, n_owner: int,
               window: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Summed waveform of each owner at its bin kq[owner], on the k/10 range grid; ``window``: each element's
    bins k ∈ [⌈10 r⌉, ⌊10(r + cτ_H)⌋] (`beams.windows`)."""
    klo, khi = window
    k = kq[owner]
    val = np.where((k >= klo) & (k <= khi), coef * np.sin(np.pi * (k / 10.0 - r) / C_TAU) ** 2, 0.0)
    return np.bincount(owner, weights=val, minlength=n_owner)


@dataclass(frozen=True, eq=False)
class BeamResult:
    """Per beam: outcome (0 clean, 1 attenuated, 2 scatter), new range, new intensity (0..255 scale),
    and the hard target's unoccluded share q₀ (1 for beams without a flake)."""

    outcome: np.ndarray
    range: np.ndarray
    intensity: np.ndarray
    q0: np.ndarray


def simulate(
    index: ParticleIndex,
    set_id: np.ndarray,
    phi: np.ndarray,
    r0: np.ndarray,
    intensity: np.ndarray,
    channel_max: np.ndarray,
    *,
    compat: bool,
    sampling: bool,
    divergence_mrad: float = 3.0,
    focal_f: np.ndarray | None = None,
    focal_s: np.ndarray | None = None,
    min_intensity: float = 0.0,
) -> BeamResult:
    """The snow model for B beams: ``set_id`` (particle set of each beam's channel), ``phi`` (azimuth in
    the set's frame, [0, 2π)), ``r0`` (m), ``intensity`` and ``channel_max`` (0..255 scale). ``compat``: the
    reference's hard-target amplitude (A₀ = 0.9·i_max,ch in every flake-hit beam); ``sampling``: the
    reference's range-bin grid, truncation and 120 m limit (`bench_build.stages.weather.snow`'s modes)."""
    nb = len(r0)
    half = divergence_mrad * 1e-3 / 2
    outcome = np.zeros(nb, dtype=np.int8)
    new_r = r0.astype(np.float64).copy()
    new_i = intensity.astype(np.float64).copy()
    q0 = np.ones(nb)
    active = np.isfinite(r0) & np.isfinite(phi) & np.isfinite(intensity) & (r0 > 0)
    if sampling:  # the window of the hard target must fit the 1230-bin grid
        active &= np.floor(np.round(10.0 * (r0 + C_TAU), 9)) <= PAPER_BINS - 1
    act = np.flatnonzero(active)
    beam, d, a, b = _candidates(index, set_id[act], phi[act], r0[act], half)
    beam = act[beam]

    q = beams.occlusion_shares(beam, a, b, half)
    q0 -= np.bincount(beam, weights=q, minlength=nb)
    np.clip(q0, 0.0, 1.0, out=q0)
    seen = q > 0
    beam, d, q = beam[seen], d[seen], q[seen]
    hit = np.unique(beam)  # beams with at least one visible flake
    if len(hit) == 0:
        return BeamResult(outcome, new_r, new_i, q0)

    # received power: flakes, then the hard target, as one flat element list sorted by (beam, r)
    slot = np.searchsorted(hit, beam)
    R0, imx = r0[hit], channel_max[hit]
    if focal_f is not None:
        fh, sh = focal_f[hit], focal_s[hit]
        before = REF_SCALE if compat else imx  # the reference removes 255·s·|…|, adds back i_max,ch·s·|…|
        i_adj = np.clip(intensity[hit] - before * sh * np.abs(fh - (1 - R0 / 120.0) ** 2), 0.0, imx)
    else:
        i_adj = np.clip(intensity[hit], 0.0, imx)
    amp = FLAKE_REFLECTIVITY * imx
    c_flake = amp[slot] * q * _xi(d) / d**2
    if compat:
        c_hard = amp * q0[hit] * _xi(R0) / R0**2
    elif sampling:
        c_hard = i_adj * q0[hit] * _xi(R0)
    else:
        c_hard = i_adj * q0[hit]
    owner = np.concatenate([slot, np.arange(len(hit))])
    r_el = np.concatenate([d, R0])
    c_el = np.concatenate([c_flake, c_hard])
    order = beams.merge_targets(slot, d, R0)  # = np.lexsort((r_el, owner)): flakes of a beam come sorted by d
    owner, r_el, c_el = owner[order], r_el[order], c_el[order]
    m, ks = _peak(owner, r_el, c_el, len(hit), sampling)
    ok = m > 0
    ks = np.where(ok, ks, 0)
    if sampling:
        dmax, imax = ks / 10.0 - C_TAU / 2, m
    else:  # 3-point parabola through the peak bin and its neighbours
        window = beams.windows(r_el, C_TAU)
        ym = _signal_at(ks - 1, owner, r_el, c_el, len(hit), window)
        yp = _signal_at(ks + 1, owner, r_el, c_el, len(hit), window)
        den = ym - 2 * m + yp
        with np.errstate(invalid="ignore", divide="ignore"):
            p = np.where(ok & (den < 0), 0.5 * (ym - yp) / den, 0.0)
        p = np.clip(np.nan_to_num(p), -0.5, 0.5)
        dmax, imax = (ks + p) / 10.0 - C_TAU / 2, np.maximum(m - 0.25 * (ym - yp) * p, m)
    if focal_f is not None:
        imax = imax + imx * focal_s[hit] * np.abs(focal_f[hit] - (1 - dmax / 120.0) ** 2)
    i_new = np.clip(imax, min_intensity, imx)
    if sampling:
        i_new = np.floor(i_new)
    att = np.abs(dmax - R0) < ATTENUATED_TOLERANCE
    hit, att, dmax, i_new = hit[ok], att[ok], dmax[ok], i_new[ok]
    outcome[hit] = np.where(att, 1, 2)
    new_r[hit] = np.where(att, r0[hit], dmax)
    new_i[hit] = i_new
    return BeamResult(outcome, new_r, new_i, q0)
