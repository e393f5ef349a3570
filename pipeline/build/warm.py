"""`bench-build warm`: compile (or load) the numba kernels of benchmarks' builds once, before the workers start.

The stages' numba kernels are compiled on their first call and cached on disk (``cache=True``): next to the
module if that directory is writable (an editable checkout), else under ``NUMBA_CACHE_DIR`` or
``~/.cache/numba`` (a package installed by root, as in the image). A process that finds no cache entry for the
CPU it compiles for compiles them itself: ≈ 11 CPU-s for KITTI-C's stages, inside its first task. Ray starts a machine's
workers together, so on a fresh machine or container each of them compiles the same kernels at the same time
(16 workers of a 16-CPU node: ≈ 3 CPU-minutes, and ≈ 11 s before any of them has written a file).

`warm` builds one demo frame of each benchmark in this process through the real task code (`build_shard`,
contact-sheet painting included), into a temporary directory it then deletes, so every kernel a build calls
is compiled with the argument types a build passes. Later processes on the machine load them (≈ 0.25 s).
The image runs it at build time (deploy/Dockerfile). The numeric pin has numba compile for the generic CPU,
its cache key on every node, so those kernels load on any x86-64 node, not only on the builder's CPU model.
"""

from __future__ import annotations

import inspect
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench_build.build.run import DEMO_FRAMES
from bench_build.build.shard import build_shard
from bench_build.manifests.recipe import load_recipe
from bench_build.plan.tasks import plan_shards
from bench_build.sources import open_source
from bench_build.stages.kernels import buckets


def numba_cache_dir() -> str:
    """Where numba keeps (and looks for) the compiled kernels of the installed `stages` package: the directory
    its own locators pick, in their order, for one of them."""

    from numba.core import caching

    py_func = buckets.counting_sort.py_func  # any cached kernel of the package: they share one locator
    impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl  # older numba: _CacheImpl
    for cls in impl._locator_classes:
        locator = cls.from_function(py_func, inspect.getfile(py_func))
        if locator is not None:  # in-tree: each module's __pycache__; else one folder per package directory
            path = locator.get_cache_path()
            in_tree = getattr(caching, "InTreeCacheLocator", None) or caching._InTreeCacheLocator
            return path if isinstance(locator, in_tree) else str(Path(path).parent)
    return "nowhere: numba cannot write a cache here, so every process compiles its kernels"


def warm(benchmarks: Sequence[str], on_done=None) -> list[dict]:
    """Build one demo frame of each benchmark in this process (nothing kept); return per benchmark its CPU
    seconds and examples. A kernel already in the cache for this CPU is loaded, not compiled."""

    out = []
    recipes = [load_recipe(name) for name in benchmarks]  # every name checked before minutes of compiling
    for name, recipe in zip(benchmarks, recipes, strict=True):
        source = open_source(recipe, None, demo_frames=DEMO_FRAMES)  # generated once, as `run` without --source
        spec = plan_shards(source.list_frames()[:1], 1)[0]
        cpu = time.process_time()
        with tempfile.TemporaryDirectory(prefix="bench-build-warm-") as tmp:
            entry = build_shard(spec, recipe, source, tmp, "warm", "warm", panels={})
        row = {"benchmark": name, "cpu_seconds": time.process_time() - cpu,
               "examples": sum(f["rows"] for f in entry["files"])}
        out.append(row)
        if on_done is not None:
            on_done(row)
    return out
