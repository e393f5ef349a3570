"""upsample: ⌊N/d⌋ new points at parent + U(−0.1, 0.1)³ (Li et al. Appendix C-A)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.spatial import cKDTree

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.frame import Frame, PointTag
from bench_build.stages.noise.upsample import UpsampleParams, upsample
from tests.stages.conftest import rng_for

SEVERITIES = load_recipe("kitti-c:text").corruption("upsample").params  # Appendix C (the text variant)
CODE = load_recipe("kitti-c").corruption("upsample").params  # the released generator (the default)


def _grid_frame() -> Frame:
    """Points 1 m apart (so the parent of a new point is its nearest original), with a ring column and labels."""
    g = np.stack(np.meshgrid(np.arange(40.0), np.arange(25.0), np.arange(8.0), indexing="ij"), -1).reshape(-1, 3)
    n = len(g)
    rng = np.random.default_rng(0)
    xyz = g + np.array([5.0, -12.0, -2.0])
    points = np.concatenate([xyz, rng.uniform(0, 1, (n, 1)), np.arange(n)[:, None] % 64], axis=1)
    return Frame("grid", points.astype(np.float32), fields=("x", "y", "z", "intensity", "ring"),
                 labels={"semantic": np.arange(n, dtype=np.int32)})


def test_recipe_values_are_the_papers():
    assert [p.count_divisor for p in SEVERITIES] == [10, 8, 6, 4, 2]
    assert all(p.offset == 0.1 for p in SEVERITIES)


def test_infinite_divisor_is_identity(scene):
    out = upsample(scene, UpsampleParams(math.inf), rng_for(0))
    assert np.array_equal(out.points, scene.points)


@pytest.mark.parametrize("params", [UpsampleParams(0), UpsampleParams(-2), UpsampleParams(2, offset=-0.1)])
def test_rejects_bad_params(scene, params):
    with pytest.raises(ValueError, match="upsample"):
        upsample(scene, params, rng_for(0))


@pytest.mark.parametrize("severity", range(1, 6))
def test_count_and_tags_on_scene(scene_with_ring, severity):
    p = SEVERITIES[severity - 1]
    n = len(scene_with_ring)
    out = upsample(scene_with_ring, p, rng_for(severity))
    assert out.points.dtype == np.float32
    assert len(out) - n == n // p.count_divisor
    assert np.array_equal(out.points[:n], scene_with_ring.points)
    assert np.all(out.point_tag[n:] == PointTag.SYNTHETIC) and np.all(out.point_tag[:n] == PointTag.CLEAN)
    # every new point is inside the ±0.1 m cube of some original point
    d, _ = scene_with_ring.kdtree.query(out.xyz[n:].astype(np.float64), p=np.inf)
    assert np.all(d <= 0.1 + 1e-5)


@pytest.mark.parametrize("severity", range(1, 6))
def test_offsets_from_parent_are_uniform_per_axis(severity):
    frame = _grid_frame()
    p = SEVERITIES[severity - 1]
    n = len(frame)
    out = upsample(frame, p, rng_for(10 + severity))
    new = out.points[n:]
    _, parent = frame.kdtree.query(new[:, :3].astype(np.float64))
    assert len(np.unique(parent)) == len(parent)  # parents drawn without replacement
    off = new[:, :3].astype(np.float64) - frame.xyz[parent]
    assert np.all(np.abs(off) <= 0.1 + 1e-5)
    assert np.allclose(off.std(axis=0), 0.1 / np.sqrt(3), rtol=0.06)
    assert np.allclose(off.mean(axis=0), 0.0, atol=0.008)
    # attributes are copied from the parent
    assert np.array_equal(new[:, 3:], frame.points[parent, 3:])
    assert np.array_equal(out.labels["semantic"][n:], frame.labels["semantic"][parent])


def test_effect_grows_with_severity(scene):
    added = [len(upsample(scene, p, rng_for(1))) - len(scene) for p in SEVERITIES]
    assert all(b > a for a, b in itertools.pairwise(added))


# ---- released-generator parity (the default kitti-c) on the demo scan ---------------------------------

@pytest.mark.parametrize("severity", [1])
def test_code_rule_new_intensity_is_the_mean_of_the_5_nearest(demo_scan, severity):
    p = CODE[severity - 1]
    assert p.rule == "code" and (p.count_divisor, p.offset) == (SEVERITIES[severity - 1].count_divisor, 0.1)
    out = upsample(demo_scan, p, rng_for(severity))
    n = len(demo_scan)
    new = out.points[n:].astype(np.float64)
    assert len(new) == n // int(p.count_divisor)
    xyz, inten = demo_scan.xyz.astype(np.float64), demo_scan.intensity.astype(np.float64)
    d_parent = []
    for q in new[:: len(new) // 40]:
        d = ((xyz - q[:3]) ** 2).sum(axis=1)
        assert q[3] == pytest.approx(inten[np.argsort(d)[:5]].mean(), abs=1e-6)
        d_parent.append(np.sqrt(d.min()))
    assert max(d_parent) <= 0.1 * np.sqrt(3) + 1e-5  # within the ±0.1 m cube of a parent


@pytest.mark.parametrize("rule", ["code", "text"])
def test_new_rows_are_the_bytes_of_building_them_in_float64(rule):
    """The new rows are assembled in float32 in place (the parents' rows, then x, y, z and, with rule "code",
    the intensity rounded from float64): byte for byte the rows built in float64 and cast, ring column included."""
    frame = _grid_frame()
    rng = np.random.default_rng(4)
    frame = frame.with_points(frame.points + rng.normal(0, 0.2, frame.points.shape).astype(np.float32))  # no ties
    p = UpsampleParams(3, rule=rule)
    got = upsample(frame, p, rng_for(3))
    n, rng = len(frame), rng_for(3)
    parents = rng.choice(n, size=n // 3, replace=False)
    new = frame.points[parents].astype(np.float64)
    new[:, :3] += rng.uniform(-p.offset, p.offset, size=(n // 3, 3))
    if rule == "code":
        nn = cKDTree(frame.xyz.astype(np.float64)).query(new[:, :3], k=5)[1]
        new[:, 3] = frame.points[:, 3].astype(np.float64)[nn].mean(axis=1)
    assert got.points[n:].tobytes() == new.astype(np.float32).tobytes()
    assert np.array_equal(got.labels["semantic"][n:], parents)
