"""Ray for a build: start (or join) it with the workers' environment, stop it, watch the local raylet.

A worker's environment carries two pins: the numeric pin (`runtime.numeric.worker_env`: what decides the bytes)
and the thread pin (`thread_env`: every library's thread pool sized to the one CPU a Ray task holds, so N workers
run N busy threads on N cores instead of N × cores; it never changes bytes).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from importlib import metadata
from typing import Any

import pyarrow as pa

from bench_build.runtime import reaper
from bench_build.runtime.numeric import worker_env

#: the most CPUs a local Ray takes (Ray's bound on any resource quantity): `ray.init` refuses more with a
#: ValueError, which came after the build had written its ledger
MAX_LOCAL_CPUS = 10**14
RAYLET_GONE_GRACE_S = 2.0  # after the local raylet died: time for its workers to exit before the ledger is read

#: ``off``: leave the libraries' thread pools at their defaults in workers (to measure what the pin saves)
THREAD_PIN_SWITCH = "BENCH_BUILD_THREAD_PIN"
#: thread-pool sizes read by the libraries when they load: OpenMP (open3d, scikit-learn), the BLAS builds NumPy
#: and SciPy may link, numba's parallel layer, pyarrow's CPU pool (its I/O pool is set in `pin_worker_threads`)
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "NUMBA_NUM_THREADS", "OMP_THREAD_LIMIT")


def thread_pin_disabled(environ: Mapping[str, str] = os.environ) -> bool:
    return environ.get(THREAD_PIN_SWITCH, "").strip().lower() in ("off", "0", "false", "no")


def thread_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """One thread per library pool in a worker (a Ray task holds one CPU), where the user set nothing else."""
    if thread_pin_disabled(environ):
        return {}
    return {k: environ.get(k, "1") for k in THREAD_VARS}


def pin_worker_threads() -> None:
    """Size the pools a worker's libraries start lazily, once per process (called by each task; cheap after the
    first): pyarrow's CPU and I/O pools (its Parquet writer encodes and compresses columns on the CPU pool)."""
    if thread_pin_disabled() or getattr(pin_worker_threads, "done", False):
        return

    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    pin_worker_threads.done = True  # type: ignore[attr-defined]


class _PandasHidden:
    """A meta-path finder under which ``import pandas`` fails (for `spare_pandas_import`'s one call)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"{name} hidden for pyarrow's probe", name=name)


class _PandasWatch:
    """A meta-path finder that lets the first real ``import pandas`` through and, once pandas has loaded, has
    pyarrow import it too (an empty table's ``to_pandas``): pyarrow then knows pandas objects again."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "pandas":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("pandas")
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            pa.table({"x": pa.array([], pa.int8())}).to_pandas()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


_PANDAS_SPARED = False  # `spare_pandas_import` ran in this process


def spare_pandas_import() -> None:
    """Spare this process pandas' import (≈ 0.2 s), once: pyarrow imports pandas on its first `pa.array` only to
    ask whether the input is a pandas object, which a build's never is. Asked once with pandas hidden, pyarrow
    records the answer "no"; if anything in this process imports pandas later, pyarrow is made to import it as
    well (`_PandasWatch`), so that it reads pandas objects (a Categorical, a Series with its own index) as
    before."""
    global _PANDAS_SPARED
    if "pandas" in sys.modules or _PANDAS_SPARED:
        return
    finder = _PandasHidden()
    sys.meta_path.insert(0, finder)
    try:
        pa.array([0])
    finally:
        sys.meta_path.remove(finder)
    sys.meta_path.insert(0, _PandasWatch())
    _PANDAS_SPARED = True


def worker_environment() -> dict[str, str]:
    """Everything a worker must start with: the numeric pin, then the thread pin."""
    return {**thread_env(), **worker_env()}


#: packages a build's tasks import that its driver never does (so a driver that runs cannot tell they are
#: missing): {import name: the distribution pip installs}. `missing_task_packages` checks them before a build writes.
TASK_PACKAGES = {"numpy": "numpy", "scipy": "scipy", "pyarrow": "pyarrow", "numba": "numba",
                 "threadpoolctl": "threadpoolctl", "miepython": "miepython"}


def missing_task_packages(names: Mapping[str, str] = TASK_PACKAGES) -> list[str]:
    """The distributions of ``names`` this Python cannot find (``importlib.util.find_spec``: nothing is imported,
    so it costs microseconds). A local Ray's workers run this same Python, so a build that would need one is refused
    before it writes; on a cluster each worker that lacks one fails its shard, naming its node (`build.task`)."""
    missing = []
    for module, dist in names.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package that cannot load, a module set to None
            found = False
        if not found:
            missing.append(dist)
    return missing


def declared_requirements() -> list[str]:
    """bench-build's own requirements, without its extras' (none when run from a source tree never installed)."""
    try:
        return [r for r in metadata.requires("bench-build") or [] if "extra ==" not in r]
    except metadata.PackageNotFoundError:
        return []


def requirement_name(requirement: str) -> str:
    """The distribution a requirement names (``'threadpoolctl>=3.1'`` → ``threadpoolctl``), lower case."""
    return re.split(r"[\s<>=!~;\[(]", requirement.strip(), maxsplit=1)[0].lower()


def missing_packages_message(missing: list[str]) -> str:
    """One line: which packages are missing, and the pip command that installs them at bench-build's versions."""
    wanted = {requirement_name(r): r.split(";")[0].strip() for r in declared_requirements()}
    specs = [wanted.get(dist, dist) for dist in missing]
    return (f"this Python ({sys.executable}) cannot import {', '.join(missing)}, which bench-build's build tasks "
            f"need: install {'it' if len(missing) == 1 else 'them'} with: pip install "
            f"{' '.join(shlex.quote(s) for s in specs)} (or install bench-build with "
            "its dependencies)")


#: how often a local Ray's processes retry a connection to the raylet's sockets (read from the environment by
#: the raylet and the workers it starts). The raylet connects to its own object store as soon as it has started
#: it, usually before the store listens, and then sleeps Ray's default retry delay, a whole second: measured on
#: 2 cores, 4 of 8 `ray.init` calls took 3.0 s instead of 2.0 s. Retried every 20 ms, none did; 500 tries keep
#: the default's patience (10 s). A user's own setting wins.
RAY_CONNECT_RETRY = {"RAY_raylet_client_connect_timeout_milliseconds": "20",
                     "RAY_raylet_client_num_connect_attempts": "500"}


def local_ray_environment() -> dict[str, str]:
    """What a local Ray's raylet (and so every worker) starts with: the pins and the connection retry."""
    return {**{k: os.environ.get(k, v) for k, v in RAY_CONNECT_RETRY.items()}, **worker_environment()}


def unreachable(address: str, timeout_s: float = 5.0) -> str | None:
    """The line refusing a ``host:port`` (or ``ray://host:port``) ``address`` where no Ray cluster can answer,
    with the OS's words ("Connection refused", "timed out"), or None: something listens there, or the address is
    one Ray resolves itself (``auto``). Ray retries an address nobody listens on every ≈ 36 s without end, after
    the build wrote its ledger: tried once here first, so a mistyped address is refused before anything is written."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return None
    except OSError as e:  # refused, timed out, no such host
        why = e.strerror or str(e) or type(e).__name__
    return (f"--address {address}: no Ray cluster answers there ({why}); start one (`ray start --head`) or give "
            "the head's address (HEAD_IP:6379, ray://HEAD_IP:10001, or auto)")


def init_ray(workers: int | None, address: str | None) -> bool:
    """Start (or join) Ray; return True if this call started it (so the caller shuts it down).

    Every worker must start with the numeric pin (`worker_env`) and the thread pin (`thread_env`) in its
    environment. Joining a cluster, the pins travel in the job's ``runtime_env`` (its nodes were started
    elsewhere). A local Ray started here gets them by inheritance instead: its raylet, and so every worker,
    inherits this process's environment at ``ray.init``, so the pins are put there for the duration of the call
    (the caller's environment is restored). A job ``runtime_env`` would make Ray start the job's workers through
    its runtime-env agent rather than from its prestarted pool: measured here, ≈ 0.9 s more before the first
    task runs, on every build."""
    if "ray" not in sys.modules and not sys.stdout.isatty():
        # a log file: Ray's forwarded worker/raylet lines without colour codes. Its de-duplicated lines end in a
        # green "[repeated Nx across cluster]" whatever RAY_COLOR_PREFIX says, so a log keeps every line
        # instead (both read by Ray when first imported; a user's own setting wins)
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")
        os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    import ray

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True, "configure_logging": False}
    with keep_sigterm_handler():
        return _init_ray(ray, workers, address, kwargs)


class DropTokenNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Token authentication is enabled for this Ray cluster")


def quiet_token_notice() -> None:
    log = logging.getLogger("ray._private.authentication.authentication_token_setup")
    if not any(isinstance(f, DropTokenNotice) for f in log.filters):
        log.addFilter(DropTokenNotice())


@contextlib.contextmanager
def keep_sigterm_handler():
    """ray.init installs its core worker's SIGTERM handler (it prints and dies), replacing the caller's: the CLI's
    turns SIGTERM into the interrupt path that stops Ray and says how to resume. Put a Python handler back."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if callable(previous) and previous is not signal.default_int_handler:
            signal.signal(signal.SIGTERM, previous)


def _init_ray(ray: Any, workers: int | None, address: str | None, kwargs: dict[str, Any]) -> bool:
    if address:
        # every worker of the job, on any node, starts with the numeric pin (before NumPy)
        ray.init(address=address, runtime_env={"env_vars": worker_environment()}, **kwargs)
    else:
        before = set(reaper.children(os.getpid()))
        # Ray 2.60 turns token authentication on for a new local cluster (a token made once in ~/.ray) and logs a
        # notice saying so on every run: the protection stays, the notice goes
        quiet_token_notice()
        # "local": always a fresh instance — without it ray.init() joins any `ray start` cluster on this machine
        with environ(local_ray_environment()), lean_local_head():
            ray.init(address="local", num_cpus=workers if workers is not None else os.cpu_count() or 1, **kwargs)
        # Ray's agents outlive a kill -9 of this driver by a minute; a watcher reaps them (pipeline/runtime/reaper.py)
        reaper.start(sorted(set(reaper.children(os.getpid())) - before))
    return True


#: what a local head starts that a build never uses: the autoscaler monitor (one local node has nothing to scale)
#: and the API server (Ray's dashboard head, in its minimal mode the job and state APIs, which bench-build never
#: calls; progress goes through the GCS). `ray.init` has no switch for either. Measured on 2 cores (Ray 2.60,
#: 2026-11-29, 3 starts each): `ray.init` 2.7–3.8 → 1.9–3.0 s, Ray's CPU per start and stop 5.7 → 4.4 CPU-s.
LEAN_HEAD_SKIPS = ("start_monitor", "start_api_server")


@contextlib.contextmanager
def lean_local_head():
    """Inside the block, a local Ray head starts without `LEAN_HEAD_SKIPS` (the GCS, raylet, log monitor that
    forwards the workers' output, and the raylet's agents all start as usual). A private Ray API: where it is
    not there, Ray starts as it always did."""
    try:
        from ray._private.node import Node
    except ImportError:
        yield
        return
    saved = {name: Node.__dict__[name] for name in LEAN_HEAD_SKIPS if callable(Node.__dict__.get(name))}
    for name in saved:
        setattr(Node, name, _not_started)
    try:
        yield
    finally:
        for name, method in saved.items():
            setattr(Node, name, method)


def _not_started(self: Any, *args: Any, **kwargs: Any) -> None:
    return None


@contextlib.contextmanager
def environ(values: dict[str, str]):
    """``values`` in ``os.environ`` inside the block (for the processes it starts), the old values after."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


#: object references the driver holds until Ray is stopped (`hold_until_stopped`)
_HELD: list[Any] = []


def hold_until_stopped(*refs: Any) -> None:
    """Keep ``refs`` referenced until `stop_ray`. Dropping the last reference to an object in Ray's object store
    tells the store to release it; when the local raylet (which runs the store) has died, the core worker answers
    the failed write by terminating this process at once (Ray 2.60: "The connection to the plasma store is
    failed. Terminate the process."), with exit status 1, before the build's summary is printed. So the driver
    lets go of its ``ray.put`` arguments and its unfinished tasks' results only once Ray is shut down."""
    _HELD.extend(refs)


def stop_ray() -> None:
    """``ray.shutdown()``, less the second it waits for the autoscaler monitor of a local Ray: that process does not
    exit on SIGTERM, so Ray gives it 1 s before it kills it. A local node has nothing to scale: it is killed first
    (measured on 2 cores: ``ray.shutdown`` 1.35 s → 0.3 s); `init_ray` starts none (`lean_local_head`), a Ray
    started in this process otherwise may have one. The references `hold_until_stopped` kept go after it."""
    import ray

    try:
        from ray._private import ray_constants, worker

        node = worker._global_node
        if node is not None and node.is_head():  # a Ray this process started, not a cluster it joined
            for info in node.all_processes.get(ray_constants.PROCESS_TYPE_MONITOR) or []:
                info.process.kill()
    except Exception:  # a private Ray API: without it Ray stops as it always did
        pass
    ray.shutdown()
    _HELD.clear()


def stop_ray_in_background() -> threading.Thread:
    """Ray stops (`stop_ray`) on a thread while the driver writes the manifest and card; join it before exiting."""
    stopping = threading.Thread(target=stop_ray, name="bench-build-ray-shutdown")
    stopping.start()
    return stopping


#: the GCS key-value namespace of running builds' progress (`build.progress.ProgressBoard`)
PROGRESS_NAMESPACE = b"bench-build-progress"


KV_TIMEOUT_S = 2.0  # a progress request that takes longer is dropped: the bar waits, the build does not


def _kv() -> Any:
    from ray.experimental import internal_kv

    return internal_kv.internal_kv_get_gcs_client()


def kv_put(key: str, value: bytes) -> bool:
    """Put ``key`` in the progress namespace of the cluster's GCS key-value store (from a driver or a task); False
    when the store cannot be reached (Ray's internal API: progress is best effort, never the build's failure)."""
    try:
        _kv().internal_kv_put(key.encode(), value, True, namespace=PROGRESS_NAMESPACE, timeout=KV_TIMEOUT_S)
        return True
    except Exception:
        return False


def kv_get_many(keys: list[str]) -> dict[str, bytes]:
    """The values of those of ``keys`` that are set, in one request; {} when the store cannot be reached."""
    try:
        got = _kv().internal_kv_multi_get([k.encode() for k in keys], namespace=PROGRESS_NAMESPACE,
                                          timeout=KV_TIMEOUT_S)
        return {k.decode(): v for k, v in got.items() if v is not None}
    except Exception:
        return {}


def kv_delete_prefix(prefix: str) -> None:
    """Delete every key under ``prefix`` (a cluster's GCS outlives the build that wrote them)."""
    try:
        _kv().internal_kv_del(prefix.encode(), True, namespace=PROGRESS_NAMESPACE, timeout=KV_TIMEOUT_S)
    except Exception:
        pass


def local_raylet() -> Any:
    """The `Popen` of the raylet this process started (``ray.init(address="local")``), or None if unknown."""
    try:
        from ray._private import ray_constants, worker

        infos = worker._global_node.all_processes.get(ray_constants.PROCESS_TYPE_RAYLET) or []
        return infos[0].process if len(infos) == 1 and hasattr(infos[0].process, "poll") else None
    except Exception:  # a private Ray API: without it the build runs as before, only without this watch
        return None


def raylet_death(raylet: Any, wait: float = 0.0) -> str | None:
    """The local raylet's death (``raylet``: its `Popen`, or None when not watched) as the failure message of
    the shards it took with it, or None while it runs. ``wait``: seconds to give it to be seen dead — an error
    a task or ``ray.wait`` raised can be that death, noticed by a worker (its socket closed) a moment before
    the raylet's exit completes."""
    if raylet is None:
        return None
    try:
        raylet.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        return None
    return (f"Ray node died (local raylet pid {raylet.pid} exited with {raylet.returncode}): the raylet "
            "or the machine running the shard is gone")

