"""Damaging a built file the way storage does: one byte flipped inside a column chunk, the size unchanged."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

POINTS = "points.list.element.list.element"
POINT_REF = "point_ref.list.element"


def chunk_span(data: bytes | Path, column: str, row_group: int = 0) -> tuple[int, int]:
    """(first byte, length) of ``column``'s chunk in ``row_group`` of a Parquet file (path or its bytes)."""
    import pyarrow as pa

    md = pq.ParquetFile(pa.BufferReader(data) if isinstance(data, bytes) else data).metadata.row_group(row_group)
    for j in range(md.num_columns):
        c = md.column(j)
        if c.path_in_schema == column:
            start = c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset
            return start, c.total_compressed_size
    raise KeyError(column)


def flipped(data: bytes, column: str = POINTS, row_group: int = 0, at: float = 0.5) -> bytes:
    """``data`` with one bit flipped at fraction ``at`` of ``column``'s chunk (inside its page data for a
    one-page chunk: a page header is a few dozen bytes at the chunk's start)."""
    start, length = chunk_span(data, column, row_group)
    b = bytearray(data)
    b[start + int(length * at)] ^= 0x10
    return bytes(b)


def flip_file(path: Path, column: str = POINTS, row_group: int = 0, at: float = 0.5) -> None:
    path.write_bytes(flipped(path.read_bytes(), column, row_group, at))
