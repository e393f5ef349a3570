"""What both PyTorch datasets share: the manifest entries a selection names, one example as a dict, and the
per-process reader state that is opened again (never pickled) in each DataLoader or Ray worker."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from bench_build.format.reader import Example, Version, open_version
from bench_build.stages.frame import DONT_CARE


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
    """One example as the loaders yield it (the table of `bench_build.loaders`)."""
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


def is_index(i: Any) -> bool:
    return isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_))


class RowReader:
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


class VersionSelection:
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
        self._reader: RowReader | None = None
        self._version = version  # the constructing process's reader; workers open their own

    @property
    def reader(self) -> RowReader:
        if self._reader is None:
            self._reader = RowReader(self.url, self.endpoint_url, self.profile, self.verify)
        return self._reader

    def __getstate__(self) -> dict[str, Any]:  # DataLoader workers (spawn) get no open files or caches
        state = dict(self.__dict__)
        state["_reader"], state["_version"] = None, None
        return state
