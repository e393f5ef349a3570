"""upsample_obj: ⌊N/d⌋ new points per object at parent + U(−0.05, 0.05)³ (Li et al. Appendix C-B)."""

from __future__ import annotations

import math
from dataclasses import replace
from itertools import pairwise

import numpy as np
import pytest

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.frame import PointTag
from bench_build.stages.per_box.upsample_obj import UpsampleObjParams, upsample_obj
from tests.stages.conftest import make_scene, rng_for, unit_coords

SEVERITIES = load_recipe("kitti-c:text").corruption("upsample_obj").params  # Appendix C (the text variant)
CODE = load_recipe("kitti-c").corruption("upsample_obj").params  # the released generator (the default)


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


# ---- released-generator parity (the default kitti-c) on the demo scan ---------------------------------

@pytest.mark.parametrize("severity", [1, 5])
def test_code_rule_adds_n_over_d_points_in_box_units_and_shrinks_jointly(demo_scan, severity):
    p = CODE[severity - 1]
    assert p.rule == "code" and (p.count_divisor, p.offset) == (SEVERITIES[severity - 1].count_divisor, 0.05)
    out = upsample_obj(demo_scan, p, rng_for(severity))
    n = len(demo_scan)
    counts = [len(idx) // int(p.count_divisor) for idx in demo_scan.box_points]
    assert len(out) - n == sum(counts)
    start = n
    for j, idx in enumerate(demo_scan.box_points):
        before, after = unit_coords(demo_scan, j), unit_coords(demo_scan, j, out.xyz[idx])
        ratio = np.linalg.norm(before, axis=1) / np.linalg.norm(after, axis=1)
        m = float(np.median(ratio))
        assert np.allclose(ratio, m, rtol=1e-4)  # one common shrink of the originals (M ≥ 1)
        assert m >= 1 - 1e-5
        new = unit_coords(demo_scan, j, out.xyz[start:start + counts[j]]) * m
        start += counts[j]
        if len(new):
            d = np.abs(new[:, None, :] - before[None, :, :]).max(axis=2).min(axis=1)
            assert d.max() <= 0.05 + 1e-4  # within ±0.05 box units of an original point (its parent)
        if m > 1 + 1e-4:
            assert max(np.abs(after).max(), np.abs(new / m).max()) == pytest.approx(1.0, abs=1e-4)
