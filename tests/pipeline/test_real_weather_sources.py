"""Readers of the real adverse-weather sources (STF, Boreas): round trip and loud failures."""

from __future__ import annotations

import numpy as np
import pytest

from bench_build.sources.base import SourceError
from bench_build.sources.boreas import BOREAS_FIELDS, read_boreas_bin, write_boreas_bin
from bench_build.sources.records import list_scans
from bench_build.sources.stf import STF_FIELDS, read_stf_bin, write_stf_bin


def _cloud(n: int, width: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    pts = rng.normal(0, 20, (n, width)).astype(np.float32)
    pts[:, 3] = rng.integers(0, 256, n)  # byte intensities
    pts[:, 4] = rng.integers(0, 64, n)  # ring
    return pts


def test_stf_round_trip(tmp_path):
    """What validate lists and reads (`list_scans`, `read_real`): every scan, sorted, its five columns as written."""
    from bench_build.validate.extract import FORMATS, read_real

    root = tmp_path / "stf" / "lidar_hdl64_strongest"
    clouds = {f"2018-02-06_14-25-51_{i:05d}": _cloud(100 + i, 5, i) for i in range(3)}
    for name, pts in clouds.items():
        write_stf_bin(root / f"{name}.bin", pts)
    files = list_scans(tmp_path / "stf")
    assert files == [root / f"{n}.bin" for n in sorted(clouds)]
    for path in files:
        np.testing.assert_array_equal(read_real("stf", path), clouds[path.stem])
    assert FORMATS["stf"] == {"width": 5, "scale": "byte", "fields": STF_FIELDS}


def test_boreas_round_trip_nested_sequences(tmp_path):
    from bench_build.validate.extract import FORMATS, read_real

    clouds = {}
    for seq in ("boreas-2021-01-26-10-59", "boreas-2021-02-09-12-55"):
        for t in (1611676809855290, 1611676809955290):
            pts = _cloud(50, 6, t % 97)
            pts[:, 5] = np.linspace(-0.05, 0.05, 50)
            clouds[f"{seq}/lidar/{t}.bin"] = pts
            write_boreas_bin(tmp_path / seq / "lidar" / f"{t}.bin", pts)
    files = list_scans(tmp_path)
    assert [f.relative_to(tmp_path).as_posix() for f in files] == sorted(clouds)
    for path in files:
        np.testing.assert_array_equal(read_real("boreas", path), clouds[path.relative_to(tmp_path).as_posix()])
    assert FORMATS["boreas"] == {"width": 6, "scale": "byte", "fields": BOREAS_FIELDS}


@pytest.mark.parametrize(("reader", "width"), [(read_stf_bin, 5), (read_boreas_bin, 6)])
def test_malformed_files_fail_naming_the_file(tmp_path, reader, width):
    bad_size = tmp_path / "short.bin"
    bad_size.write_bytes(b"\0" * (4 * width * 3 + 4))
    with pytest.raises(SourceError, match=r"short\.bin.*not a multiple of " + str(4 * width)):
        reader(bad_size)
    nan = tmp_path / "nan.bin"
    pts = np.zeros((4, width), np.float32)
    pts[2, 1] = np.nan
    pts.tofile(nan)
    with pytest.raises(SourceError, match=r"nan\.bin.*NaN/inf.*first at point 2"):
        reader(nan)
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    with pytest.raises(SourceError, match=r"empty\.bin.*empty"):
        reader(empty)
    with pytest.raises(SourceError, match=r"missing\.bin.*not found"):
        reader(tmp_path / "missing.bin")


def test_stf_file_read_as_boreas_is_rejected(tmp_path):
    path = tmp_path / "scan.bin"
    write_stf_bin(path, _cloud(7, 5))  # 140 bytes: not a multiple of 24
    with pytest.raises(SourceError, match=r"scan\.bin"):
        read_boreas_bin(path)


def test_missing_or_empty_directory_is_loud(tmp_path):
    with pytest.raises(SourceError, match="directory not found"):
        list_scans(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no scans here")
    with pytest.raises(SourceError, match=r"empty.*no \*\.bin scans"):
        list_scans(tmp_path / "empty")


def test_validation_loader_reads_both_formats_onto_one_scale(tmp_path):
    from bench_build.validate.extract import load_real_chunk
    from bench_build.validate.preprocess import Preprocess

    pts = _cloud(400, 6, 3)
    pts[:, :3] = np.abs(pts[:, :3]) * [1, 1, 0] + [5, 0, -1]  # in range and inside the common FOV
    write_boreas_bin(tmp_path / "boreas" / "seq" / "lidar" / "1.bin", pts)
    write_stf_bin(tmp_path / "stf" / "1.bin", pts[:, :5])
    prep = Preprocess(points=64)
    b = load_real_chunk("boreas", str(tmp_path / "boreas"), ["seq/lidar/1.bin"], "weather", prep, 0)
    s = load_real_chunk("stf", str(tmp_path / "stf"), ["1.bin"], "weather", prep, 0)
    assert b["clouds"].shape == (1, 64, 4) and 0 <= b["clouds"][..., 3].min() and b["clouds"][..., 3].max() <= 1
    assert b["intensity_q"][0, 2] == pts[:, 3].max()  # observed raw intensity recorded for the report
    assert np.isin(np.round(b["clouds"][0, :, 3] * 255), pts[:, 3]).all()  # byte intensities ÷ 255
    assert s["clouds"].shape == (1, 64, 4)
    (tmp_path / "stf" / "2.bin").write_bytes(b"\0" * 21)
    bad = load_real_chunk("stf", str(tmp_path / "stf"), ["1.bin", "2.bin"], "weather", prep, 0)
    assert "2.bin" in bad["error"] and "not a multiple of 20" in bad["error"]


@pytest.mark.parametrize("fmt", ["kitti", "wads"])
def test_an_empty_real_kitti_or_wads_scan_is_not_offered_run_s_flag(tmp_path, fmt):
    """validate reads real KITTI and WADS scans with KITTI's record reader, whose empty-scan error offers
    `run --allow-empty-frames`; validate has no such option, so it says what to do there instead."""
    from bench_build.validate.extract import read_real

    scan = tmp_path / "sequences" / "36" / "velodyne" / "000001.bin"
    scan.parent.mkdir(parents=True)
    scan.write_bytes(b"")
    with pytest.raises(SourceError) as e:
        read_real(fmt, scan)
    assert e.value.path == str(scan)
    assert "empty scan (0 bytes, no points); a real scan needs points: remove it from the folder" in str(e.value)
    assert "--allow-empty-frames" not in str(e.value)
