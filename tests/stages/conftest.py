"""Fixtures for stage tests: small synthetic scenes built in memory (no I/O, no open3d).

`make_scene` returns a KITTI-like frame: a ground ring around the sensor at z = −1.73 m, a wall, and
three cars whose surfaces are densely sampled, with matching LiDAR-frame boxes (and one DontCare row)
and a KITTI-like calibration. It is fast (≈50k points) so stage tests can run many trials.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bench_build.sources.demo.kitti import generate_frame
from bench_build.stages.frame import Boxes, Calib, Frame
from bench_build.stages.geometry import lidar_heading_to_rot_y, refresh_camera_fields
from bench_build.stages.kernels.spherical import wrap_angle

CAR_DIMS = (3.9, 1.6, 1.5)
BOX_FIELDS = ("center", "dims", "heading", "cls", "truncated", "occluded", "alpha", "bbox2d")


def kitti_like_calib() -> Calib:
    p2 = np.array([[721.5, 0.0, 609.6, 44.9], [0.0, 721.5, 172.9, 0.2], [0.0, 0.0, 1.0, 0.003]])
    tr = np.array([[0.0, -1.0, 0.0, -0.02], [0.0, 0.0, -1.0, -0.06], [1.0, 0.0, 0.0, -0.33]])
    return Calib(P=(p2, p2, p2, p2), R0_rect=np.eye(3), Tr_velo_to_cam=tr, Tr_imu_to_velo=np.eye(3, 4))


def _box_surface(rng, center, dims, heading, n):
    """n points on the sides and top of an oriented box (what a LiDAR would see of a car), 1 cm inside
    the box faces, like a real annotation that encloses its object with a little slack."""
    dims = np.asarray(dims) - 0.02
    u = rng.uniform(-0.5, 0.5, size=(n, 3)) * dims
    face = rng.integers(0, 5, size=n)  # ±x, ±y, top
    u[face == 0, 0] = dims[0] / 2
    u[face == 1, 0] = -dims[0] / 2
    u[face == 2, 1] = dims[1] / 2
    u[face == 3, 1] = -dims[1] / 2
    u[face == 4, 2] = dims[2] / 2
    c, s = np.cos(heading), np.sin(heading)
    xy = np.stack([u[:, 0] * c - u[:, 1] * s, u[:, 0] * s + u[:, 1] * c], axis=1)
    return np.concatenate([xy, u[:, 2:3]], axis=1) + center


def make_scene(seed: int = 0, *, n_ground: int = 40_000, n_per_car: int = 1500, with_ring: bool = False) -> Frame:
    rng = np.random.default_rng(seed)
    r = np.sqrt(rng.uniform(3.0**2, 40.0**2, n_ground))
    az = rng.uniform(-np.pi, np.pi, n_ground)
    ground = np.stack([r * np.cos(az), r * np.sin(az), np.full(n_ground, -1.73)], axis=1)
    wall = np.stack(
        [rng.uniform(-20, 30, 6000), np.full(6000, 12.0), rng.uniform(-1.73, 4.0, 6000)], axis=1
    )
    centers = np.array([[10.0, 3.0, -1.73 + 0.75], [18.0, -4.0, -1.73 + 0.75], [25.0, 6.0, -1.73 + 0.75]])
    headings = np.array([0.1, -0.4, 1.2])
    dims = np.tile(CAR_DIMS, (3, 1))
    cars = [_box_surface(rng, centers[i], dims[i], headings[i], n_per_car) for i in range(3)]
    xyz = np.concatenate([ground, wall, *cars])
    intensity = np.concatenate(
        [rng.uniform(0.1, 0.3, len(ground)), rng.uniform(0.2, 0.5, len(wall))]
        + [rng.uniform(0.0, 0.9, n_per_car) for _ in cars]
    )
    cols = [xyz, intensity[:, None]]
    fields = ("x", "y", "z", "intensity")
    if with_ring:
        el = np.degrees(np.arcsin(xyz[:, 2] / np.linalg.norm(xyz, axis=1)))
        ring = np.clip(np.round((2.0 - el) / 26.8 * 63), 0, 63)
        cols.append(ring[:, None])
        fields += ("ring",)
    points = np.concatenate(cols, axis=1).astype(np.float32)
    calib = kitti_like_calib()
    boxes = Boxes(
        center=np.concatenate([centers, [[-1000.0, -1000.0, -1000.0]]]),
        dims=np.concatenate([dims, [[-1.0, -1.0, -1.0]]]),
        heading=np.concatenate([headings, [-10.0]]),
        cls=np.array(["Car", "Car", "Car", "DontCare"], dtype=object),
        truncated=np.array([0.0, 0.0, 0.0, -1.0]),
        occluded=np.array([0, 1, 0, -1]),
        alpha=np.array([-1.6, -1.2, 0.3, -10.0]),
        bbox2d=np.array([[500, 170, 700, 250], [300, 170, 400, 220], [700, 160, 800, 210], [0, 0, 50, 50.0]]),
    )
    return Frame(frame_id=f"{seed:06d}", points=points, fields=fields, intensity_scale="unit",
                 boxes=boxes, calib=calib)


@pytest.fixture
def scene() -> Frame:
    return make_scene(0)


@pytest.fixture
def scene_with_ring() -> Frame:
    return make_scene(0, with_ring=True)


def rng_for(i: int = 0) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([1234, i]))


def indexed(frame: Frame) -> Frame:
    """The frame with a ``src`` label column (input row number), which `Frame.take` carries along and
    stages that add points copy from their source point."""
    return frame.with_points(frame.points, src=np.arange(len(frame)))


def removed_mask(frame: Frame, out: Frame) -> np.ndarray:
    """Boolean mask of the input's removed points (``out`` from an `indexed` frame); also checks that
    the survivors are unchanged and in their original order."""
    kept = out.labels["src"]
    assert np.all(np.diff(kept) > 0)
    assert np.array_equal(out.points, frame.points[kept])
    mask = np.ones(len(frame), dtype=bool)
    mask[kept] = False
    return mask


def expected_alpha(boxes, calib) -> np.ndarray:
    """KITTI alpha of LiDAR-frame boxes: rotation_y − atan2(x_cam, z_cam)."""
    rect = calib.lidar_to_rect(boxes.center)
    return wrap_angle(lidar_heading_to_rot_y(boxes.heading, calib) - np.arctan2(rect[:, 0], rect[:, 2]))


@pytest.fixture(scope="session")
def demo_scan() -> Frame:
    """Demo frame 0 at full resolution (131,431 points, 6 labelled objects), as the KITTI reader returns
    it (x, y, z, intensity): the scan the parity tests check the released generator's statistics on."""
    f = generate_frame(0)
    return replace(f, points=np.ascontiguousarray(f.points[:, :4]), fields=f.fields[:4])


def unit_coords(frame: Frame, j: int, xyz: np.ndarray | None = None) -> np.ndarray:
    """Coordinates in box ``j``'s box-normalised frame (Li et al.'s "Max2": centre, ÷ max(l, w, h)/2,
    rotated by −heading), written out here independently of `bench_build.stages.kernels.box_unit`."""
    b = frame.boxes
    xyz = frame.xyz[frame.box_points[j]] if xyz is None else xyz
    d = (np.asarray(xyz, dtype=np.float64) - b.center[j]) / (b.dims[j].max() / 2)
    c, s = np.cos(b.heading[j]), np.sin(b.heading[j])
    return np.stack([d[:, 0] * c + d[:, 1] * s, -d[:, 0] * s + d[:, 1] * c, d[:, 2]], axis=1)


def shrink_factor(before: np.ndarray, after: np.ndarray) -> float:
    """The common factor M ≥ 1 of the released `normalize` (after = (before + noise) / M), estimated by
    regressing before on after (the noise is independent of the coordinates)."""
    return float((before * after).sum() / (after * after).sum())


def assert_only_boxes_moved(scene: Frame, out: Frame) -> None:
    """What every box transform (translation, rotation, scale, shear, FFD) keeps: points outside the boxes
    and every column after x, y, z untouched, DontCare rows unchanged, and the valid boxes' camera fields
    (alpha, bbox2d) recomputed from their new 3D geometry."""
    b, nb = scene.boxes, out.boxes
    outside = scene.box_index < 0
    assert np.array_equal(out.points[outside], scene.points[outside])
    assert np.array_equal(out.points[:, 3:], scene.points[:, 3:])
    for name in BOX_FIELDS:
        assert np.array_equal(getattr(nb, name)[~b.valid], getattr(b, name)[~b.valid])
    assert np.allclose(nb.alpha[b.valid], expected_alpha(nb, scene.calib)[b.valid])
    assert np.allclose(refresh_camera_fields(nb, scene.calib, nb.valid).bbox2d, nb.bbox2d)
