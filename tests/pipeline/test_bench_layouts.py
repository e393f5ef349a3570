"""The points-layout bench measures what it says: each layout stores the same points, and `v2` is the build's."""

import numpy as np
import pyarrow as pa

from bench_build.bench.layouts import LAYOUTS, measure_layouts
from bench_build.format.schema import points_type

FIELDS = ("x", "y", "z", "intensity")


def _points(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    sizes = [1000, 0, 1, 2500, 17]  # an empty example and a one-point example too
    out = [rng.normal(0, 20, (n, 4)).astype(np.float32) for n in sizes]
    out[0][3] = [-0.0, np.inf, np.float32(1e-40), 0.0]  # signed zero, infinity, a subnormal: bits must survive
    return out


def test_every_layout_gives_back_the_same_bits_in_the_same_shape():
    rows = measure_layouts(_points(), FIELDS, repeat=1)
    assert [r["layout"] for r in rows] == [layout.name for layout in LAYOUTS]
    assert all(r["exact"] for r in rows), [r["layout"] for r in rows if not r["exact"]]
    assert all(r["write_ms"] >= 0 and r["read_ms"] >= 0 and r["bytes"] > 0 for r in rows)


def test_a_decoder_that_loses_anything_is_reported_not_exact():
    broken = LAYOUTS[1].__class__("broken", "drops the last point", False, LAYOUTS[1].encode,
                                  lambda table, fields: [p[:-1] for p in LAYOUTS[1].decode(table, fields)])
    (row,) = measure_layouts(_points(), FIELDS, repeat=1, layouts=[broken])
    assert row["exact"] is False


def test_v2_is_the_builds_points_type_and_only_it_is_nxc_on_read():
    table, encoding = LAYOUTS[0].encode(_points(), FIELDS)
    assert table.schema.field("points").type == points_type(len(FIELDS))
    assert encoding == {"points.list.element.list.element": "BYTE_STREAM_SPLIT"}
    assert [layout.nxc_on_read for layout in LAYOUTS] == [True] + [False] * (len(LAYOUTS) - 1)


def test_planar_and_per_field_store_each_field_contiguously():
    pts = _points(1)
    planar, _ = LAYOUTS[2].encode(pts, FIELDS)
    first = planar.column("points").combine_chunks()[0].values.to_numpy()
    np.testing.assert_array_equal(first[: len(pts[0])], pts[0][:, 0])  # all x of the first example first
    per_field, _ = LAYOUTS[3].encode(pts, FIELDS)
    assert per_field.column_names == list(FIELDS)
    assert pa.types.is_list(per_field.schema.field("intensity").type)
    np.testing.assert_array_equal(per_field.column("z").combine_chunks()[3].values.to_numpy(), pts[3][:, 2])
