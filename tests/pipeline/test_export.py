"""`bench-build export`: the data root passes the file checks OpenPCDet's ``KittiDataset.get_infos`` (and
mmdetection3d's kitti converter) perform, boxes come back as the build has them, ``--all`` writes
Robo3D's layout, and corruption/severity are validated."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from bench_build.cli import app
from bench_build.export import ExportError, export_version
from bench_build.format.reader import open_version

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


def image_sets(root: Path) -> dict[str, list[str]]:
    """The four ImageSets lists of a data root, checked to be what the converters expect: no frame in two of
    train/val/test (else training infos and the GT database take evaluation frames), trainval = train ∪ val."""
    lists = {n: (root / "ImageSets" / f"{n}.txt").read_text().split() for n in ("train", "val", "test", "trainval")}
    seen = [i for n in ("train", "val", "test") for i in lists[n]]
    assert len(seen) == len(set(seen)), lists
    assert lists["trainval"] == sorted({*lists["train"], *lists["val"]}), lists
    return lists


def test_partition_export_passes_openpcdet_checks(built, kitti_images, tmp_path):
    r = export_version(built, tmp_path / "root", corruption="translation", severity=3, source=kitti_images)
    assert r.frames == 4 and r.notes == []
    assert (tmp_path / "root" / "training" / "image_2").resolve() == (kitti_images / "training" / "image_2")
    assert (tmp_path / "root" / "training" / "planes" / "000000.txt").is_file()
    infos = openpcdet_get_infos(tmp_path / "root", "val")  # a build without --split lists its frames under val
    assert sorted(infos) == ["000000", "000001", "000002", "000003"]
    ids = ["000000", "000001", "000002", "000003"]
    assert image_sets(tmp_path / "root") == {"train": [], "val": ids, "test": [], "trainval": ids}
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
    # --layout kitti: a full data root per partition, each needing image_2; without --source the note says how to
    # link it into every one of them, and following it gives 21 roots the converters accept
    import subprocess

    r = export_version(built, tmp_path / "k", all_partitions=True, layout="kitti")
    assert len(r.partitions) == 21
    [note] = [n for n in r.notes if "image_2 not written" in n]
    assert "21 data roots" in note
    loop = note.split("link it into each: ", 1)[1].split("; done.", 1)[0] + "; done"
    subprocess.run(["bash", "-c", loop.replace("<kitti>", str(kitti_images))], check=True)
    for p in r.partitions:
        assert sorted(openpcdet_get_infos(Path(p["path"]), "val")) == ["000000", "000001", "000002", "000003"]
        image_sets(Path(p["path"]))


def test_without_source_names_what_to_supply(built, tmp_path):
    res = runner.invoke(app, ["export", str(built), str(tmp_path), "--corruption", "clean", "--severity", "0",
                              "--split", "train"])
    assert res.exit_code == 0, res.output
    assert "training/image_2 not written" in res.output and "--source" in res.output
    out = " ".join(res.output.split())  # counted in words: one partition, not "1 partitions"
    assert "clean/0: 4 frames →" in out and "wrote 4 frames in 1 partition to" in out, out
    assert (tmp_path / "ImageSets" / "train.txt").read_text().split() == ["000000", "000001", "000002", "000003"]
    assert not (tmp_path / "training" / "image_2").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--corruption", "fog", "--severity", "1"], "no corruption 'fog'"),
    (["--corruption", "beam_del", "--severity", "9"], "severity 9 is outside 0…5"),
    (["--corruption", "clean", "--severity", "2"], "clean has only severity 0"),
    (["--corruption", "beam_del"], "give --corruption and --severity"),
    (["--all", "--corruption", "beam_del"], "leave out --corruption"),
    (["--all", "--layout", "mmdet"], "--layout must be one of"),
    (["--all", "--split", "bogus"], "--split 'bogus': OpenPCDet and mmdetection3d read ImageSets/"),
    (["--all", "--split", "trainval"], "--split trainval: OpenPCDet and mmdetection3d build trainval infos from"),
    (["--corruption", "beam_del", "--severity", "1", "--layout", "kitti"], "--layout kitti is for --all"),
    (["--corruption", "clean", "--severity", "0", "--layout", "robo3d"], "--layout robo3d is for --all"),
])
def test_bad_partition_is_refused(built, tmp_path, args, message):
    res = runner.invoke(app, ["export", str(built), str(tmp_path / "x"), *args])
    assert res.exit_code == 2 and message in res.output, res.output
    assert not (tmp_path / "x").exists()


def test_a_partition_a_partial_pull_lacks_names_the_pull_that_adds_it(built, tmp_path):
    """A partial pull's recipe names every partition of the version, its manifest only the files it pulled: export
    of one it lacks said only "gaussian_rad/2: no frames to export" (and --all the same of the first one). Both now
    name what is missing, what the folder holds and the `bench-build pull` that adds it; exit 2, nothing written."""
    from bench_build.publish import publish_version, pull_version

    assert publish_version(str(built), str(tmp_path / "pub"), progress=False).ok
    assert pull_version(str(tmp_path / "pub" / "mini-c"), tmp_path / "out", corruption="beam_del", severity=3,
                        progress=False).ok
    part = tmp_path / "out" / "mini-c" / "0.1.0"
    add = f"bench-build pull <publication root>/mini-c --version 0.1.0 --out {tmp_path / 'out'}"
    before = tree_state(tmp_path)
    for args, says in (
            (["--corruption", "gaussian_rad", "--severity", "2"],
             f"{part}: gaussian_rad/2 is not in this folder (a partial pull of mini-c 0.1.0); it holds beam_del/3 "
             f"(`{add} --corruption gaussian_rad --severity 2` adds it, or export one it holds); nothing was written"),
            (["--corruption", "beam_del", "--severity", "0"],
             f"clean/0 is not in this folder (a partial pull of mini-c 0.1.0); it holds beam_del/3 (`{add} "
             "--corruption clean` adds it"),
            (["--all"], f"{part}: clean/0, gaussian_rad/1–5, beam_del/1–2, 4–5, background/1–5, translation/1–5 are "
                        f"not in this folder (a partial pull of mini-c 0.1.0); it holds beam_del/3 (`{add}` adds them, "
                        "or export one partition it holds)")):
        res = runner.invoke(app, ["export", str(part), str(tmp_path / "x"), *args], terminal_width=400)
        flat = " ".join(res.output.split())
        assert res.exit_code == 2 and says in flat and len(res.output.strip().splitlines()) == 1, res.output
        assert tree_state(tmp_path) == before and not (tmp_path / "x").exists(), args
    # what it holds exports as from the whole version
    res = runner.invoke(app, ["export", str(part), str(tmp_path / "x"), "--corruption", "beam_del", "--severity", "3"])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (tmp_path / "x" / "training" / "velodyne").iterdir()) == [
        f"00000{i}.bin" for i in range(4)]


@pytest.mark.parametrize(("dataset", "kind"), [("robo3d-semantickitti-c", "semantickitti"),
                                              ("robo3d-nuscenes-c", "nuscenes"), ("modelnet-c", "modelnet40"),
                                              ("robo3d-wod-c", "waymo")])
@pytest.mark.parametrize("args", [["--corruption", "clean", "--severity", "0"], ["--all"]])
def test_non_kitti_benchmark_is_refused_up_front(built, tmp_path, dataset, kind, args):
    """Only builds of KITTI scans have what a KITTI object data root needs (full KITTI calib, camera-frame labels,
    intensity); any other benchmark is refused in one line naming it, before a partition is read."""
    import json

    manifest = json.loads((built / "manifest.json").read_text())
    manifest["dataset"] = dataset
    manifest["recipe"]["source"] = kind
    manifest["source"]["kind"] = kind
    version = tmp_path / dataset / manifest["version"]
    version.mkdir(parents=True)
    (version / "manifest.json").write_text(json.dumps(manifest))  # the manifest alone: no partition is read
    res = runner.invoke(app, ["export", str(version), str(tmp_path / "x"), *args])
    line = res.output.strip()
    assert res.exit_code == 2 and len(line.splitlines()) == 1, res.output
    assert f"{dataset} {manifest['version']}: export writes KITTI object data roots only" in line, line
    assert f"this benchmark's source is {kind}, which export does not support" in line, line
    assert not (tmp_path / "x").exists()


def test_another_split_into_the_same_root_moves_the_frames(built, tmp_path):
    """The audit's case: the same partition exported --split train, then --split val --force, left both lists
    naming the frames (so the converters' train infos and GT database held the evaluation frames) and trainval
    empty. A frame is now in one of train/val/test, trainval = train ∪ val, and other frames' lists are kept."""
    out, ids = tmp_path / "o", ["000000", "000001", "000002", "000003"]
    res = runner.invoke(app, ["export", str(built), str(out), *PART, "--split", "train"])
    assert res.exit_code == 0, res.output
    assert image_sets(out) == {"train": ids, "val": [], "test": [], "trainval": ids}
    res = runner.invoke(app, ["export", str(built), str(out), *PART, "--split", "val", "--force"])
    assert res.exit_code == 0, res.output
    assert image_sets(out) == {"train": [], "val": ids, "test": [], "trainval": ids}
    assert "4 of the exported frames left train.txt" in " ".join(res.output.split())
    # frames another export (or the user) listed stay where they are, in --split's own list too; the exported
    # ones move to --split's list
    (out / "ImageSets" / "val.txt").write_text("000007\n000002\n")
    (out / "ImageSets" / "test.txt").write_text("000008\n000003\n")
    res = runner.invoke(app, ["export", str(built), str(out), *PART, "--split", "train", "--force"])
    assert res.exit_code == 0, res.output
    assert image_sets(out) == {"train": ids, "val": ["000007"], "test": ["000008"],
                               "trainval": sorted([*ids, "000007"])}
    res = runner.invoke(app, ["export", str(built), str(out), *PART, "--split", "train", "--force"])
    assert image_sets(out)["train"] == ids and image_sets(out)["val"] == ["000007"]  # again: the same lists
    # a frame this export does not write, listed twice already: refused, nothing written
    (out / "ImageSets" / "test.txt").write_text("000007\n")
    before = tree_state(out)
    res = runner.invoke(app, ["export", str(built), str(out), *PART, "--split", "val", "--force"])
    assert res.exit_code == 2 and "val.txt and test.txt both list frame 000007" in res.output, res.output
    assert tree_state(out) == before
    # test is read from testing/, unlabelled: refused
    res = runner.invoke(app, ["export", str(built), str(tmp_path / "t"), *PART, "--split", "test"])
    assert res.exit_code == 2 and "read the test split from testing/" in res.output


def test_source_without_images_is_refused(built, tmp_path):
    for src, says in ((tmp_path / "nope", "does not exist"), (built / "manifest.json", "is not a directory")):
        res = runner.invoke(app, ["export", str(built), str(tmp_path / "o"), *PART, "--source", str(src)])
        out = " ".join(res.output.split())
        assert res.exit_code == 2 and f"--source {src} {says}: give the KITTI object root" in out, out
        assert not (tmp_path / "o").exists()
    (tmp_path / "src" / "training").mkdir(parents=True)
    with pytest.raises(ExportError, match="no training/image_2 directory"):
        export_version(built, tmp_path / "o", corruption="clean", severity=0, source=tmp_path / "src")
    (tmp_path / "src" / "training" / "image_2").mkdir()
    with pytest.raises(ExportError, match=r"4 of 4 exported frames have no image, e.g. 000000.png"):
        export_version(built, tmp_path / "o", corruption="clean", severity=0, source=tmp_path / "src")


def test_severity_names_come_from_the_builtin_recipe():
    from bench_build.export import severity_dir
    from bench_build.manifests.recipe import load_recipe, severity_names

    r = load_recipe("robo3d-kitti-c")
    manifest = {"dataset": r.name, "version": r.version, "recipe": r.canonical()}
    assert "severity_names" not in manifest["recipe"]  # not part of what determines the bytes
    assert severity_names(manifest) == ["light", "moderate", "heavy"]
    assert severity_dir(manifest, 2) == "moderate"
    assert severity_names({**manifest, "version": "0.0.1"}) == []  # another version: do not guess
    assert severity_dir({"dataset": "mine", "version": "1", "recipe": {"name": "mine"}}, 2) == "2"


# ---- issue 29: export never destroys what is in OUT or --source; exit 2 means nothing was written ----

def tree_state(*roots: Path) -> dict[str, tuple]:
    """Every entry under ``roots``: its mode and its content's sha256 (files) or target (links). Links are
    recorded, never followed, so a link that export re-pointed or wrote through shows up."""
    import hashlib
    import os
    import stat

    state: dict[str, tuple] = {}
    for root in roots:
        state[str(root)] = (root.lstat().st_mode, None)
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                p = Path(dirpath) / name
                st = p.lstat()
                if stat.S_ISLNK(st.st_mode):
                    state[str(p)] = (st.st_mode, os.readlink(p))
                elif stat.S_ISREG(st.st_mode):
                    state[str(p)] = (st.st_mode, hashlib.sha256(p.read_bytes()).hexdigest())
                else:
                    state[str(p)] = (st.st_mode, None)
    return state


@pytest.fixture
def kitti_root(demo_kitti_master, kitti_images, tmp_path) -> Path:
    """A private, complete KITTI object root (velodyne, label_2, calib, ImageSets, image_2, planes): the source
    export links from, and the directory a user might by mistake give as OUT."""
    import shutil

    root = tmp_path / "kitti"
    shutil.copytree(demo_kitti_master, root)
    for sub in ("image_2", "planes"):
        shutil.copytree(kitti_images / "training" / sub, root / "training" / sub)
    return root


PART = ["--corruption", "translation", "--severity", "3"]


def _own_source(t: Path, k: Path):
    return [str(k), *PART, "--source", str(k)], "is --source"


def _own_source_force(t: Path, k: Path):
    return [str(k), *PART, "--source", str(k), "--force"], "is --source"


def _own_source_dot(t: Path, k: Path):
    return [f"{k}/.", *PART, "--source", str(k), "--force"], "is --source"


def _link_to_source(t: Path, k: Path):
    (t / "link").symlink_to(k, target_is_directory=True)
    return [str(t / "link"), *PART, "--source", str(k), "--force"], "is --source"


def _inside_source(t: Path, k: Path):
    return [str(k / "training"), *PART, "--source", str(k), "--force"], "is inside --source"


def _new_dir_inside_source(t: Path, k: Path):
    return [str(k / "exports" / "mine"), *PART, "--source", str(k)], "is inside --source"


def _source_inside_out(t: Path, k: Path):
    # --source names the training directory of OUT: export's velodyne/ and label_2/ would land in it
    return [str(k), *PART, "--source", str(k / "training"), "--force"], "would be written over --source"


def _non_empty(t: Path, k: Path):
    (t / "o").mkdir()
    (t / "o" / "notes.txt").write_text("mine")
    return [str(t / "o"), *PART, "--source", str(k)], "is not empty (1 entries, e.g. notes.txt)"


def _image_2_is_a_directory(t: Path, k: Path):
    (t / "o" / "training" / "image_2").mkdir(parents=True)
    (t / "o" / "training" / "image_2" / "000000.png").write_bytes(b"png")
    return [str(t / "o"), *PART, "--source", str(k), "--force"], "image_2 exists and is not a link"


def _missing_partition(t: Path, k: Path):
    (t / "o").mkdir()
    (t / "o" / "notes.txt").write_text("mine")
    return [str(t / "o"), "--corruption", "fog", "--severity", "1", "--source", str(k), "--force"], \
        "no corruption 'fog'"


def _out_is_a_file(t: Path, k: Path):
    (t / "o").write_text("a file")
    return [str(t / "o"), *PART, "--source", str(k)], "is a file, not a directory"


def _out_below_a_file(t: Path, k: Path):
    (t / "o").write_text("a file")
    return [str(t / "o" / "sub"), *PART], f"{t / 'o'} is a file, not a directory, so {t / 'o' / 'sub'} cannot be"


def _file_where_export_needs_a_directory(t: Path, k: Path):
    (t / "o").mkdir()
    (t / "o" / "training").write_text("a file")
    return [str(t / "o"), *PART, "--force"], "training is a file, not a directory"


def _directory_where_export_writes_a_file(t: Path, k: Path):
    (t / "o" / "training" / "velodyne" / "000002.bin").mkdir(parents=True)
    return [str(t / "o"), *PART, "--force"], "000002.bin is a directory where export writes a file"


def _directory_linked_outside_out(t: Path, k: Path):
    # OUT/training is a link to another KITTI root (not --source): --force would replace its scans and labels
    import shutil

    shutil.copytree(k / "training" / "velodyne", t / "real" / "training" / "velodyne")
    (t / "o").mkdir()
    (t / "o" / "training").symlink_to(t / "real" / "training", target_is_directory=True)
    return [str(t / "o"), *PART, "--force"], f"{t / 'o' / 'training'} is a link to {t / 'real' / 'training'}, outside"


def _source_without_images(t: Path, k: Path):
    import shutil

    shutil.rmtree(k / "training" / "image_2")
    return [str(t / "o"), *PART, "--source", str(k)], "no training/image_2 directory"


def _source_missing_an_image(t: Path, k: Path):
    (k / "training" / "image_2" / "000002.png").unlink()
    return [str(t / "o"), *PART, "--source", str(k)], "1 of 4 exported frames have no image, e.g. 000002.png"


def _version_is_a_file(t: Path, k: Path):
    (t / "v").write_text("a file")
    return [str(t / "v"), str(t / "o"), *PART], "no manifest"


def _out_where_no_file_can_be_made(t: Path, k: Path):
    # root passes os.access in /proc (mode bits), where mkdir then failed after the pre-flight: exit 1, "No such
    # file or directory: /proc/export", as if writing had begun
    if not Path("/proc/self").is_dir():
        pytest.skip("needs Linux's /proc, where nobody can make a file")
    return ["/proc/export", *PART], "cannot create files in /proc"  # as root too: not "No such file or directory"


def _dataset_root_force(t: Path, k: Path):
    # a KITTI root export never wrote, not given as --source: --force replaced its raw scans, labels and calibs
    return [str(k), *PART, "--force"], f"{k} holds KITTI files (ImageSets/) but no BENCH_BUILD_EXPORT file"


def _dataset_root(t: Path, k: Path):
    return [str(k), *PART], f"{k} holds KITTI files (ImageSets/) but no BENCH_BUILD_EXPORT file"


REFUSALS = [_dataset_root_force, _dataset_root, _own_source, _own_source_force, _own_source_dot, _link_to_source,
            _inside_source, _new_dir_inside_source, _source_inside_out, _non_empty, _image_2_is_a_directory,
            _missing_partition, _out_is_a_file, _out_below_a_file, _file_where_export_needs_a_directory,
            _directory_where_export_writes_a_file, _directory_linked_outside_out, _source_without_images,
            _source_missing_an_image, _version_is_a_file, _out_where_no_file_can_be_made]


@pytest.mark.parametrize("case", REFUSALS, ids=lambda f: f.__name__.strip("_"))
def test_refusal_writes_nothing(built, kitti_root, tmp_path, case):
    args, message = case(tmp_path, kitti_root)
    cmd = ["export", *args] if case is _version_is_a_file else ["export", str(built), *args]
    before = tree_state(tmp_path, built)
    res = runner.invoke(app, cmd)
    assert res.exit_code == 2, res.output
    flat = res.output.strip()
    assert message in flat and len(flat.splitlines()) == 1 and "Traceback" not in flat, res.output
    assert tree_state(tmp_path, built) == before  # not one path, byte, link target or mode changed


def test_export_into_its_own_source_leaves_it_byte_identical(built, kitti_root):
    """The reproduction: OUT = the KITTI root given as --source, which the old export overwrote (raw scans,
    label_2, ImageSets/val.txt cut to the exported frames) before refusing on the image_2 link."""
    before = tree_state(kitti_root)
    for force in ([], ["--force"]):
        res = runner.invoke(app, ["export", str(built), str(kitti_root), *PART, "--source", str(kitti_root), *force])
        assert res.exit_code == 2 and "is --source" in res.output, res.output
    assert tree_state(kitti_root) == before


def test_frame_id_that_is_not_a_plain_name_is_refused():
    """A frame id becomes a file name (velodyne/<id>.bin): one with a path in it would write outside OUT."""
    import pyarrow as pa

    from bench_build.export.plan import _rows

    class Listing:  # the two calls _rows makes on a Version (and the file's name), over a hostile frame id
        url = where = "v"

        def shards(self, corruption, severity):
            return [{"path": "part.parquet"}]

        def open_file(self, path):
            return self

        def read(self, columns):
            return pa.table({"key": ["k/../../x"], "frame_id": ["../../x"], "boxes": [None], "calib": [None]})

    with pytest.raises(ExportError, match=r"k/\.\./\.\./x: frame id '\.\./\.\./x' is not a plain file name"):
        _rows(Listing(), "clean", 0, None)


@pytest.mark.parametrize("args", [["", *PART, "--force"], ["o", *PART, "--source", ""]])
def test_an_empty_path_is_not_the_working_directory(built, kitti_root, monkeypatch, args):
    """OUT "" (an unset variable in `bench-build export V "$OUT" --force`) read as ".": run from a KITTI root, the
    export replaced its raw scans, labels and calibrations with the corrupted ones; --source "" linked the working
    directory's images. Both are refused in one line, exit 2, nothing written."""
    monkeypatch.chdir(kitti_root)
    before = tree_state(kitti_root)
    res = runner.invoke(app, ["export", str(built), *args])
    flag = "OUT" if args[0] == "" else "--source"
    line = res.output.strip()
    assert res.exit_code == 2 and len(line.splitlines()) == 1, res.output
    assert f"export: {flag} is an empty string, which would mean the working directory" in line, line
    assert tree_state(kitti_root) == before


def test_out_inside_the_version_is_refused(mini_build, tmp_path):
    import shutil

    version = tmp_path / "v"
    shutil.copytree(mini_build, version)  # a copy: the shared build must not be put at risk
    before = tree_state(version)
    res = runner.invoke(app, ["export", str(version), str(version / "kitti"), *PART, "--force"])
    assert res.exit_code == 2 and "is inside the version" in res.output, res.output
    assert tree_state(version) == before


def test_force_replaces_only_what_export_writes(built, kitti_images, tmp_path):
    import os

    out = tmp_path / "o"
    first = export_version(built, out, corruption="translation", severity=3, source=kitti_images)
    assert first.written == 4 * 3 + 4 + 2 and first.replaced == 0  # velodyne, calib, label_2; 4 lists; 2 links
    want = {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and not p.is_symlink()
            and "ImageSets" not in p.parts}
    # what the user keeps in OUT, and exported files changed, or linked to data elsewhere
    (out / "notes.txt").write_text("mine")
    (out / "training" / "velodyne" / "999999.bin").write_bytes(b"not exported")
    (out / "training" / "velodyne" / "000000.bin").write_bytes(b"junk")
    (out / "ImageSets" / "train.txt").write_text("mine\n")
    keep, keep2 = tmp_path / "keep.txt", tmp_path / "keep2.txt"
    keep.write_text("elsewhere")
    keep2.write_text("elsewhere too")
    hard = out / "training" / "calib" / "000001.txt"
    hard.unlink()
    os.link(keep, hard)  # a hard link: writing in place would change keep.txt
    sym = out / "training" / "label_2" / "000002.txt"
    sym.unlink()
    sym.symlink_to(keep2)  # writing through the link would change keep2.txt
    res = runner.invoke(app, ["export", str(built), str(out), *PART, "--source", str(kitti_images), "--force"])
    assert res.exit_code == 0, res.output
    # every velodyne/calib/label_2 file and the 4 ImageSets lists; the links already point at the images. The
    # lists keep the frames export does not write (train's "mine"), and trainval is train ∪ val
    assert f"--force: replaced 16 existing files in {out}" in res.output
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "training" / "velodyne" / "999999.bin").read_bytes() == b"not exported"
    assert (out / "ImageSets" / "train.txt").read_text() == "mine\n"
    assert image_sets(out)["trainval"] == sorted(["mine", "000000", "000001", "000002", "000003"])
    assert keep.read_text() == "elsewhere" and keep2.read_text() == "elsewhere too"
    assert not sym.is_symlink() and hard.stat().st_nlink == 1
    assert {p: p.read_bytes() for p in want} == want  # the exported files are the export's again
    # without --force the same OUT is refused, naming how many files --force would replace
    res = runner.invoke(app, ["export", str(built), str(out), *PART, "--source", str(kitti_images)])
    assert res.exit_code == 2 and "add --force to replace only the files it writes (16 of them" in res.output


@pytest.mark.parametrize(("err", "cause"), [(28, "No space left on device"), (13, "Permission denied")])
def test_os_error_while_writing_is_one_line_saying_what_was_written(built, tmp_path, monkeypatch, err, cause):
    import os

    import bench_build.export.write as export_mod

    real, calls = export_mod._write_file, []

    def failing(path: Path, data: bytes) -> None:
        calls.append(path)
        if len(calls) == 6:
            raise OSError(err, os.strerror(err), str(path))
        real(path, data)

    monkeypatch.setattr(export_mod, "_write_file", failing)
    res = runner.invoke(app, ["export", str(built), str(tmp_path / "o"), *PART])
    assert res.exit_code == 1, res.output  # writing had begun: not a refusal
    line = res.output.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line, res.output
    final = calls[-1].parent / "000001.txt"  # the file named is the one exported, not its temporary name
    assert calls[-1].name.startswith(".000001.txt.") and calls[-1].name.endswith(".export.tmp")
    assert f"{cause}: {final}" in line and "export stopped before moving any file into place" in line, line
    assert f"{tmp_path / 'o'} is as it was (the 5 of 16 files written so far" in line, line
    assert not (tmp_path / "o").exists()  # nothing half-written, no temporary file, no directory it made


def test_os_error_while_moving_into_place_says_how_far(built, tmp_path, monkeypatch):
    """A rename refused once every file is written (rare: all were checked) still says what is in place."""
    import os

    import bench_build.export.write as export_mod

    real, calls = os.replace, []

    def failing(src, dst):
        calls.append(dst)
        if len(calls) == 3:
            raise OSError(5, os.strerror(5), str(dst))
        real(src, dst)

    monkeypatch.setattr(export_mod.os, "replace", failing)
    res = runner.invoke(app, ["export", str(built), str(tmp_path / "o"), *PART])
    line = res.output.strip()
    assert res.exit_code == 1 and len(line.splitlines()) == 1, res.output
    assert "export stopped after moving 2 of 16 files into place" in line and "--force" in line, line
    assert not (tmp_path / "o" / "ImageSets").exists()  # the lists go last: no root that looks finished
    assert not [p for p in (tmp_path / "o").rglob("*") if p.name.endswith(".tmp")]
    # the marker goes first: the same command with --force, as the message says, finishes the root
    monkeypatch.setattr(export_mod.os, "replace", real)
    res = runner.invoke(app, ["export", str(built), str(tmp_path / "o"), *PART, "--force"])
    assert res.exit_code == 0 and (tmp_path / "o" / "BENCH_BUILD_EXPORT").is_file(), res.output


@pytest.mark.parametrize("stop", ["ctrl-c", "refused rename"])
def test_stopped_while_moving_into_place_leaves_no_root_a_converter_trusts(built, tmp_path, monkeypatch, stop):
    """--force over an earlier export of another partition, stopped while moving files into place: the old
    ImageSets lists stayed, naming every frame of a root whose scans were now half snow/5, half fog/3, and (Ctrl-C)
    the files not yet moved stayed under their temporary names. The old lists now go before the first file moves,
    the new ones come last: a root stopped between the two has none, and no temporary file is left."""
    import bench_build.export.write as export_mod

    out = tmp_path / "o"
    export_version(built, out, corruption="beam_del", severity=1)
    real, calls = os.replace, []

    def stopping(src, dst):
        calls.append(dst)
        if len(calls) == 3:
            if stop == "ctrl-c":
                raise KeyboardInterrupt
            raise OSError(5, os.strerror(5), str(dst))
        real(src, dst)

    monkeypatch.setattr(export_mod.os, "replace", stopping)
    res = runner.invoke(app, ["export", str(built), str(out), "--corruption", "beam_del", "--severity", "5",
                              "--force"])
    assert res.exit_code == (130 if stop == "ctrl-c" else 1), res.output  # Ctrl-C: click's "Aborted!"
    if stop != "ctrl-c":
        line = " ".join(res.output.split())
        assert "export stopped after moving 2 of 16 files into place" in line, line
        assert "(2 of them replacing earlier ones;" in line, line  # not the third, whose rename was refused
        assert "its ImageSets lists are removed, so that no converter reads a root half-way" in line, line
    assert not (out / "ImageSets").exists() or not list((out / "ImageSets").iterdir())
    assert not [p for p in out.rglob("*") if p.name.endswith(".export.tmp")]
    # the same command again finishes the root: every scan is beam_del/5's, and the lists name them
    monkeypatch.setattr(export_mod.os, "replace", real)
    res = runner.invoke(app, ["export", str(built), str(out), "--corruption", "beam_del", "--severity", "5",
                              "--force"])
    assert res.exit_code == 0, res.output
    ds = open_version(built)
    for fid in image_sets(out)["val"]:
        back = np.fromfile(out / "training" / "velodyne" / f"{fid}.bin", np.float32).reshape(-1, 4)
        np.testing.assert_array_equal(back, ds.example(fid, "beam_del", 5).points[:, :4])


def test_a_bug_while_writing_keeps_its_traceback(built, tmp_path, monkeypatch):
    """Writing turned any ValueError or KeyError into "export stopped after writing …": a bug in the export's own
    code read as a problem of the user's files, and its traceback was lost. Only I/O and domain errors are."""
    import bench_build.export.write as export_mod

    real, calls = export_mod._write_file, []

    def buggy(path: Path, data: bytes) -> None:
        calls.append(path)
        if len(calls) == 6:
            raise KeyError("intensity")
        real(path, data)

    monkeypatch.setattr(export_mod, "_write_file", buggy)
    res = runner.invoke(app, ["export", str(built), str(tmp_path / "o"), *PART])
    assert res.exit_code == 1 and isinstance(res.exception, KeyError), res.output
    assert "error:" not in res.output and "export stopped" not in res.output


def test_unwritable_out_is_refused_before_writing(built, tmp_path, monkeypatch):
    import os

    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    if os.geteuid() == 0:  # root may write anyway: answer as the kernel would for anyone else
        real_access = os.access
        monkeypatch.setattr(os, "access", lambda p, mode, **kw: not (Path(p) == ro and mode & os.W_OK)
                            and real_access(p, mode, **kw))
    try:
        res = runner.invoke(app, ["export", str(built), str(ro), *PART])
    finally:
        ro.chmod(0o755)
    assert res.exit_code == 2 and f"Permission denied: cannot create files in {ro}" in res.output, res.output
    assert list(ro.iterdir()) == []


def test_damaged_points_page_leaves_out_as_it_was(built, tmp_path, kitti_images):
    """The pre-flight reads boxes and calibrations, not points: a damaged points page of the second shard stopped
    the export after it had written the first shard's frames under their final names, a partial KITTI root (or,
    with --force, an earlier export's root with some frames swapped). Files are written under temporary names
    and moved into place only once all are: OUT is left as it was, new or not."""
    import json
    import shutil

    from tests.pipeline.tamper import flip_file

    v = tmp_path / "v"
    shutil.copytree(built, v, ignore=shutil.ignore_patterns("_ledger"))
    shards = [s for s in json.loads((v / "manifest.json").read_text())["shards"]
              if (s["corruption"], s["severity"]) == ("translation", 3)]
    assert len(shards) == 2
    good = tmp_path / "good"
    assert runner.invoke(app, ["export", str(v), str(good), *PART]).exit_code == 0
    before = {p: p.read_bytes() for p in good.rglob("*") if p.is_file()}
    flip_file(v / shards[1]["path"])  # the first shard's frames are written before the damage is read

    out = tmp_path / "new" / "o"
    res = runner.invoke(app, ["export", str(v), str(out), *PART, "--source", str(kitti_images)])
    line = res.output.strip()
    assert res.exit_code == 1 and len(line.splitlines()) == 1, res.output
    assert "does not match its checksum" in line and f"{out} is as it was" in line, line
    assert not out.exists() and not out.parent.exists()  # the directories it created are gone too

    res = runner.invoke(app, ["export", str(v), str(good), *PART, "--force", "--source", str(kitti_images)])
    assert res.exit_code == 1 and f"{good} is as it was" in res.output, res.output
    assert {p: p.read_bytes() for p in good.rglob("*") if p.is_file()} == before  # no temporary file left either
    assert not (good / "training" / "image_2").exists()  # nor a link made


def test_calibration_of_another_length_is_refused_in_one_line(built, tmp_path):
    """A flipped bit in the page header of a calib chunk (no page checksum covers it) decodes a matrix's list with
    another length: the pre-flight, which reads boxes and calibrations without the reader's row checks, ended in
    a traceback, "ValueError: cannot reshape array of size 8 into shape (3,4)". It is refused as the reader
    refuses it, naming the file, row and matrix: exit 2, nothing written."""
    import hashlib
    import json
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    v = tmp_path / "v"
    shutil.copytree(built, v, ignore=shutil.ignore_patterns("_ledger"))
    manifest = json.loads((v / "manifest.json").read_text())
    entry = next(s for s in manifest["shards"] if (s["corruption"], s["severity"]) == ("translation", 3))
    table = pq.read_table(v / entry["path"])
    calib = table["calib"].to_pylist()
    calib[1]["P2"] = calib[1]["P2"][:8]
    i = table.schema.get_field_index("calib")
    pq.write_table(table.set_column(i, table.schema.field(i), pa.array(calib, table.schema.field(i).type)),
                   v / entry["path"], row_group_size=2)
    entry["bytes"] = (v / entry["path"]).stat().st_size  # the manifest matches: the damage is in the file itself
    entry["sha256"] = hashlib.sha256((v / entry["path"]).read_bytes()).hexdigest()
    (v / "manifest.json").write_text(json.dumps(manifest))
    res = runner.invoke(app, ["export", str(v), str(tmp_path / "o"), *PART], terminal_width=400)
    line = res.output.strip()
    assert res.exit_code == 2 and len(line.splitlines()) == 1, res.output
    assert f"{v / entry['path']}: row 1 (mini-c/{table['frame_id'][1]}/translation/3): its calibration P2 has 8 " \
           "values, not 12; the file changed since the build" in line, line
    assert not (tmp_path / "o").exists()


def test_link_inside_out_to_a_directory_inside_out_is_followed(built, tmp_path):
    """A link that stays inside OUT is the user's layout, not an escape: the export writes through it."""
    out = tmp_path / "o"
    (out / "store").mkdir(parents=True)
    (out / "training").symlink_to(out / "store", target_is_directory=True)
    res = runner.invoke(app, ["export", str(built), str(out), *PART, "--force"])
    assert res.exit_code == 0, res.output
    assert len(list((out / "store" / "velodyne").glob("*.bin"))) == 4


def test_temporary_files_of_a_killed_export_are_removed(built, tmp_path):
    """SIGKILL (or a lost host) gives an export no chance to remove its temporary files; the next export into
    the same directories removes those whose process is gone, and only those."""
    import subprocess
    import sys

    from bench_build.storage.owners import host_name

    out = tmp_path / "o"
    export_version(built, out, corruption="translation", severity=3)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    velodyne = out / "training" / "velodyne"
    stale = velodyne / f".000001.bin.{host_name()}~{dead.pid}.export.tmp"
    alive = velodyne / f".000002.bin.{host_name()}~{os.getppid()}.export.tmp"  # another export, still running
    other_host = velodyne / f".000003.bin.elsewhere~{dead.pid}.export.tmp"  # cannot tell: kept
    mine = velodyne / ".notes.export.tmp"  # not export's name
    for p in (stale, alive, other_host, mine):
        p.write_bytes(b"partial")
    res = runner.invoke(app, ["export", str(built), str(out), *PART, "--force"])
    assert res.exit_code == 0, res.output
    assert "removed 1 temporary files an earlier export left when it was killed" in res.output
    assert not stale.exists() and alive.exists() and other_host.exists() and mine.exists()


def _header_damaged(data: bytes, column: str) -> bytes:
    """``data`` with one bit of ``column``'s first page header flipped so that pyarrow refuses the page in words of
    its own ("Unknown encoding type for levels", "Invalid page header", ...): no page checksum covers a header, and
    the reader's checks recognise none of these as damage."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.pipeline.tamper import chunk_span

    start, length = chunk_span(data, column)
    top = column.split(".")[0]
    for off in range(min(48, length)):
        for bit in (0x01, 0x10, 0x80):
            b = bytearray(data)
            b[start + off] ^= bit
            try:
                pq.ParquetFile(pa.BufferReader(bytes(b)), page_checksum_verification=True).read(columns=[top])
            except OSError as e:
                if not any(w in str(e) for w in ("CRC", "integrity", "thrift", "magic bytes")):
                    return bytes(b)
            except Exception:  # decoded otherwise (ArrowInvalid, ...): not the damage looked for
                continue
    raise AssertionError(f"no header bit of {column} gives one of pyarrow's own read errors")


@pytest.mark.parametrize(("column", "shard", "code"), [("calib.P2.list.element", 0, 2),
                                                       ("points.list.element.list.element", 1, 1)])
def test_damaged_page_header_names_the_file_and_how_to_check_the_version(built, tmp_path, column, shard, code):
    """A damaged page header read as pyarrow's own words: "…part-00000.parquet: Unknown encoding type for levels.",
    with no hint, while every other damaged file names `bench-build verify`. The boxes and calibrations are read
    before writing (exit 2), the points while writing (exit 1); either way OUT is not created."""
    import json
    import shutil

    v = tmp_path / "v"
    shutil.copytree(built, v, ignore=shutil.ignore_patterns("_ledger"))
    shards = [s for s in json.loads((v / "manifest.json").read_text())["shards"]
              if (s["corruption"], s["severity"]) == ("translation", 3)]
    path = v / shards[shard]["path"]
    path.write_bytes(_header_damaged(path.read_bytes(), column))
    res = runner.invoke(app, ["export", str(v), str(tmp_path / "o"), *PART], terminal_width=400)
    line = " ".join(res.output.split())
    assert res.exit_code == code and len(res.output.strip().splitlines()) == 1, res.output
    assert line.startswith(f"error: {path}: ") and "Traceback" not in line, line
    assert f"the version's file cannot be read; `bench-build verify {v}` checks them all" in line, line
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("whole", [False, True], ids=["partition", "all"])
def test_a_partition_the_manifest_lists_no_file_of_is_refused(built, tmp_path, whole):
    """A manifest edited (or cut short) so that it lists no shard of a partition, and not a partial pull's (that one
    names the pull that adds it): --all wrote that velodyne-only partition as an empty folder, "0 frames", exit 0,
    and a partition asked for by name said "no frames to export" without saying where to look."""
    import json
    import shutil

    v = tmp_path / "v"
    shutil.copytree(built, v, ignore=shutil.ignore_patterns("_ledger"))
    manifest = json.loads((v / "manifest.json").read_text())
    name = next(c["name"] for c in manifest["recipe"]["corruptions"] if c["name"] != "translation")
    manifest["shards"] = [s for s in manifest["shards"] if (s["corruption"], s["severity"]) != (name, 2)]
    (v / "manifest.json").write_text(json.dumps(manifest))
    args = ["--all"] if whole else ["--corruption", name, "--severity", "2"]
    res = runner.invoke(app, ["export", str(v), str(tmp_path / "o"), *args], terminal_width=400)
    line = " ".join(res.output.split())
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    assert f"partition {name}/2 has no frames to export: {v / 'manifest.json'} lists no file of it" in line, line
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("where", "said"), [
    ("store", "{o} is an output root of built versions ({v})"),
    ("store/mini-c", "{o} is a benchmark folder of {t}/store, an output root of built versions ({v})"),
    ("copy", "{o} is a version folder"),
    ("copy/kitti", "{o} is inside the version folder {t}/copy"),
])
def test_out_in_a_store_of_built_versions_is_refused(built, tmp_path, where, said):
    """`--all --force` into the output root itself wrote mini-c/clean and mini-c/<corruption>/… beside the version
    folders (mini-c/<version>), where every command reads versions; any version folder or output root, or a folder
    inside one, is refused, exit 2, nothing written. A copy of a version elsewhere (``backup/v``, not named as its
    manifest says) does not make its folder's parent an output root."""
    import shutil

    store, name = tmp_path / "store", f"{built.parent.name}/{built.name}"  # mini-c/<version>, as the build made it
    shutil.copytree(built, store / name, ignore=shutil.ignore_patterns("_ledger"))
    shutil.copytree(built, tmp_path / "copy", ignore=shutil.ignore_patterns("_ledger"))
    (tmp_path / "store" / "exports").mkdir()
    out = tmp_path / where
    before = tree_state(tmp_path)
    res = runner.invoke(app, ["export", str(store / name), str(out), "--all", "--force"],
                        terminal_width=400)
    line = " ".join(res.output.split())
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    assert said.format(o=out, t=tmp_path, v=name) in line and "export to a directory outside it" in line, line
    assert tree_state(tmp_path) == before
    backup = tmp_path / "backup"
    shutil.copytree(built, backup / "v", ignore=shutil.ignore_patterns("_ledger"))
    res = runner.invoke(app, ["export", str(backup / "v"), str(backup / "kitti"), *PART])
    assert res.exit_code == 0, res.output


def test_out_beside_built_versions_or_under_another_manifest_is_exported_into(built, tmp_path):
    """A folder of its own inside an output root (``bench-out/exports``) writes nothing beside the version folders,
    and a ``manifest.json`` that is no version's (a web app's) above OUT makes no version folder: both export."""
    import shutil

    store, name = tmp_path / "store", f"{built.parent.name}/{built.name}"
    shutil.copytree(built, store / name, ignore=shutil.ignore_patterns("_ledger"))
    res = runner.invoke(app, ["export", str(store / name), str(store / "exports" / "kitti"), "--all"])
    assert res.exit_code == 0 and (store / "exports" / "kitti" / "mini-c" / "clean").is_dir(), res.output
    app_dir = tmp_path / "web"
    app_dir.mkdir()
    (app_dir / "manifest.json").write_text('{"name": "my app", "version": "1.0"}')
    res = runner.invoke(app, ["export", str(store / name), str(app_dir / "kitti"), *PART])
    assert res.exit_code == 0 and (app_dir / "kitti" / "training" / "velodyne").is_dir(), res.output


def test_export_marks_its_roots_and_force_takes_only_a_marked_one(built, tmp_path):
    """Every data root export writes holds its marker; --force replaces files only in a root that has it (here or
    in a folder above, up to OUT), so an export made before roots were marked is refused too, by a message that
    names the marker file to create, after which the same command works. An empty OUT takes --force as before."""
    from bench_build.export.plan import EXPORT_MARKER

    one, every = tmp_path / "one", tmp_path / "every"
    export_version(built, one, corruption="translation", severity=3)
    export_version(built, every, all_partitions=True)
    clean = every / "mini-c" / "clean"
    roots = [clean, *sorted(p.parent for p in every.glob("mini-c/*/*/velodyne") if p.parent.parent != clean)]
    assert (one / EXPORT_MARKER).is_file() and len(roots) == 21
    assert all((r / EXPORT_MARKER).is_file() for r in roots)
    assert runner.invoke(app, ["export", str(built), str(one), *PART, "--force"]).exit_code == 0
    (tmp_path / "empty").mkdir()
    assert runner.invoke(app, ["export", str(built), str(tmp_path / "empty"), *PART, "--force"]).exit_code == 0

    for out, args, root in ((one, PART, one), (every, ["--all"], clean)):
        for r in [root] + (roots[1:] if out == every else []):
            (r / EXPORT_MARKER).unlink()  # as the previous release left them
        before = tree_state(out)
        res = runner.invoke(app, ["export", str(built), str(out), *args, "--force"], terminal_width=400)
        line = " ".join(res.output.split())
        assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
        where = f"{out}" if root == out else f"{out}: {root}"
        assert f"{where} holds KITTI files (ImageSets/) but no {EXPORT_MARKER} file" in line, line
        assert f"export into a new or empty directory (an export made before export marked its roots: create " \
               f"{out / EXPORT_MARKER}, then run again)" in line, line
        assert tree_state(out) == before
        (out / EXPORT_MARKER).touch()
        res = runner.invoke(app, ["export", str(built), str(out), *args, "--force"])
        assert res.exit_code == 0, res.output


def test_a_failure_while_marking_leaves_out_as_it_was(built, tmp_path, monkeypatch):
    """The markers are written once every file is staged, before the first moves into place: one that cannot be
    written stops the export with OUT as it was, the markers already made removed with the rest."""
    import bench_build.export.write as export_mod

    real, markers = export_mod._write_file, []

    def failing(path: Path, data: bytes) -> None:
        if path.name == "BENCH_BUILD_EXPORT":
            markers.append(path)
            if len(markers) == 2:
                raise OSError(28, os.strerror(28), str(path))
        real(path, data)

    monkeypatch.setattr(export_mod, "_write_file", failing)
    res = runner.invoke(app, ["export", str(built), str(tmp_path / "o"), "--all"], terminal_width=400)
    line = " ".join(res.output.split())
    assert res.exit_code == 1 and f"{tmp_path / 'o'} is as it was" in line, res.output
    assert len(markers) == 2 and not (tmp_path / "o").exists()
