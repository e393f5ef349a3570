"""fog: Hahner et al. LiDAR fog simulation (ICCV 2021), physical and paper modes."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.integrate import quad

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.frame import Frame, PointTag
from bench_build.stages.weather.fog import (
    BETA_0,
    C_LIGHT,
    FROZEN_BETA,
    R1,
    R2,
    TAU_H,
    FogParams,
    fine_table,
    fog,
    paper_table,
    soft_target_j,
    soft_target_lookup,
)
from tests.stages.conftest import rng_for

ROBO3D = dict(mode="paper", byte_scale=False, round_hard=False, clip_soft_255=False)  # Robo3D KITTI-C quirks


def _ray_frame(ranges, intensity=0.5, *, scale="unit", direction=(0.6, 0.8, 0.0), extra=None) -> Frame:
    """Points along one ray at the given ranges (a "wall" seen at each range), constant intensity."""
    ranges = np.asarray(ranges, dtype=np.float64)
    xyz = ranges[:, None] * np.asarray(direction)[None]
    cols = [xyz, np.broadcast_to(np.asarray(intensity, dtype=np.float64), ranges.shape)[:, None]]
    fields = ("x", "y", "z", "intensity")
    if extra is not None:
        cols.append(np.asarray(extra, dtype=np.float64)[:, None])
        fields += ("ring",)
    return Frame("ray", np.concatenate(cols, axis=1).astype(np.float32), fields=fields, intensity_scale=scale)


def _range(frame: Frame) -> np.ndarray:
    return np.linalg.norm(frame.xyz.astype(np.float64), axis=1)


def _crossover(alpha, beta, **kw) -> float:
    """Smallest range at which a point turns into fog (no noise), scanning 0.5 … 400 m in 1 cm steps."""
    ranges = np.arange(0.5, 400.0, 0.01)
    out = fog(_ray_frame(ranges), FogParams(alpha=alpha, beta=beta, noise_variant="none", **kw), rng_for(0))
    is_fog = out.point_tag == PointTag.SCATTER_FOG
    assert is_fog.any()
    first = int(np.argmax(is_fog))
    assert is_fog[first:].all(), "beyond the crossover every point is fog"
    return float(_range(_ray_frame(ranges[first : first + 1]))[0])


# ---- recipes ---------------------------------------------------------------------------------------
def test_kitti_c_recipe_is_lis_paper_mode():
    params = load_recipe("kitti-c").corruption("fog").params
    assert [p.alpha for p in params] == [0.005, 0.01, 0.02, 0.05, 0.1]
    for p in params:
        assert p.mode == "paper" and p.beta is None and p.beta_for(p.alpha) == pytest.approx(9.2131e-4, rel=1e-4)
        assert p.option("byte_scale") and p.option("round_hard") and p.option("clip_soft_255")
        assert p.noise_variant == "v1" and p.noise == 10.0 and not p.option("safe_noise")


def test_robo3d_recipe_fog():
    r = load_recipe("robo3d-kitti-c")
    assert r.severity_names == ("light", "moderate", "heavy") and r.source == "kitti"
    params = r.corruption("fog").params
    assert [p.beta for p in params] == [0.008, 0.05, 0.2]
    for p in params:
        assert p.alpha_choices == (0.0, 0.005, 0.01, 0.02, 0.03, 0.06)
        assert not (p.option("byte_scale") or p.option("round_hard") or p.option("clip_soft_255"))
        assert p.noise_variant == "v1" and p.noise == 10.0


# ---- the soft-target integral ----------------------------------------------------------------------
def _j_quad(big_r: float, alpha: float) -> float:
    """J(R) integrated over the pulse time t directly (independent of the closed form)."""
    def integrand(t):
        r = big_r - C_LIGHT * t / 2
        if r <= R1:
            return 0.0
        xi = min((r - R1) / (R2 - R1), 1.0)
        return math.sin(math.pi * t / (2 * TAU_H)) ** 2 * math.exp(-2 * alpha * r) * xi / r**2

    t_hi = min(2 * TAU_H, 2 * (big_r - R1) / C_LIGHT)
    breaks = [2 * (big_r - R2) / C_LIGHT] if 0 < 2 * (big_r - R2) / C_LIGHT < t_hi else None
    return quad(integrand, 0.0, t_hi, points=breaks, epsabs=0.0, epsrel=1e-12, limit=200)[0]


@pytest.mark.parametrize("alpha", [0.0, 0.005, 0.02, 0.06, 0.2])
def test_soft_target_integral_matches_quadrature(alpha):
    rs = [0.95, 1.2, 2.0, 3.3, 4.7, 6.0, 8.5, 30.0, 150.0]
    closed = soft_target_j(np.array(rs), alpha)
    for r, j in zip(rs, closed, strict=True):
        assert j == pytest.approx(_j_quad(r, alpha), rel=1e-6, abs=0.0)
    assert soft_target_j(np.array([0.0, 0.5, 0.9]), alpha).tolist() == [0.0, 0.0, 0.0]


# reference values ("original" grid): α → (R_fog, I_∞ × 1e9)
TABLE = {
    0.0: (4.7024, 4.6447), 0.005: (4.7024, 4.5680), 0.01: (4.7024, 4.4928), 0.02: (4.7024, 4.3466),
    0.03: (4.7024, 4.2058), 0.05: (4.6023, 3.9397), 0.06: (4.6023, 3.8157), 0.10: (4.6023, 3.3621),
    0.12: (4.6023, 3.1585), 0.15: (4.6023, 2.8786), 0.20: (4.5023, 2.4759),
}


@pytest.mark.parametrize("alpha", sorted(TABLE))
def test_tables_match_reference_values(alpha):
    r_fog, i_inf = TABLE[alpha]
    i_tab, rf_tab = paper_table(alpha)
    assert len(i_tab) == 2001
    assert i_tab[-1] == pytest.approx(i_inf * 1e-9, rel=1.5e-5)  # the table's printed precision
    assert rf_tab[-1] == pytest.approx(r_fog, abs=1e-4)
    assert np.all(np.diff(i_tab) >= 0)  # running maximum
    assert np.all(i_tab[48:] == i_tab[-1])  # saturated from ≈4.8 m
    # physical: exact integral and argmax (≥ the exact J at the coarse grid's argmax); the reference's
    # Simpson is ~5e-5 off the exact integral, the coarse grid's maximum up to ~6e-4 below the true one
    _, cm, rf = fine_table(alpha)
    assert cm[-1] == pytest.approx(i_inf * 1e-9, rel=1e-3)
    assert cm[-1] >= soft_target_j(np.array([rf_tab[-1]]), alpha)[0]
    assert rf[-1] == pytest.approx(r_fog, abs=0.06)


def test_near_range_entries_alpha_0005():
    i_tab, rf_tab = paper_table(0.005)
    assert np.all(i_tab[:11] < 1e-20)  # R0 ≤ 1.0 m
    assert i_tab[15] == pytest.approx(5.04e-11, rel=1e-3)
    assert i_tab[20] == pytest.approx(3.738e-10, rel=1e-3) and rf_tab[20] == pytest.approx(1.901, abs=1e-3)
    assert i_tab[30] == pytest.approx(2.017e-9, rel=1e-3) and rf_tab[30] == pytest.approx(2.901, abs=1e-3)
    assert i_tab[40] == pytest.approx(3.947e-9, rel=1e-3)


# ---- hard target and crossover ---------------------------------------------------------------------
@pytest.mark.parametrize("alpha", [0.005, 0.02, 0.06, 0.1])
def test_hard_target_is_exactly_attenuated(alpha):
    frame = _ray_frame(np.linspace(1.0, 60.0, 500), 0.37)
    out = fog(frame, FogParams(alpha=alpha, beta=0.0), rng_for(0))
    r = _range(frame)
    expected = (frame.intensity.astype(np.float64) * np.exp(-2 * alpha * r)).astype(np.float32)
    assert np.array_equal(out.intensity, expected)
    assert np.array_equal(out.xyz, frame.xyz)
    assert np.all(out.point_tag == PointTag.ATTENUATED)
    # with the default β (follows α) the points short of the crossover get exactly the same value
    out2 = fog(frame, FogParams(alpha=alpha), rng_for(0))
    hard = out2.point_tag == PointTag.ATTENUATED
    assert hard.sum() > 100 and np.array_equal(out2.intensity[hard], expected[hard])


# crossover ranges (m): α → {column: range}
FROZEN = {0.0: 272.7, 0.005: 138.0, 0.02: 69.8, 0.06: 35.6, 0.10: 25.4}
INTENDED = {0.005: 259.9, 0.02: 86.5, 0.06: 35.6, 0.10: 23.6}
ROBO = {0.0: (92.6, 37.0, 18.5), 0.005: (66.8, 31.8, 17.1), 0.02: (41.6, 23.8, 14.4),
        0.06: (24.1, 15.8, 10.7), 0.10: (18.0, 12.5, 8.9)}


@pytest.mark.parametrize("alpha", sorted(FROZEN))
def test_crossover_frozen_beta(alpha):
    assert _crossover(alpha, FROZEN_BETA) == pytest.approx(FROZEN[alpha], rel=0.01)
    assert FROZEN_BETA == pytest.approx(9.2131e-4, rel=1e-4)
    assert FROZEN_BETA / BETA_0 == pytest.approx(2894.38, rel=1e-4)


@pytest.mark.parametrize("alpha", sorted(INTENDED))
def test_crossover_intended_beta(alpha):
    assert _crossover(alpha, None) == pytest.approx(INTENDED[alpha], rel=0.01)  # physical: β = 0.046·α/ln 20


@pytest.mark.parametrize("alpha", sorted(ROBO))
@pytest.mark.parametrize("col", [0, 1, 2])
def test_crossover_robo3d_beta(alpha, col):
    beta = (0.008, 0.05, 0.2)[col]
    assert _crossover(alpha, beta) == pytest.approx(ROBO[alpha][col], rel=0.01)
    # Robo3D's own configuration (paper tables, no rounding or clipping) gives the same crossover
    assert _crossover(alpha, beta, **ROBO3D) == pytest.approx(ROBO[alpha][col], rel=0.01)


def test_crossover_li_paper_mode_is_the_rounded_one():
    # Li: unit intensities ×255, round(i_hard), clip, frozen β. With i = 0.5 (127.5 on 0..255) the
    # rounding of the small i_hard near the crossover moves it by up to ~10 % (0.78 rounds up to 1, 1.78 to 2)
    for alpha in (0.02, 0.06, 0.10):
        ranges = np.arange(0.5, 400.0, 0.01)
        r = _range(_ray_frame(ranges))
        key = np.minimum(np.rint(r * 10), 2000).astype(int)
        soft = np.minimum(127.5 * r * r * FROZEN_BETA / BETA_0 * paper_table(alpha)[0][key], 255.0)
        expected = r[np.argmax(soft > np.round(127.5 * np.exp(-2 * alpha * r)))]
        got = _crossover(alpha, None, mode="paper")
        assert got == pytest.approx(expected, abs=1e-6)
        assert got == pytest.approx(FROZEN[alpha], rel=0.1)


def test_targets_beyond_200m_use_the_saturated_integral():
    # α = 0, frozen β: crossover at 272.7 m, beyond the 200 m table, in both modes
    frame = _ray_frame([250.0, 280.0, 1000.0])
    for kw in ({}, {"mode": "paper", "byte_scale": False, "round_hard": False, "clip_soft_255": False}):
        out = fog(frame, FogParams(alpha=0.0, beta=FROZEN_BETA, noise_variant="none", **kw), rng_for(0))
        assert out.point_tag.tolist() == [PointTag.CLEAN, PointTag.SCATTER_FOG, PointTag.SCATTER_FOG]
        i_inf = fine_table(0.0)[1][-1] if not kw else paper_table(0.0)[0][-1]
        expected = 0.5 * np.array([280.0, 1000.0]) ** 2 * FROZEN_BETA / BETA_0 * i_inf
        np.testing.assert_allclose(out.intensity[1:], np.minimum(expected, 1.0 if not kw else np.inf), rtol=1e-6)


def test_worked_example_robo3d_moderate():
    # β = 0.05, α = 0.02, R0 = 30 m, i = 0.4: i_soft = 0.2458 > i_hard = 0.1205 → fog at ≈ 4.70·f_noise m
    frame = _ray_frame([30.0], 0.4, direction=(1.0, 0.0, 0.0))
    assert 0.4 * math.exp(-2 * 0.02 * 30) == pytest.approx(0.1205, abs=5e-5)
    out = fog(frame, FogParams(alpha=0.02, beta=0.05, noise_variant="none", **ROBO3D), rng_for(0))
    assert out.point_tag[0] == PointTag.SCATTER_FOG
    assert out.intensity[0] == pytest.approx(0.2458, abs=5e-5)
    assert _range(out)[0] == pytest.approx(4.7024, abs=1e-4)
    # with v1 noise: range = R_fog·R0/d, d ~ U(20, 40) after the discarded integer draw
    out = fog(frame, FogParams(alpha=0.02, beta=0.05, **ROBO3D), rng_for(5))
    ref = rng_for(5)
    ref.integers(1, 20)
    d = ref.uniform(30.0 - 10.0, 30.0 + 10.0)
    assert _range(out)[0] == pytest.approx(paper_table(0.02)[1][-1] * 30.0 / d, rel=1e-6)
    # physical mode: same decision and intensity, continuous argmax R_fog ≈ 4.69 m
    out = fog(frame, FogParams(alpha=0.02, beta=0.05, noise_variant="none"), rng_for(0))
    assert out.point_tag[0] == PointTag.SCATTER_FOG
    assert out.intensity[0] == pytest.approx(0.2458, abs=2e-4)
    assert _range(out)[0] == pytest.approx(4.70, rel=0.01)


# ---- behaviour on a scene --------------------------------------------------------------------------
def _fog_fraction(frame, **kw) -> float:
    return float(np.mean(fog(frame, FogParams(**kw), rng_for(1)).point_tag == PointTag.SCATTER_FOG))


def test_fog_fraction_grows_with_alpha_and_beta(scene):
    by_alpha = [_fog_fraction(scene, alpha=a, beta=0.05) for a in (0.005, 0.02, 0.06, 0.1)]
    assert all(b > a for a, b in itertools.pairwise(by_alpha)) and by_alpha[0] > 0
    by_beta = [_fog_fraction(scene, alpha=0.02, beta=b) for b in (0.008, 0.05, 0.2, 1.0)]
    assert by_beta[0] == 0.0  # crossover 41.6 m, beyond the scene
    assert all(b > a for a, b in itertools.pairwise(by_beta))
    # physical default β follows α: more fog with α
    by_alpha = [_fog_fraction(scene, alpha=a) for a in (0.02, 0.06, 0.1, 0.2)]
    assert all(b > a for a, b in itertools.pairwise(by_alpha))


def test_points_kept_in_order_with_columns_and_labels(scene_with_ring):
    frame = scene_with_ring
    frame = frame.with_points(frame.points, semantic=np.arange(len(frame)) % 7)
    before = frame.points.copy()
    out = fog(frame, FogParams(alpha=0.06, beta=0.2), rng_for(2))
    assert np.array_equal(frame.points, before)  # input not mutated
    assert len(out) == len(frame) and out.fields == frame.fields and out.points.dtype == np.float32
    assert np.array_equal(out.column("ring"), frame.column("ring"))
    assert np.array_equal(out.labels["semantic"], frame.labels["semantic"])
    tag = out.point_tag
    is_fog = tag == PointTag.SCATTER_FOG
    assert is_fog.any() and (tag == PointTag.ATTENUATED).any()
    assert set(np.unique(tag)) <= {PointTag.CLEAN, PointTag.ATTENUATED, PointTag.SCATTER_FOG}
    # attenuated points stay put; fog points move along their own ray
    assert np.array_equal(out.xyz[~is_fog], frame.xyz[~is_fog])
    a, b = frame.xyz[is_fog].astype(np.float64), out.xyz[is_fog].astype(np.float64)
    cos = np.einsum("ij,ij->i", a, b) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    assert np.all(cos > 1 - 1e-6)
    # fog intensity saturates at the source's maximum in physical mode
    assert out.intensity.max() <= 1.0
    assert np.all(out.intensity[~is_fog] <= frame.intensity[~is_fog])


def test_the_fog_decision_draws_nothing(scene):
    """Which points fog keeps, scatters or attenuates is decided without the RNG; only the scattered ranges
    are drawn."""
    p = FogParams(alpha=0.06, beta=0.2)
    a, c = fog(scene, p, rng_for(3)), fog(scene, p, rng_for(4))
    assert not np.array_equal(a.points, c.points)
    assert np.array_equal(a.point_tag, c.point_tag)


def test_identity_without_fog(scene):
    # physical: α = 0 with β following α (β = 0), or α = β = 0 explicitly → the input frame itself
    assert fog(scene, FogParams(alpha=0.0), rng_for(0)) is scene
    assert fog(scene, FogParams(alpha=0.0, beta=0.0), rng_for(0)) is scene
    assert fog(scene, FogParams(alpha=0.0, beta=0.0, **ROBO3D), rng_for(0)) is scene
    # Li's paper mode quantises intensities to the 0..255 grid even without fog (documented)
    out = fog(scene, FogParams(alpha=0.0, beta=0.0, mode="paper"), rng_for(0))
    expected = (np.round(scene.intensity.astype(np.float64) * 255.0) / 255.0).astype(np.float32)
    np.testing.assert_array_equal(out.intensity, expected)


def test_alpha_drawn_per_frame_from_choices(scene):
    choices = (0.0, 0.005, 0.01, 0.02, 0.03, 0.06)
    p = FogParams(alpha_choices=choices, beta=0.2, **ROBO3D)
    for seed in range(4):
        out = fog(scene, p, rng_for(seed))
        ref = rng_for(seed)
        alpha = choices[int(ref.integers(len(choices)))]
        expected = fog(scene, FogParams(alpha=alpha, beta=0.2, **ROBO3D), ref)
        assert np.array_equal(out.points, expected.points)
    with pytest.raises(ValueError, match="alpha"):
        FogParams(alpha=0.02, alpha_choices=choices)


# ---- paper vs physical -----------------------------------------------------------------------------
def test_paper_rounding_on_unit_scale_turns_nearly_everything_to_fog(scene):
    # [0,1] intensities into the rounding variant without ×255 → round(i_hard) = 0 → fog everywhere
    frac_bug = _fog_fraction(scene, alpha=0.02, mode="paper", byte_scale=False)
    assert frac_bug > 0.95
    # Li's ×255 avoids it: fog only beyond the crossover, like the physical model with the same (frozen) β
    # (the rounding of dim points' small i_hard moves their crossover, see the next test)
    frac_li = _fog_fraction(scene, alpha=0.02, mode="paper")
    frac_phys = _fog_fraction(scene, alpha=0.02, beta=FROZEN_BETA)
    assert frac_li < 0.01 and frac_phys < 0.01
    # the near fog ring of the bug sits at R_fog = 4.70 m scaled by the v1 noise
    out = fog(scene, FogParams(alpha=0.02, mode="paper", byte_scale=False, noise_variant="none"), rng_for(0))
    r = _range(out)[out.point_tag == PointTag.SCATTER_FOG]
    assert np.median(r) == pytest.approx(4.7024, abs=1e-3)


def test_paper_vs_physical_attenuated_values(scene):
    # paper: i_hard = round(255·i·e^{−2αR})/255; physical: exact. Same frozen β, no noise.
    paper = fog(scene, FogParams(alpha=0.06, mode="paper", noise_variant="none"), rng_for(0))
    phys = fog(scene, FogParams(alpha=0.06, beta=FROZEN_BETA, noise_variant="none"), rng_for(0))
    r = _range(scene)
    i = scene.intensity.astype(np.float64)
    hard = (paper.point_tag == PointTag.ATTENUATED) & (phys.point_tag == PointTag.ATTENUATED)
    exact = (i * np.exp(-0.12 * r)).astype(np.float32)
    assert np.array_equal(phys.intensity[hard], exact[hard])
    rounded = (np.round(255.0 * i * np.exp(-0.12 * r)) / 255.0).astype(np.float32)
    assert np.array_equal(paper.intensity[hard], rounded[hard])
    # the decisions differ only where rounding moved i_hard across i_soft: |i_soft − i_hard| ≤ ½ on 0..255
    differ = paper.point_tag != phys.point_tag
    assert differ.any()
    h = 255.0 * i * np.exp(-0.12 * r)
    s = 255.0 * i * r * r * FROZEN_BETA / BETA_0 * np.interp(r, *fine_table(0.06)[:2])
    assert np.all(np.abs(s - h)[differ] <= 0.5 + 1e-3 * s[differ])


def test_beta_none_follows_alpha_in_physical_and_is_frozen_in_paper():
    assert FogParams(alpha=0.02).beta_for(0.02) == pytest.approx(0.046 * 0.02 / math.log(20))
    assert FogParams(alpha=0.02, mode="paper").beta_for(0.02) == FROZEN_BETA
    assert FogParams(alpha=0.02, mode="paper", frozen_beta=False).beta_for(0.02) == pytest.approx(
        0.046 * 0.02 / math.log(20))
    assert _crossover(0.02, None, **ROBO3D) == pytest.approx(FROZEN[0.02], rel=0.01)


def test_paper_discards_one_integer_draw():
    frame = _ray_frame(np.linspace(20.0, 40.0, 50), 0.5)
    p = FogParams(alpha=0.1, beta=0.2, **ROBO3D)
    out = fog(frame, p, rng_for(7))
    assert np.all(out.point_tag == PointTag.SCATTER_FOG)
    ref = rng_for(7)
    ref.integers(1, 20)
    r0 = _range(frame)
    d = ref.uniform(r0 - 10.0, r0 + 10.0)
    np.testing.assert_allclose(_range(out), paper_table(0.1)[1][-1] * r0 / d, rtol=1e-6)
    # physical mode makes no discarded draw
    out = fog(frame, FogParams(alpha=0.1, beta=0.2, saturate=False), rng_for(7))
    d = rng_for(7).uniform(r0 - 10.0, r0 + 10.0)
    np.testing.assert_allclose(_range(out), fine_table(0.1)[2][-1] * r0 / d, rtol=1e-6)


def test_safe_noise_never_throws_points_behind_the_sensor():
    # near targets (R0 < n = 10 m) with a dense fog so that they all become fog points
    frame = _ray_frame(np.repeat(np.linspace(3.0, 9.0, 50), 40), 0.5)
    r0 = _range(frame)
    out = fog(frame, FogParams(alpha=0.05, beta=50.0), rng_for(8))
    is_fog = out.point_tag == PointTag.SCATTER_FOG
    assert is_fog.mean() > 0.9
    a, b = frame.xyz[is_fog].astype(np.float64), out.xyz[is_fog].astype(np.float64)
    assert np.all(np.einsum("ij,ij->i", a, b) > 0)  # same side of the sensor
    r_fog = np.interp(r0[is_fog], fine_table(0.05)[0], fine_table(0.05)[2])
    factor = _range(out)[is_fog] / r_fog
    assert np.all(factor <= 10.0 + 1e-4)  # d ≥ 0.1·R0
    assert np.all(factor >= r0[is_fog] / (r0[is_fog] + 10.0) - 1e-4)


def test_paper_v1_blow_up_is_reproduced():
    frame = _ray_frame(np.repeat(np.linspace(3.0, 9.0, 50), 40), 0.5)
    r0 = _range(frame)
    p = FogParams(alpha=0.05, beta=50.0, **ROBO3D)
    out = fog(frame, p, rng_for(8))
    is_fog = out.point_tag == PointTag.SCATTER_FOG
    a, b = frame.xyz[is_fog].astype(np.float64), out.xyz[is_fog].astype(np.float64)
    behind = np.einsum("ij,ij->i", a, b) < 0
    assert behind.mean() > 0.1  # d ~ U(R0 − 10, R0 + 10) contains 0
    assert _range(out)[is_fog].max() > 100.0
    # bit-for-bit reproducible: the reference's stream (discard, then one uniform per fog point)
    ref = rng_for(8)
    ref.integers(1, 20)
    key = np.minimum(np.rint(r0[is_fog] * 10), 2000).astype(int)
    d = ref.uniform(r0[is_fog] - 10.0, r0[is_fog] + 10.0)
    expected = frame.xyz[is_fog].astype(np.float64) * (paper_table(0.05)[1][key] / r0[is_fog] * r0[is_fog] / d)[:, None]
    np.testing.assert_allclose(out.xyz[is_fog], expected.astype(np.float32), rtol=1e-6)
    assert np.array_equal(fog(frame, p, rng_for(8)).points, out.points)


# ---- edge cases ------------------------------------------------------------------------------------
def test_edge_cases_zero_range_zero_intensity():
    ranges = np.array([0.0, 1e-4, 0.5, 0.9, 5.0, 30.0, 30.0])
    frame = _ray_frame(ranges, np.array([0.5, 0.5, 0.5, 0.5, 0.0, 0.0, 0.5]))
    for p in (FogParams(alpha=0.1, beta=1000.0), FogParams(alpha=0.1, beta=1000.0, mode="paper"),
              FogParams(alpha=0.1, beta=1000.0, **ROBO3D)):
        with np.errstate(all="raise"):
            out = fog(frame, p, rng_for(0))
        assert np.all(np.isfinite(out.points))
        tag = out.point_tag
        assert np.all(tag[:6] != PointTag.SCATTER_FOG)  # I(R0 ≤ 0.9) = 0, intensity 0
        assert tag[6] == PointTag.SCATTER_FOG
        assert np.array_equal(out.xyz[:6], frame.xyz[:6])


def test_empty_frame():
    frame = Frame("empty", np.zeros((0, 4), dtype=np.float32))
    assert len(fog(frame, FogParams(alpha=0.06), rng_for(0))) == 0


@pytest.mark.parametrize("kw", [dict(mode="nope"), dict(noise_variant="v9"), dict(alpha=-0.1), dict(beta=-1.0),
                                dict(noise=-1.0), dict(alpha_choices=(0.01, -0.02))])
def test_rejects_bad_params(kw):
    with pytest.raises(ValueError):
        FogParams(**kw)


@pytest.mark.parametrize("variant", ["v2", "v3", "v4"])
def test_other_noise_variants_stay_near_the_fog_ring(variant):
    frame = _ray_frame(np.linspace(40.0, 60.0, 400), 0.5)
    out = fog(frame, FogParams(alpha=0.06, beta=0.2, noise_variant=variant), rng_for(9))
    assert np.all(out.point_tag == PointTag.SCATTER_FOG)
    f = _range(out) / fine_table(0.06)[2][-1]
    lo, hi = {"v2": (0.5, 2.0), "v3": (4**-0.5, 4.0), "v4": (1.0, 1 + 10 / 4.6)}[variant]
    assert np.all((f >= lo - 1e-6) & (f <= hi + 1e-6)) and f.std() > 0.01


def test_byte_source_physical_mode_is_scale_free(scene):
    byte = Frame(scene.frame_id, (scene.points * np.array([1, 1, 1, 255.0], dtype=np.float32)).astype(np.float32),
                 intensity_scale="byte")
    p = FogParams(alpha=0.06, beta=0.2)
    a, b = fog(scene, p, rng_for(0)), fog(byte, p, rng_for(0))
    assert np.array_equal(a.point_tag, b.point_tag)
    np.testing.assert_allclose(b.intensity, a.intensity * 255.0, rtol=1e-5)
    np.testing.assert_allclose(b.xyz, a.xyz, rtol=1e-5)


def test_kitti_c_alpha_005_uses_the_006_table_as_li_et_al_shipped():
    """Li et al. ship tables for α ∈ {0.005, 0.01, 0.02, 0.03, 0.06, 0.1, 0.12, 0.15, 0.2} only; the
    nearest-table rule therefore serves α = 0.05 from the 0.06 table (attenuation still uses 0.05)."""
    code = load_recipe("kitti-c").corruption("fog").params[3]
    text = load_recipe("kitti-c:text").corruption("fog").params[3]
    assert code.alpha == text.alpha == 0.05
    assert 0.05 not in code.table_alphas and 0.06 in code.table_alphas
    r0 = np.linspace(0.1, 80.0, 800)
    got = soft_target_lookup(r0, 0.05, table_grid=True, table_alphas=code.table_alphas)
    want = soft_target_lookup(r0, 0.06, table_grid=True, table_alphas=code.table_alphas)
    exact = soft_target_lookup(r0, 0.05, table_grid=True, table_alphas=text.table_alphas)
    assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(got, exact, strict=True))  # 0.05 ≠ 0.06 table
