"""`PointCloudIterableDataset`: the streaming dataset, its files split over ranks and DataLoader workers (see
`bench_build.loaders`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from bench_build.format.reader import Example
from bench_build.loaders.common import VersionSelection, example_dict, is_index


class PointCloudIterableDataset(VersionSelection, IterableDataset):
    """Streams the selected files, split over ranks and DataLoader workers: every example exactly once.

    ``seed`` is an integer ≥ 0 and ``shuffle_buffer`` a number of examples ≥ 1; they, ``rank`` and ``world_size``
    are checked here, not first at iteration in a DataLoader worker. ``verify=False`` reads without checking files
    against the manifest and pages against their checksums (trusted fast paths only; see `bench_build.loaders`)."""

    def __init__(self, root: str | Path, *, shuffle: bool = False, seed: int = 0, shuffle_buffer: int = 32,
                 rank: int | None = None, world_size: int | None = None, **filters: Any) -> None:
        # an RNG seed of 1.5 or -1 failed only at iteration, and True was seed 1; a buffer of 0 or -5 was 1, of 2.5
        # a float limit: each is refused here, one line naming it, before the version is opened
        if not (is_index(seed) and seed >= 0):
            raise ValueError(f"seed must be an integer ≥ 0 (the shuffle's random seed), got {seed!r}")
        if not (is_index(shuffle_buffer) and shuffle_buffer >= 1):
            raise ValueError(f"shuffle_buffer must be an integer ≥ 1 (examples held to shuffle), got "
                             f"{shuffle_buffer!r}")
        super().__init__(root, **filters)
        self.shuffle, self.seed, self.shuffle_buffer = shuffle, int(seed), int(shuffle_buffer)
        # the epoch in shared memory: DataLoader workers hold a copy of the dataset, kept across epochs with
        # persistent_workers=True, but a tensor's shared storage is the same in every copy (fork or spawn), so
        # set_epoch reaches workers that already run
        self._epoch = torch.zeros((), dtype=torch.int64).share_memory_()
        if (rank is None) != (world_size is None) or (world_size is not None and not (  # 0.5 or True: not at iteration
                is_index(rank) and is_index(world_size) and 0 <= rank < world_size)):
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
        if not (is_index(epoch) and 0 <= epoch < 2**63):  # held in an int64 tensor; int("a") named no argument
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
