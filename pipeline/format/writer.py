"""Parquet writing: the one place a version's data file is written.

`ShardWriter` owns one file's life: a temp name in its store, Parquet pages written batch by batch with the
build's fixed options (`PARQUET_OPTIONS`, whose digest `parquet_format` is part of every build's fingerprint),
then the commit — fsync and rename locally, one upload of the finished file on S3 — so that only a complete
file ever has its final name. If writing fails, nothing appears under that name. `record_batches` turns
examples into the row groups it writes (`ROW_GROUP_EXAMPLES` examples each, encoded by `format.schema`).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from bench_build.format.schema import encode_rows
from bench_build.storage import LocalStore, StagedFile, Store


class Timer(Protocol):
    """Where a task's time goes (`build.shard.TaskSplit`): ``start()`` then ``add(phase)`` around each phase."""

    def start(self) -> None: ...

    def add(self, phase: str) -> None: ...


ROW_GROUP_EXAMPLES = 8  # ≈ 15 MB of KITTI points per row group: readers can skip what they filter out
# Float coordinates compress poorly as-is; BYTE_STREAM_SPLIT + zstd makes files ≈35 % smaller and
# encodes ≈10× faster than the default dictionary attempt on float columns (measured on demo scans).
# zstd level 1, not 3: on BYTE_STREAM_SPLIT floats level 3 gains 0.4 % of size for ≈ 1.9 ms more CPU per
# 130k-point example (≈ 12.0 → 10.0 ms to encode and write; LZ4 would be ≈ 8.6 ms but 6 % larger and not
# readable by older Parquet readers). Measured with `bench-build bench` ("I/O floor") on one core.
# write_page_checksum: a CRC32 in every data page header, which our readers verify (format/checked.py): without
# it a flipped byte inside a BYTE_STREAM_SPLIT float page decodes to other points without any error. It costs 4
# bytes per page and a CRC of each page written; plain readers ignore it unless asked to check.
PARQUET_OPTIONS = {
    "compression": "zstd",
    "write_page_checksum": True,
    "compression_level": 1,
    "use_dictionary": ["frame_id", "boxes.list.element.cls", "class_name", "split", "track", "scenario",
                       "sequence"],
    "write_statistics": ["key", "frame_id", "num_points"],
    # floats: BYTE_STREAM_SPLIT; compact encoding's references into the clean scan are mostly increasing runs,
    # a few bits each with DELTA_BINARY_PACKED (pyarrow takes one or the other option, hence column_encoding)
    "column_encoding": {"points.list.element.list.element": "BYTE_STREAM_SPLIT",
                        "sigma.list.element": "BYTE_STREAM_SPLIT", "mu.list.element": "BYTE_STREAM_SPLIT",
                        "point_ref.list.element": "DELTA_BINARY_PACKED"},
}
ENCODINGS = ("full", "compact")

def parquet_format() -> str:
    """A short digest of the writer options: part of every build's fingerprint, because the same examples
    written with other options are other bytes (a build is never resumed with a different writer)."""

    text = json.dumps({"options": PARQUET_OPTIONS, "row_group": ROW_GROUP_EXAMPLES}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


class ShardWriter:
    """One Parquet file of a version, from its temp name to its final name ``key`` in ``store``::

        with ShardWriter(store, "data/corruption=fog/severity=3/part-00000-of-00004.parquet", schema) as w:
            for batch in batches:
                w.write(batch)
        w.rows, w.bytes, w.sha256      # what was committed

    On a clean exit the file is committed (fsync + rename, or one upload); on an exception the temp file is
    removed and nothing has the final name. ``split`` gets the Parquet writer's seconds ("parquet") and the
    commit's ("commit")."""

    def __init__(self, store: Store, key: str, schema: pa.Schema, split: Timer | None = None) -> None:
        self.store, self.key, self.schema, self.split = store, key, schema, split
        self.rows = self.bytes = 0
        self.sha256 = ""

    def __enter__(self) -> ShardWriter:
        self._staged_cm = self.store.staged_file(self.key)
        self._staged: StagedFile = self._staged_cm.__enter__()
        try:
            self._writer = pq.ParquetWriter(self._staged.path, self.schema, **PARQUET_OPTIONS)
        except BaseException:
            self._staged_cm.__exit__(*sys.exc_info())
            raise
        return self

    def write(self, batch: pa.RecordBatch) -> None:
        if self.split is not None:
            self.split.start()
        self._writer.write_batch(batch)
        if self.split is not None:
            self.split.add("parquet")
        self.rows += batch.num_rows

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if self.split is not None:
                self.split.start()
            self._writer.close()
            if self.split is not None:
                self.split.add("parquet")
        except BaseException:
            if exc_type is None:
                self._staged_cm.__exit__(*sys.exc_info())
                raise
        if exc_type is None and self.split is not None:  # the staged file's exit: fsync, sha256, rename or hand-off
            self.split.start()
        self._staged_cm.__exit__(exc_type, exc, tb)
        if exc_type is None:
            if self.split is not None:
                self.split.add("commit")
            self.bytes, self.sha256 = self._staged.size, self._staged.sha256
        return False


def write_parquet_atomic(path: str | Path, schema: pa.Schema, batches: Iterable[pa.RecordBatch],
                         store: Store | None = None, split: Timer | None = None) -> tuple[int, int, str]:
    """Stream record batches into ``path`` (a key of ``store``, or a local path) with a `ShardWriter`.
    Returns (rows, bytes, sha256)."""
    if store is None:
        store, path = LocalStore(Path(path).parent), Path(Path(path).name)
    with ShardWriter(store, Path(path).as_posix(), schema, split) as w:
        for batch in batches:
            w.write(batch)
    return w.rows, w.bytes, w.sha256


def record_batches(examples: Iterable[Any], schema: pa.Schema, size: int = ROW_GROUP_EXAMPLES,
                   split: Timer | None = None) -> Iterator[pa.RecordBatch]:
    """Examples (as `encode_rows` takes them) in row groups of ``size``; ``split`` gets the encoding seconds."""

    def encode(buf: list[Any]) -> pa.RecordBatch:
        if split is not None:
            split.start()
        batch = encode_rows(buf, schema)
        if split is not None:
            split.add("encode")
        return batch

    buf = []
    for ex in examples:
        buf.append(ex)
        if len(buf) == size:
            yield encode(buf)
            buf = []
    if buf:
        yield encode(buf)
