"""Reading a built version: filter by corruption / severity / frame, get examples as NumPy.

    from pipeline.reader import open_version
    ds = open_version("bench-out/kitti-c/1.0.0")
    for ex in ds.examples(corruption="translation", severity=3, frames=["000008"]):
        ex.points      # (N, C) float32 view, columns ex.fields
        ex.point_tag   # (N,) uint8, stages.frame.PointTag
        ex.boxes       # stages.frame.Boxes in the LiDAR frame (or None)
        ex.to_frame()  # a stages.frame.Frame, e.g. to run further stages or export KITTI labels

Only the files of the requested partitions are opened (the manifest says which), and within a file
only the row groups whose statistics can hold the requested frames.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from manifests.manifest import read_manifest
from pipeline.plan import CLEAN
from pipeline.schema import decode_boxes, decode_calib, decode_points, file_metadata
from stages.frame import Boxes, Calib, Frame


@dataclass(frozen=True)
class Example:
    key: str
    frame_id: str
    corruption: str
    severity: int
    points: np.ndarray
    fields: tuple[str, ...]
    point_tag: np.ndarray
    semantic: np.ndarray | None
    boxes: Boxes | None
    calib: Calib | None
    intensity_scale: str
    info: dict = field(default_factory=dict)  # per-example facts recorded by the stage (JSON column)

    def to_frame(self) -> Frame:
        labels = {"point_tag": self.point_tag}
        if self.semantic is not None:
            labels["semantic"] = self.semantic
        return Frame(self.frame_id, self.points, self.fields, self.intensity_scale, labels, self.boxes, self.calib,
                     dict(self.info))


class Version:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.manifest = read_manifest(self.root)

    @property
    def corruptions(self) -> list[str]:
        return [c["name"] for c in self.manifest["recipe"]["corruptions"]]

    def files(self, corruption: str | None = None, severity: int | None = None) -> list[Path]:
        """Files holding the requested partition(s). Severity 0 of any corruption is the clean copy."""
        out = []
        for s in self.manifest["shards"]:
            if severity == 0 or corruption == CLEAN:
                if s["corruption"] != CLEAN:
                    continue
            else:
                if corruption is not None and s["corruption"] != corruption:
                    continue
                if severity is not None and s["severity"] != severity:
                    continue
            out.append(self.root / s["path"])
        return out

    def examples(self, corruption: str | None = None, severity: int | None = None,
                 frames: Iterable[str] | None = None) -> Iterator[Example]:
        """Examples in manifest order; ``severity=0`` gives the clean frames (labelled ``clean``)."""
        if corruption is not None and corruption != CLEAN and corruption not in self.corruptions:
            raise KeyError(f"{self.root}: no corruption {corruption!r}; it has {', '.join(self.corruptions)}")
        wanted = None if frames is None else sorted(set(frames))
        for path in self.files(corruption, severity):
            pf = pq.ParquetFile(path)
            meta = file_metadata(pf.schema_arrow)
            fields = tuple(meta["fields"])
            for rg in range(pf.num_row_groups):
                table = pf.read_row_group(rg)
                if wanted is not None:
                    table = table.filter(pc.is_in(table["frame_id"], value_set=pa.array(wanted)))
                    if table.num_rows == 0:
                        continue
                yield from _rows(table, fields, meta["intensity_scale"])

    def example(self, frame_id: str, corruption: str, severity: int) -> Example:
        for ex in self.examples(corruption, severity, [frame_id]):
            return ex
        raise KeyError(f"{self.root}: no example ({frame_id}, {corruption}, {severity})")


def _rows(table, fields: tuple[str, ...], scale: str) -> Iterator[Example]:
    points = decode_points(table["points"].combine_chunks(), len(fields))
    tags = decode_points(table["point_tag"].combine_chunks(), 1)
    semantic = table["semantic"].to_pylist()
    boxes = table["boxes"].to_pylist()
    calib = table["calib"].to_pylist()
    info = table["info"].to_pylist() if "info" in table.column_names else [None] * table.num_rows
    cols = {k: table[k].to_pylist() for k in ("key", "frame_id", "corruption", "severity")}
    for i in range(table.num_rows):
        yield Example(
            key=cols["key"][i], frame_id=cols["frame_id"][i], corruption=cols["corruption"][i],
            severity=cols["severity"][i], points=points[i], fields=fields, point_tag=tags[i].ravel(),
            semantic=None if semantic[i] is None else np.asarray(semantic[i], dtype=np.uint32),
            boxes=decode_boxes(boxes[i]), calib=decode_calib(calib[i]), intensity_scale=scale,
            info={} if info[i] is None else json.loads(info[i]),
        )


def open_version(root: str | Path) -> Version:
    return Version(root)


def export_kitti(root: str | Path, out: str | Path, *, corruption: str, severity: int,
                 frames: Iterable[str] | None = None) -> int:
    """Write one partition of a built version in KITTI layout (velodyne .bin, label_2, calib).

    Labels come from the example's boxes, so for object-level corruptions that move, rotate,
    scale or deform objects the exported ``label_2`` describes the corrupted scene. Returns the
    number of frames written to ``out/training``.
    """
    from pipeline.sources.kitti import write_frame

    n = 0
    for ex in open_version(root).examples(corruption, severity, frames):
        write_frame(Path(out), ex.to_frame())
        n += 1
    return n
