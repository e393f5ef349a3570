"""One contract every scene reader keeps, run over each reader on its demo data in the real on-disk layout.

A reader lists frame ids in a stable order (the same twice, and the same from a fresh instance), and each
frame it reads is a valid `Frame`: N×C float32 points with x, y, z first, finite coordinates, and per-point
labels as long as the cloud. Malformed input fails with a `SourceError` whose message names the file."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from bench_build.sources.base import Source, SourceError
from bench_build.sources.kitti import KittiSource
from bench_build.sources.nuscenes import NuScenesSource
from bench_build.sources.semantickitti import SemanticKittiSource
from bench_build.sources.synthetic import write_demo_dataset
from bench_build.sources.waymo import WaymoSource

#: reader kind → how to open it at its demo root, on the split its demo data is written to
READERS: dict[str, Callable[[Path], Source]] = {
    "kitti": lambda root: KittiSource(root),
    "semantickitti": lambda root: SemanticKittiSource(root, "val"),
    "nuscenes": lambda root: NuScenesSource(root, "mini_val"),
    "waymo": lambda root: WaymoSource(root, "validation"),
}


@pytest.fixture(scope="module", params=sorted(READERS))
def reader_root(request, tmp_path_factory, demo_kitti_master) -> tuple[str, Path]:
    kind = request.param
    if kind == "kitti":
        return kind, demo_kitti_master
    return kind, write_demo_dataset(kind, tmp_path_factory.mktemp(f"contract-{kind}"), 2)


def test_frame_list_is_stable(reader_root):
    kind, root = reader_root
    first = READERS[kind](root).list_frames()
    assert first, f"{kind}: no frames listed"
    assert READERS[kind](root).list_frames() == first
    src = READERS[kind](root)
    assert src.list_frames() == src.list_frames() == first
    assert len(set(first)) == len(first)


def test_every_frame_is_a_valid_frame(reader_root):
    kind, root = reader_root
    src = READERS[kind](root)
    for frame_id in src.list_frames():
        frame = src.read(frame_id)
        pts = frame.points
        assert pts.dtype == np.float32 and pts.ndim == 2 and len(pts) > 0
        assert pts.shape[1] == len(frame.fields)
        assert frame.fields[:3] == ("x", "y", "z")
        assert np.isfinite(pts[:, :3]).all()
        for name, column in (frame.labels or {}).items():
            assert len(column) == len(pts), f"{kind} {frame_id}: label {name} not aligned with the points"


def test_truncated_scan_is_a_source_error_naming_the_file(demo_kitti):
    frame_id = KittiSource(demo_kitti).list_frames()[0]
    scan = demo_kitti / "training" / "velodyne" / f"{frame_id}.bin"
    scan.write_bytes(scan.read_bytes()[:20])  # not a whole number of 16-byte x, y, z, intensity rows
    with pytest.raises(SourceError, match=re.escape(str(scan))) as e:
        KittiSource(demo_kitti).read(frame_id)
    assert "16" in str(e.value)


def test_missing_scan_is_a_source_error_naming_the_file(demo_kitti):
    frame_id = KittiSource(demo_kitti).list_frames()[0]
    scan = demo_kitti / "training" / "velodyne" / f"{frame_id}.bin"
    scan.unlink()
    with pytest.raises(SourceError, match="not found") as e:
        KittiSource(demo_kitti).read(frame_id)
    assert str(scan) in str(e.value)


#: reader kind → (files of one frame to break, glob under the demo root) for each malformed-input kind
MALFORMED = {
    "semantickitti": {"truncated labels": "sequences/*/labels/*.label", "truncated scan": "sequences/*/velodyne/*.bin"},
    "nuscenes": {"truncated scan": "samples/LIDAR_TOP/*.pcd.bin", "truncated labels": "lidarseg/*/*_lidarseg.bin"},
}


@pytest.mark.parametrize(("kind", "what"), [(k, w) for k, ws in sorted(MALFORMED.items()) for w in ws])
def test_malformed_file_is_a_source_error_naming_it(kind, what, tmp_path):
    root = write_demo_dataset(kind, tmp_path / kind, 1)
    (path,) = root.glob(MALFORMED[kind][what])
    path.write_bytes(path.read_bytes()[:-7])  # cut mid-record: no reader format has 7-byte records
    src = READERS[kind](root)
    with pytest.raises(SourceError) as e:
        src.read(src.list_frames()[0])
    assert str(path) in str(e.value), f"{kind} {what}: message does not name {path}: {e.value}"
