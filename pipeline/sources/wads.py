"""WADS, the Winter Adverse Driving dataSet (Kurup and Bos, Michigan Technological University): real
snowfall recorded with a 128-beam Velodyne and labelled per point. Licence: CC BY-NC-SA 4.0.

Layout (SemanticKITTI's; ``ROOT`` is the folder that holds ``sequences/``)::

    ROOT/sequences/NN/velodyne/FFFFFF.bin    float32 little-endian x, y, z (m, LiDAR frame), intensity 0..255
    ROOT/sequences/NN/labels/FFFFFF.label    uint32 per point: low 16 bits class id, high 16 instance

There is no calibration and no official split: ``split`` is None / ``"all"`` (every sequence found, sorted)
or sequence numbers such as ``"11"`` or ``"11,36"``. Frame ids are ``NN_FFFFFF`` (sequence, scan), in
sorted order. Class ids are SemanticKITTI's plus WADS's two snow classes, **110 = active falling snow** and
**111 = accumulated snow** (`LABEL_NAMES`); `snow_masks` splits a scan into falling snow, accumulated snow
and the rest by label.

Duplicates: a raw WADS scan repeats many rows exactly (about 42 % of the rows of a released
WADS scan, label included). ``duplicates = "keep"`` (the default) reads the file as it is;
``"drop"`` keeps the first occurrence of each exact (x, y, z, intensity, label) row, in file order. Either
way the frame's ``info`` records ``duplicate_rows`` (how many rows repeat an earlier one) and
``duplicates`` (``kept`` / ``dropped``), so the choice is visible in every row of a build. As a build
source the option is the recipe's ``[source_options] duplicates``.

Sensor: WADS's LiDAR is described by its authors as a 128-beam Velodyne (VLS-128 class: about −25°…+15°
vertical field of view, which the scan's −24.9°…+14.8° elevations match). `VLS128` spreads its 128 beams
evenly over that field of view — the real sensor's spacing is not uniform, so ring-based stages get an
approximation; the naturalness report names the sensor and flags beam-dependent quantities.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bench_build.sources.base import SourceError
from bench_build.sources.kitti import read_velodyne
from bench_build.sources.semantickitti import LABEL_NAMES as SEMANTICKITTI_NAMES
from bench_build.sources.semantickitti import read_label_file
from bench_build.stages.frame import Frame
from bench_build.stages.sensor import Sensor

FALLING_SNOW = 110
ACCUMULATED_SNOW = 111
#: class id → name: SemanticKITTI's ids (WADS reuses them) plus the two snow classes. The WADS README names
#: 110 "active falling snow" and 111 "accumulated snow"; the hyphenated spelling here is ours.
LABEL_NAMES = {**SEMANTICKITTI_NAMES, FALLING_SNOW: "active-falling-snow", ACCUMULATED_SNOW: "accumulated-snow"}
DUPLICATE_CHOICES = ("keep", "drop")
#: [source_options] a recipe with ``source = "wads"`` may set, with their allowed values
SOURCE_OPTIONS = {"duplicates": DUPLICATE_CHOICES}
#: elevations approximate (evenly spread; the real VLS-128's spacing is finer near the horizon)
VLS128 = Sensor("velodyne-vls128", tuple(float(v) for v in np.linspace(-25.0, 15.0, 128)), max_range=245.0)


def parse_sequences(split: str | None) -> tuple[str, ...] | None:
    """None (every sequence) for no split / ``all``, else the listed sequence numbers as two digits."""
    if split in (None, "", "all"):
        return None
    seqs = tuple(s.strip() for s in split.split(",") if s.strip())
    if not seqs or not all(s.isdigit() for s in seqs):
        raise ValueError(f"WADS split {split!r}: expected 'all' or sequence numbers like 11,36")
    return tuple(f"{int(s):02d}" for s in seqs)


def duplicate_first(points: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Boolean mask, True on the first occurrence of each exact (points row, label) — file order kept."""
    rows = np.concatenate([np.ascontiguousarray(points, dtype="<f4").view("<u4"),
                           labels.astype("<u4")[:, None]], axis=1)
    _, first = np.unique(rows, axis=0, return_index=True)
    keep = np.zeros(len(points), dtype=bool)
    keep[first] = True
    return keep


def snow_masks(semantic: np.ndarray) -> dict[str, np.ndarray]:
    """A scan split by label into ``falling`` (110), ``accumulated`` (111) and ``rest`` (every other class)."""
    cls = np.asarray(semantic) & 0xFFFF
    falling, accumulated = cls == FALLING_SNOW, cls == ACCUMULATED_SNOW
    return {"falling": falling, "accumulated": accumulated, "rest": ~(falling | accumulated)}


class WadsSource:
    """WADS scans with their per-point labels, every sequence (or those of ``split``) in sorted order."""

    kind = "wads"
    columns = ("semantic", "instance", "sequence")
    fields = ("x", "y", "z", "intensity")
    intensity_scale = "byte"
    sensor = VLS128

    def __init__(self, root: str | Path, split: str | None = None, duplicates: str = "keep", *,
                 allow_empty: bool = False) -> None:
        root = Path(root)
        if not (root / "sequences").is_dir():
            raise SourceError(root / "sequences", "sequences directory not found (is this a WADS root? "
                                                  "it holds sequences/NN/velodyne and sequences/NN/labels)")
        if duplicates not in DUPLICATE_CHOICES:
            raise SourceError(root, f"duplicates must be one of {list(DUPLICATE_CHOICES)}, got {duplicates!r}")
        self.root = root
        self.split = split or "all"
        self.duplicates = duplicates
        self.allow_empty = allow_empty  # 0-byte scans are an error unless the dataset really has empty frames
        try:
            self.sequences = parse_sequences(split)
        except ValueError as e:
            raise SourceError(root, str(e)) from None

    def _sequences(self) -> list[str]:
        if self.sequences is not None:
            for seq in self.sequences:
                if not (self.root / "sequences" / seq / "velodyne").is_dir():
                    raise SourceError(self.root / "sequences" / seq / "velodyne",
                                      f"velodyne directory of sequence {seq} not found")
            return list(self.sequences)
        found = sorted(d.name for d in (self.root / "sequences").iterdir() if (d / "velodyne").is_dir())
        if not found:
            raise SourceError(self.root / "sequences", "no sequence with a velodyne/ directory")
        return found

    def list_frames(self) -> list[str]:
        ids = []
        for seq in self._sequences():
            ids.extend(f"{seq}_{p.stem}" for p in sorted((self.root / "sequences" / seq / "velodyne").glob("*.bin")))
        if not ids:
            raise SourceError(self.root / "sequences", "no *.bin scans in the velodyne/ directories")
        return ids

    def paths(self, frame_id: str) -> dict[str, Path]:
        seq, _, scan = frame_id.partition("_")
        d = self.root / "sequences" / seq
        return {"velodyne": d / "velodyne" / f"{scan}.bin", "label": d / "labels" / f"{scan}.label"}

    def read_labelled(self, frame_id: str) -> tuple[np.ndarray, np.ndarray, int]:
        """Points (N×4 float32, intensity 0..255), raw uint32 labels, and the number of duplicate rows in the
        file; with ``duplicates = "drop"`` the points and labels are already deduplicated."""
        p = self.paths(frame_id)
        if not p["velodyne"].is_file():
            raise SourceError(p["velodyne"], "scan file not found")
        points = read_velodyne(p["velodyne"], allow_empty=self.allow_empty, name="wads")
        if not p["label"].is_file():
            raise SourceError(p["label"], f"label file missing for scan {p['velodyne'].name} (WADS scans are "
                                          "labelled; the realism report needs the snow labels)")
        raw = read_label_file(p["label"], len(points), p["velodyne"])
        first = duplicate_first(points, raw)
        n_dup = int(len(points) - first.sum())
        if self.duplicates == "drop":
            points, raw = points[first], raw[first]
        return points, raw, n_dup

    def read(self, frame_id: str) -> Frame:
        seq = frame_id.partition("_")[0]
        points, raw, n_dup = self.read_labelled(frame_id)
        labels = {"semantic": (raw & 0xFFFF).astype(np.uint32), "instance": (raw >> 16).astype(np.uint32)}
        info = {"duplicate_rows": n_dup, "duplicates": "kept" if self.duplicates == "keep" else "dropped"}
        return Frame(frame_id=frame_id, points=points, fields=self.fields, intensity_scale=self.intensity_scale,
                     labels=labels, sensor=self.sensor, info=info, attrs={"sequence": seq})

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "root": str(self.root), "split": self.split, "duplicates": self.duplicates,
                "fields": list(self.fields), "intensity_scale": self.intensity_scale,
                "sensor": self.sensor.describe(), "semantic": "WADS class id (label & 0xFFFF)",
                "label_names": {str(k): v for k, v in LABEL_NAMES.items()}}
