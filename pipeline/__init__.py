"""bench-build: corrupted point-cloud robustness benchmarks, built reproducibly, read and scored.

Everything a user imports is reachable from this one name::

    from bench_build import open_version, PointCloudDataset, score_version, Frame, stage

The names load on first use, so ``import bench_build`` (and ``import bench_build.stages``) stays light: reading
a version imports pyarrow, the PyTorch datasets import torch, nothing else is loaded until asked for.

The installed package is the repository's ``pipeline/`` folder; ``stages/`` and ``manifests/`` are its
subpackages ``bench_build.stages`` and ``bench_build.manifests``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name → the module that defines it
PUBLIC = {
    # reading a built or published version
    "open_version": "pipeline.reader", "Version": "pipeline.reader", "Example": "pipeline.reader",
    "IntegrityError": "pipeline.checked",
    # PyTorch datasets (need torch)
    "PointCloudDataset": "pipeline.loaders", "PointCloudIterableDataset": "pipeline.loaders",
    "collate_point_clouds": "pipeline.loaders",
    # scoring predictions with each paper's metrics
    "score_version": "pipeline.score", "ScoreReport": "pipeline.score", "METRICS": "pipeline.score",
    # the frame model and the stage API, for custom corruptions and recipes
    "Frame": "stages.frame", "Boxes": "stages.frame", "Calib": "stages.frame", "PointTag": "stages.frame",
    "Stage": "stages.registry", "stage": "stages.registry", "get_stage": "stages.registry",
    "all_stages": "stages.registry",
    "Recipe": "manifests.recipe", "RecipeError": "manifests.recipe", "load_recipe": "manifests.recipe",
    "builtin_recipes": "manifests.recipe",
    # building, exporting, rendering and storage from Python
    "run_build": "pipeline.build", "export_version": "pipeline.export", "render_version": "pipeline.render",
    "open_store": "pipeline.storage",
    # the root of every error bench-build reports
    "BenchBuildError": "pipeline.errors",
}

__all__ = [  # the names below, as a literal for tools that read it
    "METRICS",
    "BenchBuildError",
    "Boxes",
    "Calib",
    "Example",
    "Frame",
    "IntegrityError",
    "PointCloudDataset",
    "PointCloudIterableDataset",
    "PointTag",
    "Recipe",
    "RecipeError",
    "ScoreReport",
    "Stage",
    "Version",
    "__version__",
    "all_stages",
    "builtin_recipes",
    "collate_point_clouds",
    "export_version",
    "get_stage",
    "load_recipe",
    "open_store",
    "open_version",
    "render_version",
    "run_build",
    "score_version",
    "stage",
]


def __getattr__(name: str) -> Any:
    module = PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *PUBLIC})


if TYPE_CHECKING:  # what the names are, for type checkers and IDEs
    from manifests.recipe import Recipe, RecipeError, builtin_recipes, load_recipe
    from pipeline.build import run_build
    from pipeline.checked import IntegrityError
    from pipeline.errors import BenchBuildError
    from pipeline.export import export_version
    from pipeline.loaders import PointCloudDataset, PointCloudIterableDataset, collate_point_clouds
    from pipeline.reader import Example, Version, open_version
    from pipeline.render import render_version
    from pipeline.score import METRICS, ScoreReport, score_version
    from pipeline.storage import open_store
    from stages.frame import Boxes, Calib, Frame, PointTag
    from stages.registry import Stage, all_stages, get_stage, stage
