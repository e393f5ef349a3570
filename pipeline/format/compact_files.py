"""Compact files: rewriting a compact-encoded shard in full encoding, and a version's size against raw points.

The encoding itself (references into the clean scan, and back) is `bench_build.format.compact`, pure arrays; this module
is the file side, on top of the checked reader and the shard writer."""

from __future__ import annotations

from pathlib import Path

from bench_build.format.checked import CheckedParquetFile
from bench_build.format.reader import open_version, rows_of
from bench_build.format.schema import decode_points, encode_rows, file_metadata, schema_with_metadata
from bench_build.format.writer import ShardWriter
from bench_build.manifests.manifest import sha256_file
from bench_build.storage import LocalStore


def materialize_file(path: str | Path, clean_path: str | Path) -> tuple[int, str]:
    """Rewrite the compact Parquet file ``path`` in full encoding in place (atomically), its row groups and
    footer kept (``encoding`` → ``full``); ``clean_path`` is the clean file of its shard. Returns (bytes, sha256).

    The rows go through the build's own writer (`encode_rows` with the full schema), so the points are
    byte-identical to what a full build stores."""

    path = Path(path)
    # page checksums on: a damaged page must fail here, not be written out as a "full" file with a new sha256
    pf = CheckedParquetFile.local(path)
    meta = file_metadata(pf.schema_arrow)
    if "point_ref" not in pf.schema_arrow.names:
        return path.stat().st_size, sha256_file(path)
    clean_table = CheckedParquetFile.local(clean_path).read(columns=["frame_id", "points"])
    clean = dict(zip(clean_table["frame_id"].to_pylist(), decode_points(clean_table["points"], writable=False),
                     strict=True))
    # the partition fingerprint stood for the compact bytes: a rewritten file claims none (never reused as one)
    schema = schema_with_metadata({**{k: v for k, v in meta.items() if k != "partition_fingerprint"},
                                   "encoding": "full"})

    def batches():
        first = 0
        for rg in range(pf.num_row_groups):
            table = pf.read_row_group(rg)
            rows = rows_of(table, meta, meta["corruption"], meta["severity"], clean=clean, where=str(path),
                           rows=list(range(first, first + table.num_rows)))
            first += table.num_rows
            yield encode_rows([(ex.key, ex.corruption, ex.severity, ex.to_frame()) for ex in rows], schema)

    with ShardWriter(LocalStore(path.parent), path.name, schema) as w:
        for batch in batches():
            w.write(batch)
    return w.bytes, w.sha256


def size_report(version_dir: str) -> dict[str, float]:
    """Bytes on disk of a version against its raw float32 points (Σ N × C × 4 over the stored examples)."""

    v = open_version(version_dir)
    width = len(v.fields)
    raw = 0
    for entry in v.manifest["shards"]:
        counts = v.open_file(entry["path"]).read(columns=["num_points"])["num_points"]
        raw += int(counts.to_numpy().sum()) * width * 4
    stored = int(v.manifest["counts"]["bytes"])
    return {"bytes": stored, "raw_point_bytes": raw, "ratio": stored / raw if raw else float("nan"),
            "encoding": v.manifest.get("encoding", "full")}


if __name__ == "__main__":
    import sys

    for path in sys.argv[1:]:
        r = size_report(path)
        print(f"{path}: {r['encoding']}, {r['bytes'] / 1e6:,.1f} MB on disk for {r['raw_point_bytes'] / 1e6:,.1f} MB "
              f"of raw float32 points = {r['ratio']:.3f}× raw")
