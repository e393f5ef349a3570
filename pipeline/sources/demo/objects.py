"""The demo object source: procedural meshes for every class, written in the real on-disk formats.

So that ``bench-build run modelnet-c`` / ``modelnet40-e`` / ``3dos`` build with no download, and the
readers are exercised end to end, this writes under one root::

    modelnet40_ply_hdf5_2048/   ply_data_{train,test}{0,1}.h5 (data float32 B×2048×3 unit sphere,
                                label uint8 B×1), shape_names.txt, {train,test}_files.txt, *_id2file.json
    ModelNet40/<class>/{train,test}/<class>_NNNN.off   the meshes those clouds were sampled from
    ScanObjectNN/h5_files/main_split/{training,test}_objectdataset.h5   object + floor/wall clutter,
                                data float32 N×2048×3, label int64 (N,), mask uint8 N×2048
    ShapeNetCore.v2/taxonomy.json, all.csv, <synset>/<model>/models/model_normalized.{obj,json}

Each class is a fixed assembly of 2–4 primitives (box, cylinder, cone, sphere) whose sizes and
offsets are drawn from a seed derived from the class name; instances vary by ±15 % per part. Classes
are therefore distinguishable, shapes are reproducible from (seed, class, index), and the files are
byte-identical on every run (h5 files are written without timestamps).
"""

from __future__ import annotations

import csv
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from bench_build.plan.tasks import stable_hash
from bench_build.sources.demo.cache import demo_cache_dir, mark_demo
from bench_build.sources.mesh import sample_surface, unit_sphere
from bench_build.sources.scanobjectnn import SONN_CLASSES
from bench_build.sources.shapenet import SHAPENET_SYNSETS

DEMO_OBJECT_SEED = 4242
#: The 40 ModelNet40 class names, alphabetical (= shape_names.txt order).
MODELNET40_CLASSES = (
    "airplane", "bathtub", "bed", "bench", "bookshelf", "bottle", "bowl", "car", "chair", "cone", "cup",
    "curtain", "desk", "door", "dresser", "flower_pot", "glass_box", "guitar", "keyboard", "lamp", "laptop",
    "mantel", "monitor", "night_stand", "person", "piano", "plant", "radio", "range_hood", "sink", "sofa",
    "stairs", "stool", "table", "tent", "toilet", "tv_stand", "vase", "wardrobe", "xbox",
)
DEMO_VERSION = 2  # bump when the generated files change (part of the cache directory name)


def class_mesh(name: str, instance: int, seed: int = DEMO_OBJECT_SEED):
    """The ``instance``-th procedural mesh of class ``name`` (a trimesh.Trimesh, roughly 1 unit tall)."""
    import trimesh

    crng = np.random.default_rng(np.random.SeedSequence([seed, stable_hash(f"class/{name}")]))
    irng = np.random.default_rng(np.random.SeedSequence([seed, stable_hash(f"instance/{name}/{instance}")]))
    parts = []
    for _ in range(int(crng.integers(2, 5))):
        kind = int(crng.integers(0, 4))
        size = crng.uniform(0.15, 0.8, 3) * irng.uniform(0.85, 1.15, 3)
        offset = crng.uniform(-0.4, 0.4, 3) + irng.normal(0, 0.03, 3)
        if kind == 0:
            m = trimesh.creation.box(extents=size)
        elif kind == 1:
            m = trimesh.creation.cylinder(radius=size[0] / 2, height=size[2], sections=16)
        elif kind == 2:
            m = trimesh.creation.cone(radius=size[0] / 2, height=size[2], sections=16)
        else:
            m = trimesh.creation.icosphere(subdivisions=1, radius=size[0] / 2)
        m.apply_translation(offset)
        parts.append(m)
    return trimesh.util.concatenate(parts)


def _shape_rng(seed: int, what: str) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, stable_hash(what)]))


def _write_h5(path: Path, **datasets: np.ndarray) -> None:
    import h5py  # ≈ 0.1 s: only the object benchmarks' files need it, and every worker imports the readers

    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w", track_order=True) as f:
        for k, v in datasets.items():
            f.create_dataset(k, data=v, track_times=False)


def write_modelnet40(root: Path, per_class: dict[str, int], seed: int = DEMO_OBJECT_SEED, files: int = 2) -> None:
    """PointNet HDF5 release + OFF meshes; ``per_class`` = shapes per class per split."""
    h5 = root / "modelnet40_ply_hdf5_2048"
    h5.mkdir(parents=True, exist_ok=True)
    (h5 / "shape_names.txt").write_text("".join(f"{c}\n" for c in MODELNET40_CLASSES))
    for split, n in per_class.items():
        clouds, labels, names = [], [], []
        for i in range(n):  # interleave classes like the real files (not sorted by class)
            for label, cls in enumerate(MODELNET40_CLASSES):
                number = i + 1 if split == "train" else 500 + i + 1  # test ids follow train ids, as in ModelNet
                stem = f"{cls}_{number:04d}"
                mesh = class_mesh(cls, i if split == "train" else 1000 + i, seed)
                off = root / "ModelNet40" / cls / split / f"{stem}.off"
                off.parent.mkdir(parents=True, exist_ok=True)
                off.write_text(mesh.export(file_type="off"))
                pts = sample_surface(mesh, 2048, _shape_rng(seed, f"modelnet/{split}/{stem}"))
                clouds.append(unit_sphere(pts))
                labels.append(label)
                names.append(f"{cls}/{stem}.ply")
        order = _shape_rng(seed, f"modelnet-order/{split}").permutation(len(clouds))
        chunks = np.array_split(order, files)
        listing = []
        for k, idx in enumerate(chunks):
            name = f"ply_data_{split}{k}.h5"
            _write_h5(h5 / name, data=np.stack([clouds[j] for j in idx]).astype(np.float32),
                      label=np.array([[labels[j]] for j in idx], dtype=np.uint8))
            (h5 / f"ply_data_{split}_{k}_id2file.json").write_text(json.dumps([names[j] for j in idx]))
            listing.append(f"data/modelnet40_ply_hdf5_2048/{name}\n")
        (h5 / f"{split}_files.txt").write_text("".join(listing))


def write_scanobjectnn(root: Path, per_class: dict[str, int], seed: int = DEMO_OBJECT_SEED) -> None:
    """OBJ_BG-style h5: 2,048 points per scan, object + a floor and a wall (mask 0), in metres."""
    out = root / "ScanObjectNN" / "h5_files" / "main_split"
    for split, n in per_class.items():
        data, labels, masks = [], [], []
        for i in range(n):
            for label, cls in enumerate(SONN_CLASSES):
                rng = _shape_rng(seed, f"sonn/{split}/{cls}/{i}")
                mesh = class_mesh(f"sonn-{cls}", (0 if split == "training" else 1000) + i, seed)
                n_obj = int(rng.integers(1400, 1900))
                obj = sample_surface(mesh, n_obj, rng) * 0.8 + rng.normal(0, 0.004, (n_obj, 3))
                n_bg = 2048 - n_obj
                floor = np.c_[rng.uniform(-0.8, 0.8, (n_bg, 2)), np.full(n_bg, obj[:, 2].min())]
                wall = n_bg // 3
                floor[:wall, 1] = obj[:, 1].max() + 0.05
                floor[:wall, 2] = rng.uniform(obj[:, 2].min(), obj[:, 2].max(), wall)
                pts = np.concatenate([obj, floor]).astype(np.float32)
                perm = rng.permutation(2048)
                mask = np.r_[np.ones(n_obj, np.uint8), np.zeros(n_bg, np.uint8)]
                data.append(pts[perm])
                masks.append(mask[perm])
                labels.append(label)
        _write_h5(out / f"{split}_objectdataset.h5", data=np.stack(data), label=np.array(labels, dtype=np.int64),
                  mask=np.stack(masks))


def model_id(synset: str, index: int, seed: int = DEMO_OBJECT_SEED) -> str:
    return hashlib.sha256(f"{seed}/{synset}/{index}".encode()).hexdigest()[:32]


def write_shapenet(root: Path, per_split: dict[str, int], seed: int = DEMO_OBJECT_SEED) -> None:
    """ShapeNetCore.v2 tree of OBJ meshes for all 55 synsets, with taxonomy.json and an all.csv split."""
    sn = root / "ShapeNetCore.v2"
    sn.mkdir(parents=True, exist_ok=True)
    rows, taxonomy, idx = [], [], 0
    for synset, name in SHAPENET_SYNSETS.items():
        count = 0
        for split, n in per_split.items():
            for _ in range(n):
                mid = model_id(synset, count, seed)
                mesh = class_mesh(f"shapenet-{name}", count, seed)
                d = sn / synset / mid / "models"
                d.mkdir(parents=True, exist_ok=True)
                (d / "model_normalized.obj").write_text(mesh.export(file_type="obj", include_normals=False,
                                                                    include_texture=False))
                lo, hi = mesh.bounds
                (d / "model_normalized.json").write_text(json.dumps(
                    {"id": mid, "numVertices": len(mesh.vertices), "min": lo.tolist(), "max": hi.tolist(),
                     "centroid": mesh.vertices.mean(axis=0).tolist()}))
                rows.append({"id": idx, "synsetId": synset, "subSynsetId": synset, "modelId": mid, "split": split})
                idx += 1
                count += 1
        taxonomy.append({"synsetId": synset, "name": name, "children": [], "numInstances": count})
    (sn / "taxonomy.json").write_text(json.dumps(taxonomy, indent=1))
    with (sn / "all.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["id", "synsetId", "subSynsetId", "modelId", "split"])
        w.writeheader()
        w.writerows(rows)


def write_demo_objects(out: str | Path, *, modelnet: dict[str, int] | None = None,
                       scanobjectnn: dict[str, int] | None = None, shapenet: dict[str, int] | None = None,
                       seed: int = DEMO_OBJECT_SEED) -> Path:
    """Write the demo object datasets under ``out``; a dict of 0 shapes skips that dataset."""
    out = Path(out)
    write_modelnet40(out, modelnet if modelnet is not None else {"train": 2, "test": 2}, seed)
    write_scanobjectnn(out, scanobjectnn if scanobjectnn is not None else {"training": 3, "test": 2}, seed)
    write_shapenet(out, shapenet if shapenet is not None else {"train": 2, "test": 2}, seed)
    mark_demo(out)
    return out


#: Which top-level folders each demo dataset writes (generated on demand, one dataset at a time).
DEMO_PARTS: dict[str, tuple[str, ...]] = {
    "modelnet40": ("modelnet40_ply_hdf5_2048", "ModelNet40"),
    "scanobjectnn": ("ScanObjectNN",),
    "shapenet": ("ShapeNetCore.v2",),
}


def ensure_demo_objects(datasets: tuple[str, ...] = tuple(DEMO_PARTS), seed: int = DEMO_OBJECT_SEED) -> Path:
    """The demo object root in the cache directory with ``datasets`` generated (each on first use only, under
    a file lock, renamed into place when complete: a killed run never leaves a half-written dataset)."""
    root = demo_cache_dir().parent / "demo-objects" / f"seed{seed}-v{DEMO_VERSION}"
    root.mkdir(parents=True, exist_ok=True)
    writers = {"modelnet40": lambda out: write_modelnet40(out, {"train": 2, "test": 2}, seed),
               "scanobjectnn": lambda out: write_scanobjectnn(out, {"training": 3, "test": 2}, seed),
               "shapenet": lambda out: write_shapenet(out, {"train": 2, "test": 2}, seed)}
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent first runs generate each dataset once
        for ds in datasets:
            marker = root / f".complete-{ds}"
            if marker.is_file():
                continue
            tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
            try:
                writers[ds](tmp)
                for sub in DEMO_PARTS[ds]:
                    if (root / sub).exists():  # left by a killed run (no marker)
                        shutil.rmtree(root / sub)
                    os.rename(tmp / sub, root / sub)
                marker.write_text("ok\n")
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return root
