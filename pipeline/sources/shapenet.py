"""ShapeNetCore v2 meshes, sampled the way 3DOS's pre-sampled clouds were made.

Layout::

    ROOT/taxonomy.json                                         [{synsetId, name, children, numInstances}]
    ROOT/<synsetId>/<modelId>/models/model_normalized.obj      the mesh (``.mtl``/``.json`` optional)
    ROOT/all.csv                                               optional official split
                                                               (id,synsetId,subSynsetId,modelId,split)

A shape's id is ``<synsetId>/<modelId>``. Its split (train / val / test) comes from ``all.csv`` when
present (ShapeNet's official 70/10/20 split that 3DOS uses); without it, a deterministic 70/10/20
split by a hash of the model id (documented choice: the same shape is always in the same split).

Reading a shape builds the cloud that 3DOS's ``sncore_fps_4096`` files hold, from the mesh: 16,384
area-weighted surface samples (trimesh, RNG seeded from the shape id), then farthest-point sampling
to 4,096 points (open3d, from point 0). The per-example 1,024-point draw and the unit-sphere
normalisation are a stage (``object_sample``), seeded per example. Every synset folder must be a
known ShapeNetCore synset listed in ``taxonomy.json``: anything else is an error naming the folder.
"""

from __future__ import annotations

import csv
import json
from functools import cached_property
from pathlib import Path
from typing import Any

from bench_build.plan.tasks import stable_hash
from bench_build.sources.base import SourceError, read_text
from bench_build.sources.mesh import DENSE_POINTS, farthest_points, load_mesh, mesh_rng, sample_surface
from bench_build.stages.frame import Frame

XYZ = ("x", "y", "z")
FPS_POINTS = 4096
SPLITS = ("train", "val", "test")
MESH = ("models", "model_normalized.obj")

#: The 55 ShapeNetCore v2 synsets with 3DOS's short names (antoalli/3D_OS datasets/sncore_splits.py).
SHAPENET_SYNSETS: dict[str, str] = {
    "02691156": "airplane", "02747177": "trash bin", "02773838": "bag", "02801938": "basket",
    "02808440": "bathtub", "02818832": "bed", "02828884": "bench", "02843684": "birdhouse",
    "02871439": "bookshelf", "02876657": "bottle", "02880940": "bowl", "02924116": "bus",
    "02933112": "cabinet", "02942699": "camera", "02946921": "can", "02954340": "cap", "02958343": "car",
    "02992529": "cellphone", "03001627": "chair", "03046257": "clock", "03085013": "keyboard",
    "03207941": "dishwasher", "03211117": "display", "03261776": "earphone", "03325088": "faucet",
    "03337140": "file cabinet", "03467517": "guitar", "03513137": "helmet", "03593526": "jar",
    "03624134": "knife", "03636649": "lamp", "03642806": "laptop", "03691459": "loudspeaker",
    "03710193": "mailbox", "03759954": "microphone", "03761084": "microwave", "03790512": "motorbike",
    "03797390": "mug", "03928116": "piano", "03938244": "pillow", "03948459": "pistol", "03991062": "flowerpot",
    "04004475": "printer", "04074963": "remote", "04090263": "rifle", "04099429": "rocket",
    "04225987": "skateboard", "04256520": "sofa", "04330267": "stove", "04379243": "table",
    "04401088": "telephone", "04460130": "tower", "04468005": "train", "04530566": "watercraft",
    "04554684": "washer",
}


def hash_split(model_id: str) -> str:
    """70/10/20 train/val/test by a stable hash of the model id (used when no ``all.csv`` is given)."""
    u = stable_hash(f"shapenet-split/{model_id}") % 100
    return "train" if u < 70 else "val" if u < 80 else "test"


class ShapeNetCoreSource:
    kind = "shapenet"
    columns = ("class_name", "synset", "model_id", "split")  # optional row columns (pipeline/format/schema.py)
    fields = XYZ
    intensity_scale = "unit"

    def __init__(self, root: str | Path, split: str | None = None, points: int = FPS_POINTS,
                 dense: int = DENSE_POINTS) -> None:
        root = Path(root)
        self.root = root / "ShapeNetCore.v2" if (root / "ShapeNetCore.v2").is_dir() else root
        self.split = split or "all"
        if self.split not in (*SPLITS, "all"):
            raise SourceError(self.root, f"unknown ShapeNet split {self.split!r} (train, val, test or all)")
        self.points, self.dense = points, dense

    @cached_property
    def taxonomy(self) -> dict[str, str]:
        """synsetId → name of ``taxonomy.json``."""
        path = self.root / "taxonomy.json"
        if not path.is_file():
            raise SourceError(path, "taxonomy.json not found")
        try:
            data = json.loads(read_text(path))
            return {str(rec["synsetId"]): str(rec["name"]) for rec in data}
        except (json.JSONDecodeError, TypeError, KeyError) as e:
            raise SourceError(path, f"not a list of {{synsetId, name, …}} records: {type(e).__name__}: {e}") from None

    @cached_property
    def official_split(self) -> dict[str, str] | None:
        path = self.root / "all.csv"
        if not path.is_file():
            return None
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
        if rows and not {"modelId", "split"} <= set(rows[0]):
            raise SourceError(path, f"expected columns id,synsetId,subSynsetId,modelId,split, got {list(rows[0])}")
        return {r["modelId"]: r["split"] for r in rows}

    def split_of(self, model_id: str) -> str:
        table = self.official_split
        if table is None:
            return hash_split(model_id)
        if model_id not in table:
            raise SourceError(self.root / "all.csv", f"model {model_id} is not listed")
        return table[model_id]

    @cached_property
    def _shapes(self) -> list[str]:
        if not self.root.is_dir():
            raise SourceError(self.root, "directory not found")
        taxonomy = self.taxonomy
        ids = []
        for syn in sorted(p for p in self.root.iterdir() if p.is_dir()):
            if syn.name not in SHAPENET_SYNSETS or syn.name not in taxonomy:
                raise SourceError(syn, f"unknown synset {syn.name!r}: not a ShapeNetCore v2 synset listed in "
                                       "taxonomy.json")
            for model in sorted(p for p in syn.iterdir() if p.is_dir()):
                if self.split == "all" or self.split_of(model.name) == self.split:
                    ids.append(f"{syn.name}/{model.name}")
        if not ids:
            raise SourceError(self.root, f"no <synset>/<model>/models/model_normalized.obj shapes (split {self.split})")
        return ids

    def list_frames(self) -> list[str]:
        return list(self._shapes)

    def read_class(self, synset: str) -> str:
        return SHAPENET_SYNSETS[synset]

    def path(self, frame_id: str) -> Path:
        return self.root.joinpath(frame_id, *MESH)

    def read(self, frame_id: str) -> Frame:
        synset, _, model = frame_id.partition("/")
        if synset not in SHAPENET_SYNSETS:
            raise SourceError(self.root / synset, f"unknown synset {synset!r}")
        mesh = load_mesh(self.path(frame_id), "obj")
        dense = sample_surface(mesh, self.dense, mesh_rng(f"shapenet/{frame_id}"))
        pts = farthest_points(dense, self.points)
        return Frame(frame_id=frame_id, points=pts, fields=XYZ,
                     attrs={"class_name": SHAPENET_SYNSETS[synset], "synset": synset, "model_id": model,
                            "split": self.split_of(model)})

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "root": str(self.root), "split": self.split, "fields": list(XYZ),
                "sampling": f"{self.dense} area-weighted surface points (trimesh) → FPS {self.points} (open3d)",
                "split_from": "all.csv" if self.official_split is not None else "hash of model id (70/10/20)"}
