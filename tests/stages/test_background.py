"""background: ⌊N/d⌋ uniform points in the scan's bounding box, d = 45, 40, 35, 30, 20 (Li et al. C-A)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.frame import PointTag
from bench_build.stages.noise.background import BackgroundParams, background
from tests.stages.conftest import rng_for

SEVERITIES = load_recipe("kitti-c:text").corruption("background").params  # Appendix C (the text variant)
CODE = load_recipe("kitti-c").corruption("background").params  # the released generator (the default)


def test_recipe_values_are_the_papers():
    assert [p.count_divisor for p in SEVERITIES] == [45, 40, 35, 30, 20]


def test_infinite_divisor_is_identity(scene):
    out = background(scene, BackgroundParams(math.inf), rng_for(0))
    assert np.array_equal(out.points, scene.points)
    assert np.array_equal(out.boxes.center, scene.boxes.center)
    assert np.array_equal(out.boxes.dims, scene.boxes.dims)


@pytest.mark.parametrize("bad", [0.0, -20.0])
def test_rejects_non_positive_divisor(scene, bad):
    with pytest.raises(ValueError, match="count_divisor"):
        background(scene, BackgroundParams(bad), rng_for(0))


@pytest.mark.parametrize("severity", range(1, 6))
def test_adds_floor_n_over_d_uniform_points_in_the_scene_box(scene_with_ring, severity):
    p = SEVERITIES[severity - 1]
    frame = scene_with_ring
    n = len(frame)
    out = background(frame, p, rng_for(severity))
    n_add = len(out) - n
    assert n_add == math.floor(n / p.count_divisor) > 0
    # originals untouched, in place, and tagged CLEAN; the new ones SYNTHETIC
    assert np.array_equal(out.points[:n], frame.points)
    tag = out.point_tag
    assert len(tag) == len(out)
    assert np.all(tag[:n] == PointTag.CLEAN)
    assert np.all(tag[n:] == PointTag.SYNTHETIC)
    # inside the scan's axis-aligned bounding box, filling it uniformly
    new = out.points[n:]
    lo, hi = frame.xyz.min(axis=0), frame.xyz.max(axis=0)
    assert np.all(new[:, :3] >= lo) and np.all(new[:, :3] <= hi)
    size = (hi - lo).astype(np.float64)
    mean = new[:, :3].astype(np.float64).mean(axis=0)
    assert np.all(np.abs(mean - (lo + hi) / 2) < 0.05 * size)
    assert np.allclose(new[:, :3].std(axis=0), size / np.sqrt(12), rtol=0.06)
    # intensities drawn from the scan's own values; extra columns (ring) are −1
    ci = frame.fields.index("intensity")
    assert np.all(np.isin(new[:, ci], frame.points[:, ci]))
    assert np.unique(new[:, ci]).size > n_add // 2  # resampled, not one value copied
    assert np.all(new[:, frame.fields.index("ring")] == -1)
    # boxes and calibration unchanged
    assert np.array_equal(out.boxes.center, frame.boxes.center)
    assert out.calib is frame.calib


def test_effect_grows_with_severity(scene):
    sizes = [len(background(scene, p, rng_for(5))) for p in SEVERITIES]
    assert all(b > a for a, b in itertools.pairwise(sizes))


# ---- released-generator parity (the default kitti-c) on the demo scan ---------------------------------

def _trimmed_z(z, trim):
    """The released rule, spelled out: drop the value of largest |z-score| ``trim`` times."""
    z = z.astype(np.float64)
    score = np.abs(z - z.mean()) / z.std()
    order = np.argsort(-score, kind="stable")
    rest = np.delete(z, order[:trim])
    return rest.min(), rest.max()


@pytest.mark.parametrize("severity", [1, 5])
def test_code_rule_trims_the_z_range_and_uses_5nn_intensity(demo_scan, severity):
    p = CODE[severity - 1]
    assert p.rule == "code" and p.count_divisor == SEVERITIES[severity - 1].count_divisor and p.z_trim == 200
    out = background(demo_scan, p, rng_for(severity))
    n, n_add = len(demo_scan), len(demo_scan) // int(p.count_divisor)
    assert len(out) == n + n_add
    new = out.points[n:].astype(np.float64)
    lo, hi = demo_scan.xyz.min(axis=0), demo_scan.xyz.max(axis=0)
    z_lo, z_hi = _trimmed_z(demo_scan.xyz[:, 2], 200)
    assert z_hi < hi[2] - 0.5  # the demo scan's raw z max (2.5 m) is far above the trimmed one
    tol = lambda a, b: 5 * (b - a) / n_add  # noqa: E731 - a few expected gaps of n_add uniform draws
    for axis, (a, b) in enumerate([(lo[0], hi[0]), (lo[1], hi[1]), (z_lo, z_hi)]):
        assert a - 1e-5 <= new[:, axis].min() <= a + tol(a, b)
        assert b - tol(a, b) <= new[:, axis].max() <= b + 1e-5
    # intensity = mean intensity of the 5 nearest originals (brute force on a sample)
    xyz, inten = demo_scan.xyz.astype(np.float64), demo_scan.intensity.astype(np.float64)
    for q in new[:: max(1, n_add // 40)]:
        d = ((xyz - q[:3]) ** 2).sum(axis=1)
        assert q[3] == pytest.approx(inten[np.argsort(d)[:5]].mean(), abs=1e-6)
