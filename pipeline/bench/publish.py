"""Object-storage benchmark (a script, not a test): `python -m bench_build.bench.publish`.

On a demo version it measures, against a local SeaweedFS (started on 127.0.0.1 for the run, unless
``--to s3://…`` names another store reached through the AWS chain):

1. a whole build to a local directory and the same build straight to ``s3://`` (the overhead of
   staging each Parquet file locally and uploading it, of ledger objects, and of re-reading a footer);
2. ``publish`` throughput (upload MB/s, every file new);
3. ``pull`` throughput (download + sha256 of every file, MB/s);
4. remote ``verify`` throughput (streamed sha256 + footer row counts, MB/s).

`run_bench_s3_build` (``bench-build bench s3-build``) times only the builds, interleaved and repeated:
local directory, ``s3://`` with uploads overlapping compute (the default) and ``s3://`` with overlap off
(``BENCH_BUILD_OVERLAP_UPLOADS=0``); it prints each run, the medians, the overhead of each s3 mode over
local, the CPU seconds of the build (driver + tasks) and, of those, of the threads that ran the uploads
(recorded per task in the ledger as ``upload_cpu_seconds``), the CPU seconds the SeaweedFS server used (on
loopback it shares the machine's cores with the build), and the load average before and after (other work
on a shared machine inflates wall times; CPU seconds much less). With ``--isolate-server`` the server runs on
the last CPU and every build (driver, Ray, workers) on the others, in all three modes: the overhead is then
what an s3 build costs the build itself, as with an object store on another host, and not the server's own
hashing on the build's cores.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import typer

from bench_build.build.ledger import Ledger
from bench_build.build.run import run_build
from bench_build.publish import publish_version, pull_version, verify_remote
from bench_build.storage import OVERLAP_ENV, open_store
from bench_build.storage.seaweed import SeaweedServer


def run_bench_publish(frames: int = 8, workers: int = 2, to: str | None = None, recipe: str = "kitti-c") -> dict:

    results: dict = {}
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-publish-")))
        if to is None:

            secret = uuid.uuid4().hex
            server = stack.enter_context(SeaweedServer(tmp / "seaweed", "bench", secret, ("bench",)))
            saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL")}
            os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY=secret, AWS_ENDPOINT_URL=server.endpoint)
            stack.callback(lambda: [os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
                                    for k, v in saved.items()])
            root = f"s3://bench/run-{uuid.uuid4().hex[:8]}"
            print(f"local SeaweedFS at {server.endpoint}")
        else:
            root = to.rstrip("/") + f"/bench-build-bench-{uuid.uuid4().hex[:8]}"

        print(f"demo build of {recipe}: {frames} frames, {workers} workers (Ray start-up included)")
        t = time.perf_counter()
        local = run_build(recipe, out=tmp / "local", workers=workers, max_frames=frames, progress=False)
        t_local = time.perf_counter() - t
        t = time.perf_counter()
        remote = run_build(recipe, out=f"{root}/work", workers=workers, max_frames=frames, progress=False)
        t_s3 = time.perf_counter() - t
        assert local.ok and remote.ok
        mb = local.manifest["counts"]["bytes"] / 1e6
        n_files = len(local.manifest["shards"])
        results.update(build_local_s=t_local, build_s3_s=t_s3, mb=mb, files=n_files)
        print(f"  to a local directory: {t_local:.1f} s; to s3://: {t_s3:.1f} s "
              f"(overhead {t_s3 - t_local:+.1f} s, {(t_s3 / t_local - 1) * 100:+.0f} %) — {n_files} files, {mb:.1f} MB")

        pub = publish_version(local.version_dir, f"{root}/datasets", progress=False)
        assert pub.ok
        results["upload_mb_s"] = pub.mb_per_s
        print(f"publish: {len(pub.transferred)} files, {pub.transferred_bytes / 1e6:.1f} MB in {pub.seconds:.2f} s "
              f"= {pub.mb_per_s:.0f} MB/s (local sha256 check + upload + commit)")

        dataset = local.manifest["dataset"]
        pulled = pull_version(f"{root}/datasets/{dataset}", tmp / "pulled", progress=False)
        assert pulled.ok
        results["download_mb_s"] = pulled.mb_per_s
        print(f"pull: {len(pulled.transferred)} files, {pulled.transferred_bytes / 1e6:.1f} MB in "
              f"{pulled.seconds:.2f} s = {pulled.mb_per_s:.0f} MB/s (download + sha256)")

        t = time.perf_counter()
        report = verify_remote(f"{root}/datasets/{dataset}/{local.manifest['version']}", progress=False)
        dt = time.perf_counter() - t
        assert report.ok
        results["verify_mb_s"] = mb / dt
        print(f"verify (remote): {report.checked} files in {dt:.2f} s = {mb / dt:.0f} MB/s")
    return results


def _proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far, its waited-for children included (Linux ``/proc``;
    0 elsewhere). ``weed mini`` runs every component in one process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _driver_cpu_seconds() -> float:

    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def _tasks_cpu_seconds(res) -> tuple[float, float]:
    """CPU seconds the build's tasks recorded in the ledger: (each worker process's time over the task, upload
    threads included — with the driver's, what a build cost in CPU whatever else the machine runs; of that, the
    threads that ran the uploads to object storage)."""

    ledger = Ledger(open_store(res.version_dir))
    entries = [ledger.done_entry(name) or {} for name in res.shards_built]
    return sum(e.get("cpu_seconds", 0.0) for e in entries), sum(e.get("upload_cpu_seconds", 0.0) for e in entries)


S3_BUILD_MODES = ("local", "s3-overlap", "s3-serial")


def split_cpus(cpus: set[int]) -> tuple[set[int], set[int]]:
    """(the build's CPUs, the server's CPU) for ``--isolate-server``: the server gets the highest one."""
    if len(cpus) < 2:
        raise ValueError(f"--isolate-server needs at least 2 CPUs; this process may use {sorted(cpus)}")
    return set(sorted(cpus)[:-1]), {max(cpus)}


@contextmanager
def thread_affinity(cpus: set[int] | None) -> Iterator[None]:
    """Run the block with this thread's CPU mask set to ``cpus`` (None: unchanged). Linux applies
    ``sched_setaffinity(0, …)`` to the calling thread, and processes it starts (Ray's GCS and raylet, whose
    workers inherit from the raylet; the SeaweedFS server) inherit that mask."""
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def run_bench_s3_build(frames: int = 8, workers: int = 2, repeat: int = 3, recipe: str = "kitti-c",
                       modes: tuple[str, ...] = S3_BUILD_MODES, isolate_server: bool = False) -> dict:
    """Median wall time of a demo build per mode (interleaved ``repeat`` times, after one untimed 1-frame
    warm-up build) and each s3 mode's overhead over ``local``. Every s3 build gets a fresh SeaweedFS on
    127.0.0.1 (started and stopped outside the timed region, its data deleted after), and every local build's
    output is deleted after it is timed, so the runs are alike and the disk holds one build at a time.
    ``isolate_server``: the server on the last CPU, every build on the others (``workers`` at most their
    number), so the server's CPU does not come out of the build's."""


    times: dict[str, list[float]] = {m: [] for m in modes}
    server_cpu: dict[str, list[float]] = {m: [] for m in modes}
    build_cpu: dict[str, list[float]] = {m: [] for m in modes}
    upload_cpu: dict[str, list[float]] = {m: [] for m in modes}
    load_before = os.getloadavg()
    keys = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", OVERLAP_ENV)
    saved = {k: os.environ.get(k) for k in keys}
    build_cpus = server_cpus = None
    if isolate_server:
        build_cpus, server_cpus = split_cpus(os.sched_getaffinity(0))
        workers = min(workers, len(build_cpus))
    print(f"demo build of {recipe}: {frames} frames, {workers} workers (Ray start-up included), {repeat} rounds "
          f"of {', '.join(modes)}; s3 = a fresh SeaweedFS on 127.0.0.1 per build"
          + (f"; server on CPU {sorted(server_cpus)}, builds on CPUs {sorted(build_cpus)}" if isolate_server else ""))
    try:
        with tempfile.TemporaryDirectory(prefix="bench-s3-build-") as tmp_name:
            tmp = Path(tmp_name)
            # untimed: the first build of a process (and the first after a code change: numba recompiles its
            # on-disk cache) pays one-off costs that would land on whichever mode happens to run first
            t = time.perf_counter()
            with thread_affinity(build_cpus):
                assert run_build(recipe, out=tmp / "warmup", workers=workers, max_frames=1, progress=False).ok
            shutil.rmtree(tmp / "warmup", ignore_errors=True)
            print(f"  warm-up build (1 frame, not counted): {time.perf_counter() - t:.1f} s", flush=True)
            for i in range(repeat):
                for mode in modes:
                    os.environ[OVERLAP_ENV] = "0" if mode == "s3-serial" else "1"  # the local Ray's workers inherit it
                    with ExitStack() as stack:
                        server = None
                        if mode == "local":
                            out: str | Path = tmp / "local"
                        else:
                            secret = uuid.uuid4().hex
                            with thread_affinity(server_cpus):
                                server = stack.enter_context(SeaweedServer(tmp / "seaweed", "bench", secret,
                                                                           ("bench",)))
                            os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY=secret,
                                              AWS_ENDPOINT_URL=server.endpoint)
                            out = f"s3://bench/{mode}-{i}"
                        cpu0 = _proc_cpu_seconds(server.proc.pid) if server else 0.0
                        build_cpu0 = _driver_cpu_seconds()
                        t = time.perf_counter()
                        with thread_affinity(build_cpus):
                            res = run_build(recipe, out=out, workers=workers, max_frames=frames, progress=False)
                        dt = time.perf_counter() - t
                        assert res.ok, res.failures
                        times[mode].append(dt)
                        server_cpu[mode].append(_proc_cpu_seconds(server.proc.pid) - cpu0 if server else 0.0)
                        tasks_cpu, uploads_cpu = _tasks_cpu_seconds(res)
                        build_cpu[mode].append(_driver_cpu_seconds() - build_cpu0 + tasks_cpu)
                        upload_cpu[mode].append(uploads_cpu)
                    shutil.rmtree(tmp / "local", ignore_errors=True)
                    shutil.rmtree(tmp / "seaweed", ignore_errors=True)
                    # res.seconds ends when the last task returned: the rest is the ledger check + manifest + card
                    print(f"  round {i + 1} {mode:>10}: {dt:6.1f} s (finishing {dt - res.seconds:4.1f} s; "
                          f"build CPU {build_cpu[mode][-1]:5.1f} s of which uploads {upload_cpu[mode][-1]:4.1f} s, "
                          f"server CPU {server_cpu[mode][-1]:5.1f} s, "
                          f"load {os.getloadavg()[0]:.2f})", flush=True)
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    load_after = os.getloadavg()
    med = {m: statistics.median(v) for m, v in times.items()}
    results: dict = {"median_s": med, "runs_s": times,
                     "server_cpu_s": {m: statistics.median(v) for m, v in server_cpu.items()},
                     "build_cpu_s": {m: statistics.median(v) for m, v in build_cpu.items()},
                     "upload_cpu_s": {m: statistics.median(v) for m, v in upload_cpu.items()},
                     "load_before": load_before, "load_after": load_after, "workers": workers,
                     "isolate_server": isolate_server}
    print(f"medians over {repeat} interleaved rounds (load average 1/5/15 min: before "
          f"{'/'.join(f'{x:.2f}' for x in load_before)}, after {'/'.join(f'{x:.2f}' for x in load_after)}):")
    for m in modes:
        extra = ""
        if m != "local" and "local" in med:
            results[f"overhead_{m}_pct"] = (med[m] / med["local"] - 1) * 100
            extra = f"  overhead vs local {med[m] - med['local']:+.1f} s ({results[f'overhead_{m}_pct']:+.0f} %)"
        print(f"  {m:>10}: {med[m]:6.1f} s  build CPU {results['build_cpu_s'][m]:5.1f} s (uploads "
              f"{results['upload_cpu_s'][m]:4.1f} s)  server CPU {results['server_cpu_s'][m]:5.1f} s{extra}")
    if "local" in med:
        cores = os.cpu_count() or 1
        print("what an s3 build adds, ours vs the server's (CPU seconds per build, medians; the wall-time overhead "
              "above is the headline, nothing subtracted):")
        for m in modes:
            if m == "local":
                continue
            extra_build = results["build_cpu_s"][m] - results["build_cpu_s"]["local"]
            print(f"  {m:>10}: client (bench-build) {extra_build:+5.1f} CPU-s over local, of which upload threads "
                  f"{results['upload_cpu_s'][m]:4.1f}; server {results['server_cpu_s'][m]:5.1f} CPU-s "
                  + (f"(on its own CPU, {sorted(server_cpus)})" if isolate_server else
                     f"(on loopback it runs on the build's {cores} cores)"))
    return results


def main(
    frames: int = typer.Option(8, help="Demo frames to build"),
    workers: int = typer.Option(2, help="Ray workers for the builds"),
    to: str = typer.Option(None, help="An s3:// root to use instead of a throwaway local SeaweedFS"),
) -> None:
    run_bench_publish(frames=frames, workers=workers, to=to)


if __name__ == "__main__":
    typer.run(main)
