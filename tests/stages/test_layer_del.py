"""layer_del: delete every point of `layers` of 64 equal elevation bins (Li et al. Appendix C-A)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.density.layer_del import LayerDelParams, layer_del
from bench_build.stages.frame import Frame
from tests.stages.conftest import indexed, removed_mask, rng_for

SEVERITIES = load_recipe("kitti-c:text").corruption("layer_del").params  # Appendix C (the text variant)
CODE = load_recipe("kitti-c").corruption("layer_del").params  # the released generator (the default)


def _bins(xyz: np.ndarray, num_bins: int) -> np.ndarray:
    """Reference binning, written independently of the stage: 64 equal bins of asin(z / r) over [min, max]."""
    xyz = xyz.astype(np.float64)
    el = np.arcsin(xyz[:, 2] / np.linalg.norm(xyz, axis=1))
    edges = np.linspace(el.min(), el.max(), num_bins + 1)
    return np.clip(np.searchsorted(edges, el, side="right") - 1, 0, num_bins - 1)



def test_recipe_values_are_the_papers():
    assert [p.layers for p in SEVERITIES] == [3, 7, 11, 15, 19]
    assert all(p.num_bins == 64 for p in SEVERITIES)


def test_zero_layers_is_identity(scene):
    assert np.array_equal(layer_del(scene, LayerDelParams(0, rule="text"), rng_for(0)).points, scene.points)


@pytest.mark.parametrize(
    "params", [LayerDelParams(-1, rule="text"),
        LayerDelParams(65, rule="text"),
        LayerDelParams(3, num_bins=0, rule="text"),
        LayerDelParams(3, num_bins=2, rule="text")]
)
def test_rejects_bad_params(scene, params):
    with pytest.raises(ValueError, match="layer_del"):
        layer_del(scene, params, rng_for(0))


@pytest.mark.parametrize("severity", range(1, 6))
def test_deletes_exactly_the_chosen_bins(scene_with_ring, severity):
    scene_with_ring = indexed(scene_with_ring)
    p = SEVERITIES[severity - 1]
    bins = _bins(scene_with_ring.xyz, p.num_bins)
    assert len(np.unique(bins)) == p.num_bins  # every bin is populated on this scene
    out = layer_del(scene_with_ring, p, rng_for(severity))
    assert out.points.dtype == np.float32
    kept = out.labels["src"]
    assert np.all(np.diff(kept) > 0) and np.array_equal(out.points, scene_with_ring.points[kept])
    removed = np.ones(len(scene_with_ring), dtype=bool)
    removed[kept] = False
    deleted_bins = np.unique(bins[removed])
    assert len(deleted_bins) == p.layers
    assert not np.isin(bins[kept], deleted_bins).any()  # no point of a deleted bin survives


@pytest.mark.parametrize("severity", range(1, 6))
def test_expected_fraction_removed(scene, severity):
    """Each bin is deleted with probability layers / 64, so on average that fraction of points goes."""
    p = SEVERITIES[severity - 1]
    frac = [1 - len(layer_del(scene, p, rng_for(100 + i))) / len(scene) for i in range(40)]
    assert abs(np.mean(frac) - p.layers / p.num_bins) < 4 * np.std(frac) / np.sqrt(len(frac))


def test_bins_are_chosen_among_all_bins_even_empty_ones():
    # two elevations only: 62 of the 64 bins are empty, so one chosen bin usually deletes nothing
    xyz = np.array([[10.0, 0.0, -1.0], [10.0, 1.0, -1.0], [10.0, 0.0, 1.0], [10.0, 1.0, 1.0]])
    frame = Frame("two", np.concatenate([xyz, np.zeros((4, 1))], axis=1).astype(np.float32))
    sizes = [len(layer_del(frame, LayerDelParams(1, rule="text"), rng_for(i))) for i in range(200)]
    assert set(sizes) == {2, 4}
    assert 0.9 < np.mean(np.array(sizes) == 4) < 0.99  # 62/64 ≈ 0.97


def test_effect_grows_with_severity(scene):
    removed = [np.mean([len(scene) - len(layer_del(scene, p, rng_for(i))) for i in range(20)]) for p in SEVERITIES]
    assert all(b > a for a, b in itertools.pairwise(removed))


# ---- released-generator parity (the default kitti-c) on the demo scan ---------------------------------

def _released_bins(frame, num_bins=64):
    """The released rule, spelled out: polar angle in degrees, a 1000-bin density histogram, near-empty
    ends (density ≤ 1/1000/4) trimmed, 64 equal bins over the points strictly inside the rest."""
    xyz = frame.xyz.astype(np.float64)
    theta = np.degrees(np.arccos(xyz[:, 2] / np.linalg.norm(xyz, axis=1)))
    dens, edges = np.histogram(theta, bins=1000, density=True)
    keep = dens > 1 / 1000 / 4
    lo, hi = edges[:-1][keep].min(), edges[1:][keep].max()
    inside = theta[(lo < theta) & (theta < hi)]
    e = np.linspace(inside.min(), inside.max(), num_bins + 1)
    which = np.full(len(theta), -1)
    for i in range(num_bins):
        which[(e[i] < theta) & (theta < e[i + 1])] = i
    return which


def test_code_rule_deletes_c_minus_1_to_c_plus_1_trimmed_polar_bins(demo_scan):
    which = _released_bins(demo_scan)
    p = CODE[2]  # c = 11
    assert (p.rule, p.layers, p.num_bins) == ("code", 11, 64)
    seen = set()
    frame = indexed(demo_scan)
    for seed in range(12):
        out = layer_del(frame, p, rng_for(seed))
        gone = removed_mask(frame, out)
        # replay the two draws of the rule: the count offset in {−1, 0, +1}, then the bins
        rng = rng_for(seed)
        n_del = p.layers + int(rng.integers(0, 3)) - 1
        chosen = rng.choice(64, size=n_del, replace=False)
        assert np.array_equal(gone, np.isin(which, chosen))  # whole trimmed bins, nothing on edges/outside
        seen.add(n_del)
    assert seen == {p.layers - 1, p.layers, p.layers + 1}


def test_code_rule_never_deletes_more_than_num_bins():
    xyz = np.random.default_rng(0).normal(size=(5000, 3)).astype(np.float32)
    frame = Frame("f", np.concatenate([xyz, np.zeros((5000, 1), np.float32)], axis=1))
    out = layer_del(frame, LayerDelParams(4, num_bins=4), rng_for(0))  # 3, 4 or 5 → at most 4 bins
    assert 0 <= len(out) < len(frame)
