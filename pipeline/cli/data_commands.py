"""Using a version: verify, export, score, render, validate, diff."""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from bench_build.cli.app import (
    PANEL_USE,
    EndpointOpt,
    ProfileOpt,
    app,
    console,
    counted,
    fail,
    local_version,
    out_console,
)
from bench_build.errors import as_path, refuse_empty_path


@app.command(rich_help_panel=PANEL_USE)
def verify(
    version_dir: Annotated[str, typer.Argument(help="OUT/<benchmark>/<version>, or its s3:// URL (checked in place)",
                                               callback=refuse_empty_path)],
    *,
    endpoint_url: EndpointOpt = None,
    profile: ProfileOpt = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar (remote)")] = True,
) -> None:
    """Re-check every shard of a built or published version against its manifest (rows, bytes, sha256)."""
    from bench_build.manifests.manifest import ManifestError, verify_version
    from bench_build.storage import StorageError, is_remote, open_store

    try:
        if is_remote(version_dir):
            from bench_build.publish import verify_remote

            report = verify_remote(version_dir, endpoint_url=endpoint_url, profile=profile, progress=progress)
        else:
            report = verify_version(open_store(version_dir).root)  # type: ignore[attr-defined]
    except (ManifestError, StorageError) as e:
        raise fail(e) from None
    from rich.markup import escape

    for p in report.problems:
        out_console.print(f"[red]BAD[/red] {escape(p)}", highlight=False)
    for w in report.warnings:
        out_console.print(f"[yellow]WARN[/yellow] {escape(w)}", highlight=False)
    if not report.ok:
        checked = counted(report.checked, "listed file")
        out_console.print(f"{counted(len(report.problems), 'problem')}; {checked} checked")
        raise typer.Exit(code=1)
    part = f" (a partial pull: {report.checked} of the version's {report.of_files})" if report.of_files else ""
    out_console.print(f"OK: {counted(report.checked, 'file')} verified{part}, no unlisted data file"
                      + (f"; {counted(report.renders, 'render')} verified" if report.renders else "")
                      + (f" ({counted(len(report.warnings), 'warning')})" if report.warnings else ""))


@app.command(rich_help_panel=PANEL_USE)
def export(
    version: Annotated[str, typer.Argument(help="OUT/<benchmark>/<version> (a local folder)",
                                           callback=refuse_empty_path)],
    out: Annotated[str, typer.Argument(help="Directory for the KITTI data root(s)", callback=refuse_empty_path)],
    *,
    corruption: Annotated[str | None, typer.Option(help="Corruption name, or clean")] = None,
    severity: Annotated[int | None, typer.Option(min=0, help="Severity (0 = clean)")] = None,
    all_partitions: Annotated[bool, typer.Option("--all", help="Every partition: OUT/<benchmark>/clean/ as a data "
                                                               "root, the others per --layout")] = False,
    layout: Annotated[str | None, typer.Option(help="Only with --all: robo3d (default: velodyne, and label_2 "
                                                    "where boxes moved, per corrupted partition, reusing the clean "
                                                    "infos) or kitti (a full data root per partition)")] = None,
    source: Annotated[str | None, typer.Option(help="KITTI object root to link training/image_2 (and planes) "
                                                     "from; OpenPCDet and mmdetection3d read the images",
                                                     callback=refuse_empty_path)] = None,
    split: Annotated[str | None, typer.Option(help="ImageSets list the frames go in: train or val (default: the "
                                                   "build's split if one of these, else val; test is read from "
                                                   "testing/, unlabelled); they leave the other lists, and "
                                                   "trainval.txt is train ∪ val")] = None,
    force: Annotated[bool, typer.Option(help="Export into a non-empty OUT: replace the files and links the export "
                                             "writes, keep everything else (a root that holds KITTI files needs "
                                             "an export's BENCH_BUILD_EXPORT file)")] = False,
) -> None:
    """Write a built version as KITTI data roots that OpenPCDet and mmdetection3d convert.

    velodyne, label_2, calib and ImageSets are written; image_2/planes are linked from --source. Supports builds
    of KITTI scans only: kitti-c, robo3d-kitti-c or a recipe with source = "kitti"; other benchmarks are refused.
    Every check runs before the first file is written: exit 2 means nothing was written. OUT must be new or empty
    (or --force) and never is, or lies inside, --source."""
    version_dir = local_version(version, "export")
    from bench_build.export import ExportError, ExportIncomplete, export_version
    from bench_build.manifests.manifest import ManifestError

    try:
        r = export_version(version_dir, out, corruption=corruption, severity=severity, all_partitions=all_partitions,
                           source=source, split=split, layout=layout, force=force)
    except (ExportError, ManifestError) as e:  # the pre-flight: nothing was written
        raise fail(e) from None
    except ExportIncomplete as e:  # writing had begun: the message says how far
        raise fail(e, code=1) from None
    except OSError as e:  # export_version turns its own OS errors into the two above; anything else is not refused
        from bench_build.build.shard import os_error_message

        raise fail(os_error_message(e), code=1) from None
    if r.replaced:
        console.print(f"--force: replaced {r.replaced} existing files in {out}; nothing else in it was touched",
                      highlight=False)
    for p in r.partitions:
        out_console.print(f"{p['corruption']}/{p['severity']}: {counted(p['frames'], 'frame')} → {p['path']}"
                          + ("" if p["labels"] else " (velodyne only: boxes as clean)"))
    for note in r.notes:
        console.print(f"[yellow]note:[/yellow] {note}", highlight=False)
    out_console.print(f"wrote {counted(r.frames, 'frame')} in {counted(len(r.partitions), 'partition')} to {out}")


@app.command(rich_help_panel=PANEL_USE)
def score(
    version: Annotated[str, typer.Argument(help="A built version: OUT/<benchmark>/<version> (a local folder)",
                                           callback=refuse_empty_path)],
    predictions: Annotated[Path, typer.Argument(
        help="Predictions: .jsonl or .parquet keyed by example key; for detection a directory of KITTI "
             "result files <corruption>/<severity>/<frame>.txt (nuScenes-C: of results JSON "
             "<corruption>/<severity>/results_nusc.json; WOD-C: rows with boxes per key)",
             parser=as_path, callback=refuse_empty_path)],
    *,
    out: Annotated[Path | None, typer.Option(help="Write OUT.csv and OUT.json (default: print only)",
                                             parser=as_path, callback=refuse_empty_path)] = None,
    metric: Annotated[str | None, typer.Option(help="kitti-c, robo3d-det, robo3d-seg, modelnet-c, modelnet40-e, "
                                                    "3dos, nuscenes-det or wod-det (default: from the dataset "
                                                    "name and, on nuScenes-C/WOD-C, the predictions)")] = None,
    num_classes: Annotated[int | None, typer.Option(min=1, help="Classes of a classification benchmark "
                                                         "(default: the source's: ModelNet40 40, ScanObjectNN 15; "
                                                         "else 40)")] = None,
    source_root: Annotated[Path | None, typer.Option(help="nuScenes-C detection: the nuScenes dataroot the build "
                                                          "was made from (poses, velocities, attributes; default: "
                                                          "the manifest's source root)",
                                                          parser=as_path, callback=refuse_empty_path)] = None,
    workers: Annotated[int | None, typer.Option(min=1, help="Processes scoring KITTI detection partitions "
                                                            "(default: every CPU for versions of ≥ 5,000 frames, "
                                                            "else 1)")] = None,
) -> None:
    """Score predictions with the benchmark paper's metrics (mCE, mRR, CE_AP, AP, bug rates, ECE, AUROC, ...)."""
    version_dir = local_version(version, "score")
    from bench_build.manifests.manifest import ManifestError
    from bench_build.score import PredictionError, score_version
    from bench_build.score.report import print_report
    from bench_build.score.validate import ScoreError
    from bench_build.storage import StorageError, refuse_unwritable

    try:
        if out is not None:  # where OUT.csv goes, checked before the scoring, not after it
            refuse_unwritable(out.parent, "the folder of --out")
            if out.is_dir():
                raise StorageError(f"--out {out} is a folder; --out is a file prefix: it writes OUT.csv and OUT.json "
                                   f"(e.g. --out {out / 'scores'})")
            if out.parent.exists() and not os.access(out.parent, os.W_OK):
                raise StorageError(f"--out {out}: cannot create files in {out.parent} (permission denied)")
        report = score_version(version_dir, predictions, metric=metric, num_classes=num_classes,
                               source_root=source_root, workers=workers)
    except (PredictionError, ScoreError, ManifestError, StorageError) as e:
        raise fail(e) from None
    print_report(report, out_console)
    if out is not None:
        csv_path, json_path = report.write(out)
        out_console.print(f"wrote {csv_path} and {json_path}")


@app.command(rich_help_panel=PANEL_USE)
def render(
    version: Annotated[str, typer.Argument(help="A built version: OUT/<benchmark>/<version> (a local folder)",
                                           callback=refuse_empty_path)],
    *,
    out: Annotated[Path | None, typer.Option(help="Directory for the PNGs (default: ./renders-<benchmark>-<version> "
                                                  "in the current directory; never VERSION/renders, which "
                                                  "publish uploads)",
                                                  parser=as_path, callback=refuse_empty_path)] = None,
    frame: Annotated[str | None, typer.Option(help="Frame id (default: the first frame of the first shard)")]
    = None,
    corruption: Annotated[str | None, typer.Option(help="Only this corruption (or clean): one PNG per severity "
                                                        "instead of the contact sheet")] = None,
    severity: Annotated[int | None, typer.Option(min=0, help="Only this severity (0 = clean)")] = None,
    color_by: Annotated[str, typer.Option(help="Point colours: tag (provenance), height, or semantic (each point's "
                                                "class, in a segmentation build)")] = "tag",
) -> None:
    """PNGs of a frame: bird's-eye views with boxes, a metre scale and a zoom on one object marking what
    differs from clean (scenes), or three labelled views (objects), with a legend; by default the contact
    sheet of every corruption × severity."""
    version_dir = local_version(version, "render")
    from rich.markup import escape

    from bench_build.manifests.manifest import ManifestError
    from bench_build.render import RenderError, RenderWriteError, render_version
    from bench_build.storage import StorageError, refuse_unwritable

    try:
        if out is not None:
            if Path(out).resolve().is_relative_to(Path(version_dir).resolve()):
                raise RenderError(f"--out {out} is inside the version {version_dir}, whose folders hold the files "
                                  "its manifest lists (publish and verify read them): give a folder outside it")
            refuse_unwritable(out, "--out")  # after: its probe file never goes into the version
        paths = render_version(version_dir, out, frame_id=frame, corruption=corruption, severity=severity,
                               color_by=color_by,
                               on_note=lambda n: console.print(f"[yellow]note:[/yellow] {escape(n)}", highlight=False))
    except RenderWriteError as e:  # the pictures written before it stay: said, and exit 1 (something was written)
        for p in e.written:
            out_console.print(f"wrote {p}")
        raise fail(e, code=1 if e.written else 2) from None
    except (RenderError, ManifestError, StorageError) as e:
        raise fail(e) from None
    for p in paths:
        out_console.print(f"wrote {p}")
    if out is None and paths:
        out_console.print(f"(no --out given: wrote into {paths[0].parent.resolve()}; --out DIR writes elsewhere)")


class RealFormat(StrEnum):  # a typer choice, so a misspelt format is refused naming its option; the same as
    auto = "auto"          # bench_build.validate.config.REAL_FORMATS (tested)
    stf = "stf"
    boreas = "boreas"
    kitti = "kitti"
    wads = "wads"


class Duplicates(StrEnum):  # a typer choice, as bench_build.validate.config.DUPLICATE_CHOICES
    keep = "keep"
    drop = "drop"


@app.command(rich_help_panel=PANEL_USE)
def validate(
    version: Annotated[str, typer.Argument(help="A built version, OUT/<benchmark>/<version> (a local folder)",
                                           callback=refuse_empty_path)],
    *,
    corruption: Annotated[list[str], typer.Option(help="Corruption to validate (repeatable), e.g. snow, fog")],
    real: Annotated[list[str], typer.Option(
        help="Real adverse-weather scans: CORRUPTION=DIR (e.g. snow=/data/boreas, fog=/data/stf/fog), or DIR",
        callback=refuse_empty_path)],
    real_clean: Annotated[list[str], typer.Option(
        help="Real clear-weather scans of the same sensor: DIR, or CORRUPTION=DIR", callback=refuse_empty_path)],
    real_format: Annotated[RealFormat, typer.Option(help="Format of the real scans; auto: from the path name, "
                                                         "else the record size")]
    = RealFormat.auto,
    real_clean_format: Annotated[RealFormat | None, typer.Option(help="Format of the --real-clean scans (default: "
                                                                      "--real-format; auto after wads)")] = None,
    real_duplicates: Annotated[Duplicates, typer.Option(help="WADS's exact duplicate rows: keep them (as "
                                                             "recorded) or drop them")]
    = Duplicates.keep,
    severity: Annotated[list[int] | None, typer.Option(min=0, help="Simulated severities tested, 1…S (repeatable; "
                                                                   "default all)")]
    = None,
    sample: Annotated[int | None, typer.Option(min=1, help="Build frames tested (default: all)")] = None,
    max_real: Annotated[int | None, typer.Option(min=1, help="Real scans per class (default: all)")] = None,
    epochs: Annotated[int, typer.Option(min=1, help="Training epochs (paper: 80)")] = 80,
    batch_size: Annotated[int, typer.Option(min=2, help="Batch size (paper: 32)")] = 32,
    patience: Annotated[int | None, typer.Option(min=1, help="Early stopping: epochs without a better val accuracy")]
    = None,
    points: Annotated[int, typer.Option(min=1, help="Points sampled per scan")] = 16384,
    width: Annotated[float, typer.Option(min=0.01, max=16,
                                         help="PointNet width multiplier (1 = 64-64-64-128-1024)")] = 1.0,
    seed: Annotated[int, typer.Option(min=0, help="Seed of sampling, split, training, t-SNE and permutations")] = 0,
    permutations: Annotated[int, typer.Option(min=1, help="MMD permutation-test permutations")] = 500,
    max_embed: Annotated[int, typer.Option(min=1, help="Samples per group (real/simulated/clean) for t-SNE and "
                                                       "MMD")] = 500,
    workers: Annotated[int | None, typer.Option(min=1, help="CPUs of the local Ray instance (default: all)")] = None,
    address: Annotated[str | None, typer.Option(help="Join an existing Ray cluster")] = None,
) -> None:
    """Naturalness of simulated weather: PointNet real-vs-clean classifier, t-SNE and MMD (report in validation/)."""
    version_dir = local_version(version, "validate")
    from bench_build.runtime.ray import unreachable
    from bench_build.validate.config import ValidateConfig, ValidationError, parse_real_options
    from bench_build.validate.run import validate_version

    try:
        dirs = parse_real_options(corruption, real, real_clean)
        configs = [ValidateConfig(corruption=c, real_weather=w, real_clean=cl, real_format=str(real_format),
                                  real_clean_format=None if real_clean_format is None else str(real_clean_format),
                                  real_duplicates=str(real_duplicates),
                                  severities=tuple(severity) if severity else None, sample=sample, max_real=max_real,
                                  epochs=epochs, batch_size=batch_size, patience=patience, points=points, width=width,
                                  seed=seed, permutations=permutations, max_embed=max_embed,
                                  threads=workers)
                   for c, (w, cl) in dirs.items()]
        if address and (why := unreachable(address)):  # Ray would retry it for ever
            raise ValidationError(why)
        reports = validate_version(version_dir, configs, workers=workers, address=address)
    except ValidationError as e:  # the reports of the corruptions validated before it are written: exit 1
        done = getattr(e, "done", [])
        for r in done:
            _validation_line(r, version_dir)
        raise fail(e, code=1 if done else 2) from None
    for r in reports:
        _validation_line(r, version_dir)


def _validation_line(r: dict, version_dir: object) -> None:
    """One corruption's verdict and numbers, and where its report is (`validate`)."""
    acc = r["accuracy"]
    out_console.print(f"{r['corruption']}: [bold]{r['verdict']['verdict']}[/bold] — accuracy on simulated "
                      f"{acc['test']['simulated']:.1%} (val {acc['val']:.1%}, clean {acc['test']['clean']:.1%}); "
                      f"MMD² real–sim {r['mmd']['raw']['pairs']['real|simulated']['mmd2']:.4g}, sim–clean "
                      f"{r['mmd']['raw']['pairs']['simulated|clean']['mmd2']:.4g}; "
                      f"{version_dir}/validation/{r['corruption']}/summary.md")
    if "corruptions" in (r.get("realism") or {}):  # per-point snow realism against WADS
        from bench_build.validate.realism_report import console_line

        out_console.print(console_line(r["realism"]))


# --- diff: kept to one delimited block ---
@app.command(rich_help_panel=PANEL_USE)
def diff(
    version_a: Annotated[str, typer.Argument(help="The earlier version: its directory or URL",
                                             callback=refuse_empty_path)],
    version_b: Annotated[str, typer.Argument(help="The later version: its directory or URL",
                                             callback=refuse_empty_path)],
    endpoint_url: EndpointOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """Which partitions of two versions changed, which are identical or were reused, and which parameters differ."""
    from rich.markup import escape
    from rich.table import Table

    from bench_build.build.reuse import diff_notes, diff_versions, read_version_manifest
    from bench_build.manifests.manifest import ManifestError
    from bench_build.publish.common import version_key
    from bench_build.storage import LocalStore, StorageError, open_store

    try:
        a = read_version_manifest(version_a, endpoint_url=endpoint_url, profile=profile)
        b = read_version_manifest(version_b, endpoint_url=endpoint_url, profile=profile)
    except (ManifestError, StorageError) as e:
        raise fail(e) from None

    def place(where: str) -> str:  # the directory (links resolved) or URL a version argument names
        store = open_store(where, endpoint_url=endpoint_url, profile=profile)
        return os.path.realpath(store.root) if isinstance(store, LocalStore) else store.spec.url.rstrip("/")

    same_place = place(version_a) == place(version_b)
    va, vb = str(a.get("version")), str(b.get("version"))
    notes = diff_notes(a, b, same_place=same_place, a_later=version_key(va) > version_key(vb))
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
    for note in notes:  # after the table, where the eye lands: what to keep in mind reading it
        out_console.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False)
