"""Every dataset reader, registered in one table: `READERS`, one `ReaderInfo` a source kind.

A recipe's ``source`` is a key of `READERS`. Everything else that needs to know the readers reads this table:
`bench_build.sources.open_source` (which class, which demo data), the source contract test
(tests/pipeline/test_source_contract.py), which runs over every entry with its fixture writer. The CLI's ``--split``
help points here (each entry's ``splits``) rather than importing it: the help is built before the numeric pin lets
NumPy load. The licence a dataset card prints for a kind is in `bench_build.manifests.card.SOURCE_LICENCES` and its
BibTeX in ``manifests/citations.json`` (``sources``), because the card is written by `bench_build.manifests`, a
layer below this one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench_build.manifests.names import name_problem
from bench_build.sources.demo import kitti as demo_kitti
from bench_build.sources.demo import nuscenes as demo_nuscenes
from bench_build.sources.demo import objects as demo_objects
from bench_build.sources.demo import semantickitti as demo_semantickitti
from bench_build.sources.demo import wads as demo_wads
from bench_build.sources.demo import waymo as demo_waymo
from bench_build.sources.kitti import KittiSource
from bench_build.sources.modelnet import SPLITS as MODELNET_SPLITS
from bench_build.sources.modelnet import ModelNet40H5Source
from bench_build.sources.nuscenes import NuScenesSource
from bench_build.sources.nuscenes import split_problem as nuscenes_split_problem
from bench_build.sources.scanobjectnn import SPLITS as SCANOBJECTNN_SPLITS
from bench_build.sources.scanobjectnn import ScanObjectNNSource
from bench_build.sources.semantickitti import SemanticKittiSource, parse_split
from bench_build.sources.shapenet import SPLITS as SHAPENET_SPLITS
from bench_build.sources.shapenet import ShapeNetCoreSource
from bench_build.sources.threedos import ThreeDOSSource
from bench_build.sources.wads import WadsSource, parse_sequences
from bench_build.sources.waymo import WaymoSource

#: ``write(root, frames, seed)``: demo data of a scene kind in the reader's own on-disk layout; returns the root
DemoWriter = Callable[[Path, int, int], Path]
#: ``problem(root, split)``: why ``split`` is none of the splits a reader takes, as a phrase naming those it has
#: ("is not a KITTI split: …"), or None. ``root`` is the data's root, or None before the data is opened (then only
#: what the format fixes is checked)
SplitCheck = Callable[[Path | None, str], str | None]
#: ``write(root)``: a small fixture in the reader's on-disk layout (a few frames, coarse scans); returns the root
#: that ``reader(root)`` opens with its default split. The source contract test runs every reader on it.
FixtureWriter = Callable[[Path], Path]


@dataclass(frozen=True)
class ReaderInfo:
    """One dataset reader: what a recipe's ``source = "<kind>"`` opens, and how its demo data is made."""

    kind: str
    reader: type  #: the reader class: ``reader(root, split, **source_options)`` (composites: see ``parts``)
    name: str  #: the dataset's name in help texts
    splits: str  #: what ``--split`` takes for this reader (the CLI help)
    write_fixture: FixtureWriter  #: the contract test's fixture (`FixtureWriter`)
    #: scene kinds: writes the demo data a build uses without ``--source``; None: no demo (pass --source)
    write_demo: DemoWriter | None = None
    #: object (classification) benchmark: the demo is `bench_build.sources.demo.objects`, one root for all
    objects: bool = False
    #: composite readers: the datasets it reads, each root given by --source or --source-<name>
    parts: tuple[str, ...] = ()
    #: False for KITTI: its demo is read whole (the training folder) whatever ImageSets split the recipe names,
    #: so demo builds of every KITTI recipe see the same frames
    demo_takes_recipe_split: bool = True
    #: raise when ``write_demo`` writes other data: the demo cache is keyed by it, so old caches are not reused
    demo_version: int = 1
    #: the reader takes ``allow_empty=True`` (``--allow-empty-frames``): a 0-byte scan is read as a frame with no
    #: points instead of failing its shard (KITTI's velodyne record, `bench_build.sources.kitti.read_velodyne`;
    #: nuScenes' ``.pcd.bin``, `bench_build.sources.nuscenes.read_points`)
    allow_empty: bool = False
    #: `SplitCheck` of a recipe's split (or ``--split``), run before any work: a typo (``trainig``) is refused,
    #: naming the splits, where the reader would read something else or nothing (KITTI's demo reads every frame
    #: whatever the split). None: the reader checks its split itself when it opens the data
    split_problem: SplitCheck | None = None


def _one_of(name: str, accepted: tuple[str, ...], takes: str) -> SplitCheck:
    """A format with a fixed set of splits: ``accepted`` (aliases included); ``takes`` lists them for the message."""
    return lambda root, split: None if split in accepted else f"is not a {name} split (it takes {takes})"


def _parsed(name: str, parse: Callable[[str], object], takes: str) -> SplitCheck:
    """A format whose split is parsed (sequence lists): the reader's own parser decides."""
    def problem(root: Path | None, split: str) -> str | None:
        try:
            parse(split)
        except ValueError:
            return f"is not a {name} split (it takes {takes})"
        return None
    return problem


def _kitti_split(root: Path | None, split: str) -> str | None:
    """``training``, ``testing`` or an ImageSets list of the data (demo data included: it has train, val and
    trainval, although a demo build reads every frame whatever the split)."""
    if split in ("training", "testing"):
        return None
    if root is None or name_problem(split) is not None:
        return None  # a list name only the data can tell; a path ("../../x") the reader refuses, naming ImageSets
    if root.name in ("training", "testing") and (root / "velodyne").is_dir():
        root = root.parent
    sets = root / "ImageSets"
    lists = sorted(p.stem for p in sets.glob("*.txt")) if sets.is_dir() else []
    if split in lists:
        return None
    return (f"is not a KITTI split of {root}: it takes training, testing or an ImageSets list "
            f"({', '.join(lists) if lists else f'{sets} has none'})")


def _no_split(root: Path | None, split: str) -> str | None:
    return "is not taken: 3DOS's tracks fix the split of each dataset they read"


def _write_kitti_demo(root: Path, frames: int, seed: int) -> Path:
    return demo_kitti.write_demo_dataset(root, frames, seed=seed)


# Fixtures: 2-3 frames at a coarse azimuth step (the readers' checks do not depend on the resolution).
def _kitti_fixture(root: Path) -> Path:
    return demo_kitti.write_demo_dataset(root, 2, azimuth_step_deg=0.72)


def _semantickitti_fixture(root: Path) -> Path:
    return demo_semantickitti.write_semantickitti(root, 2, azimuth_step_deg=0.72)


def _nuscenes_fixture(root: Path) -> Path:
    return demo_nuscenes.write_nuscenes(root, 3, azimuth_step_deg=0.72)


def _waymo_fixture(root: Path) -> Path:
    return demo_waymo.write_waymo(root, 4, width=650)


def _wads_fixture(root: Path) -> Path:
    return demo_wads.write_wads(root, 2, points=2000)


def _objects_fixture(root: Path) -> Path:
    return demo_objects.write_demo_objects(root, modelnet={"train": 1, "test": 1},
                                           scanobjectnn={"training": 1, "test": 1},
                                           shapenet={"train": 1, "val": 1, "test": 1})


READERS: dict[str, ReaderInfo] = {info.kind: info for info in (
    ReaderInfo("kitti", KittiSource, "KITTI", "training, testing or an ImageSets list (train, val)",
               _kitti_fixture, write_demo=_write_kitti_demo, demo_takes_recipe_split=False,
               demo_version=demo_kitti.DEMO_VERSION, allow_empty=True, split_problem=_kitti_split),
    ReaderInfo("semantickitti", SemanticKittiSource, "SemanticKITTI", "val, train, test or sequences (08,09)",
               _semantickitti_fixture, write_demo=demo_semantickitti.write_demo, allow_empty=True,
               split_problem=_parsed("SemanticKITTI", parse_split, "val, train, test or sequence "
                                     "numbers like 08,09")),
    ReaderInfo("nuscenes", NuScenesSource, "nuScenes", "a devkit split (val) or VERSION:SPLIT",
               _nuscenes_fixture, write_demo=demo_nuscenes.write_demo, allow_empty=True,
               split_problem=nuscenes_split_problem),
    ReaderInfo("waymo", WaymoSource, "Waymo", "the split folder", _waymo_fixture,
               write_demo=demo_waymo.write_demo),
    ReaderInfo("wads", WadsSource, "WADS", "all (default) or sequence numbers (11,36)",
               _wads_fixture, allow_empty=True,
               split_problem=_parsed("WADS", parse_sequences, "all or sequence numbers like 11,36")),
    ReaderInfo("modelnet40", ModelNet40H5Source, "ModelNet40", "train, test or all", _objects_fixture,
               objects=True, split_problem=_one_of("ModelNet40", (*MODELNET_SPLITS, "all"), "train, test or all")),
    ReaderInfo("scanobjectnn", ScanObjectNNSource, "ScanObjectNN", "training or test", _objects_fixture,
               objects=True, split_problem=_one_of("ScanObjectNN", (*SCANOBJECTNN_SPLITS, "train", "all"),
                                                   "training, test or all")),
    ReaderInfo("shapenet", ShapeNetCoreSource, "ShapeNetCore", "train, val or test", _objects_fixture,
               objects=True, split_problem=_one_of("ShapeNetCore", (*SHAPENET_SPLITS, "all"),
                                                   "train, val, test or all")),
    ReaderInfo("3dos", ThreeDOSSource, "3DOS", "fixed by the benchmark's tracks", _objects_fixture,
               objects=True,
               parts=("shapenet", "modelnet40", "scanobjectnn"), split_problem=_no_split),
)}
