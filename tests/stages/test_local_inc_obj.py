"""local_inc_obj: c centres per object, k = 30 points added on each neighbourhood's fitted plane (Appendix C-B)."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

import numpy as np
import pytest
from scipy.spatial import cKDTree

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.frame import PointTag
from bench_build.stages.kernels.boxes import points_in_box_frame
from bench_build.stages.per_box.local_inc_obj import LocalIncObjParams, local_inc_obj
from tests.stages.conftest import make_scene, rng_for, unit_coords

SEVERITIES = load_recipe("kitti-c:text").corruption("local_inc_obj").params  # Appendix C (the text variant)
CODE = load_recipe("kitti-c").corruption("local_inc_obj").params  # the released generator (the default)


@pytest.fixture(scope="module")
def labelled():
    scene = make_scene(0, with_ring=True)
    return replace(scene, labels={"orig": np.arange(len(scene))})


def test_recipe_values_are_the_papers():
    assert [(p.centers, p.k) for p in SEVERITIES] == [(c, 30) for c in range(1, 6)]


@pytest.mark.parametrize("params", [LocalIncObjParams(0), LocalIncObjParams(3, k=0)])
def test_zero_is_identity(scene, params):
    out = local_inc_obj(scene, params, rng_for(0))
    assert np.array_equal(out.points, scene.points)


@pytest.mark.parametrize("params", [LocalIncObjParams(-1), LocalIncObjParams(2, k=-3)])
def test_rejects_bad_params(scene, params):
    with pytest.raises(ValueError, match="local_inc_obj"):
        local_inc_obj(scene, params, rng_for(0))


def _surface_distance(local: np.ndarray, dims: np.ndarray) -> np.ndarray:
    """Distance of box-frame points to the surface of a box of size ``dims`` (outside or inside)."""
    q = np.abs(local) - dims / 2
    outside = np.linalg.norm(np.maximum(q, 0), axis=1)
    return np.where(q.max(axis=1) > 0, outside, -q.max(axis=1))


@pytest.mark.parametrize("severity", range(1, 6))
def test_adds_ck_planar_points_on_the_surface(labelled, severity):
    p = SEVERITIES[severity - 1]
    n = len(labelled)
    out = local_inc_obj(labelled, p, rng_for(severity))
    assert out.points.dtype == np.float32
    assert len(out) - n == 3 * p.centers * p.k
    assert np.array_equal(out.points[:n], labelled.points)
    assert np.all(out.point_tag[n:] == PointTag.SYNTHETIC)
    new = out.xyz[n:].astype(np.float64).reshape(3, p.centers, p.k, 3)  # object by object, centre by centre
    boxes = labelled.boxes
    for j in range(3):
        obj = np.flatnonzero(labelled.box_index == j)
        pts = new[j].reshape(-1, 3)
        # near the object's sampled surface and on the car's box surface
        d, _ = cKDTree(labelled.xyz[obj].astype(np.float64)).query(pts)
        assert d.max() < 0.3 and np.median(d) < 0.1
        surf = _surface_distance(points_in_box_frame(pts, boxes.center[j], boxes.heading[j]), boxes.dims[j])
        assert np.median(surf) < 0.08 and surf.max() < 0.25  # planes cut across edges
        for group in new[j]:  # each centre's k points lie on one plane
            sv = np.linalg.svd(group - group.mean(axis=0), compute_uv=False)
            assert sv[2] < 1e-4 * sv[0]
    # attributes (intensity, ring) and labels come from a neighbour of the same object
    parent = out.labels["orig"][n:]
    assert np.array_equal(out.points[n:, 3:], labelled.points[parent, 3:])
    assert np.array_equal(labelled.box_index[parent], np.repeat(np.arange(3), p.centers * p.k))
    assert np.all(np.linalg.norm(out.xyz[n:] - labelled.xyz[parent], axis=1) < 0.6)
    assert out.boxes is labelled.boxes


def test_effect_grows_with_severity(scene):
    added = [len(local_inc_obj(scene, p, rng_for(1))) - len(scene) for p in SEVERITIES]
    assert all(b > a for a, b in pairwise(added))


def test_small_objects_use_all_their_points():
    scene = make_scene(0, n_per_car=10)
    out = local_inc_obj(scene, LocalIncObjParams(2, rule="text"), rng_for(0))
    assert len(out) - len(scene) == 3 * 2 * 10


# ---- released-generator parity (the default kitti-c) on the demo scan ---------------------------------

@pytest.mark.parametrize("severity", [1, 5])
def test_code_rule_adds_2k_per_operation_on_planes_and_shrinks_jointly(demo_scan, severity):
    p = CODE[severity - 1]
    assert (p.rule, p.centers, p.k) == ("code", severity, 30)
    out = local_inc_obj(demo_scan, p, rng_for(severity))
    n = len(demo_scan)
    ops = [min(p.centers, (len(i) - 1) // p.k) if len(i) > p.k else 0 for i in demo_scan.box_points]
    assert len(out) - n == sum(2 * p.k * o for o in ops)  # 60 new points per operation
    assert np.all(out.point_tag[n:] == PointTag.SYNTHETIC)
    start = n
    for j, idx in enumerate(demo_scan.box_points):
        before, after = unit_coords(demo_scan, j), unit_coords(demo_scan, j, out.xyz[idx])
        ratio = np.linalg.norm(before, axis=1) / np.linalg.norm(after, axis=1)
        m = float(np.median(ratio))
        assert np.allclose(ratio, m, rtol=1e-4) and m >= 1 - 1e-5  # one common shrink, M ≥ 1
        for _ in range(ops[j]):
            block = unit_coords(demo_scan, j, out.xyz[start:start + 2 * p.k].astype(np.float64))
            inten = out.intensity[start:start + 2 * p.k]
            start += 2 * p.k
            assert np.all(inten == inten[0])  # the neighbourhood's mean intensity
            # every block lies on a plane (the least-squares fit of one axis over the other two)
            centred = block - block.mean(axis=0)
            assert np.linalg.svd(centred, compute_uv=False)[-1] < 1e-4 * np.sqrt(len(block))
