"""Waymo v2 reader: range-image convention, fixture round trip, labelled frames, malformed Parquet."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench_build.sources.base import SourceError
from bench_build.sources.demo.waymo import synthetic_extrinsic, write_waymo
from bench_build.sources.waymo import (
    BOX_COLUMNS,
    CALIB_COLUMNS,
    KEY_LASER,
    KEY_TIME,
    RI1_SHAPE,
    RI1_VALUES,
    TOP,
    WaymoSource,
    beam_inclinations,
    range_image_to_points,
)
from bench_build.stages.geometry import assign_points_to_boxes


def fid_ctx(fid: str) -> str:
    return fid.rpartition("-")[0]


@pytest.fixture(scope="module")
def wo_root(tmp_path_factory) -> Path:
    return write_waymo(tmp_path_factory.mktemp("wo"), 4, width=650)


def test_convention_pixel_by_pixel():
    """Each pixel by the official steps (formats.md §1.5), one at a time, against the vectorised decoder."""
    h, w = 3, 8
    rng = np.random.default_rng(0)
    ri = np.zeros((h, w, 4), np.float32)
    ri[..., 0] = rng.uniform(1, 50, (h, w))
    ri[1, 2, 0] = -1.0  # no return
    yaw = 0.3
    e = np.eye(4)
    e[:2, :2] = [[np.cos(yaw), -np.sin(yaw)], [np.sin(yaw), np.cos(yaw)]]
    e[:3, 3] = [1.0, 2.0, 3.0]
    values = np.array([-0.3, -0.1, 0.05])  # stored lowest first
    incl = beam_inclinations(values, 0.0, 0.0, h)
    assert incl.tolist() == values[::-1].tolist()
    pts, idx = range_image_to_points(ri, e, incl)
    expect = []
    for i in range(h):
        for j in range(w):
            r = float(ri[i, j, 0])
            if r <= 0:
                continue
            az = (2 * (w - j - 0.5) / w - 1) * np.pi - np.arctan2(e[1, 0], e[0, 0])
            inc = values[h - 1 - i]
            p = np.array([r * np.cos(az) * np.cos(inc), r * np.sin(az) * np.cos(inc), r * np.sin(inc), 1.0])
            expect.append((e @ p)[:3])
    np.testing.assert_allclose(pts, np.array(expect), atol=1e-4)  # float32 points, ≤ 50 m
    assert len(pts) == h * w - 1 and idx[0] == 0 and 1 * w + 2 not in idx
    uniform = beam_inclinations(None, -0.2, 0.1, 4)
    np.testing.assert_allclose(uniform, (-0.2 + (np.arange(4) + 0.5) / 4 * 0.3)[::-1])


def test_labelled_frames_points_and_labels(wo_root):
    src = WaymoSource(wo_root)
    ids = src.list_frames()
    assert len(ids) == 2  # 2 segments × 2 frames, the last of each has no segmentation row
    f = src.read(ids[0])
    assert f.fields == ("x", "y", "z", "intensity", "ring", "elongation") and f.intensity_scale == "tanh"
    assert f.sensor.beams == 64 and f.sensor.top_ring_first
    assert 0 <= f.intensity.min() and f.intensity.max() < 1
    ring = f.column("ring")
    assert ring.min() >= 0 and ring.max() <= 63 and np.all(ring == np.round(ring))
    # a ring is one beam: its points share the calibration's elevation (seen from the sensor origin)
    ext = synthetic_extrinsic()
    local = (f.xyz.astype(np.float64) - ext[:3, 3]) @ ext[:3, :3]
    elev = np.degrees(np.arcsin(local[:, 2] / np.linalg.norm(local, axis=1)))
    assert np.abs(elev - f.sensor.elevations[ring.astype(int)]).max() < 1e-3
    # ground sits at vehicle z = 0 (the sensor is 1.73 m up)
    inst = f.labels["instance"]
    assert inst[road := f.labels["semantic"] == 18].max() == 0 and inst[f.labels["semantic"] == 1].min() > 0
    assert f.attrs == {"sequence": fid_ctx(ids[0]), "timestamp_us": int(ids[0].rpartition("-")[2])}
    assert abs(np.median(f.xyz[road, 2])) < 0.05
    owner = assign_points_to_boxes(f.xyz, f.boxes)
    cars = np.isin(f.labels["semantic"], [1, 2, 3])
    assert (owner[cars] >= 0).mean() > 0.99
    assert set(f.boxes.cls) <= {"Vehicle", "Pedestrian", "Cyclist"}


def test_unlabelled_source_lists_every_top_frame(wo_root, tmp_path):
    root = shutil.copytree(wo_root, tmp_path / "r")
    shutil.rmtree(root / "validation" / "lidar_segmentation")
    src = WaymoSource(root / "validation")
    assert len(src.list_frames()) == 4
    assert "semantic" not in src.read(src.list_frames()[-1]).labels


def test_a_recipe_that_reads_labels_refuses_a_source_without_them(wo_root, tmp_path):
    """robo3d-wod-c's wet_ground takes the ground from the segmentation labels: without the component every task
    would fail at that stage, so `run` refuses first (exit 2, nothing written), naming the folder."""
    from typer.testing import CliRunner

    from bench_build.cli import app

    assert WaymoSource(wo_root / "validation").unlabelled() is None
    root = shutil.copytree(wo_root, tmp_path / "r")
    shutil.rmtree(root / "validation" / "lidar_segmentation")
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["run", "robo3d-wod-c", "--source", str(root), "--out", str(out), "--no-progress"])
    assert res.exit_code == 2, res.output
    assert (f"robo3d-wod-c's wet_ground reads per-point semantic labels, but {root / 'validation'} has no "
            "lidar_segmentation component folder") in " ".join(res.output.split())
    assert not out.exists()


def test_missing_column_names_file_and_column(wo_root, tmp_path):
    root = shutil.copytree(wo_root, tmp_path / "r")
    path = next((root / "validation" / "lidar").glob("*.parquet"))
    t = pq.read_table(path)
    pq.write_table(t.drop_columns([RI1_SHAPE]), path)
    src = WaymoSource(root)
    fid = next(i for i in src.list_frames() if i.startswith(path.stem))
    with pytest.raises(SourceError, match="missing column") as e:
        src.read(fid)
    assert e.value.path == str(path) and RI1_SHAPE in str(e.value)


def test_missing_calibration_row_names_the_calibration_file(wo_root, tmp_path):
    root = shutil.copytree(wo_root, tmp_path / "r")
    path = next((root / "validation" / "lidar_calibration").glob("*.parquet"))
    t = pq.read_table(path, columns=list(CALIB_COLUMNS))
    keep = np.asarray(t.column(KEY_LASER).to_numpy()) != TOP
    pq.write_table(t.filter(keep), path)
    src = WaymoSource(root)
    fid = next(i for i in src.list_frames() if i.startswith(path.stem))
    with pytest.raises(SourceError, match="no calibration row for the TOP laser") as e:
        src.read(fid)
    assert e.value.path == str(path)


def _set_pixel_value(path: Path, returned: bool, channel: int, value: float) -> None:
    """Set ``channel`` of the first pixel with (``returned``) or without a return in every range image of ``path``."""
    t = pq.read_table(path)
    images = t.column(RI1_VALUES).to_pylist()
    for v in images:
        pixel = next(k for k in range(0, len(v), 4) if (v[k] > 0) == returned)
        v[pixel + channel] = value
    i = t.column_names.index(RI1_VALUES)
    pq.write_table(t.set_column(i, RI1_VALUES, pa.array(images, t.schema.field(RI1_VALUES).type)), path)


@pytest.mark.parametrize(("channel", "value"), [(0, np.inf), (0, np.nan), (1, np.nan), (2, -np.inf)],
                         ids=["range-inf", "range-nan", "intensity-nan", "elongation-inf"])
def test_nan_or_inf_in_a_returned_pixel_names_the_lidar_file(wo_root, tmp_path, channel, value):
    """A damaged value is refused, not written as a point with NaN/inf coordinates or features."""
    root = shutil.copytree(wo_root, tmp_path / "r")
    path = next((root / "validation" / "lidar").glob("*.parquet"))
    _set_pixel_value(path, True, channel, value)
    src = WaymoSource(root)
    fid = next(i for i in src.list_frames() if i.startswith(path.stem))
    with pytest.raises(SourceError, match=r"1 pixel\(s\) with NaN/inf range, intensity or elongation") as e:
        src.read(fid)
    assert e.value.path == str(path) and "\n" not in str(e.value)


def test_nan_in_a_pixel_without_return_is_ignored(wo_root, tmp_path):
    """Pixels with range ≤ 0 are no points: their other channels are never read, whatever they hold."""
    root = shutil.copytree(wo_root, tmp_path / "r")
    path = next((root / "validation" / "lidar").glob("*.parquet"))
    _set_pixel_value(path, False, 1, np.nan)
    fid = next(i for i in WaymoSource(root).list_frames() if i.startswith(path.stem))
    np.testing.assert_array_equal(WaymoSource(root).read(fid).points, WaymoSource(wo_root).read(fid).points)


@pytest.mark.parametrize(("field", "value"), [(0, np.nan), (4, np.inf), (6, -np.inf)],
                         ids=["center.x-nan", "size.y-inf", "heading-inf"])
def test_nan_or_inf_in_a_box_names_the_box_file_timestamp_and_box(wo_root, tmp_path, field, value):
    """A damaged box value is refused (the shard fails), not written as a box with NaN/inf values."""
    root = shutil.copytree(wo_root, tmp_path / "r")
    path = next((root / "validation" / "lidar_box").glob("*.parquet"))
    t = pq.read_table(path)
    times = t.column(KEY_TIME).to_pylist()
    ts = times[0]
    row = [k for k, v in enumerate(times) if v == ts][1]  # the timestamp's second box
    values = t.column(BOX_COLUMNS[field]).to_pylist()
    values[row] = float(value)
    i = t.column_names.index(BOX_COLUMNS[field])
    pq.write_table(t.set_column(i, BOX_COLUMNS[field], pa.array(values, pa.float64())), path)
    src = WaymoSource(root)
    fid = f"{path.stem}-{ts}"
    n = times.count(ts)
    with pytest.raises(SourceError) as e:
        src.read(fid)
    assert e.value.path == str(path) and "\n" not in str(e.value)
    name = BOX_COLUMNS[field].rpartition(".box.")[2]
    assert f"boxes of timestamp {ts}: 1 of {n} with NaN/inf values (first: box 1, {name})" in str(e.value)
    other = f"{path.stem}-{next(v for v in times if v != ts)}"  # the file's other frame reads as before
    np.testing.assert_array_equal(src.read(other).boxes.center, WaymoSource(wo_root).read(other).boxes.center)


def test_a_box_without_its_type_names_the_box_file(wo_root, tmp_path):
    """A null class in lidar_box crashed the reader in int(); it is damage, named like a NaN box value."""
    root = shutil.copytree(wo_root, tmp_path / "r")
    path = next((root / "validation" / "lidar_box").glob("*.parquet"))
    t = pq.read_table(path)
    ts = t.column(KEY_TIME)[0].as_py()
    col = t.column(BOX_COLUMNS[-1])
    values = col.to_pylist()
    values[0] = None
    t = t.set_column(t.column_names.index(BOX_COLUMNS[-1]), BOX_COLUMNS[-1], pa.array(values, col.type))
    pq.write_table(t, path)
    with pytest.raises(SourceError) as e:
        WaymoSource(root).read(f"{path.stem}-{ts}")
    assert e.value.path == str(path)
    assert f"boxes of timestamp {ts}: 1 of " in str(e.value) and f"without a {BOX_COLUMNS[-1]} value" in str(e.value)


def test_small_row_groups_read_the_same_frames(wo_root, tmp_path):
    """Frames are read row group by row group (the file's keys once, then only the groups a frame is in)."""
    root = shutil.copytree(wo_root, tmp_path / "r")
    for tag in ("lidar", "lidar_segmentation", "lidar_box"):
        for path in (root / "validation" / tag).glob("*.parquet"):
            pq.write_table(pq.read_table(path), path, row_group_size=1)
    assert pq.ParquetFile(next((root / "validation" / "lidar").glob("*.parquet"))).num_row_groups == 2
    a, b = WaymoSource(wo_root), WaymoSource(root)
    assert a.list_frames() == b.list_frames()
    for fid in reversed(b.list_frames()):  # out of order too
        fa, fb = a.read(fid), b.read(fid)
        np.testing.assert_array_equal(fa.points, fb.points)
        np.testing.assert_array_equal(fa.labels["semantic"], fb.labels["semantic"])
        np.testing.assert_array_equal(fa.boxes.center, fb.boxes.center)


def test_a_split_folder_is_read_only_as_its_own_split(wo_root, tmp_path):
    """A root that is itself a split folder was read whatever split was named: `--source …/validation` with
    `split = "training"` built the validation frames under the training split's name. The root is now taken as the
    split named only when it is that split's folder (or when no split is named), else an error naming both."""
    from typer.testing import CliRunner

    from bench_build.cli import app

    folder = wo_root / "validation"
    ids = WaymoSource(wo_root).list_frames()
    assert WaymoSource(folder).list_frames() == WaymoSource(folder, "validation").list_frames() == ids
    with pytest.raises(SourceError) as e:
        WaymoSource(folder, "training")
    assert str(e.value) == (f"{folder}: split 'training' not found: no {folder / 'training' / 'lidar'}, and {folder} "
                            "is the split folder 'validation' (pass the folder that holds training/, or split "
                            "'validation' to build this one)")
    with pytest.raises(SourceError) as e:
        WaymoSource(wo_root, "training")
    assert str(e.value) == (f"{wo_root}: split 'training' not found: no {wo_root / 'training' / 'lidar'} (the split "
                            "folders there: validation)")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SourceError, match=r"no Waymo v2 'lidar' component folder \(looked in "):
        WaymoSource(empty, "training")
    out = tmp_path / "out"
    for command in (["plan", "robo3d-wod-c", "--source", str(folder), "--split", "training"],
                    ["run", "robo3d-wod-c", "--source", str(folder), "--split", "training", "--out", str(out),
                     "--no-progress"]):
        res = CliRunner().invoke(app, command)
        assert res.exit_code == 2, res.output
        assert f"error: {folder}: split 'training' not found: no" in " ".join(res.output.split()), res.output
    assert not out.exists()


def test_a_split_folder_read_with_no_split_named_records_the_split_it_is(wo_root, tmp_path, shared_ray):
    """With no split named, a split folder given as the root is read whatever its name, and `describe()` (the
    manifest's source, the card) said ``split: validation`` even for `--source …/training`. It now records the
    folder's name when that is a Waymo split, else no split and a note that the folder was read as given; the
    folder holding the splits and a split named are recorded as before."""
    from typer.testing import CliRunner

    from bench_build.cli import app
    from bench_build.manifests.card import render_card
    from bench_build.manifests.manifest import read_manifest
    from bench_build.manifests.recipe import load_recipe

    ids = WaymoSource(wo_root).list_frames()
    assert WaymoSource(wo_root).describe()["split"] == "validation"
    assert WaymoSource(wo_root / "validation", "validation").describe()["split"] == "validation"
    for name in ("training", "testing", "validation", "my_wod"):
        folder = tmp_path / name
        shutil.copytree(wo_root / "validation", folder)
        src = WaymoSource(folder)
        assert src.list_frames() == ids
        described = src.describe()
        if name == "my_wod":
            assert described["split"] is None and described["split_note"] == (
                "folder my_wod read as given, not a Waymo split (training, validation, testing)")
        else:
            assert described["split"] == name and "split_note" not in described
    # a build of a recipe that names no split, from the training folder: its manifest and card say training
    recipe = tmp_path / "wod-folder.toml"
    recipe.write_text('[benchmark]\nname = "wod-folder"\nversion = "0.1.0"\nseed = 1\nsource = "waymo"\n'
                      'severities = 1\n[corruptions.motion_blur]\nstage = "motion_blur"\nsigma = [0.06]\n')
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["run", str(recipe), "--source", str(tmp_path / "training"), "--out", str(out),
                                   "--max-frames", "1", "--workers", "1", "--no-progress"])
    assert res.exit_code == 0, res.output
    version = out / "wod-folder" / "0.1.0"
    manifest = read_manifest(version)
    assert manifest["source"]["split"] == "training" and "split_note" not in manifest["source"]
    card = (version / "README.md").read_text()
    assert "- Source: `waymo` (training), 1 frame," in card and '  - split: "train"' in card
    # the card of a folder read as given says so
    note = "folder my_wod read as given, not a Waymo split (training, validation, testing)"
    card = render_card({**manifest, "source": {**manifest["source"], "split": None, "split_note": note}},
                       load_recipe(str(recipe)))
    assert f"- Source: `waymo` ({note}), 1 frame," in card


def test_wod_c_ring_stages_use_the_range_image_rows(wo_root):
    """Waymo's points are in the vehicle frame, whose origin lies 1.7–2.2 m below the LiDAR, so the ring column
    (the range-image row) fails `ring_column_valid`'s elevation check there: ``ring_method = "column"`` fell back
    to the HDL-64E laser table, and WOD-C's beam missing and cross-sensor deleted other rows than the rule's —
    cross-sensor kept 27,458 / 25,630 / 41,821 of a demo scan's 95,881 points at light / moderate / heavy. The
    recipe now takes the rows as they are (``row``): cross-sensor keeps every 2nd point of the rows it does not
    delete, so its counts follow from the clean scan's rows exactly, and fall with the severity."""
    from bench_build.manifests.recipe import load_recipe
    from bench_build.stages.density.cross_sensor import deleted_rings
    from bench_build.stages.frame import Frame
    from bench_build.stages.registry import get_stage
    from bench_build.stages.ring import frame_rings

    frame = WaymoSource(wo_root).read(WaymoSource(wo_root).list_frames()[0])
    assert frame_rings(frame, "column")[1] != "column"  # the check, seen from the vehicle origin, fails
    rings, used = frame_rings(frame, "row")
    assert used == "column" and np.array_equal(rings, frame.column("ring").astype(np.int64))
    recipe = load_recipe("robo3d-wod-c")
    cross = next(c for c in recipe.corruptions if c.name == "cross_sensor")
    kept = []
    for s, params in enumerate(cross.params, start=1):
        assert params.ring_method == "row"
        out = get_stage(cross.stage).fn(frame, params, np.random.default_rng(s))
        rows = ~np.isin(rings, deleted_rings(params))
        assert len(out) == (int(rows.sum()) + 1) // 2 and out.info["ring_method"] == "column", (s, params)
        kept.append(len(out))
    assert kept[0] > kept[1] > kept[2]
    with pytest.raises(ValueError, match="ring_method 'row' needs a ring column"):
        frame_rings(Frame(frame.frame_id, frame.points[:, :4], frame.fields[:4], frame.intensity_scale), "row")


def test_wod_c_weather_is_measured_from_the_top_laser(tmp_path):
    """Waymo's points are in the vehicle frame: from its origin (on the ground, behind the laser) every ground
    return meets the ground at a grazing angle, so wet ground's reflectance fit went astray (a full-resolution
    demo scan lost all its ground returns at heavy) and snow's ground fit failed, skipping its noise floor.
    WOD-C's fog, wet ground and snow run with ``origin = "lidar"`` (the frame's `Sensor.origin`, the extrinsic's
    translation): wet ground keeps most ground returns, darkened, and snow's noise floor runs. Nothing else of
    the recipe measures from the laser."""
    from dataclasses import replace

    from bench_build.build.shard import partition_meta
    from bench_build.manifests.recipe import load_recipe

    src = WaymoSource(write_waymo(tmp_path, 4))  # full resolution: 2,650 columns
    frame = src.read(src.list_frames()[0])
    np.testing.assert_allclose(frame.sensor.origin, synthetic_extrinsic()[:3, 3])
    recipe = load_recipe("robo3d-wod-c")
    assert recipe.version == "1.2.0"
    assert {c.name for c in recipe.corruptions if c.origin == "lidar"} == {"fog", "wet_ground", "snow"}
    assert partition_meta(recipe, "fog", 1)["origin"] == "lidar"
    assert "origin" not in partition_meta(recipe, "crosstalk", 1)
    ground = np.isin(frame.labels["semantic"], [17, 18, 20, 21, 22])
    wet = recipe.corruption("wet_ground")
    kept = {o: len(replace(wet, origin=o).apply(frame, 3, np.random.default_rng(0))) - int((~ground).sum())
            for o in ("lidar", "points")}
    assert kept["points"] < 0.05 * ground.sum() and kept["lidar"] > 0.8 * ground.sum(), (kept, ground.sum())
    snow = recipe.corruption("snow")
    for origin, floor in (("lidar", True), ("points", False)):
        out = replace(snow, origin=origin).apply(frame, 1, np.random.default_rng(0))
        assert out.info["snow_noise_floor"] is floor and out.info["snow_focal"] == "hdl64e_s3/row", origin

