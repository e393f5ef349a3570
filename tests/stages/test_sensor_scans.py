"""Ring stages on a 32-beam HDL-32E scan (nuScenes conventions: ring column, ring 0 lowest, 0–255
intensity) and ring recovery from the frame's own sensor; also the real nuScenes sweep when present."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bench_build.manifests.recipe import load_recipe
from bench_build.sources.demo.synthetic import cast_scan, spinning_azimuths
from bench_build.stages.density.beam_missing import BeamMissingParams, beam_missing, draw_beams
from bench_build.stages.density.cross_sensor import cross_sensor, deleted_rings
from bench_build.stages.frame import Frame
from bench_build.stages.ring import frame_rings
from bench_build.stages.sensor import HDL32E
from tests.stages.conftest import indexed, removed_mask, rng_for

REAL = Path(__file__).resolve().parents[3] / "shared" / "real" / "nuscenes-lidar-top"
NUSC = load_recipe("robo3d-nuscenes-c")


def _hdl32_frame() -> Frame:
    """A ray-cast 32-beam scan in nuScenes firing order (every ring at each azimuth step)."""
    scan = cast_scan(0, HDL32E.elevations, spinning_azimuths(0.5))
    hit = scan.hit.T
    xyz = np.transpose(scan.xyz(), (1, 0, 2))[hit]
    ring = np.broadcast_to(np.arange(32)[None, :], hit.shape)[hit]
    pts = np.column_stack([xyz, np.round(scan.intensity.T[hit] * 255), ring]).astype(np.float32)
    return Frame("hdl32", pts, fields=("x", "y", "z", "intensity", "ring"), intensity_scale="byte", sensor=HDL32E)


def _real_frame() -> Frame:
    pts = np.fromfile(next(REAL.glob("*.pcd.bin")), dtype="<f4").reshape(-1, 5)
    return Frame("real", pts, fields=("x", "y", "z", "intensity", "ring"), intensity_scale="byte", sensor=HDL32E)


FRAMES = [pytest.param(_hdl32_frame, id="raycast-hdl32"),
          pytest.param(_real_frame, id="real-nuscenes",
                       marks=pytest.mark.skipif(not REAL.is_dir(), reason="../shared/real is absent"))]


@pytest.fixture(scope="module", params=FRAMES)
def frame32(request) -> Frame:
    return indexed(request.param())


def test_ring_column_of_32_rings_is_used(frame32):
    rings, method = frame_rings(frame32)
    assert method == "column"
    assert rings.max() == 31 and np.array_equal(rings, frame32.column("ring").astype(int))


def test_sensor_laser_table_recovers_32_beam_rings_without_the_column():
    f = _hdl32_frame()
    no_ring = Frame(f.frame_id, np.ascontiguousarray(f.points[:, :4]), intensity_scale="byte", sensor=HDL32E)
    rings, method = frame_rings(no_ring, "laser_table")
    assert method == "laser_table"
    assert np.array_equal(rings, f.column("ring").astype(int))
    # without a sensor the HDL-64E table is assumed, which is wrong for this scan
    rings64, _ = frame_rings(replace(no_ring, sensor=None), "laser_table")
    assert not np.array_equal(rings64, rings)


@pytest.mark.parametrize("severity", [1, 2, 3])
def test_beam_missing_removes_exactly_the_drawn_rings(frame32, severity):
    params = NUSC.corruption("beam_missing").params_for(severity)
    drawn = draw_beams(params, rng_for(severity))
    assert drawn.min() >= 2 and drawn.max() <= 28 and len(drawn) == 8 * severity
    out = beam_missing(frame32, params, rng_for(severity))
    ring = frame32.column("ring").astype(int)
    assert np.array_equal(removed_mask(frame32, out), np.isin(ring, drawn))
    assert out.sensor == HDL32E and out.intensity_scale == "byte"


def test_beam_missing_distinct_rings_match_drawing_with_replacement():
    """Mean distinct rings of K draws with replacement from 27 candidates is 27·(1 − (26/27)^K)."""
    for k in (8, 16, 24):
        p = BeamMissingParams(beams=k, ring_low=2, ring_high=28)
        distinct = [len(np.unique(draw_beams(p, rng_for(i)))) for i in range(3000)]
        assert np.mean(distinct) == pytest.approx(27 * (1 - (26 / 27) ** k), abs=0.1)


@pytest.mark.parametrize("severity", [1, 2, 3])
def test_cross_sensor_drops_the_right_rings_then_every_second_point(frame32, severity):
    params = NUSC.corruption("cross_sensor").params_for(severity)
    drop = deleted_rings(params)
    assert len(drop) == 8 * severity and drop.max() <= 31
    out = cross_sensor(frame32, params, rng_for(0))
    ring = frame32.column("ring").astype(int)
    expect = np.flatnonzero(~np.isin(ring, drop))[::2]
    assert np.array_equal(out.labels["src"], expect)
    assert not np.isin(out.column("ring"), drop).any()
    assert len(out) == -(-int((~np.isin(ring, drop)).sum()) // 2)
