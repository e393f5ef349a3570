"""Row encoding round trip (layout v2): N×C points, tags, boxes, calib, info, and the optional columns."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.reader import rows_of
from pipeline.schema import (
    EXAMPLE_COLUMNS,
    POINT_COLUMNS,
    encode_rows,
    file_metadata,
    row_schema,
    schema_with_metadata,
)
from stages.frame import PointTag
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
    x = a.with_points(a.points, semantic=sem, sigma=sigma).with_info(class_name="car", class_id=7, known=True,
                                                                     split="test", drawn=0.5)
    y = a.with_info(class_name="plant")  # no per-point labels, no class id: nulls
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
    # split was not declared: it stays a fact in the info JSON, as does anything else a stage recorded
    assert json.loads(table["info"][0].as_py()) == {"drawn": 0.5, "split": "test"}
    meta = file_metadata(table.schema)
    assert meta["schema_version"] == 2 and meta["columns"] == ["semantic", "sigma", "class_name", "class_id", "known"]
    ex, ey = rows_of(table, meta, "clean", 0)
    np.testing.assert_array_equal(ex.semantic, sem)
    np.testing.assert_array_equal(ex.labels["sigma"], sigma)
    assert ex.attrs == {"class_name": "car", "class_id": 7, "known": True}
    assert ey.semantic is None and "sigma" not in ey.labels and ey.attrs["class_id"] is None
    back = ex.to_frame()
    np.testing.assert_array_equal(back.labels["semantic"], sem)
    assert back.info["class_name"] == "car" and back.info["split"] == "test"


def test_undeclared_labels_and_unknown_columns_are_refused():
    a = make_scene(3, n_ground=200, n_per_car=10)
    labelled = a.with_points(a.points, semantic=np.zeros(len(a), np.uint32))
    with pytest.raises(ValueError, match=r"per-point label\(s\) \['semantic'\] are not columns"):
        encode_rows([("k", "clean", 0, labelled)])
    with pytest.raises(ValueError, match="unknown optional column"):
        row_schema(a.fields, ("semantics",))
    with pytest.raises(ValueError, match="4 point fields .* files have 5"):
        encode_rows([("k", "clean", 0, make_scene(4, n_ground=50, n_per_car=5, with_ring=False))],
                    row_schema(("x", "y", "z", "intensity", "ring")))
