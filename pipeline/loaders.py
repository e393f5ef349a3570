"""PyTorch datasets over a built version (local, ``file://`` or ``s3://``, read in place).

    from torch.utils.data import DataLoader
    from bench_build.loaders import PointCloudDataset, PointCloudIterableDataset, collate_point_clouds

    ds = PointCloudDataset("bench-out/kitti-c/1.0.0", corruption="fog", severity=3)       # map-style
    it = PointCloudIterableDataset("s3://bench/datasets/kitti-c/1.0.0", severity=[0, 5])  # streaming
    for batch in DataLoader(it, batch_size=8, num_workers=2, collate_fn=collate_point_clouds): ...

Both are filterable by corruption, severity, split (the ``split`` column of object benchmarks) and frame; a
value the version does not have, or a split none of the selected frames is in, is a `NotInVersion` naming what
there is, never an empty dataset; so is a partition a partial pull (``bench-build pull --corruption …``) does not
hold, naming what it holds and the pull that adds it. They yield one dict per example with writable NumPy arrays
(``torch.from_numpy`` shares them, no warning):

| key | value |
| --- | --- |
| ``key``, ``frame_id``, ``corruption``, ``severity`` | identity of the example |
| ``points`` | (N, C) float32, columns ``fields`` (the manifest's) |
| ``point_tag`` | (N,) uint8 |
| ``gt_boxes`` | (M, 7) float32, OpenPCDet ``gt_boxes_lidar``: x, y, z (centre), dx, dy, dz, heading; no DontCare |
| ``gt_names`` | (M,) str class names of those boxes |
| optional per-point columns | e.g. ``semantic`` (N,) uint32, ``sigma``/``mu`` (N,) float32, when the example has them |
| optional per-example columns | e.g. ``class_name``, ``class_id``, ``known`` (None where unknown) |

Both verify what they read unless ``verify=False``: each file against its manifest entry on open (size, rows;
on ``s3://`` the sha256 recorded at upload) and each data page against its checksum, raising
`IntegrityError` naming the file (see `format.reader.Version`). ``verify=False`` is for trusted
fast paths (a local copy ``bench-build verify`` just checked); changed bytes then decode silently.

`PointCloudDataset` builds its index of (file, row) from the manifest alone (rows per file, and the frame of
each row from ``shard_frames``): no scan of the data. A read decodes the row group holding the row and keeps
the last one, so sequential or batched access costs one row-group read per 8 examples; random access reads a
row group per example (prefer the iterable dataset for full passes).

`PointCloudIterableDataset` splits the selected files over distributed ranks (``torch.distributed`` when it
is initialised, or ``rank``/``world_size``) and then over DataLoader workers (``get_worker_info()``): each
example is yielded by exactly one worker of one rank. ``shuffle=True`` permutes the files (same permutation
in every worker, from ``seed`` + ``set_epoch``) and mixes examples through a ``shuffle_buffer``-example buffer
(bounded memory, like webdataset's shuffle). Call ``set_epoch(e)`` before each epoch's ``iter(loader)``: the
epoch is held in shared memory, so it reaches DataLoader workers that outlive an epoch
(``persistent_workers=True``), which keep their own copy of the dataset otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from bench_build.format.reader import Example, Version, open_version
from bench_build.format.remote_fs import s3_filesystem
from bench_build.format.schema import EXAMPLE_COLUMNS, POINT_COLUMNS
from bench_build.stages.frame import DONT_CARE

__all__ = ["PointCloudDataset", "PointCloudIterableDataset", "collate_point_clouds", "example_dict",
           "s3_filesystem"]


def select_rows(version: Version, corruption: Any, severity: Any) -> list[dict[str, Any]]:
    """Manifest entries of the requested corruption(s) × severity(ies). Severity 0 and corruption ``clean`` both
    name the clean copy: ``corruption="fog", severity=[0, 5]`` is clean + fog 5; ``corruption="fog"`` is fog 1…S.
    What the version does not have is a `NotInVersion` (`Version.selection`)."""
    corruptions, severities, _ = version.selection(corruption, severity)
    want_clean_c = corruptions is None or "clean" in corruptions or (severities is not None and 0 in severities)
    want_clean_s = severities is None or 0 in severities or (corruptions is not None and "clean" in corruptions)
    out = []
    for entry in version.manifest["shards"]:
        c, s = entry["corruption"], entry["severity"]
        if c == "clean":
            ok = want_clean_c and want_clean_s
        else:
            ok = (corruptions is None or c in corruptions) and (severities is None or s in severities)
        if ok:
            out.append(entry)
    return out


def example_dict(ex: Example) -> dict[str, Any]:
    """One example as the loaders yield it (see the module docstring)."""
    out: dict[str, Any] = {"key": ex.key, "frame_id": ex.frame_id, "corruption": ex.corruption,
                           "severity": ex.severity, "points": ex.points, "point_tag": ex.point_tag}
    b = ex.boxes
    if b is None:
        out["gt_boxes"], out["gt_names"] = np.zeros((0, 7), np.float32), np.zeros(0, dtype=str)
    else:
        keep = np.array([c != DONT_CARE for c in b.cls], dtype=bool)
        out["gt_boxes"] = np.concatenate([b.center[keep], b.dims[keep], b.heading[keep, None]], axis=1
                                         ).astype(np.float32).reshape(-1, 7)
        out["gt_names"] = np.array([str(c) for c in b.cls[keep]], dtype=str)
    for name, values in ex.labels.items():
        out[name] = values
    out.update(ex.attrs)
    return out


def _is_index(i: Any) -> bool:
    return isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_))


class _Reader:
    """Per-process reader state: the version, open files and the last decoded row group (never pickled)."""

    def __init__(self, url: str, endpoint_url: str | None, profile: str | None, verify: bool = True) -> None:
        self.version = open_version(url, endpoint_url=endpoint_url, profile=profile, verify=verify)
        self.files: dict[str, Any] = {}
        self.starts: dict[str, np.ndarray] = {}
        self.cached: tuple[str, int, list[Example]] | None = None

    def row_groups(self, rel: str) -> np.ndarray:
        """Cumulative first row of each row group of a file (from its footer, read once)."""
        if rel not in self.starts:
            pf = self.version.open_file(rel)
            self.files[rel] = pf
            sizes = [pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)]
            self.starts[rel] = np.concatenate([[0], np.cumsum(sizes)])
        return self.starts[rel]

    def row(self, entry: dict[str, Any], row: int) -> Example:
        rel = entry["path"]
        starts = self.row_groups(rel)
        rg = int(np.searchsorted(starts, row, side="right") - 1)
        if self.cached is None or self.cached[:2] != (rel, rg):
            self.cached = (rel, rg, list(self.version.read_file(entry, row_groups=[rg])))
        return self.cached[2][row - int(starts[rg])]


class _Base:
    def __init__(self, root: str | Path, *, corruption: str | Iterable[str] | None = None,
                 severity: int | Iterable[int] | None = None, split: str | Iterable[str] | None = None,
                 frames: Iterable[str] | None = None, endpoint_url: str | None = None,
                 profile: str | None = None, verify: bool = True) -> None:
        self.endpoint_url, self.profile, self.verify = endpoint_url, profile, verify
        version = open_version(root, endpoint_url=endpoint_url, profile=profile, verify=verify)
        # what a reader opens again, in this process or another (DataLoader and Ray workers, which may run in
        # another working directory): a local version by its absolute path, never relative to a later one
        self.url = str(root) if version.root is None else str(version.root.absolute())
        self.manifest = version.manifest
        self.fields: tuple[str, ...] = version.fields
        self.entries = select_rows(version, corruption, severity)
        # a split filter is a frame filter: the frames in the requested split(s)
        self.frames = version.split_selection(split, self.entries, version.selection(frames=frames)[2])
        self._reader: _Reader | None = None
        self._version = version  # the constructing process's reader; workers open their own

    @property
    def reader(self) -> _Reader:
        if self._reader is None:
            self._reader = _Reader(self.url, self.endpoint_url, self.profile, self.verify)
        return self._reader

    def __getstate__(self) -> dict[str, Any]:  # DataLoader workers (spawn) get no open files or caches
        state = dict(self.__dict__)
        state["_reader"], state["_version"] = None, None
        return state


class PointCloudDataset(_Base, Dataset):
    """Map-style dataset: ``ds[i]`` is the i-th selected example (manifest order: partition files, then rows).

    ``verify=False`` reads without checking files against the manifest and pages against their checksums
    (trusted fast paths only; see the module docstring)."""

    def __init__(self, root: str | Path, **filters: Any) -> None:
        super().__init__(root, **filters)
        index: list[tuple[int, int]] = []
        for i, entry in enumerate(self.entries):
            if self.frames is None:
                index.extend((i, r) for r in range(entry["rows"]))
                continue
            keep = [r for r, fid in enumerate(self._version.frame_ids(entry)) if fid in self.frames]
            index.extend((i, r) for r in keep)
        self.index = index
        self._version = None

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int) -> dict[str, Any]:
        if not _is_index(i) or not -len(self.index) <= i < len(self.index):
            raise IndexError(f"index {i!r} of a dataset of {len(self.index)} examples (an integer 0…"
                             f"{len(self.index) - 1})")
        file_no, row = self.index[i]
        # the row group's decoded examples are kept for the next index: the caller gets arrays of its own, so an
        # in-place augmentation never changes what a later read returns
        return {k: v.copy() if isinstance(v, np.ndarray) else v
                for k, v in example_dict(self.reader.row(self.entries[file_no], row)).items()}


class PointCloudIterableDataset(_Base, IterableDataset):
    """Streams the selected files, split over ranks and DataLoader workers: every example exactly once.

    ``verify=False`` reads without checking files against the manifest and pages against their checksums
    (trusted fast paths only; see the module docstring)."""

    def __init__(self, root: str | Path, *, shuffle: bool = False, seed: int = 0, shuffle_buffer: int = 32,
                 rank: int | None = None, world_size: int | None = None, **filters: Any) -> None:
        super().__init__(root, **filters)
        self.shuffle, self.seed, self.shuffle_buffer = shuffle, seed, max(1, shuffle_buffer)
        # the epoch in shared memory: DataLoader workers hold a copy of the dataset, kept across epochs with
        # persistent_workers=True, but a tensor's shared storage is the same in every copy (fork or spawn), so
        # set_epoch reaches workers that already run
        self._epoch = torch.zeros((), dtype=torch.int64).share_memory_()
        if (rank is None) != (world_size is None) or (world_size is not None and not (  # 0.5 or True: not at iteration
                _is_index(rank) and _is_index(world_size) and 0 <= rank < world_size)):
            raise ValueError(f"rank and world_size go together, integers 0 ≤ rank < world_size; got rank={rank!r}, "
                             f"world_size={world_size!r}")
        self.rank, self.world_size = rank, world_size
        # examples over all ranks and workers, counted like the map-style index: from the manifest (the frame of
        # each row from ``shard_frames``), so a frame or split filter is counted too
        self._len = sum(e["rows"] if self.frames is None else
                        sum(fid in self.frames for fid in self._version.frame_ids(e)) for e in self.entries)
        self._version = None

    @property
    def epoch(self) -> int:
        return int(self._epoch)

    @epoch.setter
    def epoch(self, epoch: int) -> None:
        self.set_epoch(epoch)

    def set_epoch(self, epoch: int) -> None:
        """The shuffle's epoch (file permutation and buffer), read when an iteration starts: call it before
        ``iter(loader)``. It reaches the workers of ``persistent_workers=True`` too."""
        if not (_is_index(epoch) and 0 <= epoch < 2**63):  # held in an int64 tensor; int("a") named no argument
            raise ValueError(f"set_epoch: epoch must be an integer 0 ≤ epoch < 2**63, got {epoch!r}")
        self._epoch.fill_(int(epoch))

    def _rank(self) -> tuple[int, int]:
        if self.rank is not None or self.world_size is not None:
            return self.rank or 0, self.world_size or 1
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1

    def my_entries(self, epoch: int | None = None) -> list[dict[str, Any]]:
        """The files this (rank, worker) reads in ``epoch`` (default: the current one): file k goes to consumer
        k mod (world_size × num_workers) of the epoch's permutation."""
        epoch = self.epoch if epoch is None else epoch
        rank, world = self._rank()
        info = get_worker_info()
        workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
        order = np.arange(len(self.entries))
        if self.shuffle:
            order = np.random.default_rng([self.seed, epoch]).permutation(order)
        me, total = rank * workers + worker, world * workers
        return [self.entries[k] for k in order[me::total]]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        epoch = self.epoch  # read once: files and buffer of one epoch
        rng = np.random.default_rng([self.seed, epoch, 1]) if self.shuffle else None
        version = self.reader.version
        buf: list[Example] = []  # shuffle buffer: bounded memory whatever the file size
        for entry in self.my_entries(epoch):
            for ex in version.read_file(entry, frames=self.frames):
                if rng is None:
                    yield example_dict(ex)
                    continue
                buf.append(ex)
                if len(buf) >= self.shuffle_buffer:
                    yield example_dict(buf.pop(int(rng.integers(len(buf)))))
        while buf:
            yield example_dict(buf.pop(int(rng.integers(len(buf)))))  # type: ignore[union-attr]

    def __len__(self) -> int:  # examples over all ranks and workers, what one pass of them all yields
        return self._len


def collate_point_clouds(batch: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Collate examples with different N (and M boxes) into one batch dict of tensors.

    - ``points`` (ΣN, C) float32, ``batch_index`` (ΣN,) int64 and ``num_points`` (B,) int64 (OpenPCDet style:
      ``torch.cat``, not padding); ``point_tag`` concatenated the same way;
    - a per-point optional column (``semantic``, ``sigma``, …) that any example of the batch has: (ΣN,)
      concatenated the same way, with ``has_<name>`` (B,) bool saying which examples have it; the points of one
      that has not (ModelNet40-E's clean copy has no ``sigma``/``mu``) are NaN for a float column, 0 for an
      integer one (per point: ``has_<name>[batch_index]``). A batch where no example has it has neither key;
    - ``gt_boxes`` (B, M_max, 7) float32 zero-padded, ``num_boxes`` (B,), ``gt_names`` list of lists;
    - everything else (key, corruption, class_name, timestamp_us, known, …) as lists, except ``severity`` and
      ``class_id``, which are int64 tensors (B,) instead when no value is None (a model's targets).
    """
    if not batch:
        raise ValueError("empty batch")
    n = torch.tensor([len(b["points"]) for b in batch], dtype=torch.int64)
    out: dict[str, Any] = {
        "points": torch.from_numpy(np.concatenate([b["points"] for b in batch])),
        "batch_index": torch.repeat_interleave(torch.arange(len(batch)), n),
        "num_points": n,
        "point_tag": torch.from_numpy(np.concatenate([b["point_tag"] for b in batch])),
    }
    for name in POINT_COLUMNS:
        have = [name in b for b in batch]
        if not any(have):
            continue
        # an example without the column (ModelNet40-E's clean copy has no sigma/mu) keeps its place: NaN (float)
        # or 0 (integer) for its points, and has_<name> says which examples have it
        dtype = next(b[name].dtype for b in batch if name in b)
        fill = np.nan if np.issubdtype(dtype, np.floating) else 0
        out[name] = torch.from_numpy(np.concatenate([b[name] if h else np.full(len(b["points"]), fill, dtype)
                                                     for b, h in zip(batch, have, strict=True)]))
        out[f"has_{name}"] = torch.tensor(have, dtype=torch.bool)
    m = [len(b["gt_boxes"]) for b in batch]
    boxes = np.zeros((len(batch), max(m, default=0), 7), np.float32)
    for i, b in enumerate(batch):
        boxes[i, : m[i]] = b["gt_boxes"]
    out["gt_boxes"], out["num_boxes"] = torch.from_numpy(boxes), torch.tensor(m, dtype=torch.int64)
    out["gt_names"] = [list(b["gt_names"]) for b in batch]
    for name in ("key", "frame_id", "corruption", "severity", *EXAMPLE_COLUMNS):
        if any(name in b for b in batch):
            values = [b.get(name) for b in batch]
            out[name] = values
            if name in ("severity", "class_id") and all(v is not None for v in values):
                out[name] = torch.tensor(values, dtype=torch.int64)
    return out
