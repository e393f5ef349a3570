"""ModelNet40: PointNet's HDF5 release (``modelnet40_ply_hdf5_2048``) and the OFF meshes.

HDF5 layout (PointNet's ``modelnet40_ply_hdf5_2048`` release)::

    ROOT/ply_data_train0.h5 … ply_data_train4.h5, ply_data_test0.h5, ply_data_test1.h5
        data  float32 (B, 2048, 3)  xyz, zero-mean, inside the unit sphere
        label int     (B, 1) or (B,) class index 0..39 (line of shape_names.txt)
        normal (optional, ignored)
    ROOT/shape_names.txt            40 class names, line index = label
    ROOT/{train,test}_files.txt     optional: one h5 path per line (PointNet-relative; only the name is used)

``ROOT`` may also be the folder that contains ``modelnet40_ply_hdf5_2048/``. Files are taken in the
order of ``{split}_files.txt`` when present, else sorted by name (the reference DGCNN / ModelNet-C
loaders glob unsorted; we never depend on filesystem order). A shape's id is ``<split>/<index>``, its
row in the concatenation of the split's files: ``test/00000`` … ``test/02467`` is the row order of
the ModelNet-C files. ``split='all'`` lists train then test (ModelNet40-E corrupts both).

OFF layout (Princeton's ModelNet40 meshes): ``ROOT/<class>/{train,test}/<class>_NNNN.off``; both ``OFF\\n3 1 0`` and
the glued ``OFF3 1 0`` header are read (trimesh). A mesh is turned into a cloud by area-weighted
surface sampling seeded from its id, then centred and scaled into the unit sphere like the h5 clouds.
"""

from __future__ import annotations

import re
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from bench_build.sources.base import SourceError, read_text
from bench_build.sources.mesh import load_mesh, mesh_rng, sample_surface, unit_sphere
from bench_build.stages.frame import Frame

H5_DIR = "modelnet40_ply_hdf5_2048"
SPLITS = ("train", "test")
XYZ = ("x", "y", "z")


def read_shape_names(path: Path) -> tuple[str, ...]:
    if not path.is_file():
        raise SourceError(path, "shape_names.txt not found (40 class names, one per line)")
    names = tuple(line.strip() for line in read_text(path).splitlines() if line.strip())
    if not names:
        raise SourceError(path, "no class names")
    return names


def h5_labels(path: Path, f: Any, n_expected: int | None = None) -> np.ndarray:
    """The ``label`` dataset of an open h5 file as int64 (B,), validated against ``data``'s length."""
    if "label" not in f:
        raise SourceError(path, f"no 'label' dataset (keys: {sorted(f.keys())})")
    lab = np.asarray(f["label"][...])
    if lab.ndim == 2 and lab.shape[1] == 1:
        lab = lab[:, 0]
    if lab.ndim != 1:
        raise SourceError(path, f"'label' has shape {lab.shape}, expected (B,) or (B, 1)")
    if n_expected is not None and len(lab) != n_expected:
        raise SourceError(path, f"'label' has {len(lab)} rows but 'data' has {n_expected}")
    if not np.issubdtype(lab.dtype, np.integer):
        if not np.all(np.mod(lab, 1) == 0):
            raise SourceError(path, f"'label' has non-integer values (dtype {lab.dtype})")
    return lab.astype(np.int64)


def h5_points_shape(path: Path, f: Any, width: int = 3) -> tuple[int, int]:
    """(B, N) of the ``data`` dataset, checked to be B×N×``width``."""
    if "data" not in f:
        raise SourceError(path, f"no 'data' dataset (keys: {sorted(f.keys())})")
    shape = f["data"].shape
    if len(shape) != 3 or shape[2] != width:
        raise SourceError(path, f"'data' has shape {shape}, expected (B, N, {width})")
    return int(shape[0]), int(shape[1])


def open_h5(path: Path):
    import h5py  # ≈ 0.1 s: only the object benchmarks' files need it, and every worker imports the readers

    if not path.is_file():
        raise SourceError(path, "file not found")
    try:
        return h5py.File(path, "r")
    except OSError as e:
        raise SourceError(path, f"not a readable HDF5 file: {e}") from None


def check_points(path: Path, pts: np.ndarray, row: int) -> np.ndarray:
    if not np.isfinite(pts).all():
        raise SourceError(path, f"row {row}: NaN/inf coordinates")
    return np.ascontiguousarray(pts, dtype=np.float32)


class ModelNet40H5Source:
    """ModelNet40 point clouds from PointNet's HDF5 files; one frame per shape of the chosen split."""

    kind = "modelnet40"
    columns = ("class_name", "class_id", "split")  # optional row columns (pipeline/format/schema.py)
    fields = XYZ
    intensity_scale = "unit"

    def __init__(self, root: str | Path, split: str | None = "test") -> None:
        root = Path(root)
        self.root = root / H5_DIR if (root / H5_DIR).is_dir() else root
        self.split = split or "test"
        if self.split not in (*SPLITS, "all"):
            raise SourceError(self.root, f"unknown ModelNet40 split {self.split!r} (train, test or all)")

    @property
    def splits(self) -> tuple[str, ...]:
        return SPLITS if self.split == "all" else (self.split,)

    @cached_property
    def class_names(self) -> tuple[str, ...]:
        return read_shape_names(self.root / "shape_names.txt")

    def files(self, split: str) -> list[Path]:
        if not self.root.is_dir():
            raise SourceError(self.root, "directory not found")
        lst = self.root / f"{split}_files.txt"
        if lst.is_file():
            names = [Path(line.strip()).name for line in read_text(lst).splitlines() if line.strip()]
            files = [self.root / n for n in names]
            for p in files:
                if not p.is_file():
                    raise SourceError(lst, f"lists {p.name}, which is not in {self.root}")
        else:
            def order(p: Path) -> tuple[int, str]:
                m = re.search(r"(\d+)\.h5$", p.name)
                return (int(m.group(1)) if m else -1, p.name)

            files = sorted(self.root.glob(f"ply_data_{split}*.h5"), key=order)
        if not files:
            raise SourceError(self.root, f"no ply_data_{split}*.h5 files")
        return files

    @cached_property
    def _index(self) -> dict[str, tuple[list[Path], np.ndarray]]:
        """split → (files, cumulative shape counts); reads only h5 metadata and labels."""
        out: dict[str, Any] = {}
        n_classes = len(self.class_names)
        for split in self.splits:
            files, counts = self.files(split), [0]
            for p in files:
                with open_h5(p) as f:
                    b, _ = h5_points_shape(p, f)
                    lab = h5_labels(p, f, b)
                if len(lab) and (lab.min() < 0 or lab.max() >= n_classes):
                    raise SourceError(p, f"labels outside 0..{n_classes - 1} (shape_names.txt has {n_classes})")
                counts.append(counts[-1] + b)
            out[split] = (files, np.array(counts))
        return out

    def list_frames(self) -> list[str]:
        return [f"{s}/{i:05d}" for s in self.splits for i in range(int(self._index[s][1][-1]))]

    def labels(self) -> dict[str, int]:
        """Frame id → class index, from the ``label`` datasets only (no points are read)."""
        out: dict[str, int] = {}
        for split in self.splits:
            i = 0
            for p in self._index[split][0]:
                with open_h5(p) as f:
                    b, _ = h5_points_shape(p, f)
                    for lab in h5_labels(p, f, b).tolist():
                        out[f"{split}/{i:05d}"] = lab
                        i += 1
        return out

    def locate(self, frame_id: str) -> tuple[Path, int]:
        split, _, num = frame_id.partition("/")
        if split not in self._index or not num.isdigit():
            raise SourceError(self.root, f"no shape {frame_id!r} in split(s) {self.splits}")
        files, cum = self._index[split]
        i = int(num)
        if i >= cum[-1]:
            raise SourceError(self.root, f"no shape {frame_id!r}: split {split} has {cum[-1]} shapes")
        k = int(np.searchsorted(cum, i, side="right") - 1)
        return files[k], i - int(cum[k])

    def read(self, frame_id: str) -> Frame:
        path, row = self.locate(frame_id)
        with open_h5(path) as f:
            b, _ = h5_points_shape(path, f)
            pts = check_points(path, f["data"][row], row)
            label = int(h5_labels(path, f, b)[row])
        return Frame(frame_id=frame_id, points=pts, fields=XYZ,
                     attrs={"class_name": self.class_names[label], "class_id": label,
                            "split": frame_id.partition("/")[0]})

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "root": str(self.root), "split": self.split, "format": "hdf5 (ply_hdf5_2048)",
                "files": {s: [p.name for p in self._index[s][0]] for s in self.splits},
                "shapes": {s: int(self._index[s][1][-1]) for s in self.splits}, "fields": list(XYZ)}


class ModelNet40MeshSource:
    """ModelNet40 OFF meshes, each sampled to ``num_points`` surface points (area-weighted, unit sphere)."""

    kind = "modelnet40-off"
    columns = ("class_name", "class_id", "split")  # optional row columns (pipeline/format/schema.py)
    fields = XYZ
    intensity_scale = "unit"

    def __init__(self, root: str | Path, split: str | None = "test", num_points: int = 2048) -> None:
        root = Path(root)
        self.root = root / "ModelNet40" if (root / "ModelNet40").is_dir() else root
        self.split = split or "test"
        self.num_points = num_points
        if self.split not in (*SPLITS, "all"):
            raise SourceError(self.root, f"unknown ModelNet40 split {self.split!r} (train, test or all)")

    @cached_property
    def class_names(self) -> tuple[str, ...]:
        if not self.root.is_dir():
            raise SourceError(self.root, "directory not found")
        names = tuple(sorted(p.name for p in self.root.iterdir() if p.is_dir()))
        if not names:
            raise SourceError(self.root, "no class folders")
        return names

    def list_frames(self) -> list[str]:
        splits = SPLITS if self.split == "all" else (self.split,)
        ids = [f"{s}/{p.stem}" for s in splits for c in self.class_names
               for p in sorted((self.root / c / s).glob("*.off"))]
        if not ids:
            raise SourceError(self.root, f"no <class>/{self.split}/*.off meshes")
        return ids

    def path(self, frame_id: str) -> Path:
        split, _, stem = frame_id.partition("/")
        cls = stem.rsplit("_", 1)[0]
        return self.root / cls / split / f"{stem}.off"

    def read(self, frame_id: str) -> Frame:
        path = self.path(frame_id)
        cls = path.parent.parent.name
        if cls not in self.class_names:
            raise SourceError(path, f"class {cls!r} is not a folder of {self.root}")
        mesh = load_mesh(path, "off")
        pts = unit_sphere(sample_surface(mesh, self.num_points, mesh_rng(f"modelnet40/{frame_id}")))
        return Frame(frame_id=frame_id, points=pts, fields=XYZ,
                     attrs={"class_name": cls, "class_id": self.class_names.index(cls),
                            "split": frame_id.partition("/")[0]})

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "root": str(self.root), "split": self.split, "format": "OFF meshes",
                "num_points": self.num_points, "sampling": "area-weighted (trimesh), unit sphere",
                "fields": list(XYZ)}
