"""Row encoding round trip: points, tags, boxes, calib and the per-example info column."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from pipeline.reader import _rows
from pipeline.schema import ROW_SCHEMA, encode_rows
from stages.frame import PointTag
from tests.stages.conftest import make_scene


def test_round_trip_keeps_points_tags_boxes_and_info():
    a = make_scene(1, n_ground=2000, n_per_car=50, with_ring=True)
    b = a.append(np.zeros((3, 5), np.float32), tag=PointTag.SYNTHETIC).with_info(ring_method="azimuth_wrap",
                                                                                  fog_alpha=0.02)
    batch = encode_rows([("k/a/clean/0", "clean", 0, a), ("k/a/fog/2", "fog", 2, b)])
    assert batch.schema == ROW_SCHEMA
    table = pa.Table.from_batches([batch])
    assert table["info"].to_pylist()[0] is None
    assert json.loads(table["info"].to_pylist()[1]) == {"fog_alpha": 0.02, "ring_method": "azimuth_wrap"}
    ea, eb = _rows(table, a.fields, "unit")
    np.testing.assert_array_equal(ea.points, a.points)
    np.testing.assert_array_equal(eb.point_tag[-3:], [PointTag.SYNTHETIC] * 3)
    assert not eb.point_tag[:-3].any()
    assert ea.info == {} and eb.info == {"fog_alpha": 0.02, "ring_method": "azimuth_wrap"}
    assert eb.to_frame().info == b.info
    np.testing.assert_allclose(eb.boxes.center, b.boxes.center, rtol=1e-6)
    assert list(eb.boxes.cls) == list(b.boxes.cls)
    np.testing.assert_allclose(eb.calib.velo_to_rect, b.calib.velo_to_rect)
