"""upsample_obj: ⌊N/d⌋ new points per object at parent + U(−0.05, 0.05)³ (Li et al. Appendix C-B)."""

from __future__ import annotations

import math
from dataclasses import replace
from itertools import pairwise

import numpy as np
import pytest

from manifests.recipe import load_recipe
from stages.frame import PointTag
from stages.noise.upsample_obj import UpsampleObjParams, upsample_obj
from tests.stages.conftest import make_scene, rng_for

SEVERITIES = load_recipe("kitti-c").corruption("upsample_obj").params


def _labelled(n_per_car: int = 1500):
    scene = make_scene(0, n_per_car=n_per_car, with_ring=True)
    return replace(scene, labels={"orig": np.arange(len(scene))})


def test_recipe_values_are_the_papers():
    assert [p.count_divisor for p in SEVERITIES] == [5, 4, 3, 2, 1]
    assert all(p.offset == 0.05 for p in SEVERITIES)


def test_infinite_divisor_is_identity(scene):
    out = upsample_obj(scene, UpsampleObjParams(math.inf), rng_for(0))
    assert np.array_equal(out.points, scene.points)


@pytest.mark.parametrize("params", [UpsampleObjParams(0), UpsampleObjParams(-1), UpsampleObjParams(2, offset=-0.1)])
def test_rejects_bad_params(scene, params):
    with pytest.raises(ValueError, match="upsample_obj"):
        upsample_obj(scene, params, rng_for(0))


@pytest.mark.parametrize("severity", range(1, 6))
def test_counts_offsets_and_attributes(severity):
    frame = _labelled(1234)
    p = SEVERITIES[severity - 1]
    n = len(frame)
    out = upsample_obj(frame, p, rng_for(severity))
    assert out.points.dtype == np.float32
    assert np.array_equal(out.points[:n], frame.points)  # source points untouched, in order
    assert np.all(out.point_tag[n:] == PointTag.SYNTHETIC) and np.all(out.point_tag[:n] == PointTag.CLEAN)
    parent = out.labels["orig"][n:]  # labels are copied from the parent
    owner = frame.box_index[parent]
    assert np.all(owner >= 0)  # only object points are parents
    for j in range(3):
        assert np.sum(owner == j) == math.floor(np.sum(frame.box_index == j) / p.count_divisor)
    assert len(np.unique(parent)) == len(parent)  # without replacement
    off = out.xyz[n:].astype(np.float64) - frame.xyz[parent]
    assert np.all(np.abs(off) <= 0.05 + 1e-5)
    assert np.allclose(off.std(axis=0), 0.05 / np.sqrt(3), rtol=0.1)
    assert np.array_equal(out.points[n:, 3:], frame.points[parent, 3:])  # intensity and ring from the parent
    assert out.boxes is frame.boxes


def test_effect_grows_with_severity(scene):
    added = [len(upsample_obj(scene, p, rng_for(1))) - len(scene) for p in SEVERITIES]
    assert all(b > a for a, b in pairwise(added))
    assert added[-1] == np.sum(scene.box_index >= 0)


def test_deterministic_and_does_not_mutate(scene):
    before = scene.points.copy()
    a = upsample_obj(scene, SEVERITIES[2], rng_for(3))
    b = upsample_obj(scene, SEVERITIES[2], rng_for(3))
    c = upsample_obj(scene, SEVERITIES[2], rng_for(4))
    assert np.array_equal(a.points, b.points) and not np.array_equal(a.points, c.points)
    assert np.array_equal(scene.points, before) and "point_tag" not in scene.labels
