"""Loading and feature extraction as Ray tasks, so validation scales like the build.

- `load_real_chunk`: read and preprocess a chunk of real scans (STF / Boreas / KITTI ``.bin``);
  the preprocessed arrays go to the driver, which trains on them.
- `extract_partition_file`: one Parquet file of the build (a shard × partition): read only the
  sampled frames' rows (``key``, ``frame_id``, ``points``; severity from the file's footer), preprocess, run the trained
  PointNet and return only logits and global features — point data never reaches the driver.

Task bodies never raise for bad input: they return ``{"error": message}`` (naming the file), which
the driver turns into one clear error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench_build.format.checked import CheckedParquetFile, IntegrityError
from bench_build.format.compact import materialize
from bench_build.format.schema import decode_points, file_metadata
from bench_build.sources.base import SourceError
from bench_build.sources.boreas import BOREAS_FIELDS, BOREAS_INTENSITY_SCALE, read_boreas_bin
from bench_build.sources.kitti import read_velodyne
from bench_build.sources.semantickitti import read_label_file
from bench_build.sources.stf import STF_FIELDS, STF_INTENSITY_SCALE, read_stf_bin
from bench_build.sources.wads import duplicate_first
from bench_build.validate.preprocess import EmptyScanError, Preprocess
from bench_build.validate.train import evaluate, load_model

FORMATS: dict[str, dict[str, Any]] = {
    "stf": {"width": len(STF_FIELDS), "scale": STF_INTENSITY_SCALE, "fields": STF_FIELDS},
    "boreas": {"width": len(BOREAS_FIELDS), "scale": BOREAS_INTENSITY_SCALE, "fields": BOREAS_FIELDS},
    "kitti": {"width": 4, "scale": "unit", "fields": ("x", "y", "z", "intensity")},
    # WADS (bench_build.sources.wads): KITTI's record, 0..255 intensities, a labels/ file beside velodyne/
    "wads": {"width": 4, "scale": "byte", "fields": ("x", "y", "z", "intensity")},
}
#: formats told apart by their record size alone (WADS has KITTI's record: it is named, or found by path)
SIZE_FORMATS = ("stf", "boreas", "kitti")


#: an empty real scan has nothing to classify (validate has no --allow-empty-frames: that is `run`'s)
EMPTY_REAL = "a real scan needs points: remove it from the folder"


def read_wads(path: Path, duplicates: str = "keep") -> tuple[np.ndarray, np.ndarray]:
    """Points and raw uint32 labels of a WADS scan (``sequences/NN/velodyne/F.bin`` + ``../labels/F.label``);
    ``duplicates = "drop"`` keeps the first of each exact (row, label) repeat."""

    pts = read_velodyne(path, empty_advice=EMPTY_REAL, name="wads")
    label = path.parent.parent / "labels" / f"{path.stem}.label"
    if not label.is_file():
        raise SourceError(label, f"label file missing for WADS scan {path.name} (expected beside velodyne/ in "
                                 "labels/; the snow labels are needed)")
    raw = read_label_file(label, len(pts), path)
    if duplicates == "drop":
        keep = duplicate_first(pts, raw)
        pts, raw = pts[keep], raw[keep]
    return pts, raw


def read_real(fmt: str, path: Path, duplicates: str = "keep") -> np.ndarray:
    if fmt == "wads":
        return read_wads(path, duplicates)[0]
    if fmt == "stf":
        return read_stf_bin(path)
    if fmt == "boreas":
        return read_boreas_bin(path)
    if fmt == "kitti":
        return read_velodyne(path, empty_advice=EMPTY_REAL)
    raise ValueError(f"unknown real-data format {fmt!r}")


def load_real_chunk(fmt: str, root: str, rel_paths: list[str], role: str, prep: Preprocess, seed: int,
                    duplicates: str = "keep") -> dict[str, Any]:
    """Preprocessed clouds (K × points × 4) of ``rel_paths`` under ``root`` and intensity statistics."""
    spec = FORMATS[fmt]
    clouds, q = [], []
    for rel in rel_paths:
        path = Path(root) / rel
        try:
            pts = read_real(fmt, path, duplicates)
            clouds.append(prep.apply(pts, spec["fields"], spec["scale"], f"real-{role}/{rel}", seed))
        except (SourceError, EmptyScanError) as e:
            return {"error": str(e) if isinstance(e, SourceError) else f"{path}: {e}"}
        except OSError as e:  # unreadable (permissions, an I/O error): bad input as much as a malformed scan
            return {"error": f"{path}: cannot read it: {e.strerror or e}"}
        q.append(np.percentile(pts[:, 3], [50, 99, 100]))
    return {"clouds": np.stack(clouds), "intensity_q": np.array(q)}


def list_partition_frames(path: str) -> dict[str, Any]:
    """The frame ids of one build file (a Ray task body): ``{"frames": [...]}``, or ``{"error": ...}``."""
    try:
        return {"frames": CheckedParquetFile.local(path).read(columns=["frame_id"])["frame_id"].to_pylist()}
    except (IntegrityError, OSError) as e:  # each names the file (`CheckedParquetFile`)
        return {"error": str(e)}


def extract_partition_file(path: str, frames: list[str] | None, prep: Preprocess, seed: int,
                           state_dict: dict[str, Any], model_cfg: Any, batch_size: int) -> dict[str, Any]:
    """Logits and global features of the sampled rows of one build file (a Ray task body); ``{"error": ...}``
    naming the file when it (or, compact, its clean file) is damaged."""
    try:
        return _extract_partition_file(path, frames, prep, seed, state_dict, model_cfg, batch_size)
    except (IntegrityError, OSError) as e:  # each names the file (`CheckedParquetFile`)
        return {"error": str(e)}


def _extract_partition_file(path: str, frames: list[str] | None, prep: Preprocess, seed: int,
                            state_dict: dict[str, Any], model_cfg: Any, batch_size: int) -> dict[str, Any]:
    import torch


    torch.set_num_threads(1)  # one Ray CPU per task
    pf = CheckedParquetFile.local(path)
    meta = file_metadata(pf.schema_arrow)
    fields, scale = tuple(meta["fields"]), meta["intensity_scale"]
    wanted = None if frames is None else pa.array(sorted(set(frames)))
    ids: list[str] = []
    sev: list[int] = []
    clouds: list[np.ndarray] = []
    compact = "point_ref" in pf.schema_arrow.names
    clean: dict[str, np.ndarray] = {}
    if compact:  # compact encoding: rows refer to the clean file of the same block (same name, clean partition)

        cpath = Path(path).parents[2] / "corruption=clean" / "severity=0" / Path(path).name
        ct = CheckedParquetFile.local(cpath).read(columns=["frame_id", "points"])
        clean = dict(zip(ct["frame_id"].to_pylist(), decode_points(ct["points"], writable=False), strict=True))
    for rg in range(pf.num_row_groups):
        table = pf.read_row_group(rg, columns=["key", "frame_id", "points", *(["point_ref"] if compact else [])])
        if wanted is not None:
            table = table.filter(pc.is_in(table["frame_id"], value_set=wanted))
        if table.num_rows == 0:
            continue
        keys = table["key"].to_pylist()
        points = decode_points(table["points"].combine_chunks(), writable=False)
        if compact:

            refs = table["point_ref"].to_pylist()
            points = [p if r is None else materialize(np.asarray(r, np.int32), p, clean[f])
                      for p, r, f in zip(points, refs, table["frame_id"].to_pylist(), strict=True)]
        for key, fid, pts in zip(keys, table["frame_id"].to_pylist(), points, strict=True):
            try:
                clouds.append(prep.apply(pts, fields, scale, key, seed))
            except (EmptyScanError, ValueError) as e:
                return {"error": f"{path}: {e}"}
            ids.append(fid)
            sev.append(int(meta["severity"]))  # layout v2: the partition key, in the footer (not a column)
    dim = model_cfg.feature_dim
    if not clouds:
        return {"frame_id": [], "severity": [], "logits": np.zeros((0, model_cfg.classes), np.float32),
                "features": np.zeros((0, dim), np.float32)}
    model = load_model(state_dict, model_cfg)
    logits, feats, _ = evaluate(model, np.stack(clouds), None, batch_size, "cpu")
    return {"frame_id": ids, "severity": sev, "logits": logits, "features": feats}
