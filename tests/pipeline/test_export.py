"""`bench-build export`: the data root passes the file checks OpenPCDet's ``KittiDataset.get_infos`` (and
mmdetection3d's kitti converter) perform, boxes come back as the build has them, ``--all`` writes
Robo3D's layout, and corruption/severity are validated."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.export import ExportError, export_version
from pipeline.reader import open_version

runner = CliRunner()


@pytest.fixture
def built(mini_build):
    return mini_build


@pytest.fixture(scope="module")
def kitti_images(tmp_path_factory) -> Path:
    """A KITTI object root with what a build does not store: left images and road planes (of mini_build's 4 frames)."""
    from matplotlib.image import imsave

    root = tmp_path_factory.mktemp("kitti_src")
    for sub in ("image_2", "planes"):
        (root / "training" / sub).mkdir(parents=True)
    for fid in ("000000", "000001", "000002", "000003"):
        imsave(root / "training" / "image_2" / f"{fid}.png", np.zeros((375, 1242, 3), np.uint8))
        (root / "training" / "planes" / f"{fid}.txt").write_text("# Plane\nWidth 4\nHeight 1\n0 -1 0 1.65\n")
    return root


def openpcdet_get_infos(root: Path, split: str) -> dict[str, dict]:
    """What OpenPCDet's KittiDataset.get_infos reads per sample, with its parsing (single-space splits,
    calib matrices by line number, DontCare after the objects), and mmdetection3d's existence checks.
    Returns per id the lidar points, image shape and gt_boxes_lidar as OpenPCDet computes them."""
    from matplotlib.image import imread

    ids = [x.strip() for x in (root / "ImageSets" / f"{split}.txt").read_text().splitlines()]
    for other in ("train", "val", "test"):  # mmdetection3d's create_kitti_info_file opens all three
        assert (root / "ImageSets" / f"{other}.txt").is_file()
    base = root / "training"
    infos = {}
    for idx in ids:
        lidar = base / "velodyne" / f"{idx}.bin"
        assert lidar.exists() and lidar.stat().st_size % 16 == 0
        points = np.fromfile(lidar, dtype=np.float32).reshape(-1, 4)
        img = base / "image_2" / f"{idx}.png"
        assert img.exists()
        shape = imread(img).shape[:2]
        lines = (base / "calib" / f"{idx}.txt").read_text().splitlines(keepends=True)
        p2 = np.array(lines[2].strip().split(" ")[1:], dtype=np.float32).reshape(3, 4)
        r0 = np.array(lines[4].strip().split(" ")[1:], dtype=np.float32).reshape(3, 3)
        v2c = np.array(lines[5].strip().split(" ")[1:], dtype=np.float32).reshape(3, 4)
        assert len(lines[6].strip().split(" ")[1:13]) == 12  # mmdetection3d reads Tr_imu_to_velo from line 7
        assert p2.shape == (3, 4)
        label_lines = (base / "label_2" / f"{idx}.txt").read_text().splitlines(keepends=True)
        objs = []
        for line in label_lines:
            f = line.strip().split(" ")
            objs.append((f[0], float(f[1]), float(f[2]), float(f[3]), [float(v) for v in f[4:8]],
                         float(f[8]), float(f[9]), float(f[10]), [float(v) for v in f[11:14]], float(f[14])))
        assert objs, "OpenPCDet's np.concatenate of the boxes fails on an empty label file"
        names = [o[0] for o in objs]
        n_obj = len([n for n in names if n != "DontCare"])
        assert "DontCare" not in names[:n_obj]  # get_infos takes the first num_objects rows as the objects
        loc = np.array([o[8] for o in objs[:n_obj]])
        h = np.array([o[5] for o in objs[:n_obj]])
        rots = np.array([o[9] for o in objs[:n_obj]])
        # calibration_kitti.rect_to_lidar: inverse of R0 · [V2C | t]
        lidar_xyz = np.linalg.solve(v2c[:, :3].astype(np.float64), (np.linalg.solve(r0, loc.T) - v2c[:, 3:]))
        lidar_xyz = lidar_xyz.T
        lidar_xyz[:, 2] += h / 2
        lwh = np.array([[o[7], o[6], o[5]] for o in objs[:n_obj]])
        infos[idx] = {"points": points, "image_shape": shape, "names": names[:n_obj],
                      "gt_boxes_lidar": np.c_[lidar_xyz, lwh, -(np.pi / 2 + rots)]}
    return infos


def _wrap(a):
    return (a + np.pi) % (2 * np.pi) - np.pi


def test_partition_export_passes_openpcdet_checks(built, kitti_images, tmp_path):
    r = export_version(built, tmp_path / "root", corruption="translation", severity=3, source=kitti_images)
    assert r.frames == 4 and r.notes == []
    assert (tmp_path / "root" / "training" / "image_2").resolve() == (kitti_images / "training" / "image_2")
    assert (tmp_path / "root" / "training" / "planes" / "000000.txt").is_file()
    infos = openpcdet_get_infos(tmp_path / "root", "val")  # a build without --split lists its frames under val
    assert sorted(infos) == ["000000", "000001", "000002", "000003"]
    assert (tmp_path / "root" / "ImageSets" / "train.txt").read_text() == ""
    ds = open_version(built)
    for fid, info in infos.items():
        ex = ds.example(fid, "translation", 3)
        np.testing.assert_array_equal(info["points"], ex.points[:, :4].astype(np.float32))
        assert info["image_shape"] == (375, 1242)
        care = np.array([str(c) != "DontCare" for c in ex.boxes.cls])
        b = info["gt_boxes_lidar"]
        assert info["names"] == [str(c) for c in ex.boxes.cls[care]]
        # label text has 2 decimals: the moved boxes come back within a centimetre and a hundredth of a radian
        np.testing.assert_allclose(b[:, :3], ex.boxes.center[care], atol=0.02)
        np.testing.assert_allclose(b[:, 3:6], ex.boxes.dims[care], atol=0.006)
        assert np.abs(_wrap(b[:, 6] - ex.boxes.heading[care])).max() < 0.011


def test_all_writes_robo3d_layout(built, kitti_images, tmp_path):
    res = runner.invoke(app, ["export", str(built), str(tmp_path), "--all", "--source", str(kitti_images)])
    assert res.exit_code == 0, res.output
    bench = tmp_path / "mini-c"
    openpcdet_get_infos(bench / "clean", "val")
    for c in ("gaussian_rad", "beam_del", "background", "translation"):
        for s in range(1, 6):
            vel = sorted(p.name for p in (bench / c / str(s) / "velodyne").iterdir())
            assert vel == ["000000.bin", "000001.bin", "000002.bin", "000003.bin"]
            # only the object-level corruption moved boxes, so only it carries its own labels
            assert (bench / c / str(s) / "label_2").is_dir() == (c == "translation")
    ex = open_version(built).example("000001", "beam_del", 5)
    back = np.fromfile(bench / "beam_del" / "5" / "velodyne" / "000001.bin", np.float32).reshape(-1, 4)
    np.testing.assert_array_equal(back, ex.points[:, :4])
    assert "velodyne only" in res.output and "wrote 84 frames in 21 partitions" in res.output
    # --layout kitti: a full data root per partition
    r = export_version(built, tmp_path / "k", all_partitions=True, layout="kitti", source=kitti_images)
    openpcdet_get_infos(tmp_path / "k" / "mini-c" / "background" / "4", "val")
    assert len(r.partitions) == 21


def test_without_source_names_what_to_supply(built, tmp_path):
    res = runner.invoke(app, ["export", str(built), str(tmp_path), "--corruption", "clean", "--severity", "0",
                              "--split", "train"])
    assert res.exit_code == 0, res.output
    assert "training/image_2 not written" in res.output and "--source" in res.output
    assert (tmp_path / "ImageSets" / "train.txt").read_text().split() == ["000000", "000001", "000002", "000003"]
    assert not (tmp_path / "training" / "image_2").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--corruption", "fog", "--severity", "1"], "no corruption 'fog'"),
    (["--corruption", "beam_del", "--severity", "9"], "severity 9 is outside 0…5"),
    (["--corruption", "clean", "--severity", "2"], "clean has only severity 0"),
    (["--corruption", "beam_del"], "give --corruption and --severity"),
    (["--all", "--corruption", "beam_del"], "leave out --corruption"),
    (["--all", "--layout", "mmdet"], "--layout must be one of"),
])
def test_bad_partition_is_refused(built, tmp_path, args, message):
    res = runner.invoke(app, ["export", str(built), str(tmp_path / "x"), *args])
    assert res.exit_code == 2 and message in res.output, res.output
    assert not (tmp_path / "x").exists()


def test_source_without_images_is_refused(built, tmp_path):
    (tmp_path / "src" / "training").mkdir(parents=True)
    with pytest.raises(ExportError, match="no training/image_2 directory"):
        export_version(built, tmp_path / "o", corruption="clean", severity=0, source=tmp_path / "src")
    (tmp_path / "src" / "training" / "image_2").mkdir()
    with pytest.raises(ExportError, match=r"4 of 4 exported frames have no image, e.g. 000000.png"):
        export_version(built, tmp_path / "o", corruption="clean", severity=0, source=tmp_path / "src")


def test_severity_names_come_from_the_builtin_recipe():
    from manifests.recipe import load_recipe
    from pipeline.export import severity_dir, severity_names

    r = load_recipe("robo3d-kitti-c")
    manifest = {"dataset": r.name, "version": r.version, "recipe": r.canonical()}
    assert "severity_names" not in manifest["recipe"]  # not part of what determines the bytes
    assert severity_names(manifest) == ["light", "moderate", "heavy"]
    assert severity_dir(manifest, 2) == "moderate"
    assert severity_names({**manifest, "version": "0.0.1"}) == []  # another version: do not guess
    assert severity_dir({"dataset": "mine", "version": "1", "recipe": {"name": "mine"}}, 2) == "2"
