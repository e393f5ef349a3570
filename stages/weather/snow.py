"""LiDAR snowfall simulation (Hahner et al., CVPR 2022), from the paper and its released code.

Every point is a hard target at range R₀ whose beam (an azimuth wedge of divergence δ = 3 mrad in the
scan plane of its laser channel) may be partly occluded by snowflakes:

1. Particle field. Area occupancy ν = ρ_w·S/(3.6e6·ρ_s·v_t) from the rate S (mm/h), the terminal
   velocity v_t (m/s) and the snow density ρ_s; rain-equivalent rate R_eq = (S/(487·ρ_s·D_s·v_t))^1.5;
   flake diameters D ~ Exp(mean 10/Λ mm), Λ = 25.5·R_eq^−0.48 cm⁻¹ (Gunn–Marshall; Sekhon–Srivastava
   22.9·R_eq^−0.45), redrawn while D > 20 mm. Dart throwing in a disk of 80 m around the sensor: centre
   radius √U(0, 80²), angle U(0, 2π); the sphere is cut by the scan plane at h ~ U(−D/2, D/2), giving a
   disk of radius √(D²/4 − h²); disks containing the origin or overlapping an accepted disk are
   rejected; stop once Σπr² ≥ ν·π·80². Vectorised: candidates are drawn in batches, overlaps found with a
   KD-tree, and acceptance resolved greedily in draw order (exactly the sequential rule).
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
   the rest q₀ belongs to the hard target. Candidates are found without a per-point loop: flakes are
   binned by distance (√2-geometric bands) and sorted by azimuth per set, each beam searches only the
   bands nearer than its R₀ with `searchsorted` over its wedge (the few very wide flakes right at the
   sensor are checked against every beam); beams are then processed in groups of equal candidate count.
4. Received power: each element (flakes, then the hard target) adds
   c_j·sin²(π(R_k − r_j)/cτ_H) to the range bins k ∈ [⌈10 r_j⌉, ⌊10(r_j + cτ_H)⌋] (cτ_H = 2.998 m,
   τ_H = 10 ns), c_j = A_j·q_j·ξ(r_j)/r_j², ξ the fog crossover (0 below 0.9 m, 1 above 1.0 m); flakes
   have A_j = 0.9·i_max,ch. The peak k* gives d_max = R(k*) − cτ_H/2 and i_max. |d_max − R₀| < 0.2 m:
   ATTENUATED (position kept, intensity i_new); else SCATTER_SNOW (moved to d_max along its ray). Beams
   without candidates (or whose candidates all get q = 0) are unchanged. The signal is evaluated only
   at the bins of the elements' own windows (it is 0 elsewhere), so no 1230-bin array is built.
5. Noise floor: ground plane by RANSAC (`bench_build.stages.physics.ground`, with the example's generator;
   when no plane can be fitted, the flat plane z = −``sensor_height`` with the fitted sign convention),
   ground = |w·p + h| < 0.5 m, estimated on the *input* (clean) scan: n = i/cos θ, the noise-level
   line L(d) over 10–70 m, T_g = noise_floor·L(d)·cos θ on the ground points, a quadratic in range
   through (|p|, T_g) evaluated at every output point. A non-scatter point whose intensity is ≤ T(d)
   is dropped (`Frame.take`, order kept). Fewer than 1,000 ground points: the noise floor is skipped.

Intensity scale: the model works in the reference's 0..255 scale; the source's scale is explicit
(``frame.intensity_max``): i₂₅₅ = i·255/intensity_max in, i·intensity_max/255 out (a KITTI "unit" source
is ×255 and ÷255 like Robo3D; "byte" is unchanged; "tanh" is treated as linear in [0, 1]).

Modes. ``mode`` = "physical" (intended physics) or "paper" (what shaped Robo3D's released data); each
quirk is a named option, None → the mode's default:

| option                  | physical | paper | meaning                                                   |
| ----------------------- | -------- | ----- | --------------------------------------------------------- |
| ``reference_compat``    | False    | True  | hard-target amplitude: paper uses A₀ = 0.9·i_max,ch in   |
|                         |          |       | every beam with a flake (the reference overwrites A₀ in   |
|                         |          |       | its loop), so flake-hit beams become snow or very        |
|                         |          |       | dim; physical: A₀ = i_adj·R₀²/ξ(R₀), c₀ = i_adj·q₀, so   |
|                         |          |       | the unoccluded share of a beam returns its own intensity  |
| ``reference_sampling``  | False    | True  | paper: bin centres R_k = round(k·(120 + cτ_H)/1229, 2) but |
|                         |          |       | windows and d_max on k/10, i_new truncated to an integer, |
|                         |          |       | targets whose window leaves the 1230-bin grid (R₀ ≳ 120 m) |
|                         |          |       | unchanged. physical: R_k = k/10 without a range           |
|                         |          |       | limit, the peak refined by a 3-point parabola (range and  |
|                         |          |       | intensity exact to ~1e-4 instead of ±5 cm / −0.3 %), no   |
|                         |          |       | truncation                                                |
| ``reference_channel_max``| False   | True  | i_max,ch = 230 on the calibration's lasers 53, 55, 56, 58,|
|                         |          |       | looked up with ``focal_index`` (paper: Robo3D's rows 53,  |
|                         |          |       | 55, 56, 58); physical: 255 for every channel              |
| ``focal_index``         | "laser"  | "row" | which S3 calibration row a point uses (below)             |
| ``drop_clean``          | False    | True  | paper: the noise floor also drops dim points the snow did |
|                         |          |       | not touch; physical: only ATTENUATED points               |
|                         |          |       | can fall below it (a clean return was above the floor)    |
| ``noise_level``         | "lowest" | "rarest" | per-range-bin level: lowest n above 5, or one of       |
|                         |          |       | the two rarest histogram cells (reference argpartition)   |

HDL-64 focal intensity compensation, on in both modes (``focal_compensation``): before the
waveform i_adj = clip(i − 255·s·|f − (1 − R₀/120)²|, 0, i_max,ch) (physical: i_max,ch·s, so an unoccluded
beam returns exactly i), after it i_new = clip(i_max + i_max,ch·s·|f − (1 − d_max/120)²|, min_intensity,
i_max,ch), f = (1 − 100·F/13100)², with the focal distance F and slope s of the point's laser from the
shipped per-laser calibration of an HDL-64E S3 (`bench_build.stages.physics.hdl64e_s3`, values and their source).
Which calibration (`focal_lookup`): ``focal_calibration`` "auto" uses the S3 table for an HDL-64 frame
(``Frame.sensor``: KITTI, SemanticKITTI, the demo, STF) and the documented neutral calibration (slope 0:
the term is the identity; i_max,ch = 255) for any other or unknown sensor (nuScenes HDL-32E, Waymo) —
never the HDL-64 table silently; "hdl64e_s3" forces the table (Robo3D's nuScenes-C script applied it to
the HDL-32E's rings 0–31), "none" is neutral. Which row: paper (``focal_index`` "row") uses the point's
ring — Robo3D's elevation row — as the index into the laser_id-ordered table, reproducing its index
mismatch (the correction is effectively random per row); physical ("laser") uses the laser's own id:
STF's ring column (`hdl64e_s3.HDL64E_S3`), else the S3 laser whose vertical angle is nearest the point's
elevation (KITTI stores no laser id). Custom ``focal_distance``/``focal_slope`` per ring override the table.
``min_intensity`` is the lower clip (Robo3D: 0). The term is what keeps attenuated points in paper mode:
under the amplitude quirk a flake-hit hard target peaks at 229.5·q₀/R₀² (below 1 on 0..255), so without
it every ATTENUATED point falls under the noise floor and snow points come out nearly black (issue 18).

Parity with the released Robo3D script (``create/kitti_c/snow/``): it only runs after a one-line repair
(its channel loop unpacks 4 values from a per-channel function that returns 3) and with scikit-learn
≤ 1.1 for its RANSAC ground plane (``loss='squared_loss'``; newer versions reject it and a bare
``except`` takes a wrong-sign fallback plane, after which the noise-floor fit crashes or is meaningless).
Paper mode reproduces that repaired script: the quirk, its range grid and truncation, the 230 caps and
the focal term by elevation row, the rarest-cell noise level, the squared-loss plane fitted from more than
5 candidates (its array has 5 columns), and the floor also dropping untouched dim points. Issue 18 reports,
side by side on a real HDL-64 KITTI camera-FOV scan with this term on: dropped 35.3 / 31.4 / 27.9 % (script
35.4 / 31.6 / 28.0 %), ≈ 46 % of flake-hit beams kept as ATTENUATED, snow-point intensity 0.19–0.20
(without the term: 52.4 / 45.2 / 38.7 %, 0 kept, 0.004). Deviations: 16
pooled particle sets with a random rotation per channel instead of 64 shuffled files, targets beyond
≈ 120 m unchanged, the noise floor skipped (recorded) instead of crashing when the plane has fewer than
1,000 ground points. Physical mode instead keeps the hard target's own amplitude, samples the waveform
finely without truncation, looks the calibration up by laser id, uses the lowest noise level, and lets
the floor remove only points the snow dimmed.

Ring: the channel of each point comes from `bench_build.stages.ring.frame_rings` (``ring_method``, default "auto":
the source's ring column when valid, else azimuth-wrap recovery when the raw order is intact, else the
nearest HDL-64E laser elevation). Robo3D used elevation rows — ``ring_method = "elevation_bins"``.

Recorded in the example's ``info`` (the row's ``info`` JSON column): ``ring_method`` = the method used
(`bench_build.stages.ring.RING_METHOD_CODES` names), ``snow_noise_floor`` = whether the noise floor was applied
(false when skipped: fewer than 1,000 ground points, or ``noise_floor`` = 0), ``snow_focal`` = the
calibration used ("hdl64e_s3/row", "hdl64e_s3/laser", "none" = neutral, "custom"). Labels:
``point_tag`` = SCATTER_SNOW for points moved to a flake, ATTENUATED for points whose beam had a flake
and stayed; dropped points are gone; every extra column (ring, ...) and label column is kept.

Edge cases: rate 0 returns the input unchanged (no flakes; the noise floor is not applied). Empty
scans are returned unchanged. R₀ ≈ 0 has no candidate (d_j > r_j > 0). A waveform that is 0 everywhere
(R₀ < 0.9 m with only flakes below 0.9 m in paper mode, or i = 0 without visible flakes beyond 0.9 m)
leaves the point unchanged instead of moving it to bin 0 (d_max = −1.5 m, behind the sensor).
Non-finite points are left unchanged. Intensity 0 is a valid target: in physical mode a visible flake
(ξ > 0) in its beam always wins; with none, its waveform is 0 and the point is left unchanged.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from bench_build.stages.frame import Frame, PointTag
from bench_build.stages.labels import set_semantic
from bench_build.stages.physics import hdl64e_s3
from bench_build.stages.physics.ground import (
    MIN_GROUND_POINTS,
    fit_floor_quadratic,
    fit_ground_plane,
    fit_line,
    flat_ground_plane,
    noise_level_line,
)
from bench_build.stages.registry import stage
from bench_build.stages.ring import METHODS as RING_METHODS
from bench_build.stages.ring import N_RINGS, frame_rings
from bench_build.stages.sensor import HDL64E

C_LIGHT = 299_792_458.0
TAU_H = 10e-9  # s, HDL-64 S1 half-power pulse width
C_TAU = C_LIGHT * TAU_H  # 2.998 m
XI_R1, XI_R2 = 0.9, 1.0  # m, linear crossover ξ (as for fog)
REF_SCALE = 255.0  # the reference's intensity scale
FLAKE_REFLECTIVITY = 0.9
DIM_LASERS = (53, 55, 56, 58)  # i_max,ch = 230 (reference calibration), 255 otherwise
PAPER_MAX_RANGE = 120.0
PAPER_BINS = 1230  # 0.1 m bins up to 120 + cτ_H
ATTENUATED_TOLERANCE = 0.2  # m
DISK_RADIUS = 80.0  # m, particle field
MAX_DIAMETER_MM = 20.0
RHO_WATER = 1.0  # g/cm³
SNOWFLAKE_DIAMETER = 0.003  # m, D_s of the rain-equivalent rate
FLOOR_CONST = 5.0  # the released noise-level estimator's constant, in the 0..255 scale
GROUND_BAND = 0.5
DISTRIBUTIONS = {"gunn_marshall": (25.5, -0.48), "sekhon_srivastava": (22.9, -0.45)}
MODES = ("physical", "paper")
FOCAL_CALIBRATIONS = ("auto", hdl64e_s3.CALIBRATION, "none")
# Frame.sensor names the S3 table stands in for under "auto" (KITTI/SemanticKITTI/demo HDL-64E, STF S3)
HDL64_SENSORS = (HDL64E.name, hdl64e_s3.HDL64E_S3.name)

_WIDE = 1e-3  # rad: flakes subtending more than this half-angle are checked against every beam
_BAND_EDGES = np.concatenate([[0.0], 2.0 ** (np.arange(14) / 2.0)])  # 0, 1, 1.41, …, 90.5 m
_KEY_STRIDE = 8.0  # sets are laid out as key = 8·set + φ, φ ∈ [0, 2π)
_CHUNK = 2_000_000  # elements per temporary block


@dataclass(frozen=True)
class SnowParams:
    rate: float  # mm/h (snowfall rate S)
    terminal_velocity: float  # m/s
    mode: str = "physical"  # "physical" | "paper"
    snow_density: float = 0.1  # g/cm³
    divergence_mrad: float = 3.0
    distribution: str = "gunn_marshall"  # | "sekhon_srivastava"
    noise_floor: float = 0.7  # 0 disables the point removal
    reference_compat: bool | None = None  # hard-target amplitude quirk (None: paper on, physical off)
    reference_sampling: bool | None = None  # reference range-bin grid, truncation, 120 m limit
    reference_channel_max: bool | None = None  # i_max,ch = 230 on rings 53, 55, 56, 58
    drop_clean: bool | None = None  # noise floor also drops untouched dim points
    noise_level: str | None = None  # "lowest" | "rarest"
    focal_compensation: bool = True  # HDL-64 focal intensity term, where a calibration applies
    focal_calibration: str = "auto"  # "auto" (by Frame.sensor) | "hdl64e_s3" | "none" (neutral)
    focal_index: str | None = None  # "row" (paper: elevation row) | "laser" (physical: the laser's own id)
    focal_distance: tuple[float, ...] = ()  # a custom calibration per ring (m), overrides focal_calibration
    focal_slope: tuple[float, ...] = ()
    min_intensity: float = 0.0  # lower clip of i_new, 0..255 scale (Robo3D: 0)
    particle_pool: int = 16  # number of precomputed particle sets
    pool_seed: int = 42
    ring_method: str = "auto"
    sensor_height: float = 1.73  # m, flat-ground fallback of the noise floor
    label_id: int | None = None  # Robo3D: semantic id of snow points (SemanticKITTI 22, nuScenes 42, WOD 24)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"snow: mode must be one of {MODES}, got {self.mode!r}")
        if self.distribution not in DISTRIBUTIONS:
            raise ValueError(f"snow: distribution must be one of {sorted(DISTRIBUTIONS)}, got {self.distribution!r}")
        if not (math.isfinite(self.rate) and self.rate >= 0):
            raise ValueError(f"snow: rate must be ≥ 0, got {self.rate}")
        if not self.terminal_velocity > 0 or not self.snow_density > 0:
            raise ValueError("snow: terminal_velocity and snow_density must be > 0")
        if not self.divergence_mrad > 0:
            raise ValueError(f"snow: divergence_mrad must be > 0, got {self.divergence_mrad}")
        if self.noise_floor < 0:
            raise ValueError(f"snow: noise_floor must be ≥ 0, got {self.noise_floor}")
        if self.particle_pool < 1:
            raise ValueError(f"snow: particle_pool must be ≥ 1, got {self.particle_pool}")
        if self.ring_method not in RING_METHODS:
            raise ValueError(f"snow: ring_method must be one of {RING_METHODS}, got {self.ring_method!r}")
        if self.noise_level not in (None, "lowest", "rarest"):
            raise ValueError(f"snow: noise_level must be 'lowest' or 'rarest', got {self.noise_level!r}")
        if len(self.focal_distance) != len(self.focal_slope):
            raise ValueError("snow: a custom focal calibration needs focal_distance and focal_slope, one per ring")
        if self.focal_calibration not in FOCAL_CALIBRATIONS:
            raise ValueError(f"snow: focal_calibration must be one of {FOCAL_CALIBRATIONS}, "
                             f"got {self.focal_calibration!r}")
        if self.focal_index not in (None, "row", "laser"):
            raise ValueError(f"snow: focal_index must be 'row' or 'laser', got {self.focal_index!r}")


@dataclass(frozen=True)
class _Options:
    compat: bool
    sampling: bool
    channel_max: bool
    drop_clean: bool
    noise_level: str
    focal_index: str


def resolved_options(p: SnowParams) -> _Options:
    paper = p.mode == "paper"

    def pick(v: bool | None) -> bool:
        return paper if v is None else bool(v)

    return _Options(
        compat=pick(p.reference_compat),
        sampling=pick(p.reference_sampling),
        channel_max=pick(p.reference_channel_max),
        drop_clean=pick(p.drop_clean),
        noise_level=p.noise_level or ("rarest" if paper else "lowest"),
        focal_index=p.focal_index or ("row" if paper else "laser"),
    )


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
    from scipy.spatial import cKDTree  # lazy: scipy costs ≈ 0.3 s to import and only this path needs it

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
        all_xy = np.concatenate([xy, new_xy])
        all_r = np.concatenate([rr, r])
        pairs = cKDTree(all_xy).query_pairs(2 * float(all_r.max()), output_type="ndarray")
        if len(pairs):
            i, j = pairs[:, 0], pairs[:, 1]  # i < j
            hit = (j >= n_old) & (np.linalg.norm(all_xy[i] - all_xy[j], axis=1) <= all_r[i] + all_r[j])
            i, j = i[hit], j[hit]
            accepted = np.concatenate([np.ones(n_old, dtype=bool), ok])
            for a, b in zip(i[np.argsort(j, kind="stable")], np.sort(j), strict=True):  # a handful of pairs
                if accepted[a]:
                    accepted[b] = False
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
class _Band:
    lo: float  # lower distance edge (query only for beams with R₀ > lo)
    key: np.ndarray  # 8·set + φ, sorted
    d: np.ndarray
    r: np.ndarray
    w: np.ndarray  # asin(r/d)
    start: np.ndarray  # per set: first index in key
    count: np.ndarray  # per set: number of flakes
    wmax: float


@dataclass(frozen=True, eq=False)
class ParticleIndex:
    """Pool of particle sets, indexed for wedge queries: distance bands of azimuth-sorted flakes plus
    the few wide flakes (half-angle > 1 mrad) that every beam of the set checks."""

    n_sets: int
    n_particles: np.ndarray  # per set
    bands: tuple[_Band, ...]
    wide: _Band


def build_index(sets: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> ParticleIndex:
    n_sets = len(sets)
    sid = np.concatenate([np.full(len(s[0]), k, dtype=np.int64) for k, s in enumerate(sets)])
    d = np.concatenate([s[0] for s in sets]).astype(np.float64)
    phi = np.concatenate([s[1] for s in sets]).astype(np.float64)
    r = np.concatenate([s[2] for s in sets]).astype(np.float64)
    w = np.arcsin(np.clip(r / np.maximum(d, 1e-300), 0.0, 1.0))
    key = _KEY_STRIDE * sid + phi

    def band(sel: np.ndarray, lo: float) -> _Band:
        order = np.argsort(key[sel], kind="stable")
        k = key[sel][order]
        s = sid[sel][order]
        start = np.searchsorted(s, np.arange(n_sets), side="left")
        count = np.searchsorted(s, np.arange(n_sets), side="right") - start
        ws = w[sel][order]
        for a in (k, d[sel][order], r[sel][order], ws):
            a.setflags(write=False)
        return _Band(lo, k, d[sel][order], r[sel][order], ws, start, count, float(ws.max()) if len(ws) else 0.0)

    wide = w > _WIDE
    bands = []
    for lo, hi in itertools.pairwise(_BAND_EDGES):
        sel = ~wide & (d >= lo) & (d < hi)
        if hi == _BAND_EDGES[-1]:
            sel |= ~wide & (d >= hi)
        if sel.any():
            bands.append(band(sel, float(lo)))
    return ParticleIndex(n_sets, np.array([len(s[0]) for s in sets]), tuple(bands), band(wide, 0.0))


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


def _ragged(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(owner, offset) of every element when owner i holds counts[i] consecutive elements."""
    counts = counts.astype(np.int64)
    owner = np.repeat(np.arange(len(counts)), counts)
    offs = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    return owner, offs


def _candidates(index: ParticleIndex, set_id, phi, r0, half: float):
    """All (beam, d, a, b) with the flake nearer than R₀ and its clipped interval [a, b] ⊂ [−δ/2, δ/2]
    non-empty (angles relative to the beam's azimuth)."""
    beams, ds, las, lbs = [], [], [], []
    two_pi = 2 * np.pi

    def emit(band: _Band, sel: np.ndarray, counts: np.ndarray, first: np.ndarray) -> None:
        owner, offs = _ragged(counts)
        b = sel[owner]
        s = set_id[b]
        local = (first[owner] + offs) % np.maximum(band.count[s], 1)
        j = band.start[s] + local
        d = band.d[j]
        near = d < r0[b]
        b, j, d, s = b[near], j[near], d[near], s[near]
        delta = np.mod(band.key[j] - _KEY_STRIDE * s - phi[b] + np.pi, two_pi) - np.pi
        lo = np.maximum(delta - band.w[j], -half)
        hi = np.minimum(delta + band.w[j], half)
        hit = hi > lo
        beams.append(b[hit])
        ds.append(d[hit])
        las.append(lo[hit])
        lbs.append(hi[hit])

    for band in index.bands:
        sel = np.flatnonzero(r0 > band.lo)
        if len(sel) == 0:
            continue
        s = set_id[sel]
        win = half + band.wmax
        lo_a, hi_a = phi[sel] - win, phi[sel] + win
        base = _KEY_STRIDE * s
        i0 = np.searchsorted(band.key, base + np.mod(lo_a, two_pi), side="left") - band.start[s]
        i1 = np.searchsorted(band.key, base + np.mod(hi_a, two_pi), side="right") - band.start[s]
        i0 = np.minimum(i0, band.count[s])
        i1 = np.minimum(i1, band.count[s])
        wrapped = (lo_a < 0) | (hi_a >= two_pi)
        counts = np.where(wrapped, band.count[s] - i0 + i1, i1 - i0)
        counts = np.clip(counts, 0, band.count[s])
        if counts.any():
            emit(band, sel, counts, i0)
    wide = index.wide
    if len(wide.key):
        sel = np.flatnonzero(wide.count[set_id] > 0)
        if len(sel):
            emit(wide, sel, wide.count[set_id[sel]], np.zeros(len(sel), dtype=np.int64))
    if not beams:
        z = np.zeros(0)
        return np.zeros(0, dtype=np.int64), z, z, z
    return np.concatenate(beams), np.concatenate(ds), np.concatenate(las), np.concatenate(lbs)


def occlusion_ratios(a: np.ndarray, b: np.ndarray, half: float) -> np.ndarray:
    """q (B, K) for B beams with K candidates each, sorted by distance: every elementary piece of the
    wedge [−half, half] goes to the nearest candidate whose clipped interval [a, b] covers it."""
    nb, k = a.shape
    width = 2 * half
    if k == 1:
        return (b - a) / width
    q = np.empty((nb, k))
    step = max(1, _CHUNK // ((2 * k + 1) * k))
    ar = np.arange(k)
    for s0 in range(0, nb, step):
        aa, bb = a[s0 : s0 + step], b[s0 : s0 + step]
        n = len(aa)
        bounds = np.sort(np.concatenate([aa, bb, np.full((n, 1), -half), np.full((n, 1), half)], axis=1), axis=1)
        mids = 0.5 * (bounds[:, 1:] + bounds[:, :-1])
        lens = np.diff(bounds, axis=1)
        cover = (aa[:, None, :] <= mids[:, :, None]) & (mids[:, :, None] <= bb[:, None, :])
        owner = np.argmax(cover, axis=2)
        has = cover.any(axis=2)
        onehot = (owner[:, :, None] == ar) & has[:, :, None]
        q[s0 : s0 + step] = np.einsum("npk,np->nk", onehot, lens) / width
    return q


# ---- received power ----------------------------------------------------------------------------------


def _xi(r: np.ndarray) -> np.ndarray:
    return np.clip((r - XI_R1) / (XI_R2 - XI_R1), 0.0, 1.0)


def _grid(k: np.ndarray, sampling: bool) -> np.ndarray:
    """Range of bin k: the reference's rounded k·(120 + cτ_H)/1229, or k/10."""
    if sampling:
        return np.round(k * ((PAPER_MAX_RANGE + C_TAU) / (PAPER_BINS - 1)), 2)
    return k / 10.0


def _windows(r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bins k ∈ [⌈10 r⌉, ⌊10(r + cτ_H)⌋] of each element (rounded to 1e-9 so 10·20.0 stays bin 200)."""
    klo = np.ceil(np.round(10.0 * r, 9)).astype(np.int64)
    khi = np.floor(np.round(10.0 * (r + C_TAU), 9)).astype(np.int64)
    return klo, khi


def _pulse(k: np.ndarray, r: np.ndarray, coef: np.ndarray, sampling: bool) -> np.ndarray:
    return coef * np.sin(np.pi * (_grid(k, sampling) - r) / C_TAU) ** 2


_BIG = np.iinfo(np.int64).max


def _peak(owner: np.ndarray, r: np.ndarray, coef: np.ndarray, n_owner: int, sampling: bool):
    """Peak of the summed waveform per owner (beam). Elements are flat arrays sorted by (owner, r).

    Returns (max value, bin of the first maximum) per owner (−inf, _BIG for owners without elements).
    Elements are grouped into clusters of chained overlapping windows (the waveform of a cluster does
    not depend on any other element). A lone element peaks at one of the 5 bins around r + cτ_H/2
    (closed form); a cluster is evaluated on every bin of its span (scatter-add with bincount). The
    first maximum (smallest bin) wins ties, as np.argmax over the reference's bin array does."""
    klo, khi = _windows(r)
    new_owner = np.r_[True, owner[1:] != owner[:-1]]
    new_cluster = new_owner | np.r_[True, klo[1:] > khi[:-1]]
    cid = np.cumsum(new_cluster) - 1
    size = np.bincount(cid)
    lone = size[cid] == 1
    cand_o, cand_m, cand_k = [], [], []

    e = np.flatnonzero(lone)
    if len(e):
        k = np.round(10.0 * (r[e] + C_TAU / 2)).astype(np.int64)[:, None] + np.arange(-2, 3)
        inside = (k >= klo[e, None]) & (k <= khi[e, None])
        sig = np.where(inside, _pulse(k, r[e, None], coef[e, None], sampling), -np.inf)
        m = sig.max(axis=1)
        cand_o.append(owner[e])
        cand_m.append(m)
        cand_k.append(np.where(sig >= m[:, None], k, _BIG).min(axis=1))

    e = np.flatnonzero(~lone)
    if len(e):
        c = cid[e]
        first = np.r_[True, c[1:] != c[:-1]]
        c_lo = klo[e][first]
        c_len = np.maximum.reduceat(khi[e], np.flatnonzero(first)) - c_lo + 1
        c_off = np.cumsum(c_len) - c_len
        ci = np.cumsum(first) - 1  # cluster of each element, 0..n_clusters-1
        t = np.arange(32)
        k = klo[e, None] + t
        ok = k <= khi[e, None]
        pos = c_off[ci, None] + (k - c_lo[ci, None])
        val = _pulse(k, r[e, None], coef[e, None], sampling)
        total = int(c_len.sum())
        buf = np.bincount(pos[ok], weights=val[ok], minlength=total)
        kbuf = np.repeat(c_lo - c_off, c_len) + np.arange(total)
        m = np.maximum.reduceat(buf, c_off)
        cand_o.append(owner[e][first])
        cand_m.append(m)
        cand_k.append(np.minimum.reduceat(np.where(buf >= np.repeat(m, c_len), kbuf, _BIG), c_off))

    best_m = np.full(n_owner, -np.inf)
    best_k = np.full(n_owner, _BIG, dtype=np.int64)
    if cand_o:
        o, m, k = np.concatenate(cand_o), np.concatenate(cand_m), np.concatenate(cand_k)
        order = np.lexsort((k, -m, o))
        o, m, k = o[order], m[order], k[order]
        head = np.r_[True, o[1:] != o[:-1]]
        best_m[o[head]] = m[head]
        best_k[o[head]] = k[head]
    return best_m, best_k


def _signal_at(
    kq: np.ndarray, owner: np.ndarray, r: np.ndarray, coef: np.ndarray, n_owner: int, sampling: bool
) -> np.ndarray:
    """Summed waveform of each owner at its bin kq[owner]."""
    klo, khi = _windows(r)
    k = kq[owner]
    val = np.where((k >= klo) & (k <= khi), _pulse(k, r, coef, sampling), 0.0)
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
    opts: _Options,
    *,
    divergence_mrad: float = 3.0,
    focal_f: np.ndarray | None = None,
    focal_s: np.ndarray | None = None,
    min_intensity: float = 0.0,
) -> BeamResult:
    """The snow model for B beams: ``set_id`` (particle set of each beam's channel), ``phi`` (azimuth in
    the set's frame, [0, 2π)), ``r0`` (m), ``intensity`` and ``channel_max`` (0..255 scale)."""
    nb = len(r0)
    half = divergence_mrad * 1e-3 / 2
    outcome = np.zeros(nb, dtype=np.int8)
    new_r = r0.astype(np.float64).copy()
    new_i = intensity.astype(np.float64).copy()
    q0 = np.ones(nb)
    active = np.isfinite(r0) & np.isfinite(phi) & np.isfinite(intensity) & (r0 > 0)
    if opts.sampling:  # the window of the hard target must fit the 1230-bin grid
        active &= np.floor(np.round(10.0 * (r0 + C_TAU), 9)) <= PAPER_BINS - 1
    act = np.flatnonzero(active)
    beam, d, a, b = _candidates(index, set_id[act], phi[act], r0[act], half)
    beam = act[beam]
    order = np.lexsort((d, beam))
    beam, d, a, b = beam[order], d[order], a[order], b[order]

    # occlusion ratios, beams grouped by their number of candidates
    counts = np.bincount(beam, minlength=nb)
    first = np.cumsum(counts) - counts
    q = np.empty(len(beam))
    for k in np.unique(counts[counts > 0]):
        bm = np.flatnonzero(counts == k)
        idx = first[bm][:, None] + np.arange(k)
        q[idx] = occlusion_ratios(a[idx], b[idx], half)
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
        before = REF_SCALE if opts.compat else imx  # the reference removes 255·s·|…|, adds back i_max,ch·s·|…|
        i_adj = np.clip(intensity[hit] - before * sh * np.abs(fh - (1 - R0 / 120.0) ** 2), 0.0, imx)
    else:
        i_adj = np.clip(intensity[hit], 0.0, imx)
    amp = FLAKE_REFLECTIVITY * imx
    c_flake = amp[slot] * q * _xi(d) / d**2
    if opts.compat:
        c_hard = amp * q0[hit] * _xi(R0) / R0**2
    elif opts.sampling:
        c_hard = i_adj * q0[hit] * _xi(R0)
    else:
        c_hard = i_adj * q0[hit]
    owner = np.concatenate([slot, np.arange(len(hit))])
    r_el = np.concatenate([d, R0])
    c_el = np.concatenate([c_flake, c_hard])
    order = np.lexsort((r_el, owner))
    owner, r_el, c_el = owner[order], r_el[order], c_el[order]
    m, ks = _peak(owner, r_el, c_el, len(hit), opts.sampling)
    ok = m > 0
    ks = np.where(ok, ks, 0)
    if opts.sampling:
        dmax, imax = ks / 10.0 - C_TAU / 2, m
    else:  # 3-point parabola through the peak bin and its neighbours
        ym = _signal_at(ks - 1, owner, r_el, c_el, len(hit), False)
        yp = _signal_at(ks + 1, owner, r_el, c_el, len(hit), False)
        den = ym - 2 * m + yp
        with np.errstate(invalid="ignore", divide="ignore"):
            p = np.where(ok & (den < 0), 0.5 * (ym - yp) / den, 0.0)
        p = np.clip(np.nan_to_num(p), -0.5, 0.5)
        dmax, imax = (ks + p) / 10.0 - C_TAU / 2, np.maximum(m - 0.25 * (ym - yp) * p, m)
    if focal_f is not None:
        imax = imax + imx * focal_s[hit] * np.abs(focal_f[hit] - (1 - dmax / 120.0) ** 2)
    i_new = np.clip(imax, min_intensity, imx)
    if opts.sampling:
        i_new = np.floor(i_new)
    att = np.abs(dmax - R0) < ATTENUATED_TOLERANCE
    hit, att, dmax, i_new = hit[ok], att[ok], dmax[ok], i_new[ok]
    outcome[hit] = np.where(att, 1, 2)
    new_r[hit] = np.where(att, r0[hit], dmax)
    new_i[hit] = i_new
    return BeamResult(outcome, new_r, new_i, q0)


def simulate_beams(
    r0,
    phi,
    intensity,
    particles: tuple[np.ndarray, np.ndarray, np.ndarray],
    *,
    mode: str = "physical",
    reference_compat: bool | None = None,
    reference_sampling: bool | None = None,
    divergence_mrad: float = 3.0,
    channel_max: float = REF_SCALE,
    focal_distance: float | None = None,
    focal_slope: float = 0.0,
) -> BeamResult:
    """Explicit-input entry point (one channel): beams at range ``r0`` (m), azimuth ``phi`` (rad) and
    ``intensity`` (0..255) against one particle set ``(d, φ, r)``; for tests and analysis. With
    ``focal_distance`` (m), the channel's HDL-64 focal term with that distance and ``focal_slope``."""
    r0 = np.atleast_1d(np.asarray(r0, dtype=np.float64))
    phi = np.mod(np.broadcast_to(np.asarray(phi, dtype=np.float64), r0.shape), 2 * np.pi)
    intensity = np.broadcast_to(np.asarray(intensity, dtype=np.float64), r0.shape)
    d, ph, r = (np.atleast_1d(np.asarray(x, dtype=np.float64)) for x in particles)
    opts = resolved_options(
        SnowParams(1.0, 1.0, mode=mode, reference_compat=reference_compat, reference_sampling=reference_sampling)
    )
    index = build_index([(d, np.mod(ph, 2 * np.pi), r)])
    return simulate(
        index,
        np.zeros(len(r0), dtype=np.int64),
        phi,
        r0,
        intensity,
        np.full(len(r0), float(channel_max)),
        opts,
        divergence_mrad=divergence_mrad,
        focal_f=None if focal_distance is None else np.full(len(r0), hdl64e_s3.focal_offset(focal_distance)),
        focal_s=None if focal_distance is None else np.full(len(r0), float(focal_slope)),
    )


# ---- noise floor -----------------------------------------------------------------------------------


def noise_floor_threshold(
    xyz: np.ndarray, i255: np.ndarray, params: SnowParams, opts: _Options, rng: np.random.Generator
):
    """np.polyval coefficients of T(d) (0..255 scale) from the ground of the clean scan, or None when the
    scan has fewer than 1,000 ground points."""
    paper = params.mode == "paper"
    # the snow script's array has 5 columns (x, y, z, i, channel): it fits from more than 5 candidates
    plane = (fit_ground_plane(xyz, rng, min_candidates=6 if paper else 5, squared_loss=paper)
             or flat_ground_plane(params.sensor_height))
    ground = np.abs(plane.offset(xyz)) < GROUND_BAND
    ground &= np.all(np.isfinite(xyz), axis=1) & np.isfinite(i255)
    if int(ground.sum()) < MIN_GROUND_POINTS:
        return None
    g = xyz[ground]
    dist = np.linalg.norm(g, axis=1)
    cos = plane.cos_incidence(g)
    n = i255[ground] / cos
    line = noise_level_line(dist, n, floor_const=FLOOR_CONST, method=opts.noise_level, fallback=fit_line(dist, n))
    t_ground = params.noise_floor * (line[0] * dist + line[1]) * cos
    return fit_floor_quadratic(dist, t_ground)


# ---- HDL-64 focal calibration --------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class FocalLookup:
    """Per point: focal offset f, focal slope s and channel cap i_max,ch; ``name`` says what was used
    (recorded in the example's info as ``snow_focal``)."""

    offset: np.ndarray | None  # None: no focal term (slope 0)
    slope: np.ndarray | None
    channel_max: np.ndarray
    name: str


def focal_lookup(frame: Frame, rings: np.ndarray, params: SnowParams, opts: _Options) -> FocalLookup:
    """The calibration each point's channel uses.

    - custom ``focal_distance``/``focal_slope``: indexed by ring; cap 255 (230 on rows 53/55/56/58 with
      ``reference_channel_max``).
    - ``focal_calibration`` "auto": the HDL-64E S3 table for an HDL-64 frame (``Frame.sensor`` is
      `bench_build.stages.sensor.HDL64E` or `hdl64e_s3.HDL64E_S3`), else neutral. "hdl64e_s3" forces the table
      (Robo3D's nuScenes-C script applied it to the HDL-32E's rings 0–31), "none" is neutral.
    - neutral (no calibration for the sensor, e.g. nuScenes HDL-32E, Waymo, an unknown sensor): focal slope
      0, so the term is the identity, and i_max,ch = 255 on every channel.
    - the S3 table, ``focal_index`` "row" (paper): table row = the point's ring (Robo3D's elevation row,
      looked up in the laser_id-ordered table: Robo3D's index mismatch, reproduced); "laser" (physical): the
      laser's own id, i.e. the ring column of an S3 source (STF), otherwise the S3 laser whose vertical
      angle is nearest the point's elevation (KITTI stores no laser id).
    """
    n = len(frame)
    flat = np.full(n, REF_SCALE)
    if params.focal_distance:
        fd = np.asarray(params.focal_distance, dtype=np.float64)
        if int(rings.max()) >= len(fd):
            raise ValueError(f"snow: focal calibration has {len(fd)} lasers, the frame has ring {rings.max()}")
        cmax = flat.copy()
        if opts.channel_max:
            cmax[np.isin(rings, DIM_LASERS)] = 230.0
        off = hdl64e_s3.focal_offset(fd[rings]) if params.focal_compensation else None
        slope = np.asarray(params.focal_slope, dtype=np.float64)[rings] if params.focal_compensation else None
        return FocalLookup(off, slope, cmax, "custom")
    cal = params.focal_calibration
    sensor = frame.sensor.name if frame.sensor is not None else None
    if cal == "auto":
        cal = hdl64e_s3.CALIBRATION if sensor in HDL64_SENSORS else "none"
    if cal == "none":
        return FocalLookup(None, None, flat, "none")
    if opts.focal_index == "row":
        idx = rings
        if int(rings.max()) >= len(hdl64e_s3.LASERS):
            raise ValueError(f"snow: the HDL-64E S3 table has 64 rows, frame {frame.frame_id} has ring {rings.max()}")
    elif sensor == hdl64e_s3.HDL64E_S3.name and "ring" in frame.fields:
        idx = np.clip(frame.column("ring").astype(np.int64), 0, len(hdl64e_s3.LASERS) - 1)
    else:
        xyz = frame.xyz.astype(np.float64)
        r = np.linalg.norm(xyz, axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            el = np.degrees(np.arcsin(np.clip(np.where(r > 0, xyz[:, 2] / r, 0.0), -1.0, 1.0)))
        idx = hdl64e_s3.nearest_laser(np.nan_to_num(el))
    cmax = hdl64e_s3.MAX_INTENSITY[idx].copy() if opts.channel_max else flat
    if not params.focal_compensation:
        return FocalLookup(None, None, cmax, f"{hdl64e_s3.CALIBRATION}/{opts.focal_index}/off")
    return FocalLookup(hdl64e_s3.focal_offset(hdl64e_s3.FOCAL_DISTANCE[idx]), hdl64e_s3.FOCAL_SLOPE[idx], cmax,
                       f"{hdl64e_s3.CALIBRATION}/{opts.focal_index}")


# ---- the stage ---------------------------------------------------------------------------------------


@stage("snow", params=SnowParams, version=2)  # v2: HDL-64 focal term, squared-loss plane from > 5 candidates
def snow(frame: Frame, params: SnowParams, rng: np.random.Generator) -> Frame:
    n = len(frame)
    if n == 0 or params.rate == 0:
        return frame
    if "intensity" not in frame.fields:
        raise ValueError(f"snow: frame {frame.frame_id} has no intensity column")
    opts = resolved_options(params)
    rings, method = frame_rings(frame, params.ring_method)
    n_ch = max(N_RINGS, int(rings.max()) + 1)
    pool = particle_pool(
        float(params.rate),
        float(params.terminal_velocity),
        float(params.snow_density),
        params.distribution,
        int(params.particle_pool),
        int(params.pool_seed),
    )
    sets, rot = assign_channels(rng, pool.n_sets, n_ch)

    xyz = frame.xyz.astype(np.float64)
    scale = REF_SCALE / frame.intensity_max
    i255 = frame.intensity.astype(np.float64) * scale
    r0 = np.linalg.norm(xyz, axis=1)
    phi = np.mod(np.arctan2(xyz[:, 1], xyz[:, 0]) - rot[rings], 2 * np.pi)
    focal = focal_lookup(frame, rings, params, opts)
    res = simulate(
        pool,
        sets[rings],
        phi,
        r0,
        i255,
        focal.channel_max,
        opts,
        divergence_mrad=params.divergence_mrad,
        focal_f=focal.offset,
        focal_s=focal.slope,
        min_intensity=params.min_intensity,
    )

    points = frame.points.astype(np.float64)
    scatter = res.outcome == 2
    changed = res.outcome > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        points[scatter, :3] *= (res.range[scatter] / r0[scatter])[:, None]
    col = frame.fields.index("intensity")
    points[changed, col] = res.intensity[changed] / scale
    tag = frame.point_tag.astype(np.uint8).copy()
    tag[res.outcome == 1] = PointTag.ATTENUATED
    tag[scatter] = PointTag.SCATTER_SNOW

    coef = None
    if params.noise_floor > 0:
        coef = noise_floor_threshold(xyz, i255, params, opts, rng)
    out = set_semantic(frame.with_points(points.astype(np.float32), point_tag=tag), scatter, params.label_id)
    out = out.with_info(ring_method=method, snow_noise_floor=coef is not None, snow_focal=focal.name)
    if coef is None:
        return out
    thr = np.polyval(coef, np.linalg.norm(points[:, :3], axis=1))
    dim = ~(points[:, col] * scale > thr)
    drop = dim & ~scatter & (True if opts.drop_clean else res.outcome == 1)
    if not drop.any():
        return out
    return out.take(~drop)
