"""The numeric pin (pipeline/runtime/numeric.py) and the stage battery (pipeline/build/repro_check.py).

The battery runs in subprocesses, because NumPy reads ``NPY_DISABLE_CPU_FEATURES`` and OpenBLAS reads
``OPENBLAS_CORETYPE`` only when they are loaded: pinned, on a simulated AVX2-only node, and unpinned.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bench_build.build.repro_check import HASWELL_NUMBA, differing, run_in_subprocess
from bench_build.runtime.numeric import (
    PIN,
    PIN_SWITCH,
    build_profile,
    cpu_has_avx512,
    is_avx512_target,
    live_profile,
    numpy_dispatch_targets,
    pin_environment,
    pin_mode,
    profile_differences,
    worker_env,
)

# --- the pin ------------------------------------------------------------------------------------------

def test_the_pin_fills_unset_variables_keeps_a_users_override_and_can_be_switched_off():
    assert worker_env({}) == PIN and pin_mode({}) == "pinned"
    assert PIN["NPY_DISABLE_CPU_FEATURES"].split() == [t for t in numpy_dispatch_targets() if is_avx512_target(t)]
    user = {"OPENBLAS_CORETYPE": "SkylakeX"}
    assert worker_env(user) == {**PIN, "OPENBLAS_CORETYPE": "SkylakeX"} and pin_mode(user) == "override"
    assert worker_env({PIN_SWITCH: "off"}) == {} and pin_mode({PIN_SWITCH: "off"}) == "off"
    assert worker_env({PIN_SWITCH: "off", **user}) == user
    env = {"OPENBLAS_CORETYPE": "Zen", "PATH": "/bin"}
    pin_environment(env)
    assert env == {"PATH": "/bin", "OPENBLAS_CORETYPE": "Zen",
                   "NPY_DISABLE_CPU_FEATURES": PIN["NPY_DISABLE_CPU_FEATURES"], "NUMBA_CPU_NAME": "generic"}


def test_pinning_after_numba_was_imported_under_another_target_warns():
    import numba  # noqa: F401  (this process: pinned by conftest before numba was imported)
    from numba.core import config

    assert config.CPU_NAME == PIN["NUMBA_CPU_NAME"]
    assert pin_environment(dict(PIN)) == []
    with pytest.warns(RuntimeWarning, match="numba was imported before the numeric pin: this process compiles "
                                            "for generic, the pin for haswell"):
        pin_environment({"NUMBA_CPU_NAME": "haswell"})


def test_profile_differences_name_every_difference_and_nothing_else():
    base = {"arch": "x86_64", "python": "3.11", "libc": "glibc 2.36",
            "libraries": {"numpy": "1.26.4", "scipy": "1.17.1"}, "simd": ["SSE41", "AVX2"],
            "openblas": {"numpy": "Haswell", "scipy": "Haswell"}, "pin": "pinned", "env": dict(PIN)}
    assert profile_differences(base, {**base, "pin": "override", "env": {},
                                      "openblas": {"numpy": "HASWELL", "scipy": "haswell"}}) == []
    other = {**base, "libraries": {"numpy": "1.26.3", "scipy": "1.17.1"}, "simd": ["SSE41", "AVX2", "AVX512F"],
             "openblas": {"numpy": "SkylakeX", "scipy": "Haswell"}, "arch": "aarch64"}
    assert profile_differences(base, other) == [
        "arch aarch64 (build: x86_64)", "numpy 1.26.3 (build: 1.26.4)", "NumPy SIMD also dispatches AVX512F",
        "numpy's OpenBLAS core SkylakeX (build: Haswell)"]


def test_the_profile_compares_every_library_that_computes_bytes_and_old_builds_still_resume():
    """miepython computes the LISA stages' Mie tables and h5py decodes ModelNet40, yet a node with another
    miepython was not refused; a build recorded before they were compared lacks them and must still resume."""
    from bench_build.runtime.numeric import LIBRARIES, LOCKED_FOR_BYTES, build_profile

    assert {"miepython", "h5py"} <= set(LIBRARIES) <= set(LOCKED_FOR_BYTES)
    now = build_profile()
    assert now["libraries"]["miepython"] and now["libraries"]["h5py"]
    old = {**now, "libraries": {k: v for k, v in now["libraries"].items() if k not in ("miepython", "h5py")}}
    assert profile_differences(old, now) == []  # an earlier build resumes
    other = {**now, "libraries": {**now["libraries"], "miepython": "0.1"}}
    assert profile_differences(now, other) == [f"miepython 0.1 (build: {now['libraries']['miepython']})"]


def _profile_of_cli_process(**env: str) -> dict:
    """The live profile of a fresh process that imports the CLI (which pins) and then NumPy, as `bench-build` does."""
    full = {k: v for k, v in os.environ.items() if k not in (*PIN, PIN_SWITCH)} | env
    code = ("import json, bench_build.cli, numpy; from bench_build.runtime.numeric import build_profile, live_profile; "
            "print(json.dumps({'live': live_profile(), 'build': build_profile()}))")
    res = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_the_cli_pins_its_own_process_before_numpy_and_records_an_override():
    pinned = _profile_of_cli_process()
    assert not [t for t in pinned["live"]["simd"] if is_avx512_target(t)]
    assert "AVX2" in pinned["live"]["simd"] and "FMA3" in pinned["live"]["simd"]
    assert pinned["live"]["openblas"] == {"numpy": "Haswell", "scipy": "Haswell"}
    assert pinned["build"]["pin"] == "pinned" and profile_differences(pinned["build"], pinned["live"]) == []
    override = _profile_of_cli_process(OPENBLAS_CORETYPE="Sandybridge")
    assert override["live"]["openblas"] == {"numpy": "Sandybridge", "scipy": "Sandybridge"}
    assert override["build"]["pin"] == "override" and override["build"]["env"]["OPENBLAS_CORETYPE"] == "Sandybridge"
    assert profile_differences(override["build"], override["live"]) == []


# --- a task checks its profile; the build records it ------------------------------------------------

def test_a_task_under_another_numeric_profile_fails_its_shard_naming_the_node_and_writes_nothing(
        small_recipe, demo_kitti, tmp_path):
    from bench_build.build.ledger import Ledger
    from bench_build.build.task import run_shard
    from bench_build.manifests.recipe import load_recipe
    from bench_build.plan.tasks import BlockSpec
    from bench_build.sources import KittiSource
    from bench_build.storage import open_store

    store = open_store(tmp_path / "v")
    src = KittiSource(demo_kitti)
    expected = {**live_profile(), "libraries": {**live_profile()["libraries"], "numpy": "0.0.0"}}
    res = run_shard(BlockSpec(0, 1, tuple(src.list_frames()[:1])), load_recipe(str(small_recipe)), src,
                     store.spec, "f" * 64, "run1", numeric_profile=expected)
    assert not res["ok"] and res["kind"] == "resource"
    assert f"numeric profile of node {socket.gethostname()}" in res["error"]
    assert f"numpy {live_profile()['libraries']['numpy']} (build: 0.0.0)" in res["error"]
    assert not list((tmp_path / "v").rglob("*.parquet"))
    assert Ledger(store).failed_entry(res["shard"])["error"] == res["error"]
    # the same task under its own profile builds the shard
    ok = run_shard(BlockSpec(0, 1, tuple(src.list_frames()[:1])), load_recipe(str(small_recipe)), src,
                    store.spec, "f" * 64, "run1", numeric_profile=live_profile())
    assert ok["ok"], ok


def _worker_profile() -> dict:
    return live_profile()


def _numba_target() -> list[str]:
    """The CPU name and features numba compiles for in this process (what its cache entries are keyed by)."""
    from numba.core.registry import cpu_target

    return list(cpu_target.target_context.codegen().magic_tuple()[1:])


@pytest.fixture(scope="module")
def pinned_ray(no_shared_ray):
    """A local Ray started the way `run` starts it (`init_ray`: the pin in its raylet's environment, which the
    workers inherit), from a driver whose own environment lacks the pin (a library caller's): the workers must
    still be pinned, and the caller's environment comes back as it was."""
    import ray

    from bench_build.runtime.ray import init_ray

    assert not ray.is_initialized()
    saved = {k: os.environ.pop(k) for k in PIN if k in os.environ}
    os.environ["OPENBLAS_CORETYPE"] = "Haswell"  # one of the two already set as pinned, the other absent
    try:
        init_ray(1, None)
        assert "NPY_DISABLE_CPU_FEATURES" not in os.environ and os.environ["OPENBLAS_CORETYPE"] == "Haswell"
    finally:
        os.environ.pop("OPENBLAS_CORETYPE")
        os.environ.update(saved)
    try:
        yield
    finally:
        ray.shutdown()


def test_ray_workers_compute_pinned_and_the_build_records_its_profile(pinned_ray, small_recipe, demo_kitti,
                                                                      tmp_path, monkeypatch):
    import ray

    import bench_build.build.run
    from bench_build.build.ledger import Ledger, LedgerMismatch
    from bench_build.build.run import run_build

    # a plain task of the job (no runtime_env of its own): NumPy without AVX-512, OpenBLAS on Haswell kernels
    worker = ray.get(ray.remote(_worker_profile).remote())
    assert not [t for t in worker["simd"] if is_avx512_target(t)], worker["simd"]
    assert worker["openblas"] == {"numpy": "Haswell", "scipy": "Haswell"} and worker["env"] == PIN
    # and numba compiles for the generic CPU, with no features of this one: its cache key on every node
    assert ray.get(ray.remote(_numba_target).remote()) == ["generic", ""]

    res = run_build(str(small_recipe), source=str(demo_kitti), out=tmp_path, workers=1, progress=False)
    assert res.ok, res.failures
    prof = res.manifest["numeric_profile"]
    assert prof == build_profile() and prof["pin"] == "pinned" and prof["env"] == PIN
    assert profile_differences(prof, worker) == []  # what every task checked itself against
    assert Ledger(Path(res.version_dir)).run_info()["numeric_profile"] == prof
    card = (Path(res.version_dir) / "README.md").read_text()
    assert f"- Numeric profile (pinned): {prof['arch']}, NumPy {prof['libraries']['numpy']} dispatching up to AVX2, " \
        "OpenBLAS Haswell kernels" in card
    assert f"numba {prof['libraries']['numba']} compiling for generic," in card

    # resuming under another profile (another image's NumPy) is refused before anything runs
    other = {**prof, "libraries": {**prof["libraries"], "numpy": "1.26.0"}}
    monkeypatch.setattr(bench_build.build.run, "build_profile", lambda: other)
    with pytest.raises(LedgerMismatch, match=r"another numeric profile \(numpy 1\.26\.0 \(build: "):
        run_build(str(small_recipe), source=str(demo_kitti), out=tmp_path, workers=1, progress=False)
    # --overwrite starts it over under the new profile; this machine's workers do not match it: every shard
    # fails, naming the node and the difference, and no manifest is written
    res2 = run_build(str(small_recipe), source=str(demo_kitti), out=tmp_path, workers=1, progress=False,
                     overwrite=True)
    assert res2.manifest is None and len(res2.failures) == res2.shards_total > 0
    here = f"numpy {prof['libraries']['numpy']} (build: 1.26.0)"
    assert all("numeric profile of node" in e and here in e for e in res2.failures.values()), res2.failures
    assert not list(Path(res2.version_dir).rglob("*.parquet"))


def test_a_local_raylet_retries_its_connections_every_20_ms(pinned_ray):
    """`init_ray` gives a local raylet (and the workers it starts) a 20 ms connection retry: with Ray's default,
    1 s, the raylet's first try at its own object store, before the store listens, cost every other start a
    second. The driver's own environment comes back without it."""
    from ray._private import ray_constants, worker

    from bench_build.runtime.ray import RAY_CONNECT_RETRY

    (raylet,) = worker._global_node.all_processes[ray_constants.PROCESS_TYPE_RAYLET]
    env = dict(line.split("=", 1) for line in
               Path(f"/proc/{raylet.process.pid}/environ").read_text().split("\0") if "=" in line)
    assert {k: env.get(k) for k in RAY_CONNECT_RETRY} == {
        "RAY_raylet_client_connect_timeout_milliseconds": "20", "RAY_raylet_client_num_connect_attempts": "500"}
    assert not set(RAY_CONNECT_RETRY) & set(os.environ)


# --- the stage battery ----------------------------------------------------------------------------------

#: stages whose float64 results differ between AVX-512 and AVX2 NumPy or OpenBLAS cores (the matrix in the
#: README), plus cheap ones that do not: Robo3D's weather and sensor stages and ModelNet40-E's normals
BATTERY_RECIPES = ["robo3d-kitti-c", "modelnet40-e", "modelnet-c"]


@pytest.fixture(scope="module")
def battery_sources(tmp_path_factory, demo_kitti_master) -> dict[str, str]:
    from bench_build.sources.demo.objects import write_demo_objects

    objects = write_demo_objects(tmp_path_factory.mktemp("objects"), modelnet={"train": 1, "test": 1})
    kitti = tmp_path_factory.mktemp("kitti") / "kitti"
    shutil.copytree(demo_kitti_master, kitti)
    return {"kitti": str(kitti), "modelnet40": str(objects)}


def test_the_battery_is_the_same_pinned_and_on_an_avx2_node_and_differs_unpinned(battery_sources):
    """Pinned on this machine vs an AVX2-only node running the pin but numba compiling for its own CPU, as an
    image from before numba was pinned did (simulated: NumPy's AVX-512 targets disabled, OpenBLAS's Haswell
    kernels, numba for Haswell with Haswell's features and no others): the same stored bytes and the same
    float64 values in every stage. Unpinned on an AVX-512 CPU, stages compute other float64 values."""
    configs = {"pinned": dict(PIN), "avx2-node": {**PIN, **HASWELL_NUMBA}}
    if cpu_has_avx512():
        configs["unpinned"] = {}
    with ThreadPoolExecutor(len(configs)) as pool:
        runs = dict(zip(configs, pool.map(lambda env: run_in_subprocess(env, BATTERY_RECIPES, battery_sources),
                                          configs.values()), strict=True))
    pinned, avx2 = runs["pinned"], runs["avx2-node"]
    assert len(pinned["hashes"]) == 25 + 4 + 36  # every partition of the three recipes
    assert len(pinned["probe"]) >= 10  # examples whose stages call the probed functions
    assert pinned["hashes"] == avx2["hashes"] and pinned["probe"] == avx2["probe"]
    assert avx2["profile"]["simd"] == pinned["profile"]["simd"]
    if "unpinned" not in runs:
        pytest.skip("this CPU has no AVX-512: the unpinned half of the check needs one")
    unpinned = runs["unpinned"]
    assert "AVX512F" in unpinned["profile"]["simd"]
    changed = {name.split("/")[0] for name in differing(pinned["probe"], unpinned["probe"])}
    assert {"robo3d-kitti-c fog", "modelnet40-e noise"} <= changed, changed


def test_repro_check_command_compares_two_nodes_batteries(tmp_path, monkeypatch):
    """`bench-build repro-check --out` then `--compare` (README): equal → exit 0; a partition whose bytes differ
    on the other node, or another numeric profile there → exit 1, naming it."""
    from typer.testing import CliRunner

    from bench_build.cli import app

    monkeypatch.setenv("BENCH_BUILD_CACHE", str(tmp_path / "cache"))
    runner = CliRunner()
    a = tmp_path / "batteries" / "node-a.json"  # a folder not there yet is made, as --out of a build is
    res = runner.invoke(app, ["repro-check", "--recipes", "modelnet-c", "--out", str(a)])
    assert res.exit_code == 0, res.output
    battery_a = json.loads(a.read_text())
    assert len(battery_a["hashes"]) == 1 + 7 * 5 and battery_a["digest"] in res.output
    assert runner.invoke(app, ["repro-check", "--recipes", "modelnet-c", "--compare", str(a)]).exit_code == 0
    key = next(k for k in battery_a["hashes"] if "corruption=jitter/severity=2" in k)
    other = {**battery_a, "hashes": {**battery_a["hashes"], key: "0" * 64},
             "profile": {**battery_a["profile"], "openblas": {"numpy": "Nehalem", "scipy": "Nehalem"}}}
    b = tmp_path / "node-b.json"
    b.write_text(json.dumps(other))
    res = runner.invoke(app, ["repro-check", "--recipes", "modelnet-c", "--compare", str(b)])
    assert res.exit_code == 1
    assert "1 partitions' bytes differ" in res.output and "modelnet-c jitter/2" in res.output
    assert "numeric profile differs" in res.output
