"""Ring recovery (Robo3D's scripts): azimuth wrap, elevation rows, nearest HDL-64E laser, and the fallbacks."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bench_build.sources.demo.kitti import generate_frame
from bench_build.stages.frame import Frame
from bench_build.stages.ring import (
    HDL64E_ELEVATIONS_DEG,
    azimuth_wrap_plausible,
    frame_rings,
    ring_column_valid,
    rings_from_azimuth_wrap,
    rings_from_elevation_bins,
    rings_from_laser_table,
)


@pytest.fixture(scope="module")
def demo() -> Frame:
    return generate_frame(0, azimuth_step_deg=0.36)


def _true(frame: Frame) -> np.ndarray:
    return frame.column("ring").astype(np.int64)


def _without_ring(frame: Frame) -> Frame:
    return replace(frame, points=np.ascontiguousarray(frame.points[:, :4]), fields=frame.fields[:4])


def _with_ring(frame: Frame, ring: np.ndarray) -> Frame:
    pts = frame.points.copy()
    pts[:, 4] = ring
    return replace(frame, points=pts)


def test_laser_table_is_the_documented_hdl64e_geometry():
    t = HDL64E_ELEVATIONS_DEG
    assert t.shape == (64,)
    assert np.all(np.diff(t) < 0)  # ring 0 = top
    assert t[0] == pytest.approx(2.0) and t[31] == pytest.approx(2.0 - 31 / 3) and t[-1] == pytest.approx(-24.8)
    assert np.allclose(np.diff(t[:32]), -1 / 3)
    assert np.allclose(np.diff(t[32:]), -(24.8 - 8.83) / 31)


def test_azimuth_wrap_and_laser_table_recover_the_true_rings(demo):
    ring = _true(demo)
    assert np.mean(rings_from_azimuth_wrap(demo.xyz) == ring) >= 0.99
    assert np.mean(rings_from_laser_table(demo.xyz) == ring) >= 0.99
    assert azimuth_wrap_plausible(demo.xyz)


def test_elevation_bins_follow_robo3d_rows():
    psi = np.radians([3.0, 2.9, 0.0, -25.0, -30.0])
    xyz = np.stack([np.cos(psi), np.zeros(5), np.sin(psi)], axis=1) * 10
    rows = rings_from_elevation_bins(xyz)
    assert rows.tolist() == [0, 0, int(64 * (1 - 25 / 28)), 63, 63]


def test_frame_rings_uses_a_valid_ring_column(demo):
    rings, method = frame_rings(demo)
    assert method == "column"
    assert np.array_equal(rings, _true(demo))


def test_raw_order_without_ring_column_uses_azimuth_wrap(demo):
    rings, method = frame_rings(_without_ring(demo))
    assert method == "azimuth_wrap"
    assert np.mean(rings == _true(demo)) >= 0.99


def test_shuffled_copy_breaks_azimuth_wrap_and_falls_back_to_laser_table(demo):
    perm = np.random.default_rng(0).permutation(len(demo))
    shuffled = _without_ring(demo).take(perm)
    truth = _true(demo)[perm]
    assert np.mean(rings_from_azimuth_wrap(shuffled.xyz) == truth) < 0.5
    assert not azimuth_wrap_plausible(shuffled.xyz)
    rings, method = frame_rings(shuffled)
    assert method == "laser_table"
    assert np.mean(rings == truth) >= 0.99


@pytest.mark.parametrize("kind", ["random", "out_of_range", "fractional", "nan", "negative"])
def test_garbage_ring_column_falls_back(demo, kind):
    n = len(demo)
    bad = {
        "random": np.random.default_rng(1).integers(0, 64, n).astype(np.float32),
        "out_of_range": _true(demo) + 64.0,
        "fractional": _true(demo) + 0.5,
        "nan": np.where(np.arange(n) % 7 == 0, np.nan, _true(demo)),
        "negative": _true(demo) - 1.0,
    }[kind]
    frame = _with_ring(demo, bad)
    assert not ring_column_valid(frame)
    rings, method = frame_rings(frame)
    assert method in ("azimuth_wrap", "laser_table")
    assert np.mean(rings == _true(demo)) >= 0.99
    rings, method = frame_rings(frame, "column")  # asked for the column: still falls back
    assert method != "column"


def test_degenerate_frames_do_not_crash():
    empty = Frame("e", np.zeros((0, 4), np.float32))
    rings, method = frame_rings(empty)
    assert rings.shape == (0,) and method == "laser_table"
    tiny = Frame("t", np.array([[0, 0, 0, 0.1], [np.nan, 1, 1, 0.2], [5, 0, -1, 0.3]], np.float32))
    rings, _ = frame_rings(tiny)
    assert rings.shape == (3,) and rings.min() >= 0 and rings.max() < 64
    with pytest.raises(ValueError, match="unknown method"):
        frame_rings(tiny, "magic")
