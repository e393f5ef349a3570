"""LiDAR snowfall simulation (Hahner et al., CVPR 2022), from the paper and its released code.

Every point is a hard target at range R₀ whose beam (an azimuth wedge of divergence δ = 3 mrad in the
scan plane of its laser channel) may be partly occluded by snowflakes:

1–4. The particle field, its pool, the occlusion of each beam and its received power are the
   simulator `bench_build.stages.physics.snowfall` (its docstring has the model's equations).
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
it every ATTENUATED point falls under the noise floor and snow points come out nearly black.

Parity with the released Robo3D script (``create/kitti_c/snow/``): it only runs after a one-line repair
(its channel loop unpacks 4 values from a per-channel function that returns 3) and with scikit-learn
≤ 1.1 for its RANSAC ground plane (``loss='squared_loss'``; newer versions reject it and a bare
``except`` takes a wrong-sign fallback plane, after which the noise-floor fit crashes or is meaningless).
Paper mode reproduces that repaired script: the quirk, its range grid and truncation, the 230 caps and
the focal term by elevation row, the rarest-cell noise level, the squared-loss plane fitted from more than
5 candidates (its array has 5 columns), and the floor also dropping untouched dim points. Measured side by
side on a real HDL-64 KITTI camera-FOV scan with this term on: dropped 35.3 / 31.4 / 27.9 % (script
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

import math
from dataclasses import dataclass

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
from bench_build.stages.physics.snowfall import (
    DISTRIBUTIONS,
    REF_SCALE,
    BeamResult,
    assign_channels,
    build_index,
    particle_pool,
    simulate,
)
from bench_build.stages.registry import stage
from bench_build.stages.ring import METHODS as RING_METHODS
from bench_build.stages.ring import N_RINGS, frame_rings
from bench_build.stages.sensor import HDL64E

DIM_LASERS = (53, 55, 56, 58)  # i_max,ch = 230 (reference calibration), 255 otherwise
FLOOR_CONST = 5.0  # the released noise-level estimator's constant, in the 0..255 scale
GROUND_BAND = 0.5
MODES = ("physical", "paper")
FOCAL_CALIBRATIONS = ("auto", hdl64e_s3.CALIBRATION, "none")
# Frame.sensor names the S3 table stands in for under "auto" (KITTI/SemanticKITTI/demo HDL-64E, STF S3)
HDL64_SENSORS = (HDL64E.name, hdl64e_s3.HDL64E_S3.name)



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

    def unused(self) -> frozenset[str]:
        """Without a noise floor there is no ground plane, so no flat-ground fallback (`Stage.unused_params`)."""
        return frozenset({"sensor_height", "drop_clean", "noise_level"} if self.noise_floor == 0 else ())


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
        compat=opts.compat,
        sampling=opts.sampling,
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
        compat=opts.compat,
        sampling=opts.sampling,
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
