"""The numeric profile of a process: what, besides the recipe and seed, decides the bytes a stage computes.

NumPy picks a SIMD implementation of many functions by CPU when it is imported, and its bundled OpenBLAS picks
a kernel by CPU when it is loaded. On x86-64 the AVX-512 code paths give different float64 results from the
AVX2 ones (``arccos``, ``exp``, ``arctan2``; ``argsort`` orders ties differently) — measured on the stages with
``python -m bench_build.build.repro_check --matrix`` (README, "Reproducibility across machines"). A Ray cluster mixing
AVX-512 nodes (Xeon SP, Zen 4) with AVX2 ones (Zen 2/3, older Xeons) would write different bytes for the same
key depending on where a task ran.

So every process that computes shard bytes runs *pinned* (`pin`): NumPy's AVX-512 dispatch targets disabled
(``NPY_DISABLE_CPU_FEATURES``, read when NumPy is imported; the names are taken from the installed NumPy's own
dispatch list, since each NumPy line names them differently, and a target the pin cannot judge is refused),
OpenBLAS on its Haswell (AVX2 + FMA3) kernels
(``OPENBLAS_CORETYPE``, read when it is loaded) and numba compiling for the ``generic`` CPU (``NUMBA_CPU_NAME``,
read when numba is imported; its target is also its cache key). All must be in the environment before ``import
numpy`` and ``import numba``:
`pin_environment` sets them at the top of the CLI. Ray workers of a local Ray that `init_ray` starts inherit them
(they are in the environment its raylet starts with); on a cluster, or a Ray the caller started, they come from
the job's and each task's ``runtime_env`` (`worker_env`), whatever node the worker starts on. A user may set any
variable to another value (an override, recorded as such) or set ``BENCH_BUILD_NUMERIC_PIN=off`` (no pin; still
recorded and checked).

`build_profile` is what a build expects its tasks to run under (computed by the driver; recorded in the ledger
and the manifest); `live_profile` is what a process actually runs under; `profile_differences` names what
differs. A task whose live profile differs from its build's fails its shard before writing anything.

This module imports nothing heavy at import time: the CLI imports it before NumPy.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import platform
import socket
import subprocess
import sys
import warnings
from collections.abc import Mapping
from functools import lru_cache
from importlib import metadata
from importlib.resources import files
from pathlib import Path
from typing import Any

from bench_build.errors import BenchBuildError

#: x86-64 dispatch targets that need no more than AVX2 + FMA3 (NumPy 1.26–2.3 name each extension, 2.4+ group
#: them as the x86-64-v2/v3 levels). Every other x86 target NumPy names is AVX-512 (``AVX512F`` … ``AVX512_SPR``;
#: 2.4+'s ``X86_V4`` is x86-64-v4, i.e. AVX-512 F/CD/VL/BW/DQ); a name in neither group is unknown and refused.
AVX2_AND_BELOW_TARGETS = frozenset({"SSE", "SSE2", "SSE3", "SSSE3", "SSE41", "POPCNT", "SSE42", "AVX", "F16C", "XOP",
                                    "FMA4", "FMA3", "AVX2", "X86_V2", "X86_V3"})
PIN_OTHER: dict[str, str] = {
    # OpenBLAS's AVX2 + FMA3 kernels (also what Zen would get as "Zen", but with other block sizes)
    "OPENBLAS_CORETYPE": "Haswell",
    # numba compiles for the architecture's baseline CPU (x86-64: SSE2; numba then adds no host features): the
    # same machine code on every node, and a cache key every node shares, so kernels compiled once (in the image,
    # by `bench-build warm`) load on any node instead of being compiled by each worker. Measured: no stage slower
    # than with this CPU's own target (AVX-512), and the same bytes (README: Reproducibility across machines).
    "NUMBA_CPU_NAME": "generic",
}
#: the variables of the pin, in the order they are set
PIN_VARS = ("NPY_DISABLE_CPU_FEATURES", *PIN_OTHER)


class NumericPinError(BenchBuildError, RuntimeError):
    """The installed NumPy dispatches a target the pin does not know how to judge: pinning it could leave an
    AVX-512 code path active, so bench-build refuses rather than pin silently."""


def cpu_has_avx512() -> bool:
    """Whether this machine's CPU has AVX-512 (``avx512f`` in /proc/cpuinfo): where the pin's effect is visible."""
    try:
        with open("/proc/cpuinfo") as f:
            return " avx512f " in f" {f.read()} ".replace("\n", " ")
    except OSError:
        return False


def is_avx512_target(name: str) -> bool:
    return name.startswith("AVX512") or name == "X86_V4"


def numpy_dispatch_targets() -> list[str]:
    """The running NumPy's dispatch targets without importing NumPy into this process (the pin must be in the
    environment before that): read in this process when NumPy is already here, else from a cache file keyed by
    NumPy's extension module (path, size, mtime), else from a short subprocess (≈ 0.1 s, once per NumPy install)."""
    if "numpy" in sys.modules:
        return list(_dispatch_module().__cpu_dispatch__)

    spec = importlib.util.find_spec("numpy")
    roots = list(spec.submodule_search_locations or []) if spec else []
    ext = sorted(p for r in roots for sub in ("_core", "core") for p in Path(r, sub).glob("_multiarray_umath*.so"))
    key = None
    cache = Path(os.environ.get("BENCH_BUILD_CACHE") or Path.home() / ".cache" / "bench-build") / "numpy-dispatch.json"
    if ext:
        st = ext[0].stat()
        key = f"{ext[0]}:{st.st_size}:{st.st_mtime_ns}"
        try:
            cached = json.loads(cache.read_text())
            if cached.get("key") == key:
                return list(cached["dispatch"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
    code = ("import json\ntry:\n from numpy._core import _multiarray_umath as m\nexcept ImportError:\n"
            " from numpy.core import _multiarray_umath as m\nprint(json.dumps(list(m.__cpu_dispatch__)))")
    env = {k: v for k, v in os.environ.items() if k not in ("NPY_DISABLE_CPU_FEATURES", "NPY_ENABLE_CPU_FEATURES")}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    if res.returncode != 0:
        raise NumericPinError(f"could not read NumPy's dispatch targets ({sys.executable}): "
                              f"{(res.stderr.strip().splitlines() or ['no output'])[-1]}")
    dispatch = json.loads(res.stdout)
    if key is not None:
        try:  # a cache that cannot be written (read-only home) only costs the probe next time
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"key": key, "dispatch": dispatch}))
            os.replace(tmp, cache)
        except OSError:
            pass
    return dispatch


def _dispatch_module() -> Any:
    try:  # NumPy 2's name; numpy.core is deprecated there
        from numpy._core import _multiarray_umath as m
    except ImportError:  # NumPy 1.26
        from numpy.core import _multiarray_umath as m
    return m


def avx512_targets(dispatch: list[str], arch: str | None = None) -> list[str]:
    """The targets of ``dispatch`` (NumPy's dispatch list, in its order) that need AVX-512: what the pin disables.
    On x86-64 a target the pin cannot judge raises `NumericPinError`; other architectures have none."""
    if (arch or platform.machine()).lower() not in ("x86_64", "amd64"):
        return []
    unknown = [t for t in dispatch if not is_avx512_target(t) and t not in AVX2_AND_BELOW_TARGETS]
    if unknown:
        raise NumericPinError(
            f"NumPy dispatches {' '.join(unknown)}, which bench-build's numeric pin does not know (it knows NumPy "
            f"1.26–2.x's x86 targets): the pin cannot tell whether its results match an AVX2 node's. Install a "
            f"NumPy bench-build supports (see the lock file), or set {PIN_SWITCH}=off to build unpinned")
    return [t for t in dispatch if is_avx512_target(t)]


@lru_cache(maxsize=1)
def _pin() -> tuple[tuple[str, str], ...]:
    return (("NPY_DISABLE_CPU_FEATURES", " ".join(avx512_targets(numpy_dispatch_targets()))), *PIN_OTHER.items())


def pin() -> dict[str, str]:
    """The numeric pin for this machine's NumPy: its AVX-512 dispatch targets disabled (derived from NumPy's own
    dispatch list, so each NumPy line gets its names), OpenBLAS on Haswell kernels, numba on the generic CPU."""
    return dict(_pin())


def __getattr__(name: str) -> Any:  # ``PIN``: computed on first use (it asks NumPy, see `numpy_dispatch_targets`)
    if name == "PIN":
        return pin()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: ``off``: do not pin (the profile is still recorded, and tasks still checked against the driver's)
PIN_SWITCH = "BENCH_BUILD_NUMERIC_PIN"
#: the libraries whose version is part of the profile (their code computes or encodes shard bytes)
#: the packages a task's profile must match the build's in: their code computes or encodes shard bytes (miepython:
#: the LISA stages' Mie tables; h5py: the ModelNet40 reader's decoding). A build recorded before a name joined
#: this list is compared without it (`profile_differences`), so it still resumes.
LIBRARIES = ("numpy", "scipy", "numba", "llvmlite", "pyarrow", "open3d-cpu", "trimesh", "miepython", "h5py")


def pin_disabled(environ: Mapping[str, str] = os.environ) -> bool:
    return environ.get(PIN_SWITCH, "").strip().lower() in ("off", "0", "false", "no")


def worker_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The numeric variables a process computing shard bytes must start with: the pin, where the user did not
    set a variable to something else (an override, kept); with ``BENCH_BUILD_NUMERIC_PIN=off`` only the user's."""
    if pin_disabled(environ):
        return {k: environ[k] for k in PIN_VARS if k in environ}
    return {k: environ.get(k, v) for k, v in pin().items()}


def pin_mode(environ: Mapping[str, str] = os.environ) -> str:
    """"pinned" (the defaults), "override" (a variable set to another value) or "off"."""
    if pin_disabled(environ):
        return "off"
    return "pinned" if worker_env(environ) == pin() else "override"


def pin_environment(environ: Any = os.environ) -> list[str]:
    """Put the pin into ``environ`` (where not set) for this process and its children; call before NumPy and
    numba are imported. If either was imported already under another setting, warns (RuntimeWarning) and returns
    the warning: this process then computes with its import-time dispatch and target (its Ray workers are still
    pinned)."""
    env = worker_env(environ)
    for k, v in env.items():
        environ.setdefault(k, v)
    late = []
    if "numpy" in sys.modules:
        got, want = active_simd(), expected_simd(env)
        if got != want:
            late.append(f"NumPy was imported before the numeric pin: this process dispatches {_fmt(got)}, the pin "
                        f"{_fmt(want)}")
    if "numba" in sys.modules:
        from numba.core import config

        want_cpu = env.get("NUMBA_CPU_NAME")
        if config.CPU_NAME != want_cpu:
            late.append(f"numba was imported before the numeric pin: this process compiles for "
                        f"{config.CPU_NAME or 'its own CPU'}, the pin for {want_cpu or 'its own CPU'}")
    if not late:
        return []
    message = (f"{'; '.join(late)}. Its Ray workers are pinned, but bytes it computes itself (demo data) may differ "
               f"from another machine's (set {', '.join(PIN_VARS)} before starting Python to pin it too)")
    warnings.warn(message, RuntimeWarning, stacklevel=2)
    return [message]


def _fmt(features: list[str]) -> str:
    return " ".join(features) if features else "(baseline only)"


# -- what a process runs under ---------------------------------------------------------------------
def active_simd() -> list[str]:
    """NumPy's dispatch targets active in this process (its CPU minus those disabled at import), in NumPy's order."""
    m = _dispatch_module()
    return [t for t in m.__cpu_dispatch__ if m.__cpu_features__.get(t)]


def expected_simd(env: Mapping[str, str]) -> list[str]:
    """The dispatch targets a process started with ``env`` would have on this machine's CPU."""
    m = _dispatch_module()
    disabled = set(env.get("NPY_DISABLE_CPU_FEATURES", "").replace(",", " ").split())
    return [t for t in m.__cpu_dispatch__ if m.__cpu_features__.get(t) and t not in disabled]


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (a container's or `taskset`'s share), else the count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def openblas_cores() -> dict[str, str]:
    """{"numpy": core, "scipy": core}: the kernel set NumPy's OpenBLAS (``@``, ``np.linalg``) and SciPy's (scipy.linalg,
    and numba's ``np.linalg``, which calls SciPy's LAPACK) chose. Both honour ``OPENBLAS_CORETYPE``; other copies
    (OpenCV bundles a fixed Prescott build for itself) are not ours to pin."""
    import numpy  # noqa: F401  (loads NumPy's OpenBLAS)
    import scipy.linalg  # noqa: F401  (loads SciPy's)
    from threadpoolctl import threadpool_info

    out = {}
    for info in threadpool_info():
        if info.get("internal_api") != "openblas":
            continue
        for lib in ("numpy", "scipy"):
            if f"{os.sep}{lib}.libs{os.sep}" in info.get("filepath", ""):
                out[lib] = str(info.get("architecture"))
    return out


#: besides `LIBRARIES`, the packages whose code decides what a shard holds: the optional readers' decoders. A
#: build records whether all of these match the lock (`lock_record`).
LOCKED_FOR_BYTES = (*LIBRARIES, "nuscenes-devkit", "pykitti", "pyquaternion")


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def read_lock(text: str | None = None) -> dict[str, str]:
    """The lock (``manifests/lock.txt``, pip constraints ``name==version``) as {canonical name: version}."""
    if text is None:

        text = files("bench_build.manifests").joinpath("lock.txt").read_text(encoding="utf-8")
    out = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            if not sep:
                raise ValueError(f"manifests/lock.txt: {line!r} is not 'name==version'")
            out[_canonical(name)] = version.strip()
    return out


def lock_record() -> dict[str, Any]:
    """Which lock this process's packages come from: the lock file's sha256, and every package of
    `LOCKED_FOR_BYTES` that is installed at another version than the lock's (none: the bytes are the lock's)."""

    raw = files("bench_build.manifests").joinpath("lock.txt").read_bytes()
    lock = read_lock(raw.decode("utf-8"))
    differs = []
    for name in LOCKED_FOR_BYTES:
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue  # not installed: it computed nothing of this build
        want = lock.get(_canonical(name))
        if want is None or have.split("+")[0] != want:
            differs.append(f"{name} {have} (lock: {want or 'absent'})")
    return {"sha256": hashlib.sha256(raw).hexdigest(), "matches": not differs, "differs": differs}


def _versions() -> dict[str, str | None]:

    out: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _platform() -> dict[str, str]:
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError, AttributeError):
        libc = ""
    return {"arch": platform.machine(), "python": ".".join(map(str, sys.version_info[:2])),
            "libc": libc}  # glibc's libm also picks FMA variants by CPU: same on every AVX2 + FMA3 node


def build_profile(environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The profile the driver expects every task of its build to run under: this machine's platform and library
    versions, NumPy dispatch as a process started with `worker_env` would have it, and OpenBLAS on the pinned core
    (without a pin: the core this process's OpenBLAS chose)."""
    env = worker_env(environ)
    core = env.get("OPENBLAS_CORETYPE")
    cores = openblas_cores() if core is None else {lib: core for lib in ("numpy", "scipy")}
    return {**_platform(), "libraries": _versions(), "simd": expected_simd(env), "openblas": cores,
            "pin": pin_mode(environ), "env": env, "lock": lock_record()}


@lru_cache(maxsize=1)
def live_profile() -> dict[str, Any]:
    """What this process runs under (computed once per process: a few milliseconds)."""
    import numpy  # noqa: F401

    return {**_platform(), "libraries": _versions(), "simd": active_simd(), "openblas": openblas_cores(),
            "env": {k: os.environ[k] for k in PIN_VARS if k in os.environ}}


#: the keys compared between a task and its build ("pin" and "env" describe how the build got there)
COMPARED = ("arch", "python", "libc", "libraries", "simd", "openblas")


def profile_differences(expected: Mapping[str, Any], got: Mapping[str, Any]) -> list[str]:
    """What differs between two profiles, one phrase per key (empty: the same numbers)."""
    out = []
    for key in COMPARED:
        a, b = expected.get(key), got.get(key)
        if key == "openblas" and isinstance(a, dict) and isinstance(b, dict):
            out += [f"{lib}'s OpenBLAS core {b.get(lib)} (build: {a.get(lib)})" for lib in sorted(set(a) | set(b))
                    if str(a.get(lib)).lower() != str(b.get(lib)).lower()]
        elif key == "libraries" and isinstance(a, dict) and isinstance(b, dict):
            # only what the build recorded: one made before a library joined LIBRARIES did not record it
            out += [f"{name} {b.get(name)} (build: {a.get(name)})" for name in sorted(a)
                    if a.get(name) != b.get(name)]
        elif key == "simd" and isinstance(a, list) and isinstance(b, list):
            if a != b:
                extra, missing = [t for t in b if t not in a], [t for t in a if t not in b]
                out.append("NumPy SIMD " + "; ".join([f"also dispatches {_fmt(extra)}"] * bool(extra)
                                                     + [f"lacks {_fmt(missing)}"] * bool(missing)))
        elif a != b:
            out.append(f"{key.replace('_', ' ')} {b} (build: {a})")
    return out


def node_name() -> str:
    """``host (ip)`` of this process: the node a message about a task should name."""
    host = socket.gethostname()
    try:
        import ray

        if ray.is_initialized():
            return f"{host} ({ray.util.get_node_ip_address()})"
    except Exception:
        pass
    return host


def check_profile(expected: Mapping[str, Any] | None) -> str | None:
    """None if this process computes like ``expected`` (or there is nothing to compare), else the message a
    task fails its shard with: the node and every difference, and where to read about it."""
    if not expected:
        return None
    diffs = profile_differences(expected, live_profile())
    if not diffs:
        return None
    return (f"numeric profile of node {node_name()} differs from the build's: {'; '.join(diffs)}. Its bytes could "
            "differ from the other nodes', so nothing was written; run this node with the build's image and "
            "environment (README: Reproducibility across machines)")
