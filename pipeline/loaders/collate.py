"""`collate_point_clouds`: examples of different sizes as one batch of tensors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from bench_build.format.schema import EXAMPLE_COLUMNS, POINT_COLUMNS


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
