"""Reader API, plain pyarrow/DuckDB access, label export, and the small CLI commands."""

from __future__ import annotations

import json

import duckdb
import numpy as np
import pyarrow.dataset as pads
import pytest
from typer.testing import CliRunner

from pipeline.build import run_build
from pipeline.cli import app
from pipeline.reader import export_kitti, open_version
from pipeline.sources.kitti import KittiSource

runner = CliRunner()


@pytest.fixture(scope="module")
def built(tmp_path_factory, demo_kitti_master):
    from tests.conftest import SMALL_RECIPE

    tmp = tmp_path_factory.mktemp("built")
    recipe = tmp / "mini-c.toml"
    recipe.write_text(SMALL_RECIPE)
    res = run_build(str(recipe), source=str(demo_kitti_master), out=tmp / "out", workers=2,
                    max_frames=4, frames_per_shard=2, progress=False)
    assert res.ok
    return res.version_dir


def test_reader_filters_and_decodes(built, demo_kitti_master):
    ds = open_version(built)
    src = KittiSource(demo_kitti_master)
    clean = {ex.frame_id: ex for ex in ds.examples(severity=0)}
    assert sorted(clean) == ["000000", "000001", "000002", "000003"]
    for fid, ex in clean.items():  # the clean copy is the source scan, bit for bit
        frame = src.read(fid)
        assert ex.corruption == "clean" and ex.severity == 0
        np.testing.assert_array_equal(ex.points, frame.points)
        assert ex.fields == ("x", "y", "z", "intensity")
        np.testing.assert_allclose(ex.boxes.center, frame.boxes.center, atol=1e-4)
        assert list(ex.boxes.cls) == list(frame.boxes.cls)
        np.testing.assert_allclose(ex.calib.velo_to_rect, frame.calib.velo_to_rect)
    exs = list(ds.examples(corruption="beam_del", severity=5, frames=["000002"]))
    assert len(exs) == 1 and exs[0].key == "mini-c/000002/beam_del/5"
    n = len(clean["000002"].points)
    assert len(exs[0].points) == n - n // 3
    bg = ds.example("000001", "background", 5)
    added = bg.point_tag == 7
    assert added.sum() == len(clean["000001"].points) // 20 and not added[: -added.sum()].any()
    frame = bg.to_frame()
    assert len(frame) == len(bg.points) and frame.labels["point_tag"] is bg.point_tag
    with pytest.raises(KeyError, match="no corruption 'fog'"):
        next(ds.examples(corruption="fog"))


def test_plain_pyarrow_and_duckdb(built):
    manifest = json.loads((built / "manifest.json").read_text())
    t = pads.dataset(built / "data", format="parquet", partitioning="hive").to_table(
        filter=(pads.field("corruption") == "gaussian_rad") & (pads.field("severity") == 3))
    assert t.num_rows == 4
    fields = json.loads(t.schema.metadata[b"bench_build"])["fields"]
    col = t["points"].combine_chunks()
    pts = col.values.to_numpy().reshape(-1, len(fields))
    assert len(pts) == sum(t["num_points"].to_pylist())
    rows = duckdb.sql(
        f"SELECT corruption, severity, count(*) AS n FROM read_parquet('{built}/data/**/*.parquet', "
        "hive_partitioning = true) GROUP BY ALL ORDER BY ALL").fetchall()
    assert len(rows) == 4 * 5 and all(n == 4 for *_, n in rows)
    by_part = manifest["counts"]["by_partition"]
    assert {(c, s): n for c, s, n in rows} == {
        (k.split("/")[0], int(k.split("/")[1])): v["examples"] for k, v in by_part.items() if not k.startswith("clean")}


def test_export_writes_labels_of_the_corrupted_scene(built, tmp_path):
    n = export_kitti(built, tmp_path / "exp", corruption="translation", severity=5)
    assert n == 4
    src = KittiSource(tmp_path / "exp")
    ex = open_version(built).example("000001", "translation", 5)
    back = src.read("000001")
    np.testing.assert_allclose(back.points, ex.points)
    clean = open_version(built).example("000001", "clean", 0)
    moved = np.linalg.norm(back.boxes.center[:, :2] - clean.boxes.center[:, :2], axis=1)
    # kitti-c s5 (released generator): |Δx|, |Δy| each in [0.8, 1.0] m, within the label text's 1 cm precision
    assert ((moved > np.sqrt(2) * 0.8 - 0.02) & (moved < np.sqrt(2) * 1.0 + 0.02)).all()


def test_list_status_verify_and_demo_data(built, tmp_path):
    out = runner.invoke(app, ["list"])
    assert out.exit_code == 0 and "kitti-c" in out.output and "uniform_rad" in out.output
    out = runner.invoke(app, ["verify", str(built)])
    assert out.exit_code == 0 and "OK: 42 files verified" in out.output
    out = runner.invoke(app, ["verify", str(tmp_path)])
    assert out.exit_code == 2 and "no manifest" in out.output
    out = runner.invoke(app, ["demo-data", str(tmp_path / "d"), "--frames", "1"])
    assert out.exit_code == 0
    assert (tmp_path / "d" / "training" / "velodyne" / "000000.bin").stat().st_size % 16 == 0
    assert KittiSource(tmp_path / "d").list_frames() == ["000000"]
    out = runner.invoke(app, ["run", "no-such-benchmark"])
    assert out.exit_code == 2 and "unknown benchmark" in out.output
