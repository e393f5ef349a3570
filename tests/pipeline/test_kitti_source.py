"""KITTI reader/writer: round trips, the camera → LiDAR label conversion, and loud failures on bad input."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from bench_build.sources.base import SourceError
from bench_build.sources.demo.kitti import generate_frame
from bench_build.sources.kitti import KittiSource, format_labels, read_calib, read_labels, read_velodyne, write_frame
from bench_build.stages.frame import DONT_CARE, Boxes, Frame
from bench_build.stages.kernels.spherical import wrap_angle

# A real KITTI calibration (training/calib/000000.txt style; P0/P1 abbreviated to P2 without offset).
KITTI_CALIB_TEXT = """\
P0: 7.215377e+02 0.000000e+00 6.095593e+02 0.000000e+00 0.000000e+00 7.215377e+02 1.728540e+02 0.000000e+00 0.000000e+00 0.000000e+00 1.000000e+00 0.000000e+00
P1: 7.215377e+02 0.000000e+00 6.095593e+02 -3.875744e+02 0.000000e+00 7.215377e+02 1.728540e+02 0.000000e+00 0.000000e+00 0.000000e+00 1.000000e+00 0.000000e+00
P2: 7.215377e+02 0.000000e+00 6.095593e+02 4.485728e+01 0.000000e+00 7.215377e+02 1.728540e+02 2.163791e-01 0.000000e+00 0.000000e+00 1.000000e+00 2.745884e-03
P3: 7.215377e+02 0.000000e+00 6.095593e+02 -3.395242e+02 0.000000e+00 7.215377e+02 1.728540e+02 2.199936e+00 0.000000e+00 0.000000e+00 1.000000e+00 2.729905e-03
R0_rect: 9.999239e-01 9.837760e-03 -7.445048e-03 -9.869795e-03 9.999421e-01 -4.278459e-03 7.402527e-03 4.351614e-03 9.999631e-01
Tr_velo_to_cam: 7.533745e-03 -9.999714e-01 -6.166020e-04 -4.069766e-03 1.480249e-02 7.280733e-04 -9.998902e-01 -7.631618e-02 9.998621e-01 7.523790e-03 1.480755e-02 -2.717806e-01
Tr_imu_to_velo: 9.999976e-01 7.553071e-04 -2.035826e-03 -8.086759e-01 -7.854027e-04 9.998898e-01 -1.482298e-02 3.195559e-01 2.024406e-03 1.482454e-02 9.998881e-01 -7.997231e-01
"""  # noqa: E501
KITTI_LABEL_LINE = "Car 0.00 0 1.85 387.63 181.54 423.81 203.12 1.67 1.87 3.69 -16.53 2.39 58.49 1.57"


def _matrix(text: str, key: str, shape: tuple[int, int]) -> np.ndarray:
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return np.array([float(v) for v in line.split(":", 1)[1].split()]).reshape(shape)
    raise AssertionError(key)


def _small_frame(i: int = 0) -> Frame:
    return generate_frame(i, azimuth_step_deg=0.72)


def _with_dont_care(frame: Frame) -> Frame:
    b = frame.boxes
    return frame.with_boxes(Boxes(
        center=np.concatenate([b.center, [[-1000.0, -1000.0, -1000.0]]]),
        dims=np.concatenate([b.dims, [[-1.0, -1.0, -1.0]]]),
        heading=np.concatenate([b.heading, [-10.0]]),
        cls=np.concatenate([b.cls, np.array([DONT_CARE], dtype=object)]),
        truncated=np.concatenate([b.truncated, [-1.0]]),
        occluded=np.concatenate([b.occluded, [-1]]),
        alpha=np.concatenate([b.alpha, [-10.0]]),
        bbox2d=np.concatenate([b.bbox2d, [[712.4, 143.0, 810.73, 307.92]]]),
    ))


def _write_scan(path, points) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.asarray(points, dtype="<f4").tofile(path)


# -- round trips ----------------------------------------------------------------------------------


def test_write_read_round_trip(tmp_path):
    frame = _with_dont_care(_small_frame(0))
    assert frame.boxes.valid.sum() >= 1
    write_frame(tmp_path, frame)
    src = KittiSource(tmp_path)
    assert src.list_frames() == [frame.frame_id]
    back = src.read(frame.frame_id)

    assert back.fields == ("x", "y", "z", "intensity")
    assert back.points.dtype == np.float32
    assert np.array_equal(back.points, frame.points[:, :4])

    b0, b1 = frame.boxes, back.boxes
    assert list(b1.cls) == list(b0.cls)
    v = b0.valid
    assert np.allclose(b1.center[v], b0.center[v], atol=0.011)  # 2-decimal text: ≤ 0.005 + conversion
    assert np.allclose(b1.dims[v], b0.dims[v], atol=0.0051)
    assert np.allclose(wrap_angle(b1.heading[v] - b0.heading[v]), 0, atol=0.011)
    assert np.allclose(b1.alpha[v], b0.alpha[v], atol=0.0051)
    assert np.allclose(b1.truncated, b0.truncated, atol=0.0051)
    assert np.array_equal(b1.occluded, b0.occluded)
    assert np.allclose(b1.bbox2d, b0.bbox2d, atol=0.0051)

    # DontCare row: sentinels survive, 2D box preserved
    dc = np.flatnonzero(~v)
    assert len(dc) == 1
    assert b1.truncated[dc[0]] == -1 and b1.occluded[dc[0]] == -1 and b1.alpha[dc[0]] == -10
    assert np.allclose(b1.bbox2d[dc[0]], [712.4, 143.0, 810.73, 307.92])
    assert b1.heading[dc[0]] == -10
    assert np.all(b1.center[dc[0]] == -1000)

    c0, c1 = frame.calib, back.calib
    for i in range(4):
        assert np.array_equal(c1.P[i], c0.P[i])
    assert np.array_equal(c1.R0_rect, c0.R0_rect)
    assert np.array_equal(c1.Tr_velo_to_cam, c0.Tr_velo_to_cam)
    assert np.array_equal(c1.Tr_imu_to_velo, c0.Tr_imu_to_velo)


def test_dont_care_row_is_written_with_sentinels(tmp_path):
    frame = _with_dont_care(_small_frame(0))
    text = format_labels(frame.boxes, frame.calib)
    last = text.splitlines()[-1]
    assert last == "DontCare -1 -1 -10 712.40 143.00 810.73 307.92 -1 -1 -1 -1000 -1000 -1000 -10"
    assert all(len(line.split()) == 15 for line in text.splitlines())


def test_label_text_is_a_fixed_point(tmp_path):
    """write → read → write gives the same text, also after many cycles (no drift)."""
    frame = _with_dont_care(_small_frame(1))
    calib = frame.calib
    path = tmp_path / "label.txt"
    first = format_labels(frame.boxes, calib)
    text = first
    for _ in range(10):
        path.write_text(text)
        text = format_labels(read_labels(path, calib), calib)
        assert text == first


def test_empty_label_file_gives_no_boxes(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("\n")
    assert len(read_labels(path, None)) == 0


# -- a real KITTI label line ----------------------------------------------------------------------


def test_real_kitti_label_line_converts_to_lidar_frame(tmp_path):
    calib_path, label_path = tmp_path / "calib.txt", tmp_path / "label.txt"
    calib_path.write_text(KITTI_CALIB_TEXT)
    label_path.write_text(KITTI_LABEL_LINE + "\n")
    boxes = read_labels(label_path, read_calib(calib_path))
    assert len(boxes) == 1 and boxes.cls[0] == "Car"

    # independent expectation, OpenPCDet's gt_boxes_lidar (and the released KITTI-C generator):
    # X_velo = inv(R0 · Tr) · loc (the bottom centre), then + h/2 on LiDAR z
    r0 = np.eye(4)
    r0[:3, :3] = _matrix(KITTI_CALIB_TEXT, "R0_rect", (3, 3))
    assert not np.allclose(r0, np.eye(4), atol=1e-3)  # a real, non-identity rectification
    tr = np.eye(4)
    tr[:3, :] = _matrix(KITTI_CALIB_TEXT, "Tr_velo_to_cam", (3, 4))
    inv = np.linalg.inv(r0 @ tr)
    h, w, length = 1.67, 1.87, 3.69
    loc = np.array([-16.53, 2.39, 58.49, 1.0])
    expected = (inv @ loc)[:3] + np.array([0.0, 0.0, h / 2])
    assert np.allclose(boxes.center[0], expected, atol=1e-9)
    # the other convention (midpoint of the transformed bottom and top centres) is measurably elsewhere
    midpoint = (inv @ (loc - np.array([0.0, h / 2, 0.0, 0.0])))[:3]
    assert np.linalg.norm(boxes.center[0] - midpoint) > 0.005
    assert boxes.center[0] == pytest.approx([58.8, 16.5, -0.9], abs=0.15)
    assert np.allclose(boxes.dims[0], [length, w, h])
    # heading: the camera-frame direction (cos ry, 0, −sin ry) of rotation_y = 1.57, taken to LiDAR
    d = inv[:3, :3] @ np.array([np.cos(1.57), 0.0, -np.sin(1.57)])
    assert abs(wrap_angle(boxes.heading[0] - np.arctan2(d[1], d[0]))) < 1e-6
    assert abs(abs(boxes.heading[0]) - np.pi) < 0.05  # facing −x: towards the sensor
    assert boxes.truncated[0] == 0 and boxes.occluded[0] == 0 and boxes.alpha[0] == 1.85
    assert np.allclose(boxes.bbox2d[0], [387.63, 181.54, 423.81, 203.12])
    # and back to the identical line
    assert format_labels(boxes, read_calib(calib_path)) == KITTI_LABEL_LINE + "\n"


def test_16_field_detection_line_is_accepted(tmp_path):
    calib_path, label_path = tmp_path / "calib.txt", tmp_path / "label.txt"
    calib_path.write_text(KITTI_CALIB_TEXT)
    label_path.write_text(KITTI_LABEL_LINE + " 0.93\n")
    assert len(read_labels(label_path, read_calib(calib_path))) == 1


# -- malformed input fails loudly, naming the file ------------------------------------------------


def _dataset(tmp_path, n: int = 2):
    for i in range(n):
        write_frame(tmp_path, _small_frame(i))
    return tmp_path / "training"


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_points(tmp_path, bad):
    pts = np.ones((10, 4), dtype=np.float32)
    pts[7, 1] = bad
    path = tmp_path / "training" / "velodyne" / "000000.bin"
    _write_scan(path, pts)
    with pytest.raises(SourceError) as e:
        read_velodyne(path)
    assert str(path) in str(e.value) and "7" in str(e.value)


def test_a_scan_saved_as_float64_fails_its_frame_naming_the_file(tmp_path):
    """A scan written from a float64 array (``points.tofile`` without ``astype(np.float32)``) has a size that is a
    whole number of float32 records, so it read as twice as many garbage points (coordinates up to 1e19) and was
    built into every corruption. The reader refuses it, naming the file and saying float64, and refuses any scan
    with values no LiDAR returns."""
    data = _dataset(tmp_path, 2)
    src = KittiSource(tmp_path)
    scan = data / "velodyne" / "000001.bin"
    pts = np.fromfile(scan, dtype="<f4").reshape(-1, 4)
    pts.astype(np.float64).tofile(scan)
    assert src.read("000000").points.shape[1] == 4
    with pytest.raises(SourceError) as e:
        src.read("000001")
    msg = str(e.value)
    assert msg.startswith(f"{scan}: not a LiDAR scan of kitti float32 records: ") and "\n" not in msg, msg
    assert "its bytes read as plausible float64 records: kitti scans are 4 float32 per point" in msg, msg
    far = pts.copy()
    far[5, 0] = 2e4
    _write_scan(scan, far)
    with pytest.raises(SourceError, match=r"not a LiDAR scan of kitti float32 records: 1 point\(s\) beyond 10000 m "
                                          r"\(first at point 5: 2e\+04"):
        src.read("000001")
    with pytest.raises(SourceError) as e:
        src.read("000001")
    assert "float64 records" not in str(e.value)


def test_label_line_with_wrong_field_count(tmp_path):
    data = _dataset(tmp_path, 1)
    label = data / "label_2" / "000000.txt"
    lines = label.read_text().splitlines()
    lines.insert(1, " ".join(lines[0].split()[:14]))  # line 2 has 14 fields
    label.write_text("\n".join(lines) + "\n")
    with pytest.raises(SourceError) as e:
        KittiSource(tmp_path).read("000000")
    msg = str(e.value)
    assert str(label) in msg and "line 2" in msg and "14" in msg


def test_non_numeric_label_field(tmp_path):
    data = _dataset(tmp_path, 1)
    label = data / "label_2" / "000000.txt"
    parts = label.read_text().splitlines()[0].split()
    parts[8] = "tall"
    label.write_text(" ".join(parts) + "\n")
    with pytest.raises(SourceError) as e:
        KittiSource(tmp_path).read("000000")
    assert str(label) in str(e.value)


def test_unlabelled_frame_without_calib_reads(tmp_path):
    data = _dataset(tmp_path, 1)
    (data / "calib" / "000000.txt").unlink()
    (data / "label_2" / "000000.txt").unlink()
    frame = KittiSource(tmp_path).read("000000")
    assert frame.boxes is None and frame.calib is None and len(frame) > 0


def test_calib_entry_with_wrong_number_of_values(tmp_path):
    data = _dataset(tmp_path, 1)
    calib = data / "calib" / "000000.txt"
    lines = calib.read_text().splitlines()
    k = next(i for i, line in enumerate(lines) if line.startswith("R0_rect:"))
    lines[k] = " ".join(lines[k].split()[:-1])  # 8 values instead of 9
    calib.write_text("\n".join(lines) + "\n")
    with pytest.raises(SourceError) as e:
        KittiSource(tmp_path).read("000000")
    msg = str(e.value)
    assert str(calib) in msg and "R0_rect" in msg and f"line {k + 1}" in msg and "8" in msg


def test_calib_missing_required_entry(tmp_path):
    path = tmp_path / "calib.txt"
    path.write_text("\n".join(ln for ln in KITTI_CALIB_TEXT.splitlines() if not ln.startswith("Tr_velo_to_cam")))
    with pytest.raises(SourceError, match="Tr_velo_to_cam") as e:
        read_calib(path)
    assert str(path) in str(e.value)


def test_calib_with_nan(tmp_path):
    path = tmp_path / "calib.txt"
    path.write_text(KITTI_CALIB_TEXT.replace("9.999239e-01", "nan", 1))
    with pytest.raises(SourceError, match="R0_rect") as e:
        read_calib(path)
    assert str(path) in str(e.value)


def test_missing_split_list(tmp_path):
    _dataset(tmp_path, 1)
    src = KittiSource(tmp_path, "train")
    with pytest.raises(SourceError) as e:
        src.list_frames()
    assert str(tmp_path / "ImageSets" / "train.txt") in str(e.value)


def test_missing_root_and_velodyne(tmp_path):
    with pytest.raises(SourceError) as e:
        KittiSource(tmp_path / "nope")
    assert str(tmp_path / "nope") in str(e.value)
    (tmp_path / "training").mkdir()
    with pytest.raises(SourceError, match="velodyne"):
        KittiSource(tmp_path)


# -- frame lists ----------------------------------------------------------------------------------


def test_split_uses_imagesets_and_is_sorted(tmp_path):
    for i in (3, 0, 2, 1):
        _write_scan(tmp_path / "training" / "velodyne" / f"{i:06d}.bin", np.ones((4, 4)))
    sets = tmp_path / "ImageSets"
    sets.mkdir()
    (sets / "train.txt").write_text("000003\n000001\n\n000003\n")
    (sets / "val.txt").write_text("000002\n000000\n")
    train = KittiSource(tmp_path, "train")
    assert train.list_frames() == ["000001", "000003"]
    assert train.list_frames() == train.list_frames()
    assert KittiSource(tmp_path, "val").list_frames() == ["000000", "000002"]
    assert KittiSource(tmp_path).list_frames() == ["000000", "000001", "000002", "000003"]
    # the training folder itself may be given as the root
    inner = KittiSource(tmp_path / "training")
    assert inner.list_frames() == ["000000", "000001", "000002", "000003"]
    assert inner.read("000002").points.shape == (4, 4)
    d = train.describe()
    assert d["kind"] == "kitti" and d["split"] == "train"


def test_a_scan_path_that_is_a_directory_is_bad_input_naming_it(small_recipe, demo_kitti, tmp_path):
    """velodyne/<id>.bin as a folder (a botched unpack) is bad input: a SourceError naming it, so the build fails
    that shard saying "fix the input", not an IsADirectoryError taken for a disk or memory problem."""
    scan = demo_kitti / "training" / "velodyne" / "000001.bin"
    scan.unlink()
    scan.mkdir()
    with pytest.raises(SourceError) as e:
        KittiSource(demo_kitti).read("000001")
    assert e.value.path == str(scan) and str(e.value) == f"{scan}: is a directory, not a scan file"
    run = subprocess.run([sys.executable, "-m", "bench_build.cli", "run", str(small_recipe), "--source",
                          str(demo_kitti), "--out", str(tmp_path / "o"), "--workers", "1", "--max-frames", "2",
                          "--frames-per-shard", "1", "--no-progress"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stderr
    assert f"{scan}: is a directory, not a scan file" in run.stderr and "1 built, 1 failed" in run.stderr
    assert "fix the input" in run.stderr and "free disk space" not in run.stderr


@pytest.mark.parametrize(("sub", "what"), [("label_2", "label"), ("calib", "calibration")])
def test_a_label_or_calib_path_that_is_a_directory_is_bad_input_naming_it(demo_kitti, sub, what):
    """Labels and calibration are optional per frame, so their reader skipped anything that is not a file: a
    label_2/<id>.txt folder (a botched unpack) gave a frame with no boxes and no word. It is damage, named."""
    path = demo_kitti / "training" / sub / "000001.txt"
    path.unlink()
    path.mkdir()
    with pytest.raises(SourceError) as e:
        KittiSource(demo_kitti).read("000001")
    assert e.value.path == str(path) and str(e.value) == f"{path}: is a directory, not a {what} file"
    assert len(KittiSource(demo_kitti).read("000000").boxes.center) > 0  # the other frames as ever
