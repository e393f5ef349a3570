"""ffd: free-form deformation of objects with a 5×5×5 Bernstein lattice on the box (Li et al. Appendix C-B)."""

from __future__ import annotations

from itertools import pairwise
from math import comb

import numpy as np
import pytest

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.kernels.boxes import points_in_box_frame
from bench_build.stages.per_box.ffd import FFDParams, ffd
from tests.stages.conftest import assert_only_boxes_moved, rng_for

SEVERITIES = load_recipe("kitti-c:text").corruption("ffd").params  # Appendix C (the text variant)
CODE = load_recipe("kitti-c").corruption("ffd").params  # the released generator (the default)



def _tensor_basis(unit: np.ndarray, n: int) -> np.ndarray:
    """Tensor-product Bernstein basis of degree n − 1 (written independently of the stage)."""
    per_axis = [
        np.stack([comb(n - 1, i) * unit[:, a] ** i * (1 - unit[:, a]) ** (n - 1 - i) for i in range(n)], axis=1)
        for a in range(3)
    ]
    return np.einsum("pi,pj,pk->pijk", *per_axis).reshape(len(unit), -1)


def _local(scene, out, j):
    obj = scene.box_index == j
    b = scene.boxes
    old = points_in_box_frame(scene.xyz[obj], b.center[j], b.heading[j])
    new = points_in_box_frame(out.xyz[obj], b.center[j], b.heading[j])
    return old, new


def test_recipe_values_are_the_papers():
    assert [p.max_displacement for p in SEVERITIES] == [0.1, 0.2, 0.3, 0.4, 0.5]
    assert all(p.lattice == 5 for p in SEVERITIES)


def test_zero_is_identity(scene):
    out = ffd(scene, FFDParams(0.0), rng_for(0))
    assert np.array_equal(out.points, scene.points) and out.boxes is scene.boxes


@pytest.mark.parametrize("params", [FFDParams(-0.1), FFDParams(0.1, lattice=1)])
def test_rejects_bad_params(scene, params):
    with pytest.raises(ValueError, match="ffd"):
        ffd(scene, params, rng_for(0))


@pytest.mark.parametrize("severity", range(1, 6))
def test_bounded_bernstein_deformation_and_refitted_box(scene, severity):
    p = SEVERITIES[severity - 1]
    out = ffd(scene, p, rng_for(severity))
    assert out.points.dtype == np.float32 and len(out) == len(scene)
    b, nb = scene.boxes, out.boxes
    for j in range(3):
        old, new = _local(scene, out, j)
        size = b.dims[j]
        disp = new - old
        assert np.all(np.abs(disp) <= p.max_displacement * size + 1e-5)  # |Δ| ≤ r × box size per axis
        assert np.abs(disp).max() > 0.2 * p.max_displacement * size.min()
        # the displacement field is a degree-4 tensor Bernstein polynomial over the box (5×5×5 lattice) ...
        unit = old / size + 0.5
        for n, tol in ((5, 1e-4), (3, None)):
            basis = _tensor_basis(unit, n)
            coef, *_ = np.linalg.lstsq(basis, disp, rcond=None)
            resid = np.abs(basis @ coef - disp).max()
            if tol is not None:
                assert resid < tol
            else:  # ... and not a lower-degree one
                assert resid > 100 * 1e-4
        # the box keeps its heading, encloses the deformed points and grows at most by r × size per side
        assert nb.heading[j] == b.heading[j]
        local = points_in_box_frame(out.xyz[scene.box_index == j], nb.center[j], nb.heading[j])
        assert np.all(np.abs(local) <= nb.dims[j] / 2 + 1e-5)
        assert np.all(nb.dims[j] <= size * (1 + 2 * p.max_displacement) + 1e-9)
        assert np.all(nb.dims[j] >= local.max(axis=0) - local.min(axis=0) - 1e-9)
    assert_only_boxes_moved(scene, out)


def test_effect_grows_with_severity(scene):
    obj = scene.box_index >= 0
    moved = [np.abs(ffd(scene, p, rng_for(1)).xyz[obj] - scene.xyz[obj]).mean() for p in SEVERITIES]
    assert all(b > a for a, b in pairwise(moved))
    # with one seed the control displacements are the same draws scaled by r: displacement ∝ r
    ratio = np.array(moved) / np.array([p.max_displacement for p in SEVERITIES])
    assert np.allclose(ratio, ratio[0], rtol=1e-3)


# ---- released-generator parity (the default kitti-c) on the demo scan ---------------------------------

@pytest.mark.parametrize("severity", [1, 5])
def test_code_rule_cube_lattice_then_squeezed_into_the_unchanged_box(demo_scan, severity):
    p = CODE[severity - 1]
    assert p.rule == "code" and (p.max_displacement, p.lattice) == (SEVERITIES[severity - 1].max_displacement, 5)
    out = ffd(demo_scan, p, rng_for(severity))
    b = demo_scan.boxes
    assert np.array_equal(out.boxes.dims, b.dims) and np.array_equal(out.boxes.center, b.center)
    for j, idx in enumerate(demo_scan.box_points):
        local = points_in_box_frame(out.xyz[idx], b.center[j], b.heading[j])
        before = points_in_box_frame(demo_scan.xyz[idx], b.center[j], b.heading[j])
        assert np.all(np.abs(local) <= b.dims[j] / 2 + 1e-4)
        assert not np.allclose(local, before, atol=1e-3)


def test_code_rule_displacement_is_in_units_of_the_longest_side(demo_scan):
    """Control points move ±r·max(l, w, h) on every axis: the mean point displacement grows with r and,
    for r = 0.1, stays below r·max(l, w, h) (Bernstein weights average the control displacements)."""
    b = demo_scan.boxes
    idx = demo_scan.box_points[3]  # the 693-point car
    moves = []
    for p in (CODE[0], CODE[4]):
        out = ffd(demo_scan, p, rng_for(0))
        moves.append(np.abs(out.xyz[idx].astype(np.float64) - demo_scan.xyz[idx]).mean())
    assert moves[1] > 2 * moves[0]
    assert moves[0] < CODE[0].max_displacement * b.dims[3].max()
