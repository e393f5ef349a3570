"""rain_lisa: LISA rain (Kilic et al.) as KITTI-C `rain` (Li et al.): outcomes, labels, intensity
scale, monotonicity over Li's severities, paper vs physical mode, edge cases, determinism."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.frame import Frame, PointTag
from bench_build.stages.physics import lisa
from bench_build.stages.registry import get_stage
from bench_build.stages.weather.rain_lisa import RainLisaParams, model_for, rain_lisa
from tests.stages.conftest import make_scene, rng_for

RATES = [5.0, 15.0, 50.0, 150.0, 500.0]
PHYSICAL_AS_PAPER = dict(
    wavelength_nm=905.0,
    r_max=200.0,
    range_accuracy=0.09,
    refractive_index=1.328,
    zero_intensity_rho=False,
    keep_lost_rows=False,
)


def _frame(xyz, intensity, scale="unit", ring=None) -> Frame:
    cols = [np.asarray(xyz, float), np.asarray(intensity, float)[:, None]]
    fields = ("x", "y", "z", "intensity")
    if ring is not None:
        cols.append(np.asarray(ring, float)[:, None])
        fields += ("ring",)
    return Frame("t", np.concatenate(cols, axis=1).astype(np.float32), fields=fields, intensity_scale=scale)


def _ray_points(n, r, rho, seed=0):
    v = np.random.default_rng(seed).normal(size=(n, 3))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return _frame(v * np.asarray(r, float).reshape(-1, 1), np.broadcast_to(rho, (n,)))


def _tagged(frame):
    return frame.with_points(frame.points, src=np.arange(len(frame)))


def test_recipe_is_lis_paper_mode():
    c = load_recipe("kitti-c").corruption("rain")
    assert c.stage == "rain_lisa" and get_stage("rain_lisa").params is RainLisaParams
    assert [p.rate for p in c.params] == RATES
    assert all(p.mode == "paper" and p.return_mode == "strongest" for p in c.params)
    r = c.params[0].resolved()
    assert (r["wavelength_nm"], r["r_max"], r["range_accuracy"], r["refractive_index"]) == (903.0, 120.0, 0.04, 1.328)
    assert r["zero_intensity_rho"] and r["keep_lost_rows"]
    assert c.notes


def test_mode_defaults_and_overrides():
    phys = RainLisaParams(5.0).resolved()
    assert (phys["wavelength_nm"], phys["r_max"], phys["range_accuracy"]) == (905.0, 200.0, 0.09)
    assert not phys["zero_intensity_rho"] and not phys["keep_lost_rows"]
    assert RainLisaParams(5.0, mode="paper", r_max=80.0).resolved()["r_max"] == 80.0


@pytest.mark.parametrize(
    "kw",
    [
        dict(rate=-1.0),
        dict(rate=math.nan),
        dict(rate=5.0, mode="li"),
        dict(rate=5.0, return_mode="first"),
        dict(rate=5.0, r_max=0.0),
        dict(rate=5.0, refractive_index=1.0),
        dict(rate=5.0, divergence_mrad=0.0),
    ],
)
def test_rejects_bad_params(kw):
    with pytest.raises(ValueError, match="rain_lisa"):
        RainLisaParams(**kw)


def test_rate_zero_and_empty_frame_are_identity(scene):
    assert rain_lisa(scene, RainLisaParams(0.0), rng_for(0)) is scene
    empty = scene.take(np.zeros(0, dtype=int))
    assert len(rain_lisa(empty, RainLisaParams(50.0), rng_for(0))) == 0


def test_worked_example_through_the_stage():
    """Rain 50 mm/h, R = 20 m, ρ = 0.5, r_max = 200 m: kept points have intensity 0.42092 and range
    noise σ = 9.31 mm, on the unit and on the byte scale alike."""
    n = 20_000
    f = _ray_points(n, 20.0, 0.5)
    out = rain_lisa(_tagged(f), RainLisaParams(50.0), rng_for(1))
    kept = out.point_tag == PointTag.ATTENUATED
    assert kept.mean() > 0.99 and len(out) == n
    np.testing.assert_allclose(out.intensity[kept], 0.42092, rtol=2e-4)
    r = np.linalg.norm(out.xyz[kept].astype(np.float64), axis=1)
    assert (r - 20.0).std() == pytest.approx(9.31e-3, rel=0.03)
    # directions preserved
    src = f.xyz[out.labels["src"]].astype(np.float64)
    cos = np.einsum("ij,ij->i", src, out.xyz.astype(np.float64)) / (
        np.linalg.norm(src, axis=1) * np.linalg.norm(out.xyz.astype(np.float64), axis=1)
    )
    assert np.all(cos > 1 - 1e-6)

    byte = Frame(
        "t", np.concatenate([f.xyz, f.intensity[:, None] * 255], axis=1).astype(np.float32), intensity_scale="byte"
    )
    out_b = rain_lisa(byte, RainLisaParams(50.0), rng_for(1))
    assert np.array_equal(out_b.point_tag, out.point_tag[: len(out_b)]) and len(out_b) == len(out)
    np.testing.assert_allclose(out_b.intensity, out.intensity * 255, rtol=1e-5)
    np.testing.assert_allclose(out_b.xyz, out.xyz, atol=1e-5)


def test_labels_and_lost_points_physical(scene_with_ring):
    f = _tagged(scene_with_ring)
    out = rain_lisa(f, RainLisaParams(150.0), rng_for(2))
    tags = set(np.unique(out.point_tag))
    assert tags <= {PointTag.ATTENUATED, PointTag.SCATTER_RAIN}
    assert PointTag.SCATTER_RAIN in tags
    assert len(out) < len(f)  # lost points are dropped
    assert not np.any(np.all(out.points[:, :4] == 0, axis=1))
    src = out.labels["src"]
    assert np.all(np.diff(src) > 0)  # order kept
    np.testing.assert_array_equal(out.column("ring"), f.column("ring")[src])  # extra columns kept
    # kept points: intensity ρ·e^{−2αR} exactly, range within a few σ
    m = model_for(RainLisaParams(150.0))
    kept = out.point_tag == PointTag.ATTENUATED
    r0 = np.linalg.norm(f.xyz[src[kept]].astype(np.float64), axis=1)
    np.testing.assert_allclose(out.intensity[kept], f.intensity[src[kept]] * np.exp(-2 * m.alpha * r0), rtol=1e-5)
    sigma = m.range_accuracy / np.sqrt(2 * f.intensity[src[kept]] * np.exp(-2 * m.alpha * r0) / r0**2 / m.p_min)
    r1 = np.linalg.norm(out.xyz[kept].astype(np.float64), axis=1)
    assert np.all(np.abs(r1 - r0) < 6 * sigma + 1e-4)


def test_paper_keeps_lost_rows_as_zeros(scene_with_ring):
    f = _tagged(scene_with_ring)
    out = rain_lisa(f, RainLisaParams(150.0, mode="paper"), rng_for(2))
    assert len(out) == len(f) and np.array_equal(out.labels["src"], np.arange(len(f)))
    zero = np.all(out.points[:, :4] == 0, axis=1)
    assert zero.sum() > 100
    assert np.all(out.point_tag[zero] == PointTag.ATTENUATED)
    np.testing.assert_array_equal(out.column("ring"), f.column("ring"))
    # the same run without keep_lost_rows is exactly the non-zero rows
    dropped = rain_lisa(f, RainLisaParams(150.0, mode="paper", keep_lost_rows=False), rng_for(2))
    np.testing.assert_array_equal(dropped.points, out.points[~zero])


def test_paper_with_physical_constants_is_physical(scene):
    a = rain_lisa(scene, RainLisaParams(50.0), rng_for(3))
    b = rain_lisa(scene, RainLisaParams(50.0, mode="paper", **PHYSICAL_AS_PAPER), rng_for(3))
    assert np.array_equal(a.points, b.points) and np.array_equal(a.point_tag, b.point_tag)


def test_zero_intensity_rho_changes_only_zero_intensity_points():
    g = np.random.default_rng(0)
    n = 4000
    f = _ray_points(n, g.uniform(0.3, 30.0, n), 0.0)
    pts = f.points.copy()
    pts[: n // 2, 3] = g.uniform(0.01, 0.8, n // 2)
    f = _tagged(Frame("t", pts))
    kw = dict(mode="paper", keep_lost_rows=True)
    a = rain_lisa(f, RainLisaParams(150.0, zero_intensity_rho=True, **kw), rng_for(4))
    b = rain_lisa(f, RainLisaParams(150.0, zero_intensity_rho=False, **kw), rng_for(4))
    zero = f.intensity == 0
    assert np.array_equal(a.points[~zero], b.points[~zero])
    # physical reading: ρ = 0 is never kept; Li's ρ = 1.2/r_max² is kept only very close (R ≲ 1.15 m)
    assert not np.any(b.point_tag[zero & (b.intensity > 0)] == PointTag.ATTENUATED)
    r = np.linalg.norm(f.xyz.astype(np.float64), axis=1)
    kept_a = zero & (a.point_tag == PointTag.ATTENUATED) & np.any(a.points[:, :3] != 0, axis=1)
    assert kept_a.sum() > 0 and np.all(r[kept_a] < 1.2)


def test_edge_cases():
    xyz = np.array([[0, 0, 0], [1.0, 0, 0], [0, 1.4, 0], [130.0, 0, 0], [0, 250.0, 0], [20.0, 0, 0]])
    f = _frame(xyz, [0.5, 0.5, 0.0, 1.0, 1.0, 0.8], ring=[1, 2, 3, 4, 5, 6])
    out = rain_lisa(_tagged(f), RainLisaParams(500.0), rng_for(5))
    src = list(out.labels["src"])
    assert 0 in src and np.array_equal(out.points[src.index(0)], f.points[0])  # R = 0 untouched
    assert out.point_tag[src.index(0)] == PointTag.CLEAN
    assert 1 in src and out.point_tag[src.index(1)] == PointTag.ATTENUATED  # inside r_min, bright
    assert 2 not in src  # inside r_min, intensity 0, no drops: lost
    assert 4 not in src  # far beyond r_max
    assert 5 in src


def _stats(out, f):
    """(lost, scattered, {src: |Δr|} of the kept points)."""
    src = out.labels["src"]
    lost = len(f) - len(out)
    scat = int(np.sum(out.point_tag == PointTag.SCATTER_RAIN))
    kept = out.point_tag == PointTag.ATTENUATED
    dr = np.abs(
        np.linalg.norm(out.xyz[kept].astype(np.float64), axis=1)
        - np.linalg.norm(f.xyz[src[kept]].astype(np.float64), axis=1)
    )
    return lost, scat, dict(zip(src[kept].tolist(), dr, strict=True))


@pytest.mark.parametrize("mode", ["physical", "paper"])
def test_heavier_rain_is_more_severe(mode):
    f = _tagged(make_scene(1))
    stats = [_stats(rain_lisa(f, RainLisaParams(r, mode=mode, keep_lost_rows=False), rng_for(6)), f) for r in RATES]
    lost, scat = np.array([s[0] for s in stats]), np.array([s[1] for s in stats])
    assert np.all(np.diff(scat) > 0)
    assert np.all(np.diff(lost + scat) > 0)
    if mode == "paper":  # with r_max = 120 the lost points alone grow too
        assert np.all(np.diff(lost) > 0)
    # range noise σ = ΔR/√(2·SNR) grows with α, on the points kept at every severity
    common = sorted(set.intersection(*(set(s[2]) for s in stats)))
    noise = [np.mean([s[2][i] for i in common]) for s in stats]
    assert len(common) > len(f) // 2 and np.all(np.diff(noise) > 0)


def test_scattered_drops_are_close_to_the_sensor(scene):
    """P_j ≈ ρ_p·D²/(9r⁴): water drops only beat P_min within a few metres (Kilic et al. 2021)."""
    f = _tagged(scene)
    for mode in ("physical", "paper"):
        out = rain_lisa(f, RainLisaParams(500.0, mode=mode), rng_for(7))
        scat = out.point_tag == PointTag.SCATTER_RAIN
        r = np.linalg.norm(out.xyz[scat].astype(np.float64), axis=1)
        assert scat.sum() > 100
        assert np.all(r > 1.5) and np.percentile(r, 95) < 6.0 and r.max() < 10.0
        r_src = np.linalg.norm(f.xyz[out.labels["src"][scat]].astype(np.float64), axis=1)
        assert np.all(r < r_src)


def test_last_return_mode_keeps_every_detectable_target(scene):
    f = _tagged(scene)
    out = rain_lisa(f, RainLisaParams(500.0, return_mode="last"), rng_for(8))
    strongest = rain_lisa(f, RainLisaParams(500.0), rng_for(8))
    m = model_for(RainLisaParams(500.0))
    r = np.linalg.norm(f.xyz.astype(np.float64), axis=1)
    detectable = f.intensity * np.exp(-2 * m.alpha * r) / r**2 >= m.p_min
    src = out.labels["src"]
    assert np.array_equal(src[out.point_tag == PointTag.ATTENUATED], np.flatnonzero(detectable))
    assert (out.point_tag == PointTag.SCATTER_RAIN).sum() < (strongest.point_tag == PointTag.SCATTER_RAIN).sum()


def test_params_are_a_frozen_dataclass():
    assert dataclasses.is_dataclass(RainLisaParams)
    with pytest.raises(dataclasses.FrozenInstanceError):
        RainLisaParams(5.0).rate = 1.0  # type: ignore[misc]
    assert lisa.backscatter_reflectance(RainLisaParams(5.0).resolved()["refractive_index"]) == pytest.approx(
        0.019851, abs=1e-6
    )
