"""snow_lisa: LISA snow (Kilic et al.) as KITTI-C `snow` (Li et al.): ice vs Li's m = 130.31 with the
water Mie table, outcomes, labels, monotonicity, paper vs physical, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.frame import Frame, PointTag
from bench_build.stages.physics import lisa
from bench_build.stages.registry import get_stage
from bench_build.stages.weather.snow_lisa import SnowLisaParams, model_for, snow_lisa
from tests.stages.conftest import make_scene, rng_for

RATES = [0.5, 1.5, 5.0, 15.0, 50.0]
SNOW_ALPHA_ICE = [9.757e-4, 1.8218e-3, 3.6117e-3, 6.5468e-3, 1.0015e-2]
PHYSICAL_AS_PAPER = dict(
    wavelength_nm=905.0,
    r_max=200.0,
    range_accuracy=0.09,
    refractive_index=1.3031,
    mie_water_table_for_snow=False,
    zero_intensity_rho=False,
    keep_lost_rows=False,
)


def _tagged(frame):
    return frame.with_points(frame.points, src=np.arange(len(frame)))


def test_recipe_is_lis_paper_mode():
    c = load_recipe("kitti-c").corruption("snow")
    assert c.stage == "snow_lisa" and get_stage("snow_lisa").params is SnowLisaParams
    assert [p.rate for p in c.params] == RATES
    assert all(p.mode == "paper" and p.return_mode == "strongest" for p in c.params)
    r = c.params[0].resolved()
    assert (r["wavelength_nm"], r["r_max"], r["range_accuracy"], r["refractive_index"]) == (903.0, 120.0, 0.04, 130.31)
    assert r["mie_water_table_for_snow"] and r["zero_intensity_rho"] and r["keep_lost_rows"]
    assert c.notes


@pytest.mark.parametrize("rate, alpha", list(zip(RATES, SNOW_ALPHA_ICE, strict=True)))
def test_physical_extinction_is_ice(rate, alpha):
    m = model_for(SnowLisaParams(rate))
    assert m.alpha == pytest.approx(alpha, rel=5e-4)
    assert m.rho_p == pytest.approx(0.01732, abs=1e-5)
    assert m.n_tot == pytest.approx(lisa.number_density(rate, "marshall_gunn"))


@pytest.mark.parametrize("rate", RATES)
def test_paper_extinction_is_the_water_table_and_rho_p_is_lis(rate):
    m = model_for(SnowLisaParams(rate, mode="paper"))
    assert m.alpha == lisa.extinction(rate, "marshall_gunn", lisa.WATER_INDEX, 903.0)
    assert m.rho_p == pytest.approx(0.9698, abs=1e-4)
    # water vs ice tables differ by a few per mille at most (both ≈ 2 × geometric cross-section)
    assert m.alpha == pytest.approx(model_for(SnowLisaParams(rate)).alpha, rel=0.01)


def test_rejects_bad_params():
    for kw in (dict(rate=-0.5), dict(rate=1.0, mode="physics"), dict(rate=1.0, refractive_index=0.9)):
        with pytest.raises(ValueError, match="snow_lisa"):
            SnowLisaParams(**kw)


def test_identity_and_empty(scene):
    assert snow_lisa(scene, SnowLisaParams(0.0, mode="paper"), rng_for(0)) is scene
    assert len(snow_lisa(scene.take(np.zeros(0, dtype=int)), SnowLisaParams(5.0), rng_for(0))) == 0


def test_labels_physical_and_paper(scene_with_ring):
    f = _tagged(scene_with_ring)
    phys = snow_lisa(f, SnowLisaParams(15.0), rng_for(1))
    assert set(np.unique(phys.point_tag)) == {PointTag.ATTENUATED, PointTag.SCATTER_SNOW}
    assert len(phys) < len(f) and not np.any(np.all(phys.points[:, :4] == 0, axis=1))
    paper = snow_lisa(f, SnowLisaParams(15.0, mode="paper"), rng_for(1))
    assert len(paper) == len(f)
    zero = np.all(paper.points[:, :4] == 0, axis=1)
    assert zero.any() and np.all(paper.point_tag[zero] == PointTag.ATTENUATED)
    np.testing.assert_array_equal(paper.column("ring"), f.column("ring"))


def test_paper_with_physical_constants_is_physical(scene):
    a = snow_lisa(scene, SnowLisaParams(5.0), rng_for(2))
    b = snow_lisa(scene, SnowLisaParams(5.0, mode="paper", **PHYSICAL_AS_PAPER), rng_for(2))
    assert np.array_equal(a.points, b.points) and np.array_equal(a.point_tag, b.point_tag)


def test_lis_index_makes_snow_far_more_visible(scene):
    """ρ_p = 0.97 instead of 0.017: flakes beat P_min out to ≈ 6–15 m instead of ≈ 3–6 m."""
    f = _tagged(scene)
    out = {}
    for mode in ("physical", "paper"):
        o = snow_lisa(f, SnowLisaParams(15.0, mode=mode, keep_lost_rows=False), rng_for(3))
        scat = o.point_tag == PointTag.SCATTER_SNOW
        out[mode] = (scat.sum(), np.linalg.norm(o.xyz[scat].astype(np.float64), axis=1))
    n_phys, r_phys = out["physical"]
    n_paper, r_paper = out["paper"]
    assert n_paper > 10 * n_phys > 0
    assert np.percentile(r_phys, 95) < 6.0 and r_phys.max() < 10.0
    assert 6.0 < np.percentile(r_paper, 95) < 20.0 and np.median(r_paper) > 1.5 * np.median(r_phys)
    # the index alone (physical constants otherwise) already makes flakes an order of magnitude more visible
    only_rho = snow_lisa(f, SnowLisaParams(15.0, refractive_index=130.31, mie_water_table_for_snow=True), rng_for(3))
    assert (only_rho.point_tag == PointTag.SCATTER_SNOW).sum() > 10 * n_phys


@pytest.mark.parametrize("mode", ["physical", "paper"])
def test_heavier_snow_scatters_more(mode):
    f = _tagged(make_scene(2))
    outs = [snow_lisa(f, SnowLisaParams(r, mode=mode, keep_lost_rows=False), rng_for(4)) for r in RATES]
    scat = np.array([np.sum(o.point_tag == PointTag.SCATTER_SNOW) for o in outs])
    not_kept = np.array([len(f) - np.sum(o.point_tag == PointTag.ATTENUATED) for o in outs])
    assert np.all(np.diff(scat) > 0)
    assert np.all(np.diff(not_kept) > 0)


def test_scattered_points_move_toward_the_sensor_along_their_ray(scene):
    f = _tagged(scene)
    out = snow_lisa(f, SnowLisaParams(50.0, mode="paper"), rng_for(5))
    scat = out.point_tag == PointTag.SCATTER_SNOW
    src = f.xyz[out.labels["src"][scat]].astype(np.float64)
    new = out.xyz[scat].astype(np.float64)
    r_src, r_new = np.linalg.norm(src, axis=1), np.linalg.norm(new, axis=1)
    assert np.all(r_new < r_src) and np.all(r_new > 1.5)
    np.testing.assert_allclose(new / r_new[:, None], src / r_src[:, None], atol=1e-5)
    # flake intensity ρ_p·e^{−2αr}·min((D/D_b)², 1) ≤ ρ_p
    assert np.all(out.intensity[scat] <= 0.9698 + 1e-6) and np.all(out.intensity[scat] > 0)


def test_byte_scale_round_trip():
    f = make_scene(3, n_ground=5000, n_per_car=300)
    byte = Frame(
        f.frame_id,
        np.concatenate([f.xyz, f.intensity[:, None] * 255], axis=1).astype(np.float32),
        intensity_scale="byte",
    )
    a = snow_lisa(f, SnowLisaParams(5.0, mode="paper"), rng_for(6))
    b = snow_lisa(byte, SnowLisaParams(5.0, mode="paper"), rng_for(6))
    assert np.array_equal(a.point_tag, b.point_tag)
    np.testing.assert_allclose(b.intensity, a.intensity * 255, rtol=1e-5, atol=1e-4)


