"""SemanticKITTI reader on generated sequences in the real layout (velodyne/labels/calib/times)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from bench_build.sources.base import SourceError
from bench_build.sources.demo.semantickitti import write_semantickitti
from bench_build.sources.semantickitti import SemanticKittiSource, parse_split
from bench_build.stages.ring import frame_rings
from bench_build.stages.sensor import HDL64E


@pytest.fixture(scope="module")
def sk_root(tmp_path_factory) -> Path:
    return write_semantickitti(tmp_path_factory.mktemp("sk"), 2, azimuth_step_deg=0.72)


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_reads_scans_and_raw_semantic_ids(sk_root):
    src = SemanticKittiSource(sk_root)
    assert src.sequences == ("08",)
    ids = src.list_frames()
    assert ids == ["08_000000", "08_000001"]
    seq = sk_root / "sequences" / "08"
    for fid in ids:
        f = src.read(fid)
        raw = np.fromfile(seq / "velodyne" / f"{fid[3:]}.bin", dtype="<f4").reshape(-1, 4)
        lab = np.fromfile(seq / "labels" / f"{fid[3:]}.label", dtype="<u4")
        np.testing.assert_array_equal(f.points, raw)
        np.testing.assert_array_equal(f.labels["semantic"], lab & 0xFFFF)
        np.testing.assert_array_equal(f.labels["instance"], lab >> 16)
        assert (lab >> 16).max() > 0 and f.attrs == {"sequence": "08"}
        assert f.intensity_scale == "unit" and f.sensor == HDL64E
        assert 0.0 <= f.intensity.min() and f.intensity.max() <= 1.0
        # calibration: pykitti's Tr, written as the demo's velodyne → rectified camera transform
        from bench_build.sources.demo.kitti import demo_calib

        np.testing.assert_allclose(f.calib.Tr_velo_to_cam, demo_calib().velo_to_rect[:3], atol=1e-9)


def test_raw_order_gives_azimuth_wrap_rings_on_the_hdl64_table(sk_root):
    f = SemanticKittiSource(sk_root).read("08_000000")
    rings, method = frame_rings(f)
    assert method == "azimuth_wrap"
    elev = np.degrees(np.arcsin(f.xyz[:, 2] / np.linalg.norm(f.xyz, axis=1)))
    assert np.abs(elev - HDL64E.elevations[rings]).max() < 0.05


def test_splits():
    assert parse_split("val") == ("08",)
    assert parse_split("train") == ("00", "01", "02", "03", "04", "05", "06", "07", "09", "10")
    assert parse_split("8,9") == ("08", "09")
    with pytest.raises(ValueError):
        parse_split("validation")


def test_missing_calibration_row_names_calib_txt(sk_root, tmp_path):
    root = _copy(sk_root, tmp_path / "r")
    calib = root / "sequences/08/calib.txt"
    calib.write_text("".join(ln + "\n" for ln in calib.read_text().splitlines() if not ln.startswith("Tr")))
    with pytest.raises(SourceError, match="missing calibration row") as e:
        SemanticKittiSource(root).list_frames()
    assert e.value.path == str(calib)


def test_source_pickles_without_pykitti_state(sk_root):
    import pickle

    src = SemanticKittiSource(sk_root)
    src.list_frames()
    again = pickle.loads(pickle.dumps(src))
    assert len(again.read("08_000001")) > 1000


def test_allow_empty_frames_reads_an_empty_scan_that_every_corruption_keeps_empty(sk_root, tmp_path):
    """The empty-scan error offers --allow-empty-frames: following it works for SemanticKITTI as for KITTI (a 0-byte
    scan with its 0-byte label file is a frame with no points, and every robo3d-semantickitti-c corruption returns
    it empty), and without it the build still refuses the scan, naming it."""
    from bench_build.manifests.recipe import load_recipe
    from bench_build.sources import open_source
    from bench_build.stages.registry import get_stage

    root = _copy(sk_root, tmp_path / "r")
    scan = root / "sequences/08/velodyne/000001.bin"
    scan.write_bytes(b"")
    (root / "sequences/08/labels/000001.label").write_bytes(b"")
    recipe = load_recipe("robo3d-semantickitti-c")
    with pytest.raises(SourceError, match=r"empty scan .*pass --allow-empty-frames") as e:
        open_source(recipe, root).read("08_000001")
    assert e.value.path == str(scan)
    src = open_source(recipe, root, allow_empty=True)
    frame = src.read("08_000001")
    assert frame.points.shape == (0, 4) and frame.labels["semantic"].shape == (0,)
    assert len(src.read("08_000000")) > 1000  # the other scans are read as ever
    for c in recipe.corruptions:
        for s, params in enumerate(c.params, 1):
            out = get_stage(c.stage).apply(frame, params, np.random.default_rng([recipe.seed, s]))
            assert len(out) == 0 and len(out.labels["semantic"]) == 0, (c.name, s)


@pytest.mark.parametrize("line", ["0.1 s", "", "nan", "0.1 0.2"])
def test_a_bad_times_txt_line_names_times_txt_not_calib_txt(sk_root, tmp_path, line):
    root = _copy(sk_root, tmp_path / "r")
    times = root / "sequences/08/times.txt"
    times.write_text(f"0.0\n{line}\n")
    with pytest.raises(SourceError, match=r"line 2: expected one timestamp in seconds per line") as e:
        SemanticKittiSource(root).list_frames()
    assert e.value.path == str(times) and "\n" not in str(e.value)


def test_a_bad_pose_line_names_the_poses_file_not_calib_txt(sk_root, tmp_path):
    """pykitti also reads KITTI odometry's ROOT/poses/NN.txt when it is there (the reader does not use the poses)."""
    root = _copy(sk_root, tmp_path / "r")
    (root / "poses").mkdir()
    poses = root / "poses/08.txt"
    poses.write_text("1 0 0 0 0 1 0 0 0 0 1 0\n1 0 0 0 0 1 0 0 0 0 1\n")
    with pytest.raises(SourceError, match=r"line 2: expected a 3×4 pose \(12 numbers\) per line") as e:
        SemanticKittiSource(root).list_frames()
    assert e.value.path == str(poses)
    poses.write_text("1 0 0 0 0 1 0 0 0 0 1 0\n" * 2)
    assert SemanticKittiSource(root).list_frames() == ["08_000000", "08_000001"]  # well-formed poses are accepted


def test_a_labelled_sequence_without_its_labels_folder_is_refused_before_any_work(sk_root, tmp_path):
    """Sequences 00-10 are labelled: without labels/ (a separate download) a robo3d-semantickitti-c build would go
    ahead with unlabelled scans, so `run` refuses (exit 2, nothing written) naming the folder. The test sequences
    (11-21) are released without labels and still read."""
    from typer.testing import CliRunner

    from bench_build.cli import app

    root = _copy(sk_root, tmp_path / "r")
    labels = root / "sequences/08/labels"
    shutil.rmtree(labels)
    with pytest.raises(SourceError, match="labels directory of sequence 08 not found") as e:
        SemanticKittiSource(root).list_frames()
    assert e.value.path == str(labels)
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["run", "robo3d-semantickitti-c", "--source", str(root), "--out", str(out),
                                   "--no-progress"])
    assert res.exit_code == 2, res.output
    assert f"{labels}: labels directory of sequence 08 not found" in " ".join(res.output.split())
    assert not out.exists()
    (root / "sequences/08").rename(root / "sequences/11")
    frame = SemanticKittiSource(root, "test").read("11_000000")
    assert len(frame) > 1000 and frame.labels == {}


def test_a_split_without_labels_is_refused_by_a_recipe_that_reads_them(sk_root, tmp_path):
    """robo3d-semantickitti-c's wet_ground takes the ground from the labels: on the unlabelled test sequences
    every task would fail at that stage, so `run` refuses first (exit 2, nothing written) and says which
    splits are labelled."""
    from typer.testing import CliRunner

    from bench_build.cli import app

    assert SemanticKittiSource(sk_root).unlabelled() is None
    root = _copy(sk_root, tmp_path / "r")
    (root / "sequences/08").rename(root / "sequences/11")
    shutil.rmtree(root / "sequences/11/labels")
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["run", "robo3d-semantickitti-c", "--source", str(root), "--split", "11",
                                   "--out", str(out), "--no-progress"])
    said = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert (f"robo3d-semantickitti-c's wet_ground reads per-point semantic labels, but sequence 11 of {root} has "
            "no labels/ folder") in said
    assert "--split val (08)" in said and "Traceback" not in said
    assert not out.exists()
