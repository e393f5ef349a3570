"""The 3DOS composite source: every (scenario, shape) of the benchmark's three tracks as one frame.

It reads ShapeNetCore v2 (`ShapeNetCoreSource`, meshes → FPS 4,096), ModelNet40 (`ModelNet40H5Source`,
PointNet's 2,048-point h5 clouds) and ScanObjectNN OBJ_BG (`ScanObjectNNSource`) and lists, per
scenario of `bench_build.manifests.threedos.SCENARIOS` (stable order: scenario, then split, then source order)::

    SN1/train/shapenet/<synset>/<model>          known set's train / val / test shapes
    SN1/test/shapenet/<synset>/<model>           + the two unknown sets' test shapes
    SR1/train/modelnet40/train/00012             ModelNet40 train shapes of the known classes
    SR1/val/modelnet40/test/00003                ModelNet40 test shapes of the known classes
    SR1/test/scanobjectnn/training/00007         every ScanObjectNN scan (training + test files) of SR1 ∪ SR2 ∪ SR3
    SR12/train/scanobjectnn/training/00007       Real-to-Real: known classes of the training file (less val),
    SR12/val/scanobjectnn/training/00003         the released trainer's validation hold-out of those,
    SR12/test/scanobjectnn/test/00001            known classes of the test file + the unknown set's scans (all)

Each frame's ``attrs`` (row columns): ``track``, ``scenario``, ``split``, ``class_name`` (the source's
original class), ``class_id`` (the scenario's mapped id; −1 when unknown), ``known``, ``unknown_set`` (the
set an unknown example comes from, e.g. SN2 or SR3), ``domain`` (synthetic / real: real scans keep 2,048
points in the ``object_sample`` preprocessing) and, for ShapeNet shapes, ``synset`` and ``model_id``; its
``info``: ``dataset``, ``source_id``, ``source_split``. The ScanObjectNN mask is not carried.
The same shape appears in several scenarios (known in one, unknown in the others), once per scenario.

Two choices follow the released code by default and are recipe ``[source_options]`` (each has a variant):

- ``cellphone``: ShapeNet's cellphone synset 02992529 is in none of SN1/SN2/SN3, and the released loader
  (``datasets/sncore_4k.py``) keeps only the scenario's synsets before its cellphone→telephone merge, so
  that merge never runs and no cellphone is in any set (``exclude``, default). ``telephone`` (variant
  ``3dos:cellphone``) merges them into telephone: known in SN1, SN1 unknowns in SN2 and SN3.
- ``r2r_val``: the released Real-to-Real trainer (``classifiers/trainer_ddp_cla_r2r.py``) takes the known
  classes' scans of the training file in file order and holds out ``train_test_split(range(n),
  test_size=int(n * 10 / 100), shuffle=True, random_state=42)``'s test part as validation. ``authors``
  (default) lists exactly those scans as ``val`` and the rest as ``train``, so a model trained on ``train``
  sees the paper's training set and model selection can use the paper's validation set (`authors_r2r_split`
  reproduces the split in NumPy; sklearn is not needed). ``none`` (variant ``3dos:r2r-train-all``) keeps
  the whole training file as ``train``. The test split is the same either way.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from bench_build.manifests.threedos import (
    DEFAULT_SOURCE_OPTIONS,
    SCENARIOS,
    SOURCE_OPTIONS,
    SR_MODELNET,
    SR_SCANOBJECTNN,
    sn_set_of,
    sonn_label_map,
    sonn_set_of,
    synset_label_map,
)
from bench_build.sources.base import SourceError
from bench_build.sources.modelnet import XYZ, ModelNet40H5Source
from bench_build.sources.scanobjectnn import SONN_CLASSES, ScanObjectNNSource
from bench_build.sources.shapenet import ShapeNetCoreSource
from bench_build.stages.frame import Frame


def authors_r2r_split(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, val) positions among ``n`` known-class training scans, as the released Real-to-Real trainer
    draws them: ``train_test_split(list(range(n)), test_size=int(n * 10 / 100), shuffle=True,
    random_state=42)``. With an int ``random_state`` and no stratification sklearn's ShuffleSplit takes
    ``permutation = RandomState(42).permutation(n)``, the first ``n_val`` as test, the next ``n - n_val`` as
    train; this repeats it (checked against sklearn in the tests). Below 10 scans sklearn refuses a 0-sized
    test set; we then hold out nothing (only tiny fixtures have so few)."""
    n_val = int(n * 10 / 100)  # the trainer's own expression: floor, not ceil(0.1·n)
    if n_val == 0:
        return np.arange(n), np.arange(0)
    perm = np.random.RandomState(42).permutation(n)
    return perm[n_val:], perm[:n_val]


class ThreeDOSSource:
    kind = "3dos"
    columns = ("class_name", "class_id", "split", "track", "scenario", "known", "synset", "model_id",
               "unknown_set", "domain")  # optional row columns (pipeline/format/schema.py)
    fields = XYZ
    intensity_scale = "unit"

    def __init__(self, root: str | Path | None = None, *, shapenet: str | Path | None = None,
                 modelnet40: str | Path | None = None, scanobjectnn: str | Path | None = None,
                 cellphone: str = DEFAULT_SOURCE_OPTIONS["cellphone"],
                 r2r_val: str = DEFAULT_SOURCE_OPTIONS["r2r_val"]) -> None:
        for key, value in (("cellphone", cellphone), ("r2r_val", r2r_val)):
            if value not in SOURCE_OPTIONS[key]:
                raise ValueError(f"3dos source option {key} must be one of {list(SOURCE_OPTIONS[key])}, got {value!r}")
        self.cellphone, self.r2r_val = cellphone, r2r_val
        roots = {"shapenet": shapenet or root, "modelnet40": modelnet40 or root, "scanobjectnn": scanobjectnn or root}
        missing = [k for k, v in roots.items() if v is None]
        if missing:
            raise SourceError(Path("."), f"3dos needs the {', '.join(missing)} root(s) (--source or --source-<name>)")
        self.shapenet = ShapeNetCoreSource(roots["shapenet"], "all")
        self.modelnet40 = ModelNet40H5Source(roots["modelnet40"], "all")
        self.scanobjectnn = ScanObjectNNSource(roots["scanobjectnn"], "all", variant="objectdataset")

    def _sub(self, dataset: str):
        return {"shapenet": self.shapenet, "modelnet40": self.modelnet40, "scanobjectnn": self.scanobjectnn}[dataset]

    @cached_property
    def _entries(self) -> dict[str, dict[str, Any]]:
        """frame id → its attrs (everything but the points), in the stable listing order."""
        out: dict[str, dict[str, Any]] = {}
        shapes = [(sid, self.shapenet.split_of(sid.split("/")[1])) for sid in self.shapenet.list_frames()]
        mn_labels = self.modelnet40.labels()
        mn_names = self.modelnet40.class_names
        sonn = self.scanobjectnn.labels()

        def add(sc, split, dataset, sid, name, cid, known, domain, unknown_set=None, **extra):
            out[f"{sc.name}/{split}/{dataset}/{sid}"] = {
                "track": sc.track, "scenario": sc.name, "split": split, "class_name": name, "class_id": cid,
                "known": known, "unknown_set": unknown_set, "domain": domain, **extra,
                "info": {"dataset": dataset, "source_id": sid}}

        for sc in SCENARIOS:
            if sc.track == "synthetic":
                labels = synset_label_map(sc.known[0], self.cellphone)
                for split in ("train", "val", "test"):
                    for sid, s in shapes:
                        syn = sid.split("/")[0]
                        member = sn_set_of(syn, self.cellphone)
                        if s != split or member is None:
                            continue
                        known = member in sc.known
                        if known or (split == "test" and member in sc.unknown):
                            add(sc, split, "shapenet", sid, self.shapenet.read_class(syn),
                                labels[syn] if known else -1, known, "synthetic", None if known else member,
                                synset=syn, model_id=sid.split("/")[1])
            elif sc.track == "synth_to_real":
                cmap = SR_MODELNET[sc.known[0]]
                for split, mn_split in (("train", "train"), ("val", "test")):
                    for mid, lab in mn_labels.items():
                        if mid.startswith(mn_split + "/") and mn_names[lab] in cmap:
                            add(sc, split, "modelnet40", mid, mn_names[lab], cmap[mn_names[lab]], True, "synthetic")
                smap = sonn_label_map(sc.known)
                others = {k for s in sc.unknown for k in SR_SCANOBJECTNN[s]}
                for sid, lab in sonn.items():
                    if lab in smap or lab in others:
                        add(sc, "test", "scanobjectnn", sid, SONN_CLASSES[lab], smap.get(lab, -1), lab in smap, "real",
                            None if lab in smap else sonn_set_of(lab))
            else:
                smap = sonn_label_map(sc.known)
                others = {k for s in sc.unknown for k in SR_SCANOBJECTNN[s]}
                # the trainer's class filter keeps the training file's order; its split indexes that list
                known_train = [sid for sid, lab in sonn.items() if sid.startswith("training/") and lab in smap]
                held = set()
                if self.r2r_val == "authors":
                    held = {known_train[i] for i in authors_r2r_split(len(known_train))[1].tolist()}
                for split in ("train", "val"):
                    for sid in known_train:
                        if (sid in held) == (split == "val"):
                            add(sc, split, "scanobjectnn", sid, SONN_CLASSES[sonn[sid]], smap[sonn[sid]], True, "real")
                for sid, lab in sonn.items():
                    if sid.startswith("test/") and lab in smap:
                        add(sc, "test", "scanobjectnn", sid, SONN_CLASSES[lab], smap[lab], True, "real")
                for sid, lab in sonn.items():
                    if lab in others:
                        add(sc, "test", "scanobjectnn", sid, SONN_CLASSES[lab], -1, False, "real", sonn_set_of(lab))
        if not out:
            raise SourceError(self.shapenet.root, "no 3DOS examples found in the three sources")
        return out

    def list_frames(self) -> list[str]:
        return list(self._entries)

    def read(self, frame_id: str) -> Frame:
        entry = self._entries.get(frame_id)
        if entry is None:
            raise SourceError(self.shapenet.root, f"no 3DOS example {frame_id!r}")
        info = entry["info"]
        frame = self._sub(info["dataset"]).read(info["source_id"])
        attrs = {k: v for k, v in entry.items() if k != "info" and v is not None}
        return replace(frame, frame_id=frame_id, attrs=attrs, labels={},
                       info={**info, "source_split": frame.attrs["split"]})

    def counts(self) -> dict[str, dict[str, dict[str, int]]]:
        """Per scenario and split: known / unknown examples (for the card)."""
        out: dict[str, dict[str, dict[str, int]]] = {}
        for a in self._entries.values():
            c = out.setdefault(a["scenario"], {}).setdefault(a["split"], {"known": 0, "unknown": 0})
            c["known" if a["known"] else "unknown"] += 1
        return out

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "fields": list(XYZ), "root": str(self.shapenet.root),
                "options": {"cellphone": self.cellphone, "r2r_val": self.r2r_val},
                "shapenet": self.shapenet.describe(), "modelnet40": self.modelnet40.describe(),
                "scanobjectnn": self.scanobjectnn.describe(), "counts": self.counts()}
