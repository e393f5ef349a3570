"""The demo generator (the test suite's fixture data): HDL-64E-like geometry, labels, determinism, layout."""

from __future__ import annotations

import numpy as np
import pytest

from bench_build.sources.demo.kitti import (
    AZIMUTH_STEP_DEG,
    DEMO_SEED,
    SENSOR_HEIGHT,
    generate_frame,
    place_objects,
    write_demo_dataset,
)
from bench_build.sources.kitti import KittiSource, read_velodyne, write_frame

FAST = 0.36  # azimuth step for every frame but the one full-resolution frame


@pytest.fixture(scope="module")
def full():
    return generate_frame(0)


def _recover_rings(xyz: np.ndarray) -> np.ndarray:
    """Ring index from the raw file order: a new ring starts where azimuth wraps from ~2π to ~0."""
    u = (np.arctan2(xyz[:, 1], xyz[:, 0]) % (2 * np.pi)) / (2 * np.pi)
    start = np.r_[False, (u[:-1] > 0.8) & (u[1:] < 0.2)]
    return np.clip(np.cumsum(start), 0, 63)


# -- sensor geometry of a full-resolution frame ---------------------------------------------------


def test_full_frame_geometry(full):
    assert full.fields == ("x", "y", "z", "intensity", "ring")
    assert full.points.dtype == np.float32
    assert len(full) >= 100_000
    xyz = full.xyz.astype(np.float64)
    r = np.linalg.norm(xyz, axis=1)
    assert r.max() <= 120.0 + 0.05  # 120 m cut on the true range, plus ~1 cm range noise
    assert r.min() > 0.9
    el = np.degrees(np.arcsin(xyz[:, 2] / r))
    assert 1.9 <= el.max() <= 2.1
    assert -24.9 <= el.min() <= -24.7
    ring = full.column("ring")
    assert np.array_equal(ring, np.round(ring))
    assert np.array_equal(np.unique(ring), np.arange(64))
    # one elevation per laser: ring 0 is the top, elevations fall with the ring number
    mean_el = np.array([np.median(el[ring == k]) for k in range(64)])
    assert np.all(np.diff(mean_el) < 0)
    assert np.all(np.array([np.ptp(el[ring == k]) for k in range(64)]) < 0.05)


def test_full_frame_azimuth_resolution(full):
    xyz = full.xyz.astype(np.float64)
    az = np.degrees(np.arctan2(xyz[:, 1], xyz[:, 0])) % 360
    ring = full.column("ring")
    gaps = [np.diff(np.sort(az[ring == k])) for k in range(64)]
    medians = np.array([np.median(g) for g in gaps])
    assert np.median(medians) == pytest.approx(AZIMUTH_STEP_DEG, rel=0.02)
    # weak mid-range returns are lost often enough that some rings' median gap is two steps
    assert np.mean(np.abs(medians - AZIMUTH_STEP_DEG) < 0.005) > 0.5
    # every gap is a whole number of 0.09° steps (lost returns skip steps, nothing falls in between),
    # and the commonest gap is one step
    steps = np.concatenate(gaps) / AZIMUTH_STEP_DEG
    assert np.all(np.abs(steps - np.round(steps)) < 0.02)
    assert np.bincount(np.round(steps).astype(int)).argmax() == 1


def test_full_frame_ground_and_intensity(full):
    z = full.xyz[:, 2].astype(np.float64)
    assert np.percentile(z, 5) == pytest.approx(-SENSOR_HEIGHT, abs=0.02)
    assert np.percentile(z, 0.1) > -SENSOR_HEIGHT - 0.05  # nothing below the ground but noise
    assert np.mean(np.abs(z + SENSOR_HEIGHT) < 0.03) > 0.3  # the ground is a large share of the scan
    i = full.intensity
    assert i.min() >= 0.0 and i.max() <= 1.0
    assert np.unique(i).size > 1000
    assert full.intensity_scale == "unit"


# -- objects and labels ---------------------------------------------------------------------------


@pytest.mark.parametrize("index", range(12))
def test_three_to_eight_objects_are_placed(index):
    rng = np.random.default_rng(np.random.SeedSequence([DEMO_SEED, index]))
    objs = place_objects(rng)
    assert 3 <= len(objs) <= 8
    assert {o.cls for o in objs} <= {"Car", "Pedestrian", "Cyclist"}
    for o in objs:  # standing on the ground
        assert o.center[2] - o.dims[2] / 2 == pytest.approx(-SENSOR_HEIGHT)


def test_labelled_boxes_contain_points_and_face_the_camera(full):
    boxes = full.boxes
    valid = boxes.valid
    assert 1 <= valid.sum() <= 8
    assert set(boxes.cls[valid]) <= {"Car", "Pedestrian", "Cyclist"}
    owner = full.box_index
    for j in np.flatnonzero(valid):
        assert (owner == j).sum() >= 5, f"box {j} ({boxes.cls[j]}) holds no points"
    corners = full.calib.lidar_to_rect(boxes.corners()[valid].reshape(-1, 3)).reshape(-1, 8, 3)
    assert np.all(corners[..., 2] > 0)  # every corner in front of the camera
    bb = boxes.bbox2d[valid]
    assert np.all(bb[:, 2] > bb[:, 0]) and np.all(bb[:, 3] > bb[:, 1])
    assert np.all((boxes.truncated[valid] >= 0) & (boxes.truncated[valid] <= 1))


@pytest.mark.parametrize("index", range(1, 5))
def test_labels_of_fast_frames(index):
    frame = generate_frame(index, azimuth_step_deg=FAST)
    b = frame.boxes
    assert set(b.cls) <= {"Car", "Pedestrian", "Cyclist"}
    rect = frame.calib.lidar_to_rect(b.center)
    assert np.all(rect[:, 2] > 0)
    assert np.all(b.center[:, 0] > 0)  # labelled objects are ahead of the car (+x)


# -- determinism ----------------------------------------------------------------------------------


def test_deterministic():
    a = generate_frame(3, azimuth_step_deg=FAST)
    b = generate_frame(3, azimuth_step_deg=FAST)
    assert a.points.tobytes() == b.points.tobytes()
    assert np.array_equal(a.boxes.center, b.boxes.center)
    assert a.frame_id == "000003"


def test_different_index_or_seed_gives_different_scan():
    a = generate_frame(3, azimuth_step_deg=FAST)
    b = generate_frame(4, azimuth_step_deg=FAST)
    c = generate_frame(3, DEMO_SEED + 1, azimuth_step_deg=FAST)
    assert len(a) != len(b) or not np.array_equal(a.points, b.points)
    assert len(a) != len(c) or not np.array_equal(a.points, c.points)
    assert not np.array_equal(a.boxes.center, b.boxes.center) or len(a.boxes) != len(b.boxes)


# -- file order allows ring recovery --------------------------------------------------------------


def test_written_order_allows_azimuth_wrap_ring_recovery(tmp_path, full):
    write_frame(tmp_path, full)
    pts = read_velodyne(tmp_path / "training" / "velodyne" / f"{full.frame_id}.bin")
    assert pts.shape == (len(full), 4)
    recovered = _recover_rings(pts[:, :3].astype(np.float64))
    assert np.mean(recovered == full.column("ring")) > 0.99


def test_ring_recovery_breaks_when_shuffled(full):
    rng = np.random.default_rng(0)
    order = rng.permutation(len(full))
    recovered = _recover_rings(full.xyz[order].astype(np.float64))
    assert np.mean(recovered == full.column("ring")[order]) < 0.5  # the property depends on the file order


# -- dataset on disk ------------------------------------------------------------------------------


def test_write_demo_dataset(tmp_path):
    root = write_demo_dataset(tmp_path / "demo", 3, azimuth_step_deg=FAST)
    data = root / "training"
    ids = ["000000", "000001", "000002"]
    for fid in ids:
        assert (data / "velodyne" / f"{fid}.bin").is_file()
        assert (data / "label_2" / f"{fid}.txt").is_file()
        assert (data / "calib" / f"{fid}.txt").is_file()
    train = (root / "ImageSets" / "train.txt").read_text().split()
    val = (root / "ImageSets" / "val.txt").read_text().split()
    assert train and val and sorted(train + val) == ids and not set(train) & set(val)

    src = KittiSource(root)
    assert src.list_frames() == ids
    assert KittiSource(root, "train").list_frames() == sorted(train)
    assert KittiSource(root, "val").list_frames() == sorted(val)
    for i, fid in enumerate(ids):
        frame = src.read(fid)
        ref = generate_frame(i, azimuth_step_deg=FAST)
        assert np.array_equal(frame.points, ref.points[:, :4])
        assert list(frame.boxes.cls) == list(ref.boxes.cls)
        assert np.allclose(frame.boxes.center, ref.boxes.center, atol=0.011)


def test_demo_data_is_made_anew_when_its_writer_version_rises(tmp_path, monkeypatch):
    """The demo cache is shared by every checkout and kept: a writer that writes other data raises its version,
    and the next build gets the new data instead of the cached old one."""
    from bench_build.sources.demo.cache import demo_key, ensure_demo_dataset

    monkeypatch.setenv("BENCH_BUILD_CACHE", str(tmp_path))
    calls = []

    def write(root, frames, seed):
        calls.append(root)
        (root / "scan.txt").write_text(f"v{len(calls)}")

    first = ensure_demo_dataset("toy", write, 2)
    assert ensure_demo_dataset("toy", write, 2) == first and len(calls) == 1  # kept
    assert first.name == demo_key(1729, 2) == "seed1729-n2"  # version 1: the name caches had before versions
    second = ensure_demo_dataset("toy", write, 2, version=2)
    assert second.name == "seed1729-n2-v2" and (second / "scan.txt").read_text() == "v2" and len(calls) == 2
