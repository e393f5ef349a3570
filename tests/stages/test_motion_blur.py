"""motion_blur: whole-cloud N(0, σ²) shift + per-point jitter 0.1σ (x, y) / 0.05σ (z), clipped at ±3σ (Robo3D)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.frame import PointTag
from bench_build.stages.noise.motion_blur import MotionBlurParams, motion_blur
from tests.stages.conftest import make_scene, rng_for

SEVERITIES = load_recipe("robo3d-kitti-c").corruption("motion_blur").params


@pytest.fixture(scope="module")
def small():
    return make_scene(1, n_ground=300, n_per_car=30, with_ring=True)


@pytest.fixture(scope="module")
def big():
    return make_scene(2, with_ring=True)


def test_recipe_values_are_the_papers():
    assert [p.sigma for p in SEVERITIES] == [0.04, 0.08, 0.10]
    assert all((p.jitter_xy, p.jitter_z, p.clip) == (0.1, 0.05, 3.0) for p in SEVERITIES)


def test_zero_sigma_is_identity(scene):
    out = motion_blur(scene, MotionBlurParams(0.0), rng_for(0))
    assert out is scene


@pytest.mark.parametrize("kw", [{"sigma": -0.1}, {"sigma": float("nan")}, {"sigma": 0.1, "jitter_xy": -1.0},
                                {"sigma": 0.1, "clip": float("inf")}])
def test_rejects_bad_params(kw):
    with pytest.raises(ValueError, match="motion_blur"):
        MotionBlurParams(**kw)


@pytest.mark.parametrize("severity", [1, 2, 3])
def test_whole_cloud_shift_is_normal_sigma(small, severity):
    """The per-frame mean displacement (the shared translation; jitter averages out) is N(0, σ²) per axis."""
    p = SEVERITIES[severity - 1]
    shifts = np.array([
        (motion_blur(small, p, rng_for(1000 * severity + i)).xyz.astype(np.float64) - small.xyz).mean(axis=0)
        for i in range(400)
    ])
    z = (shifts / p.sigma).ravel()  # 1200 samples, one per axis and frame
    assert abs(z.std() - 1.0) < 0.1
    assert abs(z.mean()) < 4 / np.sqrt(z.size)
    assert stats.kstest(z, "norm").pvalue > 1e-3
    assert all(abs(np.corrcoef(shifts[:, a], shifts[:, b])[0, 1]) < 0.15 for a, b in [(0, 1), (0, 2), (1, 2)])


@pytest.mark.parametrize("severity", [1, 2, 3])
def test_per_point_jitter_std_and_clip(big, severity):
    p = SEVERITIES[severity - 1]
    out = motion_blur(big, p, rng_for(severity))
    d = out.xyz.astype(np.float64) - big.xyz
    res = d - d.mean(axis=0)  # remove the shared shift
    std = res.std(axis=0)
    assert np.allclose(std, [0.1 * p.sigma, 0.1 * p.sigma, 0.05 * p.sigma], rtol=0.03)
    assert np.all(np.abs(res) <= 3 * p.sigma + 1e-5)
    assert out.points.dtype == np.float32
    # boxes NOT moved, other columns kept, every point tagged JITTER
    assert out.boxes is big.boxes
    assert np.array_equal(out.points[:, 3:], big.points[:, 3:])
    assert np.all(out.point_tag == PointTag.JITTER)


def test_clip_binds_when_tight(big):
    """With clip = 0.05 (= half the x/y jitter std) the x/y jitter piles up at ±0.05σ."""
    sigma = 0.1
    out = motion_blur(big, MotionBlurParams(sigma, clip=0.05), rng_for(7))
    d = out.xyz.astype(np.float64) - big.xyz
    shift = 0.5 * (d.max(axis=0) + d.min(axis=0))  # both bounds are hit: the midrange is the shift
    res = d - shift
    lim = 0.05 * sigma
    assert np.all(np.abs(res) <= lim + 2e-5)
    at_bound = np.isclose(np.abs(res[:, 0]), lim, atol=2e-5).mean()
    assert 0.55 < at_bound < 0.7  # P(|N(0,1)| > 0.5) ≈ 0.617


def test_effect_grows_with_severity(small):
    disp = [np.mean([np.abs(motion_blur(small, p, rng_for(i)).xyz - small.xyz).mean() for i in range(50)])
            for p in SEVERITIES]
    assert all(b > a for a, b in itertools.pairwise(disp))


