"""nuScenes reader through nuscenes-devkit on a generated v1.0-mini table set (+ the real sweep when present)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from bench_build.sources.base import SourceError
from bench_build.sources.demo.nuscenes import write_nuscenes
from bench_build.sources.nuscenes import FINE_INDEX, NuScenesSource
from bench_build.stages.frame import Boxes
from bench_build.stages.geometry import assign_points_to_boxes
from bench_build.stages.kernels.boxes import points_in_box_frame
from bench_build.stages.sensor import HDL32E

REAL = Path(__file__).resolve().parents[3] / "shared" / "real" / "nuscenes-lidar-top"


@pytest.fixture(scope="module")
def nu_root(tmp_path_factory) -> Path:
    return write_nuscenes(tmp_path_factory.mktemp("nu"), 3, azimuth_step_deg=0.72)


def test_val_split_frames_points_and_labels(nu_root):
    src = NuScenesSource(nu_root)
    assert (src.version, src.split) == ("v1.0-mini", "mini_val")
    ids = src.list_frames()
    assert len(ids) == 3  # the mini_train scene's frame is not in val
    scenes = [src.index[t]["scene"] for t in ids]
    assert scenes == sorted(scenes) and set(scenes) == {"scene-0103", "scene-0916"}
    assert len(NuScenesSource(nu_root, "v1.0-mini:mini_train").list_frames()) == 1
    f = src.read(ids[0])
    assert f.fields == ("x", "y", "z", "intensity", "ring") and f.intensity_scale == "byte"
    assert f.sensor == HDL32E
    raw = np.fromfile(nu_root / src.index[ids[0]]["filename"], dtype="<f4").reshape(-1, 5)
    np.testing.assert_array_equal(f.points, raw)
    assert f.intensity.max() > 1.0 and f.intensity.max() <= 255
    # ring 0 is the lowest beam: mean elevation grows with the ring id
    ring = f.column("ring").astype(int)
    elev = np.degrees(np.arcsin(f.xyz[:, 2] / np.linalg.norm(f.xyz, axis=1)))
    means = np.array([elev[ring == r].mean() for r in np.unique(ring)])
    assert np.all(np.diff(means) > 0)
    seg = np.fromfile(nu_root / src.index[ids[0]]["lidarseg"], dtype=np.uint8)
    np.testing.assert_array_equal(f.labels["semantic"], seg)
    assert src.describe()["categories"]["17"] == "vehicle.car"
    assert f.attrs["sequence"] == "scene-0103" and f.attrs["timestamp_us"] == 1532402927647951


def test_boxes_in_lidar_frame_hold_their_labelled_points(nu_root):
    """Boxes go global → ego → sensor with the devkit; vehicle-labelled points must fall inside them."""
    src = NuScenesSource(nu_root)
    for fid in src.list_frames():
        f = src.read(fid)
        assert isinstance(f.boxes, Boxes) and len(f.boxes) >= 3
        owner = assign_points_to_boxes(f.xyz, f.boxes)
        veh = np.isin(f.labels["semantic"], [FINE_INDEX["vehicle.car"], FINE_INDEX["vehicle.truck"],
                                             FINE_INDEX["vehicle.bus.rigid"]])
        assert veh.sum() > 10
        assert (owner[veh] >= 0).mean() > 0.99
        assert (owner[f.labels["semantic"] == FINE_INDEX["flat.driveable_surface"]] >= 0).mean() < 0.05


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


#: the nuScenes-lidarseg benchmark's 16 classes (devkit docs / challenge page), class → fine categories; every
#: other category is ignored (0)
LIDARSEG_16 = {
    "barrier": ["movable_object.barrier"], "bicycle": ["vehicle.bicycle"],
    "bus": ["vehicle.bus.bendy", "vehicle.bus.rigid"], "car": ["vehicle.car"],
    "construction_vehicle": ["vehicle.construction"], "motorcycle": ["vehicle.motorcycle"],
    "pedestrian": ["human.pedestrian.adult", "human.pedestrian.child", "human.pedestrian.construction_worker",
                   "human.pedestrian.police_officer"],
    "traffic_cone": ["movable_object.trafficcone"], "trailer": ["vehicle.trailer"], "truck": ["vehicle.truck"],
    "driveable_surface": ["flat.driveable_surface"], "other_flat": ["flat.other"], "sidewalk": ["flat.sidewalk"],
    "terrain": ["flat.terrain"], "manmade": ["static.manmade"], "vegetation": ["static.vegetation"]}


def test_the_build_records_the_lidarseg_benchmark_map(nu_root):
    d = NuScenesSource(nu_root).describe()
    assert d["train_classes"] == ["ignore", *LIDARSEG_16]
    want = {FINE_INDEX[fine]: 1 + i for i, fines in enumerate(LIDARSEG_16.values()) for fine in fines}
    assert {int(k): v for k, v in d["learning_map"].items()} == {i: want.get(i, 0) for i in range(32)}
    assert "LidarsegClassMapper" in d["learning_map_source"]


def test_unknown_sample_token(nu_root, tmp_path):
    src = NuScenesSource(nu_root)
    with pytest.raises(SourceError, match="unknown sample token") as e:
        src.read("0" * 32)
    assert e.value.path.endswith("sample.json")
    root = _copy(nu_root, tmp_path / "r")
    table = root / "v1.0-mini" / "sample_data.json"
    rows = json.loads(table.read_text())
    rows[0]["sample_token"] = "f" * 32
    table.write_text(json.dumps(rows))
    with pytest.raises(SourceError, match="unknown token") as e:
        NuScenesSource(root)
    assert e.value.path == str(table)


def _edit_table(root: Path, name: str, edit) -> Path:
    table = root / "v1.0-mini" / f"{name}.json"
    rows = json.loads(table.read_text())
    edit(rows)
    table.write_text(json.dumps(rows))
    return table


@pytest.mark.parametrize(("name", "edit", "problem"), [
    ("sample", lambda rows: rows[0].update(next="f" * 32), f"refers to unknown token '{'f' * 32}'"),
    ("sample_data", lambda rows: [r.update(ego_pose_token="e" * 32) for r in rows],
     f"refers to unknown token '{'e' * 32}'"),
    ("sample_data", lambda rows: rows[0].pop("token"), "has no 'token' field (1 of"),
    ("calibrated_sensor", lambda rows: [r.pop("rotation") for r in rows], "has no 'rotation' field"),
    ("sample_annotation", lambda rows: rows[0]["translation"].__setitem__(0, float("nan")),
     "translation is not all finite numbers"),
    ("ego_pose", lambda rows: rows[0].update(rotation=[1.0, 0.0, "x", 0.0]), "rotation is not all finite numbers"),
], ids=["next-unknown", "pose-unknown", "token-missing", "field-missing", "ann-nan", "pose-text"])
def test_damaged_table_is_refused_naming_the_table(nu_root, tmp_path, name, edit, problem):
    """Found when the tables are loaded (before any work, so the build exits 2), not as a KeyError traceback
    or an AssertionError in a worker, and never blaming another table."""
    table = _edit_table(_copy(nu_root, tmp_path / "r"), name, edit)
    with pytest.raises(SourceError) as e:
        NuScenesSource(table.parent.parent)
    assert e.value.path == str(table) and problem in str(e.value) and "\n" not in str(e.value)


@pytest.mark.skipif(not REAL.is_dir(), reason="no real nuScenes sweep (optional shared/real data)")
def test_real_sweep_and_its_boxes_through_the_devkit(tmp_path):
    """The real sweep and its 69 boxes written back as global annotations with the recorded lidar2ego and
    ego2global, then read through the devkit: the boxes come back in the LiDAR frame and count their points
    like `num_lidar_pts` (shared/real/README.md: 61 of 69 exactly, 68 within max(2, 5 %))."""
    sweep = np.fromfile(next(REAL.glob("*.pcd.bin")), dtype="<f4").reshape(-1, 5)
    ann = json.loads((REAL / "annotations.json").read_text())
    real = [{"points": sweep, "lidar2ego": ann["lidar2ego"], "ego2global": ann["ego2global"], "boxes": ann["boxes"]}]
    root = write_nuscenes(tmp_path / "nu", 1, real=real, train_frames=0, azimuth_step_deg=2.0)
    src = NuScenesSource(root)
    f = src.read(src.list_frames()[0])
    assert len(f) == 34_688
    np.testing.assert_array_equal(f.points, sweep)
    counts = np.bincount(f.column("ring").astype(int), minlength=32)
    assert counts.tolist() == [1084] * 32
    want = np.array([b["num_lidar_pts"] for b in ann["boxes"]])
    np.testing.assert_allclose(f.boxes.center, [[b["x"], b["y"], b["z"]] for b in ann["boxes"]], atol=1e-6)
    np.testing.assert_allclose(f.boxes.dims, [[b["l"], b["w"], b["h"]] for b in ann["boxes"]], atol=1e-6)
    dyaw = np.angle(np.exp(1j * (f.boxes.heading - [b["yaw"] for b in ann["boxes"]])))
    assert np.abs(dyaw).max() < 1e-5
    # each box counts its own points (num_lidar_pts counts overlapping boxes independently)
    local = [points_in_box_frame(f.xyz.astype(np.float64), f.boxes.center[j], f.boxes.heading[j])
             for j in range(len(want))]
    got = np.array([(np.abs(p) <= f.boxes.dims[j] / 2).all(axis=1).sum() for j, p in enumerate(local)])
    assert (got == want).sum() >= 61
    assert (np.abs(got - want) <= np.maximum(2, 0.05 * want)).sum() >= 68


def test_table_version_from_split_or_cli(nu_root):
    from typer.testing import CliRunner

    from bench_build.cli import app

    assert NuScenesSource(nu_root, "v1.0-mini:").split == "mini_val"
    out = CliRunner().invoke(app, ["run", "robo3d-nuscenes-c", "--source", str(nu_root), "--version",
                                   "v1.0-trainval", "--out", str(nu_root.parent / "o")])
    assert out.exit_code == 2
    assert "v1.0-trainval" in out.output and "nuScenes table missing" in " ".join(out.output.split())


def test_version_without_split_keeps_the_recipes_split(nu_root, tmp_path, monkeypatch):
    """`run --version V` without --split passed ``V:`` to the reader, which read it as its default split (val), so a
    recipe whose split is train built the val frames, and the run said it built split 'V:', not the benchmark's."""
    from typer.testing import CliRunner

    import bench_build.build.run as build_run
    from bench_build.cli import app
    from bench_build.manifests.recipe import builtin_recipes

    recipe = tmp_path / "r.toml"
    recipe.write_text(builtin_recipes()["robo3d-nuscenes-c"].read_text().replace('split = "val"', 'split = "train"'))
    asked: list = []

    def run_build(*args, **kwargs):  # the split the build would read, then stop: exit 3
        asked.append(kwargs["split"])
        raise SystemExit(3)

    monkeypatch.setattr(build_run, "run_build", run_build)
    for extra, split in (([], "v1.0-mini:train"), (["--split", "val"], "v1.0-mini:val")):
        res = CliRunner().invoke(app, ["run", str(recipe), "--source", str(nu_root), "--version", "v1.0-mini",
                                       "--out", str(tmp_path / "o"), "--no-progress", *extra])
        assert res.exit_code == 3 and asked[-1] == split, (res.output, asked)
    assert NuScenesSource(nu_root, asked[0]).split == "mini_train"
    assert len(NuScenesSource(nu_root, asked[0]).list_frames()) == 1  # the train scene's frame, not val's 3


def test_an_empty_or_folder_sweep_is_refused_unless_empty_frames_are_allowed(nu_root, tmp_path):
    """A 0-byte .pcd.bin read as a sweep of 0 points (0 is a multiple of 20 bytes), and a folder in its place was an
    IsADirectoryError (told as a full disk); both are bad input naming the file. --allow-empty-frames reads the
    0-byte sweep (with its 0-byte lidarseg file) as a frame with no points, as for KITTI."""
    from bench_build.manifests.recipe import load_recipe
    from bench_build.sources import open_source

    root = _copy(nu_root, tmp_path / "r")
    src = NuScenesSource(root)
    fid = src.list_frames()[0]
    rec = src.index[fid]
    sweep = root / rec["filename"]
    sweep.write_bytes(b"")
    if rec["lidarseg"] is not None:
        (root / rec["lidarseg"]).write_bytes(b"")
    with pytest.raises(SourceError, match=r"empty sweep \(0 bytes, no points\).*pass --allow-empty-frames") as e:
        NuScenesSource(root).read(fid)
    assert e.value.path == str(sweep)
    recipe = load_recipe("robo3d-nuscenes-c")
    frame = open_source(recipe, root, allow_empty=True).read(fid)
    assert frame.points.shape == (0, 5)
    sweep.unlink()
    sweep.mkdir()
    with pytest.raises(SourceError, match="is a directory, not a point cloud file") as e:
        NuScenesSource(root).read(fid)
    assert e.value.path == str(sweep)


def test_a_recipe_that_reads_labels_refuses_key_frames_without_lidarseg(nu_root, tmp_path):
    """robo3d-nuscenes-c's wet_ground takes the ground from the lidarseg labels: without the expansion, or with
    key frames it does not cover, `run` refuses before any work (exit 2, nothing written), naming the tables."""
    from typer.testing import CliRunner

    from bench_build.cli import app

    assert NuScenesSource(nu_root).unlabelled() is None
    root = _copy(nu_root, tmp_path / "r")
    first = NuScenesSource(root).list_frames()[0]
    rec = NuScenesSource(root).index[first]
    (root / rec["lidarseg"]).unlink()  # the devkit counts the label files against the records
    _edit_table(root, "lidarseg", lambda rows: rows.remove(next(r for r in rows
                                                                if r["sample_data_token"] == rec["sd_token"])))
    src = NuScenesSource(root)
    assert src.unlabelled() == (f"1 of the {len(src.list_frames())} key frames of {root / 'v1.0-mini'} have no "
                                f"lidarseg.json record, e.g. sample {first}")
    (root / "v1.0-mini" / "lidarseg.json").unlink()
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["run", "robo3d-nuscenes-c", "--source", str(root), "--out", str(out),
                                   "--no-progress"])
    assert res.exit_code == 2, res.output
    assert (f"robo3d-nuscenes-c's wet_ground reads per-point semantic labels, but {root / 'v1.0-mini'} has no "
            "lidarseg.json (the nuScenes-lidarseg expansion)") in " ".join(res.output.split())
    assert not out.exists()


def test_a_split_the_devkit_has_not_is_refused_naming_the_recipe_or_the_flag(nu_root, tmp_path):
    """An unknown split failed when the devkit's tables were read, naming the data root but not the recipe file (or
    --split) that chose it. `plan` and `run` now refuse it before any work, naming where it came from."""
    from typer.testing import CliRunner

    from bench_build.cli import app
    from bench_build.manifests.recipe import builtin_recipes

    recipe = tmp_path / "r.toml"
    recipe.write_text(builtin_recipes()["robo3d-nuscenes-c"].read_text().replace('split = "val"', 'split = "vall"'))
    said = ("is not a nuScenes split (it takes VERSION:SPLIT or a devkit split: mini_train, mini_val, test, train, "
            "train_detect, train_track, val)")
    out = tmp_path / "out"
    for command, error in (
            (["plan", str(recipe), "--source", str(nu_root)], f"{recipe}: [benchmark] split 'vall' {said}"),
            (["run", str(recipe), "--source", str(nu_root), "--out", str(out), "--no-progress"],
             f"{recipe}: [benchmark] split 'vall' {said}"),
            (["plan", "robo3d-nuscenes-c", "--source", str(nu_root), "--split", "v1.0-mini:vall"],
             f"--split 'v1.0-mini:vall' {said}")):
        res = CliRunner().invoke(app, command)
        assert res.exit_code == 2, res.output
        assert f"error: {error}" in " ".join(res.output.split()), res.output
    assert not out.exists()
    with pytest.raises(SourceError, match=r"unknown split 'vall' \(devkit splits: mini_train, "):
        NuScenesSource(nu_root, "vall")  # the reader on its own still refuses it, naming the data
