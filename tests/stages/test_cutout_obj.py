"""cutout_obj: c centres per object, each erasing its k = 20 nearest object points (Li et al. Appendix C-B)."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

import numpy as np
import pytest
from scipy.spatial import cKDTree

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.per_box.cutout_obj import CutoutObjParams, cutout_obj
from tests.stages.conftest import indexed, make_scene, removed_mask, rng_for

SEVERITIES = load_recipe("kitti-c:text").corruption("cutout_obj").params  # Appendix C (the text variant)
CODE = load_recipe("kitti-c").corruption("cutout_obj").params  # the released generator (the default)


@pytest.fixture(scope="module")
def labelled():
    scene = make_scene(0)
    return replace(scene, labels={"orig": np.arange(len(scene))})


def test_recipe_values_are_the_papers():
    assert [(p.centers, p.k) for p in SEVERITIES] == [(1, 20), (2, 20), (3, 20), (4, 20), (5, 20)]


@pytest.mark.parametrize("params", [CutoutObjParams(0), CutoutObjParams(3, k=0)])
def test_zero_is_identity(scene, params):
    out = cutout_obj(scene, params, rng_for(0))
    assert np.array_equal(out.points, scene.points)


@pytest.mark.parametrize("params", [CutoutObjParams(-1), CutoutObjParams(2, k=-3)])
def test_rejects_bad_params(scene, params):
    with pytest.raises(ValueError, match="cutout_obj"):
        cutout_obj(scene, params, rng_for(0))


@pytest.mark.parametrize("severity", range(1, 6))
def test_erases_knn_neighbourhoods_of_c_centres(labelled, severity):
    p = SEVERITIES[severity - 1]
    out = cutout_obj(labelled, p, rng_for(severity))
    kept = out.labels["orig"]
    assert np.all(np.diff(kept) > 0)  # survivors keep their order
    assert np.array_equal(out.points, labelled.points[kept])
    removed = np.setdiff1d(np.arange(len(labelled)), kept)
    owner = labelled.box_index
    assert np.all(owner[removed] >= 0)  # background and ground untouched
    for j in range(3):
        obj = np.flatnonzero(owner == j)
        gone = np.isin(obj, removed)
        assert p.k <= gone.sum() <= p.centers * p.k
        # the erased set is a union of k-NN neighbourhoods (among object points) of erased points
        xyz = labelled.xyz[obj].astype(np.float64)
        _, nn = cKDTree(xyz).query(xyz[gone], k=p.k)
        whole = gone[nn].all(axis=1)
        assert whole.any()
        covered = np.zeros(len(obj), dtype=bool)
        covered[nn[whole].ravel()] = True
        assert np.array_equal(covered, gone)
        # ... and at most c of them are needed: greedy set cover of the erased points
        left, used = gone.copy(), 0
        cand = nn[whole]
        while left.any() and used <= p.centers:
            best = cand[np.argmax(left[cand].sum(axis=1))]
            left[best] = False
            used += 1
        assert not left.any() and used <= p.centers
    assert out.boxes is labelled.boxes


def test_small_objects_are_erased_whole():
    scene = make_scene(0, n_per_car=15)
    out = cutout_obj(scene, CutoutObjParams(1, k=20, rule="text"), rng_for(0))
    assert len(out) == len(scene) - 45 and not np.any(out.box_index >= 0)


def test_effect_grows_with_severity(scene):
    removed = [np.mean([len(scene) - len(cutout_obj(scene, p, rng_for(s))) for s in range(4)]) for p in SEVERITIES]
    assert all(b > a for a, b in pairwise(removed))


# ---- released-generator parity (the default kitti-c) on the demo scan ---------------------------------

@pytest.mark.parametrize("severity", [1, 3, 5])
def test_code_rule_removes_20c_points_or_the_whole_object(demo_scan, severity):
    p = CODE[severity - 1]
    assert (p.rule, p.centers, p.k) == ("code", severity, 20)
    frame = indexed(demo_scan)
    gone = removed_mask(frame, cutout_obj(frame, p, rng_for(severity)))
    owner = demo_scan.box_index
    assert not gone[owner < 0].any()
    deleted_objects = 0
    for idx in demo_scan.box_points:
        expected = p.centers * p.k if len(idx) > p.centers * p.k else len(idx)  # small objects vanish
        deleted_objects += len(idx) <= p.centers * p.k
        assert gone[idx].sum() == expected
    assert deleted_objects == sum(len(i) <= 20 * severity for i in demo_scan.box_points)
    if severity == 3:
        assert deleted_objects >= 1  # the demo scan's 22-point car is deleted at s2 and above
