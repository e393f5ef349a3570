"""Object-storage benchmark (a script, not a test): `python -m pipeline.bench_publish`.

On a demo version it measures, against a local SeaweedFS (started on 127.0.0.1 for the run, unless
``--to s3://…`` names another store reached through the AWS chain):

1. a whole build to a local directory and the same build straight to ``s3://`` (the overhead of
   staging each Parquet file locally and uploading it, of ledger objects, and of re-reading a footer);
2. ``publish`` throughput (upload MB/s, every file new);
3. ``pull`` throughput (download + sha256 of every file, MB/s);
4. remote ``verify`` throughput (streamed sha256 + footer row counts, MB/s).
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

import typer


def run_bench_publish(frames: int = 8, workers: int = 2, to: str | None = None, recipe: str = "kitti-c") -> dict:
    from pipeline.build import run_build
    from pipeline.publish import publish_version, pull_version, verify_remote

    results: dict = {}
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-publish-")))
        if to is None:
            from pipeline.seaweed import SeaweedServer

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


def main(
    frames: int = typer.Option(8, help="Demo frames to build"),
    workers: int = typer.Option(2, help="Ray workers for the builds"),
    to: str = typer.Option(None, help="An s3:// root to use instead of a throwaway local SeaweedFS"),
) -> None:
    run_bench_publish(frames=frames, workers=workers, to=to)


if __name__ == "__main__":
    typer.run(main)
