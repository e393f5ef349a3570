"""`bench-build warm`: after it, a new process compiles none of the benchmark's numba kernels (it loads them).

Each step runs in a fresh interpreter with its own empty ``NUMBA_CACHE_DIR`` (numba reads it at import), and
counts, over every numba dispatcher of bench-build's modules, the signatures compiled (cache misses) and loaded
(cache hits). A build's first task is what the second process runs: `build_shard` on one demo frame.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARK = "modelnet40-e"  # small shapes, and numba kernels in several of its steps (normals, k-NN, noise)

COUNT = textwrap.dedent("""
    def kernel_stats():
        import sys
        from numba.core.dispatcher import Dispatcher
        hits = misses = 0
        for name, mod in list(sys.modules.items()):
            if not name.startswith("bench_build"):
                continue
            for obj in vars(mod).values():
                if isinstance(obj, Dispatcher):
                    hits += sum(obj.stats.cache_hits.values())
                    misses += sum(obj.stats.cache_misses.values())
        return {"hits": hits, "misses": misses}
""")

WARM = COUNT + textwrap.dedent("""
    import json, sys
    from bench_build.runtime.numeric import pin_environment
    pin_environment()
    from bench_build.build.warm import numba_cache_dir, warm
    rows = warm([sys.argv[1]])
    print(json.dumps({**kernel_stats(), "rows": rows, "cache": numba_cache_dir()}))
""")

TASK = COUNT + textwrap.dedent("""
    import json, sys, tempfile
    from bench_build.runtime.numeric import pin_environment
    pin_environment()
    from bench_build.manifests.recipe import load_recipe
    from bench_build.build.run import DEMO_FRAMES
    from bench_build.plan.tasks import plan_shards
    from bench_build.build.shard import build_shard
    from bench_build.sources import open_source
    recipe = load_recipe(sys.argv[1])
    source = open_source(recipe, None, demo_frames=DEMO_FRAMES)
    with tempfile.TemporaryDirectory() as tmp:
        entry = build_shard(plan_shards(source.list_frames()[1:2], 1)[0], recipe, source, tmp, "f" * 64, "r")
    print(json.dumps({**kernel_stats(), "files": len(entry["files"]), "target": globals().get("TARGET")}))
""")


#: the same first task on a node with another CPU, simulated: numba asks LLVM for the host's CPU name and
#: features (its cache key, unless ``NUMBA_CPU_NAME`` names one); here they are a Haswell's, not this machine's
OTHER_CPU = textwrap.dedent("""
    import llvmlite.binding as ll
    from bench_build.runtime.numeric import pin_environment
    pin_environment()
    from bench_build.build.repro_check import HASWELL_NUMBA
    ll.get_host_cpu_name = lambda: HASWELL_NUMBA["NUMBA_CPU_NAME"]
    import numba.core.codegen as codegen
    codegen.get_host_cpu_features = lambda: HASWELL_NUMBA["NUMBA_CPU_FEATURES"]
    from numba.core.registry import cpu_target
    TARGET = list(cpu_target.target_context.codegen().magic_tuple()[1:])
""")


def _run(code: str, env: dict[str, str]) -> dict:
    res = subprocess.run([sys.executable, "-c", code, BENCHMARK], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def _env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env.update(NUMBA_CACHE_DIR=str(root / "numba"), BENCH_BUILD_CACHE=str(root / "cache"))
    return env


@pytest.fixture(scope="module")
def warmed(tmp_path_factory) -> tuple[dict, dict[str, str]]:
    """`warm` run once into an empty cache (compiling every kernel takes a while): its output and the
    environment that points at that cache. The tests below only load from it, or add entries for another CPU."""
    env = _env(tmp_path_factory.mktemp("warmed"))
    return _run(WARM, env), env


def test_after_warm_a_new_process_loads_every_kernel_and_compiles_none(warmed):
    # warm, into an empty cache, compiled the kernels (without it, a worker's first task compiles them itself:
    # the second test's unpinned node shows a task that finds none of its kernels compiling them)
    out, warm_env = warmed
    assert out["misses"] >= 5, out
    assert out["rows"][0]["benchmark"] == BENCHMARK and out["rows"][0]["examples"] == 4
    assert Path(out["cache"]) == Path(warm_env["NUMBA_CACHE_DIR"])
    assert any(Path(out["cache"]).rglob("*.nbi")), "nothing written to the cache"

    task = _run(TASK, warm_env)  # the same first task of a worker, on another frame, after warm
    assert task["misses"] == 0 and task["files"] == 4, task  # clean + 3 severities, every kernel from the cache
    # loaded instead (fewer than were compiled: a kernel another one calls comes inside its caller's code)
    assert task["hits"] > 0, task


def test_warm_cli_names_an_unknown_benchmark():
    from typer.testing import CliRunner

    from bench_build.cli import app

    res = CliRunner().invoke(app, ["warm", "no-such-benchmark"])
    assert res.exit_code == 2
    assert "no-such-benchmark" in res.output


def test_warm_checks_every_name_before_compiling_and_names_an_unreadable_recipe(monkeypatch):
    """`warm kitti-c nosuch` compiled kitti-c's kernels for a minute before refusing nosuch; `warm ''` said
    "recipe file . is a directory"; a recipe path that cannot be read (/proc/self/mem) was an OSError traceback.
    Each is one line, exit 2, before any build."""
    from typer.testing import CliRunner

    import bench_build.build.warm as warm_module
    from bench_build.cli import app

    def no_build(*args, **kwargs):
        raise AssertionError("a demo frame was built before every name was checked")

    monkeypatch.setattr(warm_module, "build_shard", no_build)
    for names, says in ((["kitti-c", "nosuch"], "unknown benchmark 'nosuch'"),
                        ([""], "an empty benchmark name: give a built-in (3dos, kitti-c,"),
                        (["/proc/self/mem"], "recipe file /proc/self/mem: cannot read it (")):
        res = CliRunner().invoke(app, ["warm", *names])
        out = " ".join(res.output.split())
        assert res.exit_code == 2 and out.startswith(f"error: {says}") and "Traceback" not in out, (names, out)


def test_the_kernels_warm_compiled_load_on_a_node_with_another_cpu(warmed):
    """numba keys its cache by the CPU it compiles for; the numeric pin makes that the generic CPU on every node,
    so kernels compiled on one machine (the image's builder) load on a node with another CPU. Without the pin
    that node compiles them again: the simulation does change what numba compiles for."""
    out, env = warmed
    assert out["misses"] > 0, out

    other = _run(OTHER_CPU + TASK, env)
    assert other["target"] == ["generic", ""], other
    assert other["misses"] == 0 and other["hits"] > 0, other

    unpinned = _run(OTHER_CPU + TASK, {**env, "BENCH_BUILD_NUMERIC_PIN": "off"})
    assert unpinned["target"][0] == "haswell" and "+avx2" in unpinned["target"][1], unpinned
    assert unpinned["misses"] > 0, unpinned
