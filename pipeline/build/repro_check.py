"""The stage battery: the bytes every partition of every built-in recipe writes for one source frame, hashed.

`battery` builds a one-frame shard of each recipe (each variant included) with the real shard writer —
source reader, ``[preprocess]``, every corruption × severity with its key's RNG, Parquet encoding — into a
scratch directory and returns the sha256 of each partition file. Two machines (or two numeric environments
on one machine) compute the same bytes exactly when their batteries are equal, so the battery is how the
numeric pin (`bench_build.runtime.numeric`) was measured and how a user checks a node::

    python -m bench_build.build.repro_check --out node-a.json          # on each node (its environment as it is)
    python -m bench_build.build.repro_check --compare node-a.json      # on another: which partitions differ
    python -m bench_build.build.repro_check --matrix                   # this machine under several environments

``--matrix`` runs the battery in subprocesses under the environments of `CONFIGS` (the default, AVX-512
disabled, only the SSE baseline, OpenBLAS cores, …) and prints per configuration the partitions that differ
from the pinned one. The sources are the demo data (generated once, in the cache, by this process).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench_build.build import shard as shard_mod
from bench_build.errors import UsageError
from bench_build.manifests.recipe import builtin_recipes, load_recipe
from bench_build.plan.tasks import BlockSpec
from bench_build.runtime.numeric import (
    PIN,
    PIN_SWITCH,
    is_avx512_target,
    live_profile,
    numpy_dispatch_targets,
    profile_differences,
)
from bench_build.sources import open_source

#: the installed NumPy's dispatch targets above its baseline: below AVX-512, and AVX-512 (what the pin disables)
AVX2_AND_BELOW = tuple(t for t in numpy_dispatch_targets() if not is_avx512_target(t))
_NO_AVX512 = PIN["NPY_DISABLE_CPU_FEATURES"]

#: numba compiling as it does natively on a Haswell (AVX2 + FMA3, no AVX-512) node. Both variables: with
#: ``NUMBA_CPU_NAME`` alone numba adds this machine's CPU features (AVX-512 included) to the named CPU.
HASWELL_NUMBA = {"NUMBA_CPU_NAME": "haswell",
                 "NUMBA_CPU_FEATURES": "+64bit,+avx,+avx2,+bmi,+bmi2,+cmov,+cx16,+cx8,+f16c,+fma,+fxsr,+lzcnt,+mmx,"
                                       "+movbe,+pclmul,+popcnt,+sahf,+sse,+sse2,+sse3,+sse4.1,+sse4.2,+ssse3,+xsave,"
                                       "-avx512f"}
#: name → the numeric variables of a battery subprocess (nothing else of the pin is set)
CONFIGS: dict[str, dict[str, str]] = {
    "pinned": dict(PIN),
    "default": {},
    "no-avx512": {"NPY_DISABLE_CPU_FEATURES": _NO_AVX512},
    "sse3-baseline": {"NPY_DISABLE_CPU_FEATURES": " ".join(AVX2_AND_BELOW) + " " + _NO_AVX512},
    "blas-haswell": {"OPENBLAS_CORETYPE": "Haswell"},
    "blas-skylakex": {"OPENBLAS_CORETYPE": "SkylakeX"},
    "blas-prescott": {"OPENBLAS_CORETYPE": "Prescott"},
    "blas-zen": {"OPENBLAS_CORETYPE": "Zen"},
    "pinned+blas-2-threads": {**PIN, "OPENBLAS_NUM_THREADS": "2"},
    # numba not pinned: compiling for this CPU (AVX-512 here), and as a native Haswell node would
    "pinned+numba-native": {k: v for k, v in PIN.items() if not k.startswith("NUMBA_")},
    "pinned+numba-haswell": {**PIN, **HASWELL_NUMBA},
}
#: every variable a configuration may set: cleared from the parent's environment for each subprocess
NUMERIC_VARS = ("NPY_DISABLE_CPU_FEATURES", "NPY_ENABLE_CPU_FEATURES", "OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS",
                "NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", "NUMBA_OPT", "NUMBA_CACHE_DIR", PIN_SWITCH)


def battery_recipes() -> list[str]:
    """Every built-in recipe and each of its variants (``kitti-c``, ``kitti-c:text``, …)."""

    out = []
    for name in sorted(builtin_recipes()):
        out.append(name)
        out += [f"{name}:{v}" for v in sorted(load_recipe(name).variants)]
    return out


#: NumPy functions whose float64 results (or, for sorts, tie order) depend on the SIMD code path or the OpenBLAS
#: kernel (measured: AVX-512 vs AVX2 differ in 15–34 % of exp, log, power, arccos, arcsin, arctan, arctan2,
#: expm1, log1p values by one ULP; lstsq and eigh change with the OpenBLAS core; argsort orders ties otherwise)
PROBED = {"numpy": ("exp", "log", "power", "arccos", "arcsin", "arctan", "arctan2", "expm1", "log1p", "tanh",
                    "sin", "cos", "argsort", "sort", "argpartition", "partition"),
          "numpy.linalg": ("lstsq", "eigh", "eig", "svd", "solve", "inv", "norm")}


def battery(recipes: list[str] | None = None, frame_index: int = 0, roots: dict[str, str] | None = None,
            probe: bool = False) -> dict[str, Any]:
    """The battery of one frame (``frame_index`` of each recipe's source; ``roots``: source kind → root, default
    the demo data): {"hashes": {"<benchmark>/<partition file>": sha256}, "probe": {example key: sha256},
    "seconds": {recipe: s}, "profile": …, "digest": …}.

    ``hashes`` are the stored bytes. Stored points are float32, and a one-ULP float64 difference changes a
    float32 only when it straddles a rounding boundary (about once in 2^29 values) or a threshold: one frame's
    bytes can agree across CPUs where a full build's millions of examples would not. So ``probe=True`` runs
    the shards a second time with the `PROBED` NumPy functions wrapped, hashing every result they return per
    example key: which stages compute CPU-dependent values at all. (The first pass compiles the numba kernels,
    which must not see the wrapped functions; calls through ``**`` or array methods are not seen.)"""

    names = recipes or battery_recipes()
    recipes_by_name = {}
    sources = {}
    for name in names:
        recipe = recipes_by_name[name] = load_recipe(name)
        sources[name] = open_source(recipe, (roots or {}).get(recipe.source), demo_frames=8)

    def build(name: str, out: Path) -> dict[str, Any]:
        src = sources[name]
        return shard_mod.build_shard(BlockSpec(0, 1, (src.list_frames()[frame_index],)), recipes_by_name[name],
                                     src, out, "battery", "battery")

    hashes: dict[str, str] = {}
    seconds: dict[str, float] = {}
    probes: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-build-battery-") as tmp:
        for name in names:
            t = time.perf_counter()
            entry = build(name, Path(tmp) / "stored" / recipes_by_name[name].name)
            hashes.update({f"{recipes_by_name[name].name}/{f['path']}": f["sha256"] for f in entry["files"]})
            seconds[name] = round(time.perf_counter() - t, 2)
        if probe:
            with _probing(shard_mod, probes):
                for name in names:
                    build(name, Path(tmp) / "probe" / recipes_by_name[name].name)
    digest = hashlib.sha256(json.dumps(sorted(hashes.items())).encode()).hexdigest()
    return {"digest": digest, "hashes": hashes, "probe": {k: h.hexdigest() for k, h in probes.items() if k},
            "seconds": seconds, "profile": live_profile()}


class _probing:
    """Wraps the `PROBED` functions (and `example_rng`, to know the example being computed) while active."""

    def __init__(self, shard_mod: Any, probes: dict[str, Any]) -> None:

        self.shard_mod, self.probes, self.current = shard_mod, probes, [""]
        self.saved = [(importlib.import_module(mod), fn) for mod, fns in PROBED.items() for fn in fns]

    def _log(self, value: Any) -> None:

        for v in value if isinstance(value, tuple) else (value,):
            if isinstance(v, np.ndarray | np.generic):
                arr = np.ascontiguousarray(v)
                self.probes.setdefault(self.current[0], hashlib.sha256()).update(str(arr.dtype).encode()
                                                                                 + arr.tobytes())

    def _wrap(self, fn: Any) -> Any:
        def probed(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            self._log(out)
            return out
        return probed

    def __enter__(self) -> _probing:
        rng_of_key = self.rng_of_key = self.shard_mod.example_rng

        def keyed_rng(seed: int, key: str):
            self.current[0] = key  # the example the next stage calls compute
            return rng_of_key(seed, key)

        self.shard_mod.example_rng = keyed_rng
        self.originals = [(mod, fn, getattr(mod, fn)) for mod, fn in self.saved]
        for mod, fn, orig in self.originals:
            setattr(mod, fn, self._wrap(orig))
        return self

    def __exit__(self, *exc: Any) -> None:
        for mod, fn, orig in self.originals:
            setattr(mod, fn, orig)
        self.shard_mod.example_rng = self.rng_of_key


def partition_name(key: str) -> str:
    """``kitti-c/data/corruption=fog/severity=3/part-…`` (a file) or ``kitti-c/000000/fog/3`` (an example key)
    → ``kitti-c fog/3``."""
    parts = key.split("/")
    fields = dict(p.split("=", 1) for p in parts if "=" in p)
    if fields:
        return f"{parts[0]} {fields.get('corruption', '?')}/{fields.get('severity', '?')}"
    return f"{parts[0]} {'/'.join(parts[-2:])}" if len(parts) >= 4 else key


def differing(a: dict[str, str], b: dict[str, str]) -> list[str]:
    """Partitions whose bytes differ between two batteries' hashes (or that only one has)."""
    return sorted({partition_name(k) for k in set(a) | set(b) if a.get(k) != b.get(k)})


def run_in_subprocess(env_vars: dict[str, str], recipes: list[str] | None = None,
                      roots: dict[str, str] | None = None, probe: bool = True, timeout: float = 1800
                      ) -> dict[str, Any]:
    """The battery in a fresh Python whose numeric environment is exactly ``env_vars`` (NumPy reads it at import)."""
    env = {k: v for k, v in os.environ.items() if k not in NUMERIC_VARS}
    env.update(env_vars)
    with tempfile.TemporaryDirectory(prefix="bench-build-battery-out-") as tmp:
        out = Path(tmp) / "battery.json"
        cmd = [sys.executable, "-m", "bench_build.build.repro_check", "--out", str(out),
               *(["--probe"] if probe else [])]
        if recipes:
            cmd += ["--recipes", ",".join(recipes)]
        for kind, root in (roots or {}).items():
            cmd += ["--root", f"{kind}={root}"]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"battery under {env_vars} failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
        return json.loads(out.read_text())


def prepare_sources(recipes: list[str]) -> None:
    """Generate the recipes' demo data in this process, so the subprocesses only read it (same input bytes)."""

    for name in recipes:
        open_source(load_recipe(name), None, demo_frames=8)


def matrix(configs: dict[str, dict[str, str]] | None = None, recipes: list[str] | None = None,
           reference: str = "pinned") -> dict[str, Any]:
    """The battery under each configuration; per configuration the partitions differing from ``reference``."""
    configs = configs or CONFIGS
    recipes = recipes or battery_recipes()
    prepare_sources(recipes)
    runs = {name: run_in_subprocess(env, recipes) for name, env in configs.items()}
    ref = runs[reference]["hashes"]
    return {"reference": reference, "partitions": len(ref),
            "configs": {name: {"env": configs[name], "digest": r["digest"], "simd": r["profile"]["simd"],
                               "openblas": r["profile"]["openblas"],
                               "differs_from_reference": differing(ref, r["hashes"]),
                               "probe_differs_from_reference": differing(runs[reference]["probe"], r["probe"]),
                               "seconds": round(sum(r["seconds"].values()), 1)}
                        for name, r in runs.items()}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench_build.build.repro_check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipes", help="comma-separated recipes (default: every built-in recipe and variant)")
    p.add_argument("--root", action="append", default=[], help="KIND=DIR: a source root instead of the demo data")
    p.add_argument("--out", help="write the battery (hashes, profile) as JSON here")
    p.add_argument("--probe", action="store_true", help="also hash the results of NumPy's CPU-dependent functions "
                   "per example (a second pass: slower)")
    p.add_argument("--compare", help="a battery JSON from another node: print the partitions that differ")
    p.add_argument("--matrix", action="store_true", help="run the battery under every configuration of CONFIGS")
    p.add_argument("--configs", help="with --matrix: comma-separated names of CONFIGS (default: all)")
    args = p.parse_args(argv)
    recipes = args.recipes.split(",") if args.recipes else None
    if args.matrix:
        names = args.configs.split(",") if args.configs else list(CONFIGS)
        res = matrix({n: CONFIGS[n] for n in names}, recipes=recipes, reference=names[0])
        print(json.dumps(res, indent=1))
        return 0
    other = load_battery(args.compare) if args.compare else None
    res = battery(recipes, roots=dict(r.split("=", 1) for r in args.root), probe=args.probe)
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1, sort_keys=True))
    print(summary(res), file=sys.stderr)
    if args.compare:
        text, differs = compare_files(args.compare, res, other)
        print(text, file=sys.stderr)
        return 1 if differs else 0
    return 0


def load_battery(path: str | Path) -> dict[str, Any]:
    """A battery saved by ``repro-check --out``, read and checked before this machine's battery runs (minutes):
    a `UsageError` naming the file when it is missing, not JSON, or not a battery."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise UsageError(f"{path}: cannot read the battery to compare with: {e.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not a battery (written by repro-check --out): not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}: not a battery (written by repro-check --out): not JSON ({e})") from None
    if not (isinstance(data, dict) and isinstance(data.get("hashes"), dict) and isinstance(data.get("profile"), dict)):
        raise UsageError(f"{path}: not a battery (written by repro-check --out): no 'hashes' and 'profile'")
    return data


def compare_files(other_path: str | Path, res: dict[str, Any], other: dict[str, Any] | None = None) -> tuple[str, bool]:
    """(what differs between the battery saved at ``other_path`` (``other``, when already loaded) and ``res``,
    whether anything does: bytes, probe, or the numeric profile — a node whose profile differs would fail its tasks
    in a build of the other's)."""
    diff = compare(other if other is not None else load_battery(other_path), res)
    return describe_comparison(diff, str(other_path)), any(diff.values())


def summary(res: dict[str, Any]) -> str:
    prof = res["profile"]
    return (f"{len(res['hashes'])} partitions, digest {res['digest']}; NumPy SIMD {' '.join(prof['simd']) or '-'}; "
            f"OpenBLAS {', '.join(f'{k} {v}' for k, v in sorted(prof['openblas'].items()))}")


def compare(other: dict[str, Any], res: dict[str, Any]) -> dict[str, list[str]]:
    """Partitions whose stored bytes differ, examples whose probe differs (when both have one), profile
    differences (another node's battery ``other`` vs this one's ``res``)."""

    def common(a: dict[str, str], b: dict[str, str]) -> list[str]:
        return differing({k: a[k] for k in a.keys() & b.keys()}, {k: b[k] for k in a.keys() & b.keys()})

    probe = common(other["probe"], res["probe"]) if other.get("probe") and res.get("probe") else []
    only = sorted({partition_name(k) for k in other["hashes"].keys() ^ res["hashes"].keys()})
    return {"partitions": common(other["hashes"], res["hashes"]), "probe": probe, "only_in_one": only,
            "profile": profile_differences(other["profile"], res["profile"])}


def describe_comparison(diff: dict[str, list[str]], other_name: str) -> str:
    lines = [f"{len(diff['partitions'])} partitions' bytes differ from {other_name}"
             + "".join(f"\n  {d}" for d in diff["partitions"])]
    if diff["probe"]:
        lines.append(f"{len(diff['probe'])} partitions compute different float64 values (probe)"
                     + "".join(f"\n  {d}" for d in diff["probe"]))
    if diff["only_in_one"]:
        lines.append(f"{len(diff['only_in_one'])} partitions are in only one of the batteries (other --recipes?)")
    if diff["profile"]:
        lines.append("numeric profile differs (a build would fail this node's tasks): " + "; ".join(diff["profile"]))
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
