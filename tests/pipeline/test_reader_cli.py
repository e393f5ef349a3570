"""Reader API, plain pyarrow/DuckDB access, label export, and the small CLI commands."""

from __future__ import annotations

import json

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import pytest
from typer.testing import CliRunner

from bench_build.cli import app
from bench_build.export import export_version
from bench_build.format.reader import open_version
from bench_build.sources.kitti import KittiSource

runner = CliRunner()


@pytest.fixture
def built(mini_build):
    return mini_build


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
    assert t.schema.field("severity").type == pa.int32() and t.schema.field("corruption").type == pa.string()
    pts = np.array(t["points"][0].as_py(), dtype=np.float32)  # N×C straight from the column type
    assert pts.shape == (t["num_points"][0].as_py(), 4)
    rows = duckdb.sql(
        f"SELECT corruption, severity, count(*) AS n FROM read_parquet('{built}/data/**/*.parquet', "
        "hive_partitioning = true) GROUP BY ALL ORDER BY ALL").fetchall()
    assert len(rows) == 1 + 4 * 5 and all(n == 4 for *_, n in rows)  # clean is a partition of the same tree
    by_part = manifest["counts"]["by_partition"]
    assert {(c, s): n for c, s, n in rows} == {
        (k.split("/")[0], int(k.split("/")[1])): v["examples"] for k, v in by_part.items()}


def test_export_writes_labels_of_the_corrupted_scene(built, tmp_path):
    assert export_version(built, tmp_path / "exp", corruption="translation", severity=5).frames == 4
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
    assert "; 1 render verified" in out.output and "(s)" not in out.output  # the contact sheet, counted in words
    assert not (built / "clean").exists() and (built / "data" / "corruption=clean" / "severity=0").is_dir()
    out = runner.invoke(app, ["verify", str(tmp_path)])
    assert out.exit_code == 2 and "no manifest" in out.output
    out = runner.invoke(app, ["demo-data", str(tmp_path / "d"), "--frames", "1"])
    assert out.exit_code == 0
    assert (tmp_path / "d" / "training" / "velodyne" / "000000.bin").stat().st_size % 16 == 0
    assert KittiSource(tmp_path / "d").list_frames() == ["000000"]
    out = runner.invoke(app, ["run", "no-such-benchmark"])
    assert out.exit_code == 2 and "unknown benchmark" in out.output


def test_verify_counts_one_file_in_words(tmp_path, monkeypatch):
    """A version of one file (a partial pull of one clean shard) said "1 files verified"."""
    from bench_build.manifests import manifest

    monkeypatch.setattr(manifest, "verify_version", lambda root: manifest.VerifyReport(checked=1))
    out = runner.invoke(app, ["verify", str(tmp_path)])
    assert out.exit_code == 0 and "OK: 1 file verified, no unlisted data file" in out.output, out.output
    monkeypatch.setattr(manifest, "verify_version", lambda root: manifest.VerifyReport(checked=1, problems=["x"]))
    out = runner.invoke(app, ["verify", str(tmp_path)])
    assert out.exit_code == 1 and "1 problem; 1 listed file checked" in out.output, out.output


def test_layout_v1_is_refused_with_a_clear_message(built, tmp_path):
    import shutil

    old = tmp_path / "v1"
    shutil.copytree(built, old, ignore=shutil.ignore_patterns("_ledger"))
    manifest = json.loads((old / "manifest.json").read_text())
    (old / "manifest.json").write_text(json.dumps({**manifest, "manifest_version": 1}))
    with pytest.raises(ValueError, match=r"manifest_version 1 is layout v1 .* rebuild it"):
        open_version(old)
    out = runner.invoke(app, ["verify", str(old)])
    assert out.exit_code == 2 and "layout v1" in out.output and "rebuild" in out.output


# -- integrity: page checksums and the manifest's sizes ----------------------------------------------------
def _copy(built, tmp_path):
    import shutil

    copy = tmp_path / "v"
    shutil.copytree(built, copy, ignore=shutil.ignore_patterns("_ledger"))
    return copy


def test_a_flipped_byte_in_a_points_page_fails_the_read_naming_the_file(built, tmp_path):
    from bench_build.format.checked import IntegrityError
    from tests.pipeline.tamper import flip_file

    v = _copy(built, tmp_path)
    entry = open_version(v).shards("beam_del", 5)[0]
    path = v / entry["path"]
    want = {ex.key: ex.points for ex in open_version(built).examples("beam_del", 5)}
    flip_file(path)
    assert path.stat().st_size == entry["bytes"]  # same size: only the page checksum can tell
    with pytest.raises(IntegrityError, match=rf"{entry['path']}: a data page does not match its checksum"
                                             r".*re-pull it or run `bench-build verify"):
        list(open_version(v).examples("beam_del", 5))
    # unverified, the same bytes decode to other points without a word: the flip hit page data
    got = {ex.key: ex.points for ex in open_version(v, verify=False).examples("beam_del", 5)}
    assert got.keys() == want.keys()
    assert any(got[k].tobytes() != want[k].tobytes() for k in want)
    # the other partitions still read
    assert len(list(open_version(v).examples("beam_del", 4))) == 4


def test_a_file_of_another_size_fails_on_open_naming_the_manifests_value(built, tmp_path):
    from bench_build.format.checked import IntegrityError

    v = _copy(built, tmp_path)
    shorter, longer = open_version(v).shards("translation", 3)
    with open(v / shorter["path"], "r+b") as f:
        f.truncate(shorter["bytes"] - 10)
    with open(v / longer["path"], "ab") as f:
        f.write(b"\0" * 7)
    ds = open_version(v)
    with pytest.raises(IntegrityError, match=rf"{shorter['path']}: {shorter['bytes'] - 10} bytes, manifest says "
                                             rf"{shorter['bytes']}; the file changed since the build"):
        next(ds.read_file(shorter))
    with pytest.raises(IntegrityError, match=rf"{longer['path']}: {longer['bytes'] + 7} bytes, manifest says "
                                             rf"{longer['bytes']}"):
        next(ds.read_file(longer))
    with pytest.raises(IntegrityError, match="manifest says"):  # ValueError: the CLI's one-line path
        list(ds.examples("translation", 3))
    (v / shorter["path"]).unlink()
    with pytest.raises(FileNotFoundError, match=rf"{shorter['path']}: listed in the manifest but missing"):
        next(ds.read_file(shorter))


def test_a_scan_builds_card_keeps_its_lidar_tag_and_intensity_scale(built):
    """The other side of the object card's check (test_object_build.py): a KITTI build is LiDAR scans."""
    card = (built / "README.md").read_text()
    header, source = card.split("\n---\n")[0], next(x for x in card.splitlines() if x.startswith("- Source:"))
    assert "- lidar" in header and "- 3d-shapes" not in header, header
    assert "intensity scale `unit`" in source, source
