"""The source contract, run over every registered reader (`bench_build.sources.registry.READERS`) on its own
fixture (`ReaderInfo.write_fixture`, the reader's on-disk layout): a stable frame list, valid `Frame`s, and for
each kind of malformed input that applies to the reader a `SourceError` whose message names the broken file.

A new reader gets all of this by its registry entry plus one line in `MALFORMED` (which files of its layout to
break, and how); the per-reader test files keep only what is specific to the reader."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from bench_build.manifests.card import SOURCE_LICENCES
from bench_build.sources.base import SourceError
from bench_build.sources.registry import READERS, ReaderInfo
from bench_build.stages.frame import Frame

#: how many frames each check reads (object fixtures list hundreds; the first few cover the layout)
READ = 3


def truncate(p: Path) -> None:
    """Cut 3 bytes: no whole number of records (or a broken container) any more."""
    p.write_bytes(p.read_bytes()[:-3])


def drop_record(p: Path) -> None:
    """One 4-byte record fewer: a well-formed file of the wrong size (fewer labels than points)."""
    p.write_bytes(p.read_bytes()[:-4])


def garbage(p: Path) -> None:
    """A header / table / text file that does not parse."""
    p.write_text("{ not valid: [\n")


def not_text(p: Path) -> None:
    """Bytes that are not UTF-8 where a text file belongs (a damaged download, a binary file in its place)."""
    p.write_bytes(b"\xff\xfe\x00\x9c" * 8)


def missing(p: Path) -> None:
    p.unlink()


Case = tuple[str, str, Callable[[Path], None]]


def cases(**globs: str) -> list[Case]:
    """Malformed-input cases by kind of damage (the keyword) → the glob of the fixture's files it applies to."""
    how = {"truncated": truncate, "wrong_size": drop_record, "bad_text": garbage, "not_text": not_text,
           "missing": missing}
    return [(f"{damage} {glob}", glob, how[damage.split("_", 1)[0] if damage.startswith("missing") else damage])
            for damage, glob in globs.items()]


#: kind → its malformed-input cases: every file a glob matches is damaged, and opening, listing or reading the
#: first frames must raise a SourceError naming one of them ("missing_x": several missing-file cases).
MALFORMED: dict[str, list[Case]] = {
    "kitti": cases(truncated="training/velodyne/*.bin", missing="training/calib/*.txt",
                   bad_text="training/label_2/*.txt", not_text="training/calib/*.txt")
    + cases(bad_text="training/calib/*.txt", not_text="training/label_2/*.txt"),
    "semantickitti": cases(truncated="sequences/*/velodyne/*.bin", wrong_size="sequences/*/labels/*.label",
                           missing="sequences/*/labels/*.label", bad_text="sequences/*/calib.txt",
                           missing_times="sequences/*/times.txt")
    + cases(bad_text="sequences/*/times.txt", not_text="sequences/*/times.txt"),
    "nuscenes": cases(truncated="samples/LIDAR_TOP/*.pcd.bin", wrong_size="lidarseg/*/*.bin",
                      bad_text="v1.0-mini/sample.json", missing="v1.0-mini/sample_data.json"),
    "waymo": cases(truncated="validation/lidar/*.parquet", missing="validation/lidar_calibration/*.parquet")
    + cases(truncated="validation/lidar_segmentation/*.parquet"),
    "wads": cases(truncated="sequences/*/velodyne/*.bin", wrong_size="sequences/*/labels/*.label",
                  missing="sequences/*/labels/*.label"),
    "modelnet40": cases(truncated="modelnet40_ply_hdf5_2048/*.h5", missing="modelnet40_ply_hdf5_2048/*.h5",
                        not_text="modelnet40_ply_hdf5_2048/shape_names.txt")
    + cases(not_text="modelnet40_ply_hdf5_2048/test_files.txt"),
    "scanobjectnn": cases(truncated="ScanObjectNN/**/*.h5", missing="ScanObjectNN/**/*.h5"),
    "shapenet": cases(bad_text="ShapeNetCore.v2/taxonomy.json", missing="ShapeNetCore.v2/*/*/models/*.obj")
    + cases(not_text="ShapeNetCore.v2/taxonomy.json"),
    "3dos": cases(missing="ScanObjectNN/**/*.h5", missing_mesh="ShapeNetCore.v2/*/*/models/*.obj"),
}

_FIXTURES: dict[Callable[[Path], Path], Path] = {}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("contract")


def fixture_root(info: ReaderInfo, workdir: Path) -> Path:
    """The reader's fixture, written once per writer (the object readers share one) and copied by callers
    that break it."""
    if info.kind == "nuscenes":
        pytest.importorskip("nuscenes", reason="the nuscenes extra (devkit) is not installed")
    if info.write_fixture not in _FIXTURES:
        _FIXTURES[info.write_fixture] = info.write_fixture(workdir / f"fixture-{len(_FIXTURES)}")
    return _FIXTURES[info.write_fixture]


def frames(info: ReaderInfo, root: Path) -> tuple[list[str], list[Frame]]:
    src = info.reader(root)
    ids = src.list_frames()
    return ids, [src.read(fid) for fid in ids[:READ]]


def test_every_reader_has_malformed_cases():
    assert set(MALFORMED) == set(READERS), "add the new reader's malformed-input cases to MALFORMED"


def test_every_licence_the_card_prints_is_a_registered_kind():
    assert set(SOURCE_LICENCES) <= set(READERS)


@pytest.mark.parametrize("kind", sorted(READERS))
def test_frame_list_is_stable_and_frames_are_valid(kind, workdir):
    info = READERS[kind]
    root = fixture_root(info, workdir)
    ids, read = frames(info, root)
    assert ids and len(set(ids)) == len(ids)
    assert info.reader(root).list_frames() == ids  # a fresh instance lists the same frames in the same order
    src = info.reader(root)
    assert src.list_frames() == src.list_frames() == ids
    assert src.kind == kind and isinstance(src.describe(), dict)
    json.dumps(src.describe())  # goes into the manifest
    for fid, frame in zip(ids, read, strict=False):
        assert isinstance(frame, Frame) and frame.frame_id == fid
        pts = frame.points
        assert pts.dtype == np.float32 and pts.ndim == 2 and pts.shape[1] == len(frame.fields) and len(pts) > 0
        assert frame.fields[:3] == ("x", "y", "z") and frame.fields == tuple(src.fields)
        assert np.isfinite(pts).all()
        for name, labels in frame.labels.items():
            assert labels.shape == (len(pts),), f"{kind}: labels {name!r} not aligned with the points"
        if frame.boxes is not None:
            n = len(frame.boxes.center)
            assert frame.boxes.center.shape == (n, 3) and frame.boxes.dims.shape == (n, 3)
    again = info.reader(root)
    for fid, frame in zip(ids, read, strict=False):
        np.testing.assert_array_equal(again.read(fid).points, frame.points)  # reading is deterministic


CASES = [(kind, case, pattern, breaker) for kind, cases in sorted(MALFORMED.items())
         for case, pattern, breaker in cases]


@pytest.mark.parametrize(("kind", "case", "pattern", "breaker"), CASES,
                         ids=[f"{k}-{c}" for k, c, _, _ in CASES])
def test_malformed_input_raises_a_source_error_naming_the_file(kind, case, pattern, breaker, workdir, tmp_path):
    info = READERS[kind]
    root = Path(shutil.copytree(fixture_root(info, workdir), tmp_path / "root"))
    broken = sorted(root.glob(pattern))
    assert broken, f"{kind}: the fixture has no {pattern}"
    for p in broken:
        breaker(p)
    with pytest.raises(SourceError) as e:
        frames(info, root)
    message = str(e.value)
    assert "\n" not in message, "errors are one line"
    assert any(p.name in message for p in broken), f"{kind} {case}: {message!r} names none of the broken files"
