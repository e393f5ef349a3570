"""One import name: the package installs as ``bench_build`` only, with every subpackage, and its public names load.

``pipeline/`` is the package ``bench_build``; ``stages/`` and ``manifests/`` are ``bench_build.stages`` and
``bench_build.manifests`` (pyproject.toml). Research repositories often have a ``pipeline/`` of their own: an
installed bench-build must never answer to that name.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import bench_build

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"pipeline": "bench_build", "stages": "bench_build.stages", "manifests": "bench_build.manifests"}


def test_pyproject_lists_every_package_of_the_tree():
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert tool["package-dir"] == {"bench_build": "pipeline", "bench_build.stages": "stages",
                                   "bench_build.manifests": "manifests"}
    # every folder, the data-only ones (recipes, cost tables, baselines) too: setuptools warns about an unlisted one
    tree = {".".join([FOLDERS[folder], *d.relative_to(ROOT / folder).parts])
            for folder in FOLDERS for d in [ROOT / folder, *(ROOT / folder).rglob("*")]
            if d.is_dir() and "__pycache__" not in d.parts}
    assert set(tool["packages"]) == tree
    # a folder of modules without __init__.py would be left out of the wheel silently
    orphans = [str(d.relative_to(ROOT)) for folder in FOLDERS for d in (ROOT / folder).rglob("*")
               if d.is_dir() and d.name != "__pycache__" and any(d.glob("*.py")) and not (d / "__init__.py").exists()]
    assert not orphans


def test_the_wheel_ships_every_data_file_and_builds_without_warnings(tmp_path):
    """A non-editable install gets every recipe, cost table, score baseline, the citations and the lock."""
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w",
                          str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "would be ignored" not in out.stdout + out.stderr
    [wheel] = tmp_path.glob("bench_build-*.whl")
    shipped = {n for n in zipfile.ZipFile(wheel).namelist() if not n.endswith(".py") and ".dist-info/" not in n}
    tracked = subprocess.run(["git", "ls-files", *FOLDERS], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    to_wheel = {FOLDERS[f.split("/")[0]].replace(".", "/") + f[f.index("/"):] for f in tracked}
    data = {n for n in to_wheel if n.endswith((".toml", ".json", ".txt"))}
    assert data and data <= shipped, sorted(data - shipped)


def test_installed_the_only_import_name_is_bench_build(tmp_path):
    """Outside the checkout (the checkout's folders would shadow the installed package), ``bench_build`` imports
    and the folder names do not."""
    code = ("import importlib.util as u, bench_build, bench_build.stages, bench_build.manifests.recipe\n"
            "print(bench_build.__file__)\n"
            "print([n for n in ('pipeline', 'stages', 'manifests') if u.find_spec(n) is not None])\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert Path(lines[0]).resolve() == (ROOT / "pipeline" / "__init__.py").resolve()
    assert lines[1] == "[]"


def test_public_names_load_and_are_listed():
    assert set(bench_build.__all__) == {"__version__", *bench_build.PUBLIC}
    for name in bench_build.PUBLIC:
        if name.startswith(("PointCloud", "collate")):  # they need torch, which the test extra has
            pass
        assert getattr(bench_build, name) is not None, name
    assert bench_build.open_version.__module__ == "bench_build.format.reader"


def test_import_bench_build_stays_light():
    """``import bench_build`` and the stage API load neither pyarrow nor Ray nor torch."""
    code = ("import sys, bench_build, bench_build.stages\n"
            "print(sorted(m for m in ('pyarrow', 'ray', 'torch', 'boto3') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_loading_every_stage_imports_no_pyarrow_ray_or_module_above_the_stages():
    """stages/README.md: a stage is pure, with no `pipeline`, Ray or pyarrow import. `import bench_build.stages`
    loads no stage module (the registry imports them on first use), so the test above cannot see one that does:
    here every stage is loaded. A project module above the stages is also refused by tests/test_structure.py's
    layers; a third-party import only here."""
    code = ("import sys\nfrom bench_build.stages import all_stages\nassert all_stages()\n"
            "print(sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in ('pyarrow', 'ray', 'torch', "
            "'boto3')} | {m for m in sys.modules if m.split('.')[:2][-1] not in ('bench_build', 'stages', 'errors') "
            "and m.startswith('bench_build.')}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"loading the stages imported {out.stdout.strip()}"


def test_a_worker_imports_the_readers_without_the_heavy_packages_few_of_them_use():
    """Every build's workers import `bench_build.build.task` and with it every reader: what only some readers or
    pictures need is imported when used (trimesh ≈ 0.4 s, pyarrow.dataset with pandas ≈ 0.13 s, h5py
    ≈ 0.1 s, torch, matplotlib), not by every worker before its first task."""
    code = ("import sys, bench_build.build.task\n"
            "print(sorted(m for m in ('trimesh', 'pyarrow.dataset', 'pandas', 'h5py', 'torch', 'matplotlib',"
            " 'open3d')"
            " if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_workers_shard_writing_never_imports_pandas_and_pandas_still_works_when_asked_for():
    """pyarrow imports pandas (≈ 0.2 s per worker) on its first `pa.array` only to ask whether the input is a
    pandas object. After `spare_pandas_import`, writing a shard's rows (optional point columns included) leaves
    pandas unloaded; once anything imports pandas, pyarrow reads pandas objects as before."""
    code = """
import io, sys
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
from bench_build.runtime.ray import spare_pandas_import
from bench_build.format.schema import encode_rows, row_schema
from bench_build.stages.frame import Frame
spare_pandas_import()
f = Frame(points=np.zeros((5, 4), np.float32), fields=("x", "y", "z", "intensity"), frame_id="000000",
          labels={"semantic": np.arange(5)})
batch = encode_rows([("k", "clean", 0, f)], row_schema(f.fields, columns=("semantic",)))
pq.write_table(pa.Table.from_batches([batch]), io.BytesIO())
print("pandas" in sys.modules)
import pandas as pd  # imported later, by anything: pyarrow reads pandas objects again, with no conversion first
print(pa.array(pd.Categorical(["u", "v", "u"])).type, pa.array(pd.Series([1, 2], index=[5, 6])).to_pylist())
print(type(pa.table({"a": [1, 2]}).to_pandas()).__name__)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    written, objects, converted = out.stdout.split("\n")[:3]
    assert written == "False"
    assert objects.startswith("dictionary<") and objects.endswith("[1, 2]")  # a Categorical, a Series by position
    assert converted == "DataFrame"
