"""`PointCloudDataset`: the map-style dataset, indexed from the manifest (see `bench_build.loaders`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from bench_build.loaders.common import VersionSelection, example_dict, is_index


class PointCloudDataset(VersionSelection, Dataset):
    """Map-style dataset: ``ds[i]`` is the i-th selected example (manifest order: partition files, then rows).

    ``verify=False`` reads without checking files against the manifest and pages against their checksums
    (trusted fast paths only; see `bench_build.loaders`)."""

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
        if not is_index(i) or not -len(self.index) <= i < len(self.index):
            raise IndexError(f"index {i!r} of a dataset of {len(self.index)} examples (an integer 0…"
                             f"{len(self.index) - 1})")
        file_no, row = self.index[i]
        # the row group's decoded examples are kept for the next index: the caller gets arrays of its own, so an
        # in-place augmentation never changes what a later read returns
        return {k: v.copy() if isinstance(v, np.ndarray) else v
                for k, v in example_dict(self.reader.row(self.entries[file_no], row)).items()}
