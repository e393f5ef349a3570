"""local_dec_obj: c centres per object, 75 % of each 30-NN neighbourhood deleted (Li et al. Appendix C-B)."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

import numpy as np
import pytest
from scipy.spatial import cKDTree

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.per_box.local_dec_obj import LocalDecObjParams, local_dec_obj
from tests.stages.conftest import indexed, make_scene, removed_mask, rng_for

SEVERITIES = load_recipe("kitti-c:text").corruption("local_dec_obj").params  # Appendix C (the text variant)
CODE = load_recipe("kitti-c").corruption("local_dec_obj").params  # the released generator (the default)
PER_CENTRE = 23  # round half up of 0.75 · 30


@pytest.fixture(scope="module")
def labelled():
    scene = make_scene(0)
    return replace(scene, labels={"orig": np.arange(len(scene))})


def test_recipe_values_are_the_papers():
    assert [(p.centers, p.k, p.drop_fraction) for p in SEVERITIES] == [(c, 30, 0.75) for c in range(1, 6)]


@pytest.mark.parametrize(
    "params", [LocalDecObjParams(0), LocalDecObjParams(3, k=0), LocalDecObjParams(3, drop_fraction=0)]
)
def test_zero_is_identity(scene, params):
    out = local_dec_obj(scene, params, rng_for(0))
    assert np.array_equal(out.points, scene.points)


@pytest.mark.parametrize(
    "params", [LocalDecObjParams(-1), LocalDecObjParams(2, k=-3), LocalDecObjParams(2, drop_fraction=1.5)]
)
def test_rejects_bad_params(scene, params):
    with pytest.raises(ValueError, match="local_dec_obj"):
        local_dec_obj(scene, params, rng_for(0))


@pytest.mark.parametrize("severity", range(1, 6))
def test_removed_counts_per_object(labelled, severity):
    p = SEVERITIES[severity - 1]
    out = local_dec_obj(labelled, p, rng_for(severity))
    kept = out.labels["orig"]
    assert np.all(np.diff(kept) > 0) and np.array_equal(out.points, labelled.points[kept])
    removed = np.setdiff1d(np.arange(len(labelled)), kept)
    owner = labelled.box_index
    assert np.all(owner[removed] >= 0)
    for j in range(3):
        n_gone = np.sum(owner[removed] == j)
        assert PER_CENTRE <= n_gone <= p.centers * PER_CENTRE
    assert out.boxes is labelled.boxes


def test_one_centre_deletes_75_percent_of_one_neighbourhood(labelled):
    for seed in range(5):
        out = local_dec_obj(labelled, SEVERITIES[0], rng_for(seed))
        removed = np.setdiff1d(np.arange(len(labelled)), out.labels["orig"])
        for j in range(3):
            obj = np.flatnonzero(labelled.box_index == j)
            gone = np.isin(obj, removed)
            assert gone.sum() == PER_CENTRE
            # some object point's 30-NN holds all 23 deleted points (and 7 survivors)
            xyz = labelled.xyz[obj].astype(np.float64)
            _, nn = cKDTree(xyz).query(xyz, k=30)
            assert np.any(gone[nn].sum(axis=1) == PER_CENTRE)


def test_effect_grows_with_severity(scene):
    removed = [np.mean([len(scene) - len(local_dec_obj(scene, p, rng_for(s))) for s in range(4)]) for p in SEVERITIES]
    assert all(b > a for a, b in pairwise(removed))


def test_small_objects_use_all_their_points():
    scene = make_scene(0, n_per_car=12)
    out = local_dec_obj(scene, LocalDecObjParams(2, rule="text"), rng_for(0))
    left = np.bincount(out.box_index[out.box_index >= 0], minlength=3)
    # k' = 12: each centre deletes round(0.75 · 12) = 9 of the same 12 points, so 9 to 12 go
    assert np.all((12 - left >= 9) & (12 - left <= 12))
    assert np.array_equal(out.points[out.box_index < 0], scene.points[scene.box_index < 0])


# ---- released-generator parity (the default kitti-c) on the demo scan ---------------------------------

@pytest.mark.parametrize("severity", [1, 3, 5])
def test_code_rule_removes_22c_points_or_the_whole_object(demo_scan, severity):
    p = CODE[severity - 1]
    n_drop = int(p.drop_fraction * p.k)  # int(0.75 · 30) = 22 in the released code (the text's 23 rounds)
    assert (p.rule, p.centers, p.k, n_drop) == ("code", severity, 30, 22)
    frame = indexed(demo_scan)
    gone = removed_mask(frame, local_dec_obj(frame, p, rng_for(severity)))
    assert not gone[demo_scan.box_index < 0].any()
    for idx in demo_scan.box_points:
        expected = p.centers * n_drop if len(idx) > p.centers * n_drop else len(idx)
        assert gone[idx].sum() == expected
