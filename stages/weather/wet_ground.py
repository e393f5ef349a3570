"""Wet-ground augmentation (Hahner et al., CVPR 2022, by M. Bijelic), from the paper and its released code.

A film of water of height d_w on the road turns part of the diffuse (Lambertian) ground into a
specular surface, so less light returns and dim ground returns fall below the sensor's noise floor:

1. Ground plane by RANSAC on the strip in front of the sensor (`bench_build.stages.physics.ground`), fitted whenever
   the strip holds more than 4 candidates (``min_candidates`` = 5), as the released scripts do; ground
   points are |w·p + h| < 0.5 m, and the 1,000 gate (``min_ground``) counts them *after* the fit
   (the released code's minimum). A camera-FOV KITTI scan (the object-detection layout keeps only the points in
   the image) has a few hundred candidates and thousands of ground points, so it is fitted and wetted.
   No fit (≤ 4 candidates, no consensus) or fewer than 1,000 ground points: the frame is returned
   unchanged, or with ``fallback_height`` the flat plane z = −H with the fitted planes' sign convention
   (w = (0, 0, −1), h = −H; the reference's own fallback w = (0, 0, 1), h = −1.55 has the opposite sign,
   which puts its "ground" band 1–2 m *above* the sensor, so in practice the reference leaves such scans
   unchanged — hence no fallback by default).
2. Incidence cos θ = w·p/|p|, normalised intensity n = i/cos θ; laser power P_out(d) = 15·(a₁d + b₁)
   from a least-squares line n ≈ a₁d + b₁ over the ground points; reflectivity ρ = n/P_out.
3. Water film: Fresnel power coefficients air→water at θ and water→air at θ_t (n_air = 1.0003,
   n_w = 1.33), multiple bounces with the ground, t = max_s,p T_aw·ρ·T_wa/(1 − ρ·R_wa) with ρ clipped
   to [0.05, 1]; wetness f = clip(d_w/d_pav, 0, 1) with pavement texture depth d_pav = 1.2 mm.
4. τ_w = (1 − f)·ρ + f·t(/θ);  i_new = clip(P_out·cos θ·τ_w, 0, i)  — intensity never increases.
5. Noise floor: T(d) = noise_floor × (line through the per-range-bin noise level of n);
   ground points with i_new ≤ T·cos θ are dropped (`Frame.take`, order preserved), surviving ground
   points whose intensity changed are tagged ATTENUATED. Non-ground points are never touched.

Options (None → the mode's default):

| option            | physical      | paper  | meaning                                                      |
| ----------------- | ------------- | ------ | ------------------------------------------------------------ |
| ``divide_by_angle``| False        | True   | τ_w's film term is t/θ with θ in radians (the reference      |
|                   |               |        | divides by the angle itself). physical: t alone — t already |
|                   |               |        | is the ground's reflectivity seen through the film, and the |
|                   |               |        | Lambertian cos θ is applied once, in P_out·cos θ·τ_w (t/cos θ |
|                   |               |        | would make wet grazing ground brighter than dry ground)     |
| ``floor_const``   | 5/255 of full | 5.0    | lower limit of the noise-level histogram, in the working    |
|                   | scale         |        | scale (the reference's literal 5 assumes 0..255; Robo3D     |
|                   |               |        | KITTI-C feeds raw [0,1] intensities, pitfall)               |
| ``noise_level``   | "lowest"      | "rarest"| per range bin: the lowest n above floor_const, or one of   |
|                   |               |        | the two rarest histogram cells (reference's argpartition)   |
| ``drop_dry``      | False         | True   | paper: the floor test applies to every ground point, so dim |
|                   |               |        | ground points are dropped even when the water did not dim  |
|                   |               |        | them; physical: only points whose intensity the water       |
|                   |               |        | lowered can fall below the floor (water_height = 0 is the  |
|                   |               |        | identity: a measured return was above the floor)           |
| ``byte_scale``    | False         | False  | work in 0..255 (a [0,1] source ×255 in, ÷255 out). Robo3D   |
|                   |               |        | KITTI-C does not; in physical mode the result does not      |
|                   |               |        | depend on it (every step is scale-equivariant)              |
| ``squared_loss``  | False         | True   | RANSAC inlier rule. paper: the released scripts' squared    |
|                   |               |        | loss (scikit-learn ≤ 1.1, ``loss='squared_loss'``): inlier  |
|                   |               |        | when r² ≤ MAD of z, i.e. |r| ≤ √MAD; physical: |r| ≤ MAD   |

``ground_labels`` (empty): Robo3D's SemanticKITTI-C / nuScenes-C scripts take the ground from the point
labels (e.g. SemanticKITTI road, lane marking, parking, sidewalk, other-ground) with the incidence angle
against the z axis, cos θ = −z/|p| ("flat earth"), and no RANSAC; with ids given, step 1 is exactly that
(the 1,000 gate counts labelled ground points; a frame without semantic labels raises).

``fallback_height`` (None): when no plane is found, use z = −H with the fitted sign convention
(w = (0, 0, −1), h = −H) instead of returning the frame unchanged (the reference's own fallback
w = (0, 0, 1), h = −1.55 has the opposite sign).

Parity with the released Robo3D KITTI-C script (``create/kitti_c/wet_ground/``, Hahner/Bijelic code):
it passes ``loss='squared_loss'`` to scikit-learn's RANSACRegressor, which scikit-learn ≥ 1.2 rejects;
its bare ``except`` then takes the wrong-sign fallback plane for every scan, leaving nearly every scan
unchanged. Paper mode reproduces the *fitted* behaviour (scikit-learn ≤ 1.1), which is what the paper's
wet-ground numbers show. Given the reference's plane, everything downstream is bit-identical to the
script (measured on a real HDL-64 KITTI camera-FOV scan). Physical mode differs in: the absolute-loss
inlier rule, the film term without the division by θ, the deterministic lowest noise level, and only
darkened points tested against the floor (see the table).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame, PointTag
from bench_build.stages.physics.ground import (
    GROUND_BAND,
    MIN_CANDIDATES,
    MIN_GROUND_POINTS,
    fit_ground_plane,
    fit_line,
    flat_ground_plane,
    noise_level_line,
)
from bench_build.stages.registry import stage

N_AIR = 1.0003
N_WATER = 1.33
PAVEMENT_DEPTH = 1.2  # mm, coarse asphalt texture depth d_pav
POWER_FACTOR = 15.0
RHO_CLIP = (0.05, 1.0)
MODES = ("physical", "paper")
_PAPER_DEFAULTS = {
    "divide_by_angle": True, "noise_level": "rarest", "drop_dry": True, "byte_scale": False, "floor_const": 5.0,
    "squared_loss": True,
}
# floor_const None in physical mode: 5/255 of the working scale's full range (resolved per frame)
_PHYSICAL_DEFAULTS = {
    "divide_by_angle": False, "noise_level": "lowest", "drop_dry": False, "byte_scale": False, "floor_const": None,
    "squared_loss": False,
}


@dataclass(frozen=True)
class WetGroundParams:
    water_height: float  # mm, water film height d_w
    noise_floor: float = 0.7  # multiplier of the noise-level line (Hahner default 0.7; Robo3D KITTI-C 0.2)
    mode: str = "physical"  # "physical" or "paper" (see module docstring)
    pavement_depth: float = PAVEMENT_DEPTH  # mm
    ground_band: float = GROUND_BAND  # m
    min_ground: int = MIN_GROUND_POINTS  # fewer ground points (after the fit) → unchanged
    min_candidates: int = MIN_CANDIDATES  # fit the plane when the strip holds at least this many candidates
    fallback_height: float | None = None  # m; plane z = −H when RANSAC finds none (None: unchanged)
    divide_by_angle: bool | None = None
    floor_const: float | None = None
    noise_level: str | None = None
    drop_dry: bool | None = None
    byte_scale: bool | None = None
    squared_loss: bool | None = None
    ground_labels: tuple[int, ...] = ()  # Robo3D segmentation sets: ground = these semantic ids (no RANSAC)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"wet_ground: mode must be one of {MODES}, got {self.mode!r}")
        if not (self.water_height >= 0 and math.isfinite(self.water_height)):
            raise ValueError(f"wet_ground: water_height must be a finite value ≥ 0, got {self.water_height}")
        if not (self.noise_floor >= 0 and math.isfinite(self.noise_floor)):
            raise ValueError(f"wet_ground: noise_floor must be a finite value ≥ 0, got {self.noise_floor}")
        if not self.pavement_depth > 0:
            raise ValueError(f"wet_ground: pavement_depth must be > 0, got {self.pavement_depth}")
        if self.noise_level not in (None, "rarest", "lowest"):
            raise ValueError(f"wet_ground: noise_level must be 'rarest' or 'lowest', got {self.noise_level!r}")

    @property
    def needs_point_labels(self) -> bool:
        """Reads the frame's ``semantic`` labels (a build refuses a source without them before any work)."""
        return bool(self.ground_labels)

    def option(self, name: str):
        value = getattr(self, name)
        if value is not None:
            return value
        return (_PAPER_DEFAULTS if self.mode == "paper" else _PHYSICAL_DEFAULTS)[name]


def _fresnel(ci: np.ndarray, ct: np.ndarray, n1: float, n2: float) -> tuple[np.ndarray, ...]:
    """(R_s, T_s, R_p, T_p) from index n1 to n2, given cos of the incidence (ci > 0) and refraction (ct) angles.

    r_s = (a − b)/(a + b), t_s = 2a/(a + b), r_p = (c − e)/(c + e), t_p = 2a/(c + e) with a = n1 cos θ_i,
    b = n2 cos θ_t, c = n2 cos θ_i, e = n1 cos θ_t; R = r², T = t²·b/a (so T_s = 4ab/(a + b)²)."""
    a, b = n1 * ci, n2 * ct
    c, e = n2 * ci, n1 * ct
    inv_s, inv_p = 1.0 / (a + b), 1.0 / (c + e)
    rs, rp = (a - b) * inv_s, (c - e) * inv_p
    four_ab = 4.0 * a * b
    return rs * rs, four_ab * inv_s * inv_s, rp * rp, four_ab * inv_p * inv_p


def _refracted_cos(ci: np.ndarray, n1: float, n2: float) -> np.ndarray:
    st2 = (n1 / n2) ** 2 * (1.0 - ci * ci)  # Snell: sin θ_t = (n1/n2) sin θ_i
    return np.sqrt(np.maximum(1.0 - st2, 0.0))


def fresnel_powers(theta: np.ndarray, n1: float, n2: float) -> tuple[np.ndarray, ...]:
    """(R_s, T_s, R_p, T_p) power coefficients for light going from index n1 to n2 at incidence θ:
    R = r², T = t²·(n2 cos θ_t)/(n1 cos θ_i) with the standard Fresnel amplitude coefficients."""
    ci = np.cos(np.asarray(theta, dtype=np.float64))
    return _fresnel(ci, _refracted_cos(ci, n1, n2), n1, n2)


def film_transmission_sp(cos_theta: np.ndarray, rho: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(T_tot,s, T_tot,p) = T_aw·ρ·T_wa/(1 − ρ·R_wa) per polarisation, ρ clipped to [0.05, 1]:
    air→water at θ, repeated bounces between the Lambertian ground and the water surface, water→air at θ_t.

    By reciprocity the water→air coefficients at θ_t equal the air→water ones at θ (T_wa = T_aw = T,
    R_wa = R_aw = 1 − T), so T_tot = T²·ρ/(1 − ρ·(1 − T)) with T_s = 4ab/(a + b)², T_p = 4ab/(c + e)²
    (a = n_air cos θ, b = n_w cos θ_t, c = n_w cos θ, e = n_air cos θ_t); fewer temporaries, same numbers."""
    ci = np.asarray(cos_theta, dtype=np.float64)
    rho = np.minimum(np.maximum(rho, RHO_CLIP[0]), RHO_CLIP[1])
    ct = _refracted_cos(ci, N_AIR, N_WATER)
    four_ab = (4.0 * N_AIR * N_WATER) * ci * ct
    out = []
    for first, second in ((N_AIR, N_WATER), (N_WATER, N_AIR)):
        den = first * ci + second * ct
        t = four_ab / (den * den)
        out.append(t * t * rho / (1.0 - rho * (1.0 - t)))
    return out[0], out[1]


def film_transmission(cos_theta: np.ndarray, rho: np.ndarray) -> np.ndarray:
    """t = max(T_tot,s, T_tot,p): the ground's return through the water film."""
    return np.maximum(*film_transmission_sp(cos_theta, rho))


@stage("wet_ground", params=WetGroundParams, version=2)  # v2: plane from > 4 candidates, 1,000 gate after the fit
def wet_ground(frame: Frame, params: WetGroundParams, rng: np.random.Generator) -> Frame:
    if "intensity" not in frame.fields:
        raise ValueError(f"wet_ground: frame {frame.frame_id} has no intensity column")
    xyz = frame.xyz.astype(np.float64)
    if params.ground_labels:  # Robo3D SemanticKITTI-C / nuScenes-C: ground from labels, θ vs the z axis
        if "semantic" not in frame.labels:
            raise ValueError(f"wet_ground: frame {frame.frame_id} has no semantic labels (ground_labels is set)")
        plane = flat_ground_plane(0.0)  # only its normal is used: cos θ = −z/|p| ("flat earth")
        g_idx = np.flatnonzero(np.isin(frame.labels["semantic"], params.ground_labels))
    else:
        plane = fit_ground_plane(xyz, rng, min_candidates=params.min_candidates,
                                 squared_loss=params.option("squared_loss"))
        if plane is None:
            if params.fallback_height is None:
                return frame
            plane = flat_ground_plane(params.fallback_height)
        g_idx = np.flatnonzero(plane.mask(xyz, params.ground_band))
    if len(g_idx) < params.min_ground:
        return frame

    scale = 255.0 / frame.intensity_max if params.option("byte_scale") else 1.0
    floor_const = params.option("floor_const")
    if floor_const is None:  # physical default: 5 levels of a 0..255 scale, in the working scale
        floor_const = 5.0 / 255.0 * frame.intensity_max * scale
    col = frame.fields.index("intensity")
    p = xyz[g_idx]
    i = frame.points[g_idx, col].astype(np.float64) * scale
    d = np.sqrt(np.einsum("ij,ij->i", p, p))
    cos_t = plane.cos_incidence(p)
    n = i / cos_t

    a1, b1 = fit_line(d, n)
    p_out = POWER_FACTOR * (a1 * d + b1)
    p_out = np.where(p_out > 0, p_out, np.finfo(np.float64).tiny)
    rho = n / p_out
    f = min(max(params.water_height / params.pavement_depth, 0.0), 1.0)
    t = film_transmission(cos_t, rho)
    film = t / np.arccos(cos_t) if params.option("divide_by_angle") else t  # θ in radians (reference quirk)
    tau = (1.0 - f) * rho + f * film
    i_new = np.minimum(np.maximum(p_out * cos_t * tau, 0.0), i)

    slope, icept = noise_level_line(d, n, floor_const=floor_const, method=params.option("noise_level"),
                                    fallback=(a1, b1))
    threshold = params.noise_floor * (slope * d + icept) * cos_t
    new_i32 = (i_new / scale).astype(np.float32)
    old_i32 = frame.points[g_idx, col]
    darkened = new_i32 < old_i32
    drop = i_new <= threshold
    if not params.option("drop_dry"):
        drop &= darkened
    changed = darkened & ~drop
    if not drop.any() and not changed.any():
        return frame

    points = frame.points.copy()
    points[g_idx, col] = np.where(darkened, new_i32, old_i32)
    tag = frame.point_tag.astype(np.uint8, copy=True)
    ch = g_idx[changed]
    tag[ch[tag[ch] == PointTag.CLEAN]] = PointTag.ATTENUATED
    keep = np.ones(len(frame), dtype=bool)
    keep[g_idx[drop]] = False
    return frame.with_points(points, point_tag=tag).take(keep)
