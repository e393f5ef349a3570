"""The shape of `stages/`: kernels below everything, stages only in the corruption folders, no private
name crossing a module border."""

from __future__ import annotations

import ast
from pathlib import Path

from bench_build.stages.registry import all_stages

ROOT = Path(__file__).resolve().parents[2] / "stages"
STAGE_FOLDERS = {"noise", "density", "weather", "per_box", "whole_shape"}


def _module(path: Path) -> str:
    parts = ("bench_build", *path.relative_to(ROOT.parent).with_suffix("").parts)  # stages/ is bench_build.stages
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, imported names) of every import in the file, at any depth, ``TYPE_CHECKING`` blocks included."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
    return out


FILES = sorted(ROOT.rglob("*.py"))


def test_kernels_import_nothing_else_from_stages():
    bad = [f"{_module(p)} imports {mod}" for p in FILES if _module(p).startswith("bench_build.stages.kernels")
           for mod, _ in _imports(p)
           if mod.startswith("bench_build.stages") and not mod.startswith("bench_build.stages.kernels")]
    assert not bad, bad


def test_no_private_name_is_imported_across_modules():
    bad = [f"{_module(p)}: from {mod} import {name}" for p in FILES for mod, names in _imports(p)
           if mod.startswith("bench_build.stages") for name in names if name.startswith("_") and name != "__future__"]
    assert not bad, bad


def test_every_stage_lives_in_a_corruption_folder():
    """Kernels, physics helpers and the frame model register no stage; each stage's family is its folder."""
    misplaced = {n: s.fn.__module__ for n, s in all_stages().items()
                 if s.fn.__module__.split(".")[2] not in STAGE_FOLDERS or s.family != s.fn.__module__.split(".")[2]}
    assert not misplaced, misplaced
