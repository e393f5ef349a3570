"""Read throughput of a built version (a script, not a test): `bench-build bench loaders [--version-dir V]`.

Prints examples/s of
1. the raw Parquet read: every selected file read whole with ``pyarrow.parquet`` (decode only, the floor), without
   and with page checksum verification (what our readers' default verification adds to a read);
2. PyTorch ``DataLoader`` over `PointCloudIterableDataset` with 0 and 2 workers (batch 8, `collate_point_clouds`);
3. the map-style `PointCloudDataset` read in index order with 0 workers;
(2 and 3 verify as the datasets do by default; ``measure(..., verify=False)`` reads them unverified)
each pass checking that every selected example was seen exactly once, after one untimed read of every file (so the
first timed pass, which every ratio divides by, is not the only one that finds the files cold). Without
``--version-dir`` it builds the KITTI-C demo (``frames`` frames, full-resolution scans) into a temporary directory
first.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from bench_build.build.run import run_build
from bench_build.format.reader import open_version
from bench_build.loaders import PointCloudDataset, PointCloudIterableDataset, collate_point_clouds, select_rows


def _rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def measure(version_dir: str | Path, *, corruption: Any = None, severity: Any = None, batch_size: int = 8,
            workers: tuple[int, ...] = (0, 2), verify: bool = True) -> dict[str, float]:
    from torch.utils.data import DataLoader

    version = open_version(version_dir, verify=verify)
    entries = select_rows(version, corruption, severity)
    expected = sum(e["rows"] for e in entries)
    out: dict[str, float] = {"examples": expected}

    def read_all(check: bool) -> int:
        return sum(pq.ParquetFile(version.fs.open_input_file(version.path(e["path"])),
                                  page_checksum_verification=check).read().num_rows for e in entries)

    read_all(False)  # untimed: the first pass pays the page cache and the allocator, and every ratio divides by
    # the raw read (a cold raw read once made "page checksums verified" read 1.67× faster than raw)
    for key, check in (("raw_parquet", False), ("raw_parquet_checked", True)):
        t = time.perf_counter()
        n = read_all(check)
        out[key] = _rate(n, time.perf_counter() - t)
        assert n == expected

    for w in workers:
        ds = PointCloudIterableDataset(version_dir, corruption=corruption, severity=severity, verify=verify)
        keys: list[str] = []
        t = time.perf_counter()
        for batch in DataLoader(ds, batch_size=batch_size, num_workers=w, collate_fn=collate_point_clouds):
            keys += batch["key"]
        out[f"iterable_w{w}"] = _rate(len(keys), time.perf_counter() - t)
        if sorted(keys) != sorted(set(keys)) or len(keys) != expected:
            raise AssertionError(f"workers={w}: {len(keys)} examples, {len(set(keys))} distinct, expected {expected}")

    ds_map = PointCloudDataset(version_dir, corruption=corruption, severity=severity, verify=verify)
    t = time.perf_counter()
    seen = 0
    for batch in DataLoader(ds_map, batch_size=batch_size, num_workers=0, collate_fn=collate_point_clouds):
        seen += len(batch["key"])
    out["map_w0"] = _rate(seen, time.perf_counter() - t)
    return out


def run_bench_loaders(version_dir: str | None = None, frames: int = 4, verify: bool = True) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        if version_dir is None:

            print(f"building the kitti-c demo ({frames} frames) to read it back ...")
            res = run_build("kitti-c", out=tmp, workers=2, max_frames=frames, progress=False)
            assert res.ok, res.failures
            version_dir = str(res.version_dir)
        res = measure(version_dir, verify=verify)
    print(f"\nread throughput of {version_dir}: {res['examples']:.0f} examples (every partition, clean included; "
          f"datasets {'verified' if verify else 'unverified'})")
    print(f"  raw Parquet read (pyarrow, decode only)      {res['raw_parquet']:8.1f} examples/s")
    for k, label in (("raw_parquet_checked", "raw Parquet read, page checksums verified"),
                     ("iterable_w0", "DataLoader, IterableDataset, 0 workers"),
                     ("iterable_w2", "DataLoader, IterableDataset, 2 workers"),
                     ("map_w0", "DataLoader, map-style Dataset, 0 workers")):
        print(f"  {label:<45}{res[k]:8.1f} examples/s  ({res[k] / res['raw_parquet']:.2f}× raw)")
    return res


if __name__ == "__main__":
    import typer

    typer.run(run_bench_loaders)
