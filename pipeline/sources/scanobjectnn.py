"""ScanObjectNN HDF5 (Uy et al., ICCV 2019): real scanned objects, 2,048 points each, with background.

Layout::

    ROOT/h5_files/main_split/training_objectdataset.h5, test_objectdataset.h5          (OBJ_BG)
    ROOT/h5_files/main_split/{training,test}_objectdataset_augmentedrot_scale75.h5     (PB_T50_RS)
        data  float32 (N, 2048, 3)   xyz (not normalised)
        label int     (N,) or (N, 1) class index 0..14 (`SONN_CLASSES`)
        mask  int     (N, 2048)      1 = object point, 0 = background (optional here)

``ROOT`` may be the folder that holds ``ScanObjectNN``, the ScanObjectNN folder, its ``h5_files``
folder or the split folder itself. A scan's id is ``<split>/<index>`` (``training`` / ``test``;
``split='all'`` lists training then test, as 3DOS's ``split='all'`` concatenates them).
The mask is kept as the per-point label ``mask``.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from bench_build.sources.base import SourceError
from bench_build.sources.modelnet import XYZ, check_points, h5_labels, h5_points_shape, open_h5
from bench_build.stages.frame import Frame

SONN_CLASSES = ("bag", "bin", "box", "cabinet", "chair", "desk", "display", "door", "shelf", "table", "bed",
                "pillow", "sink", "sofa", "toilet")
VARIANTS = {"OBJ_BG": "objectdataset", "PB_T50_RS": "objectdataset_augmentedrot_scale75"}
SPLITS = ("training", "test")


class ScanObjectNNSource:
    kind = "scanobjectnn"
    columns = ("mask", "class_name", "class_id", "split")  # optional row columns (pipeline/format/schema.py)
    fields = XYZ
    intensity_scale = "unit"

    def __init__(self, root: str | Path, split: str | None = "test", variant: str = "objectdataset",
                 subset: str = "main_split") -> None:
        root = Path(root)
        for cand in (root / "ScanObjectNN" / "h5_files" / subset, root / "h5_files" / subset, root / subset, root):
            if cand.is_dir():
                root = cand
                break
        self.root = root
        self.split = {"train": "training"}.get(split or "test", split or "test")
        if self.split not in (*SPLITS, "all"):
            raise SourceError(self.root, f"unknown ScanObjectNN split {self.split!r} (training, test or all)")
        self.variant = VARIANTS.get(variant, variant)

    @property
    def splits(self) -> tuple[str, ...]:
        return SPLITS if self.split == "all" else (self.split,)

    def file(self, split: str) -> Path:
        return self.root / f"{split}_{self.variant}.h5"

    @cached_property
    def _counts(self) -> dict[str, int]:
        out = {}
        for split in self.splits:
            p = self.file(split)
            with open_h5(p) as f:
                b, n = h5_points_shape(p, f)
                lab = h5_labels(p, f, b)
                if "mask" in f and tuple(f["mask"].shape) != (b, n):
                    raise SourceError(p, f"'mask' has shape {f['mask'].shape}, expected {(b, n)}")
            if len(lab) and (lab.min() < 0 or lab.max() >= len(SONN_CLASSES)):
                raise SourceError(p, f"labels outside 0..{len(SONN_CLASSES) - 1}")
            out[split] = b
        return out

    def list_frames(self) -> list[str]:
        return [f"{s}/{i:05d}" for s in self.splits for i in range(self._counts[s])]

    def labels(self) -> dict[str, int]:
        """Frame id → SONN class index, from the ``label`` datasets only."""
        out: dict[str, int] = {}
        for split in self.splits:
            p = self.file(split)
            with open_h5(p) as f:
                b, _ = h5_points_shape(p, f)
                out.update({f"{split}/{i:05d}": lab for i, lab in enumerate(h5_labels(p, f, b).tolist())})
        return out

    def read(self, frame_id: str) -> Frame:
        split, _, num = frame_id.partition("/")
        if split not in self._counts or not num.isdigit() or int(num) >= self._counts[split]:
            raise SourceError(self.root, f"no scan {frame_id!r} in {self.variant} split(s) {self.splits}")
        path, row = self.file(split), int(num)
        with open_h5(path) as f:
            b, _ = h5_points_shape(path, f)
            pts = check_points(path, f["data"][row], row)
            label = int(h5_labels(path, f, b)[row])
            labels = {"mask": np.asarray(f["mask"][row]).astype(np.uint8)} if "mask" in f else {}
        return Frame(frame_id=frame_id, points=pts, fields=XYZ, labels=labels,
                     attrs={"class_name": SONN_CLASSES[label], "class_id": label, "split": split})

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "root": str(self.root), "split": self.split, "variant": self.variant,
                "scans": dict(self._counts), "fields": list(XYZ)}
