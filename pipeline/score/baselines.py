"""The papers' baseline tables, shipped as JSON data files beside this module (each with its citation)."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from bench_build.manifests import jsontext
from bench_build.score.validate import ScoreError


@cache
def load_baseline(name: str) -> dict[str, Any]:
    """``modelnet_c_dgcnn`` or ``robo3d``: the parsed data file (values, citation, bibtex); a damaged one is a
    `ScoreError` naming the file (the guarded parser the prediction files go through, `jsontext`)."""
    path = resources.files("bench_build.score").joinpath("baselines", f"{name}.json")
    try:
        return jsontext.loads(path, path.read_bytes(), error=ScoreError)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ScoreError(f"{path}: not valid JSON: {e}; the baseline tables ship with bench-build: reinstall "
                         "it") from None


def dgcnn_oa() -> dict[str, float]:
    """DGCNN's level-averaged OA per ModelNet-C corruption (and ``clean``): the CE/RCE normalisers."""
    return dict(load_baseline("modelnet_c_dgcnn")["values"])


def robo3d_baseline(table: str) -> dict[str, Any]:
    """One Robo3D baseline table (``semantickitti-c``, ``nuscenes-c-seg``, ``kitti-c``, ``nuscenes-c-det``,
    ``wod-c-det``)."""
    tables = load_baseline("robo3d")["tables"]
    if table not in tables:
        raise ScoreError(f"no Robo3D baseline table {table!r}; there are {', '.join(sorted(tables))}")
    return dict(tables[table])
