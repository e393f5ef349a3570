"""What the points column's layout costs (a script, not a test): `bench-build bench layouts`.

The Parquet write is most of a KITTI-C task's CPU, and most of the write is the points column: pyarrow generates
a repetition and a definition level for every float of a ``list<fixed_size_list<float32, C>>``, and
BYTE_STREAM_SPLIT over interleaved x, y, z, intensity mixes four value distributions in each byte stream, which
zstd then compresses less well. This measures candidate layouts of the same points, written as a build writes
them (zstd level 1, BYTE_STREAM_SPLIT on the floats, row groups of ``ROW_GROUP_EXAMPLES``), and read back to
per-example N×C float32 arrays: write CPU ms, read + decode CPU ms and MB per example.

Only ``v2`` meets the project's rule that a user's first call (pandas, DuckDB, ``pyarrow.dataset``,
``datasets``) returns points as N×C with no reshape and no metadata lookup; the others need the field list
from the schema's metadata and a reshape in every reader. Changing it is a schema bump and a decision about
that rule, not something this script decides: it gives the numbers for it.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench_build.format.writer import PARQUET_OPTIONS, ROW_GROUP_EXAMPLES
from bench_build.manifests.recipe import load_recipe
from bench_build.plan.tasks import example_key, example_rng
from bench_build.sources.demo.kitti import generate_frame

BSS = "BYTE_STREAM_SPLIT"


def _offsets(lengths: Sequence[int]) -> pa.Array:
    out = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=out[1:])
    return pa.array(out)


def _rows(values: np.ndarray, offsets: np.ndarray, shape: Callable[[np.ndarray], np.ndarray]) -> list[np.ndarray]:
    return [shape(values[offsets[i]: offsets[i + 1]]) for i in range(len(offsets) - 1)]


def _column(table: pa.Table, name: str) -> pa.ListArray | pa.BinaryArray:
    return table.column(name).combine_chunks()


@dataclass(frozen=True)
class Layout:
    name: str
    description: str
    nxc_on_read: bool  # the project's rule: a plain read gives N×C points
    encode: Callable[[list[np.ndarray], tuple[str, ...]], tuple[pa.Table, dict[str, str]]]
    decode: Callable[[pa.Table, tuple[str, ...]], list[np.ndarray]]


def _enc_v2(points, fields):
    c = len(fields)
    flat = pa.FixedSizeListArray.from_arrays(pa.array(np.concatenate(points).reshape(-1)), c)
    return (pa.table({"points": pa.ListArray.from_arrays(_offsets([len(p) for p in points]), flat)}),
            {"points.list.element.list.element": BSS})


def _dec_v2(table, fields):
    col = _column(table, "points")
    off = col.offsets.to_numpy()
    return _rows(col.flatten().flatten().to_numpy().reshape(-1, len(fields)), off - off[0], lambda a: a)


def _enc_interleaved(points, fields):
    c = len(fields)
    return (pa.table({"points": pa.ListArray.from_arrays(_offsets([len(p) * c for p in points]),
                                                         pa.array(np.concatenate(points).reshape(-1)))}),
            {"points.list.element": BSS})


def _dec_interleaved(table, fields):
    col = _column(table, "points")
    off = col.offsets.to_numpy()
    return _rows(col.flatten().to_numpy(), off - off[0], lambda a: a.reshape(-1, len(fields)))


def _enc_planar(points, fields):
    c = len(fields)
    return (pa.table({"points": pa.ListArray.from_arrays(_offsets([len(p) * c for p in points]),
                                                         pa.array(np.concatenate([p.T.reshape(-1) for p in points])))}),
            {"points.list.element": BSS})


def _dec_planar(table, fields):
    col = _column(table, "points")
    off = col.offsets.to_numpy()
    return _rows(col.flatten().to_numpy(), off - off[0], lambda a: a.reshape(len(fields), -1).T)


def _enc_per_field(points, fields):
    off = _offsets([len(p) for p in points])
    cols = {f: pa.ListArray.from_arrays(off, pa.array(np.concatenate([p[:, j] for p in points])))
            for j, f in enumerate(fields)}
    return pa.table(cols), {f"{f}.list.element": BSS for f in fields}


def _dec_per_field(table, fields):
    cols = [_column(table, f) for f in fields]
    off = cols[0].offsets.to_numpy()
    stacked = np.column_stack([c.flatten().to_numpy() for c in cols])
    return _rows(stacked, off - off[0], lambda a: a)


def _enc_binary(points, fields):
    return pa.table({"points": pa.array([np.ascontiguousarray(p, dtype="<f4").tobytes() for p in points],
                                        pa.binary())}), {}


def _dec_binary(table, fields):
    col = _column(table, "points")
    off = np.frombuffer(col.buffers()[1], dtype=np.int32)[col.offset: col.offset + len(col) + 1]
    data = np.frombuffer(col.buffers()[2], dtype=np.uint8)
    return _rows(data, off, lambda a: a.view("<f4").reshape(-1, len(fields)))


LAYOUTS = (
    Layout("v2", "list<fixed_size_list<float32, C>> (today)", True, _enc_v2, _dec_v2),
    Layout("interleaved", "list<float32> of N·C, x y z i x y z i …", False, _enc_interleaved, _dec_interleaved),
    Layout("planar", "list<float32> of C·N, all x then all y …", False, _enc_planar, _dec_planar),
    Layout("per-field", "one list<float32> column per field", False, _enc_per_field, _dec_per_field),
    Layout("binary", "binary blob of the N×C little-endian float32 (opaque to SQL)", False, _enc_binary,
           _dec_binary),
)


def _options(column_encoding: dict[str, str]) -> dict:
    """The build's writer options for this layout's points: zstd level 1, BYTE_STREAM_SPLIT on its floats, page
    checksums."""
    return {"compression": PARQUET_OPTIONS["compression"], "compression_level": PARQUET_OPTIONS["compression_level"],
            "use_dictionary": False, "write_statistics": False,
            "write_page_checksum": PARQUET_OPTIONS["write_page_checksum"],
            **({"column_encoding": column_encoding} if column_encoding else {})}


def measure_layouts(points: list[np.ndarray], fields: tuple[str, ...], repeat: int = 5,
                    layouts: Sequence[Layout] = LAYOUTS) -> list[dict]:
    """Per layout: write / read+decode CPU ms per example (best of ``repeat``), bytes per example, and whether
    the decoded points equal the input bit for bit (a layout that loses anything is not a candidate)."""
    points = [np.ascontiguousarray(p, dtype=np.float32) for p in points]
    out = []
    for layout in layouts:
        table, encoding = layout.encode(points, fields)
        options = _options(encoding)
        write = read = float("inf")
        data = b""
        for _ in range(repeat):
            buf = io.BytesIO()
            t = time.process_time()
            pq.write_table(table, buf, row_group_size=ROW_GROUP_EXAMPLES, **options)
            write = min(write, time.process_time() - t)
            data = buf.getvalue()
        decoded: list[np.ndarray] = []
        for _ in range(repeat):
            t = time.process_time()
            decoded = layout.decode(pq.read_table(pa.BufferReader(data)), fields)
            read = min(read, time.process_time() - t)
        exact = len(decoded) == len(points) and all(
            d.shape == p.shape and np.array_equal(d.view(np.uint32), p.view(np.uint32))
            for d, p in zip(decoded, points, strict=True))
        n = len(points)
        out.append({"layout": layout.name, "description": layout.description, "nxc_on_read": layout.nxc_on_read,
                    "write_ms": write / n * 1e3, "read_ms": read / n * 1e3, "bytes": len(data) / n, "exact": exact})
    return out


def run_bench_layouts(frames: int = 4, repeat: int = 5) -> list[dict]:
    """The demo frames' clean scans and their fog / snow / gaussian_rad outputs at severity 3 (the KITTI-C
    recipe's stages, so the values have real distributions), through every layout; prints a table."""

    recipe = load_recipe("kitti-c")
    demo = [generate_frame(i) for i in range(frames)]
    fields = tuple(demo[0].fields[:4])
    points = [f.points[:, :4] for f in demo]
    for name in ("fog", "snow", "gaussian_rad"):
        c = recipe.corruption(name)
        for f in demo:
            out = c.apply(f, 3, example_rng(recipe.seed, example_key(recipe.name, f.frame_id, name, 3)))
            points.append(out.points[:, :4])
    print(f"points layouts on {len(points)} examples (demo frames' clean scans and fog / snow / gaussian_rad at "
          f"severity 3, mean {np.mean([len(p) for p in points]):,.0f} points, fields {', '.join(fields)}); "
          f"CPU ms per example, best of {repeat}; the points column only (the rest of a row is ≈ 1 ms and the same "
          "in every layout)")
    rows = measure_layouts(points, fields, repeat)
    base = rows[0]
    print(f"{'layout':12s} {'write ms':>9s} {'read ms':>8s} {'MB':>7s} {'size':>6s}  N×C on read  exact  what")
    for r in rows:
        print(f"{r['layout']:12s} {r['write_ms']:9.2f} {r['read_ms']:8.2f} {r['bytes'] / 1e6:7.3f} "
              f"{r['bytes'] / base['bytes'] - 1:+6.1%}  {'yes' if r['nxc_on_read'] else 'no':11s}  "
              f"{'yes' if r['exact'] else 'NO':5s}  {r['description']}")
    return rows
