"""Row encoding round trip (layout v2): N×C points, tags, boxes, calib, info, and the optional columns."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench_build.format.reader import rows_of
from bench_build.format.schema import (
    EXAMPLE_COLUMNS,
    POINT_COLUMNS,
    encode_rows,
    file_metadata,
    row_schema,
    schema_with_metadata,
)
from bench_build.stages.frame import PointTag
from tests.stages.conftest import make_scene


def test_round_trip_keeps_points_tags_boxes_and_info():
    a = make_scene(1, n_ground=2000, n_per_car=50, with_ring=True)
    b = a.append(np.zeros((3, 5), np.float32), tag=PointTag.SYNTHETIC).with_info(ring_method="azimuth_wrap",
                                                                                  fog_alpha=0.02)
    batch = encode_rows([("k/a/clean/0", "clean", 0, a), ("k/a/clean/0", "clean", 0, b)])
    assert batch.schema == row_schema(a.fields)
    # N×C without any metadata: the element type carries C
    assert batch.schema.field("points").type == pa.list_(pa.list_(pa.float32(), 5))
    assert "corruption" not in batch.schema.names and "severity" not in batch.schema.names  # hive keys only
    table = pa.Table.from_batches([batch])
    assert table["info"].to_pylist()[0] is None
    assert json.loads(table["info"].to_pylist()[1]) == {"fog_alpha": 0.02, "ring_method": "azimuth_wrap"}
    first = np.array(table["points"][0].as_py(), dtype=np.float32)
    assert first.shape == (len(a), 5)
    np.testing.assert_array_equal(first, a.points)
    ea, eb = rows_of(table, {"fields": list(a.fields), "intensity_scale": "unit"}, "fog", 2)
    np.testing.assert_array_equal(ea.points, a.points)
    assert ea.corruption == "fog" and ea.severity == 2  # from the partition, not from the row
    np.testing.assert_array_equal(eb.point_tag[-3:], [PointTag.SYNTHETIC] * 3)
    assert not eb.point_tag[:-3].any()
    assert ea.points.flags.writeable and eb.point_tag.flags.writeable  # torch.from_numpy needs no copy
    ea.points[0, 0] = 123.0  # a private copy: the other row and the Arrow buffers are untouched
    assert eb.points[0, 0] == b.points[0, 0]
    assert ea.info == {} and eb.info == {"fog_alpha": 0.02, "ring_method": "azimuth_wrap"}
    assert eb.to_frame().info == b.info
    np.testing.assert_allclose(eb.boxes.center, b.boxes.center, rtol=1e-6)
    assert list(eb.boxes.cls) == list(b.boxes.cls)
    np.testing.assert_allclose(eb.calib.velo_to_rect, b.calib.velo_to_rect)


def test_optional_columns_are_typed_present_only_when_declared_and_null_when_unknown(tmp_path):
    a = make_scene(2, n_ground=500, n_per_car=20)
    n = len(a)
    rng = np.random.default_rng(0)
    sem = rng.integers(0, 2**32 - 1, n, dtype=np.uint64).astype(np.uint32)  # raw ids use the full uint32 range
    sigma = rng.random(n, dtype=np.float32)
    x = replace(a.with_points(a.points, semantic=sem, sigma=sigma).with_info(drawn=0.5),
                attrs={"class_name": "car", "class_id": 7, "known": True})
    y = replace(a, attrs={"class_name": "plant"})  # no per-point labels, no class id: nulls
    cols = ("known", "sigma", "class_name", "semantic", "class_id")  # any order: stored in canonical order
    schema = schema_with_metadata({"fields": list(a.fields), "intensity_scale": "unit", "corruption": "clean",
                                   "severity": 0}, columns=cols)
    assert [c for c in schema.names if c in POINT_COLUMNS or c in EXAMPLE_COLUMNS] == \
        ["semantic", "sigma", "class_name", "class_id", "known"]
    assert "split" not in schema.names and "mu" not in schema.names  # undeclared: absent, not null columns
    batch = encode_rows([("k/x/clean/0", "clean", 0, x), ("k/y/clean/0", "clean", 0, y)], schema)
    path = tmp_path / "f.parquet"
    pq.write_table(pa.Table.from_batches([batch]), path)
    table = pq.read_table(path)
    assert table.schema.field("semantic").type == pa.list_(pa.uint32())
    assert table["class_id"].type == pa.int32() and table["known"].type == pa.bool_()
    assert table["class_name"].to_pylist() == ["car", "plant"]
    assert table["class_id"].to_pylist() == [7, None] and table["known"].to_pylist() == [True, None]
    assert table["semantic"].to_pylist()[1] is None
    assert json.loads(table["info"][0].as_py()) == {"drawn": 0.5}  # what a stage recorded stays in info
    meta = file_metadata(table.schema)
    assert meta["schema_version"] == 2 and meta["columns"] == ["semantic", "sigma", "class_name", "class_id", "known"]
    ex, ey = rows_of(table, meta, "clean", 0)
    np.testing.assert_array_equal(ex.semantic, sem)
    np.testing.assert_array_equal(ex.labels["sigma"], sigma)
    assert ex.attrs == {"class_name": "car", "class_id": 7, "known": True}
    assert ey.semantic is None and "sigma" not in ey.labels and ey.attrs["class_id"] is None
    back = ex.to_frame()
    np.testing.assert_array_equal(back.labels["semantic"], sem)
    assert back.attrs == {"class_name": "car", "class_id": 7, "known": True} and back.info == {"drawn": 0.5}


def test_undeclared_labels_and_unknown_columns_are_refused():
    a = make_scene(3, n_ground=200, n_per_car=10)
    labelled = a.with_points(a.points, semantic=np.zeros(len(a), np.uint32))
    with pytest.raises(ValueError, match=r"per-point label\(s\) \['semantic'\] are not columns"):
        encode_rows([("k", "clean", 0, labelled)])
    with pytest.raises(ValueError, match=r"source attribute\(s\) \['class_name'\] are not columns"):
        encode_rows([("k", "clean", 0, replace(a, attrs={"class_name": "car"}))])
    with pytest.raises(ValueError, match="unknown optional column"):
        row_schema(a.fields, ("semantics",))
    with pytest.raises(ValueError, match=r"4 point fields .* files have 5"):
        encode_rows([("k", "clean", 0, make_scene(4, n_ground=50, n_per_car=5, with_ring=False))],
                    row_schema(("x", "y", "z", "intensity", "ring")))


def _source_cases(tmp: Path):
    from bench_build.sources.demo.nuscenes import write_nuscenes
    from bench_build.sources.demo.objects import write_demo_objects
    from bench_build.sources.demo.semantickitti import write_semantickitti
    from bench_build.sources.demo.waymo import write_waymo
    from bench_build.sources.modelnet import ModelNet40H5Source
    from bench_build.sources.nuscenes import NuScenesSource
    from bench_build.sources.scanobjectnn import ScanObjectNNSource
    from bench_build.sources.semantickitti import SemanticKittiSource
    from bench_build.sources.shapenet import ShapeNetCoreSource
    from bench_build.sources.waymo import WaymoSource

    objs = write_demo_objects(tmp / "objects", modelnet={"test": 1}, scanobjectnn={"test": 1},
                              shapenet={"test": 1})
    yield ModelNet40H5Source(objs / "modelnet40_ply_hdf5_2048")
    yield ScanObjectNNSource(objs / "ScanObjectNN" / "h5_files" / "main_split")
    yield ShapeNetCoreSource(objs / "ShapeNetCore.v2", split="test")
    yield SemanticKittiSource(write_semantickitti(tmp / "sk", 1, azimuth_step_deg=2.0))
    if importlib.util.find_spec("nuscenes") is not None:  # the nuscenes extra (absent on the NumPy 2 line)
        yield NuScenesSource(write_nuscenes(tmp / "ns", 1, azimuth_step_deg=2.0))
    yield WaymoSource(write_waymo(tmp / "wod", 2, contexts=1, width=180))


def test_every_source_encodes_losslessly_with_the_columns_it_declares(tmp_path):
    """Object and segmentation sources fill optional columns: each one's frames go through the v2 writer and
    come back with the same labels and attrs (no undeclared label or attribute, which the writer refuses)."""
    for src in _source_cases(tmp_path):
        assert src.list_frames(), src.kind
        frame = src.read(src.list_frames()[0])
        schema = schema_with_metadata({"fields": list(frame.fields), "intensity_scale": frame.intensity_scale},
                                      columns=src.columns)
        path = tmp_path / f"{src.kind}.parquet"
        pq.write_table(pa.Table.from_batches([encode_rows([(f"k/{frame.frame_id}/clean/0", "clean", 0, frame)],
                                                          schema)]), path)
        table = pq.read_table(path)
        (ex,) = rows_of(table, file_metadata(table.schema), "clean", 0)
        np.testing.assert_array_equal(ex.points, frame.points, err_msg=src.kind)
        assert set(ex.labels) == set(frame.labels) - {"point_tag"}, src.kind
        for name, values in ex.labels.items():
            np.testing.assert_array_equal(values, frame.labels[name], err_msg=f"{src.kind} {name}")
        assert ex.to_frame().attrs == dict(frame.attrs), src.kind
        expect = {"semantickitti": "semantic", "nuscenes": "semantic", "waymo": "semantic", "scanobjectnn": "mask"}
        if src.kind in expect:
            assert expect[src.kind] in ex.labels, src.kind
        else:
            assert ex.attrs["class_name"] and table.schema.field("class_name").type == pa.string(), src.kind


def test_build_columns_are_the_sources_and_the_stages_in_canonical_order():
    from types import SimpleNamespace

    from bench_build.build.shard import build_columns

    recipe = SimpleNamespace(corruptions=[SimpleNamespace(stage=s) for s in ("object_jitter", "sensor_noise")])
    source = SimpleNamespace(columns=("split", "class_id", "class_name"))
    assert build_columns(recipe, source) == ("sigma", "mu", "class_name", "class_id", "split")
    assert build_columns(SimpleNamespace(corruptions=[SimpleNamespace(stage="fog")]), object()) == ()


def test_the_builders_writer_puts_a_checksum_on_every_page(tmp_path):
    """Plain and compact encodings both go through `write_parquet_atomic`: a flipped byte in the points (or a compact
    row's literal points) is caught by the page checksum, where without it the same bytes decode silently."""
    from bench_build.format.writer import write_parquet_atomic
    from tests.pipeline.tamper import flip_file

    a = make_scene(3, n_ground=4000, n_per_car=50)
    schema = schema_with_metadata({"fields": list(a.fields), "intensity_scale": "unit", "corruption": "clean",
                                   "severity": 0})
    path = tmp_path / "part.parquet"
    rows, size, _ = write_parquet_atomic(path, schema, iter([encode_rows([("k/a/clean/0", "clean", 0, a)], schema)]))
    assert rows == 1 and pq.ParquetFile(path, page_checksum_verification=True).read().num_rows == 1
    flip_file(path)
    assert path.stat().st_size == size
    unchecked = np.array(pq.read_table(path)["points"][0].as_py(), np.float32)
    assert unchecked.shape == a.points.shape and not np.array_equal(unchecked, a.points)  # silent without it
    with pytest.raises(OSError, match="CRC checksum verification failed"):
        pq.ParquetFile(path, page_checksum_verification=True).read()
