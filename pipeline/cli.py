"""The `bench-build` command line. Thin: each command parses its options and calls one function."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Build corrupted point-cloud robustness benchmarks, reproducibly, with Ray.")
console = Console(stderr=True, soft_wrap=True)
out_console = Console(soft_wrap=True)


@app.command()
def run(
    benchmark: Annotated[str, typer.Argument(help="Built-in benchmark name (see `list`) or a recipe .toml file")],
    *,
    source: Annotated[str | None, typer.Option(help="Source dataset root; omitted: generated demo data")] = None,
    out: Annotated[Path, typer.Option(help="Output root; the build goes to OUT/<benchmark>/<version>")] = Path(
        "bench-out"),
    workers: Annotated[int | None, typer.Option(help="CPUs of the local Ray instance (default: all)")] = None,
    address: Annotated[str | None, typer.Option(help="Join an existing Ray cluster (e.g. auto, ray://host:10001)")]
    = None,
    max_frames: Annotated[int | None, typer.Option(help="Only the first N frames (smoke runs)")] = None,
    split: Annotated[str | None, typer.Option(help="training, testing, or an ImageSets list (train, val)")] = None,
    frames_per_shard: Annotated[int | None, typer.Option(help="Frames per shard (default: the recipe's)")] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace a build of a different recipe/frame list")] = False,
    recheck: Annotated[str, typer.Option(help="How resume checks finished shards: sha256 or size")] = "sha256",
    progress: Annotated[bool, typer.Option(help="Show a progress bar")] = True,
) -> None:
    """Build (or resume) a benchmark: shards as Parquet, then manifest.json and a dataset card."""
    from manifests.recipe import RecipeError
    from pipeline.build import run_build
    from pipeline.ledger import LedgerMismatch
    from pipeline.sources import SourceError

    try:
        result = run_build(benchmark, source=source, out=out, workers=workers, address=address,
                           max_frames=max_frames, split=split, frames_per_shard=frames_per_shard,
                           overwrite=overwrite, recheck=recheck, progress=progress)
    except (RecipeError, SourceError, LedgerMismatch, ValueError, FileNotFoundError) as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(code=2) from None
    if result.manifest:
        _summary_table(result.manifest)
    console.print(f"{result.shards_total} shards: {result.shards_skipped} already done, "
                  f"{len(result.shards_built)} built, {len(result.failures)} failed in {result.seconds:.1f} s")
    if result.failures:
        for shard, err in sorted(result.failures.items()):
            console.print(f"[red]FAILED[/red] {shard}: {err.splitlines()[0]}")
        console.print("fix the input and run the same command again: finished shards are kept")
        raise typer.Exit(code=1)
    console.print(f"[green]done:[/green] {result.version_dir}")


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
    out: Annotated[Path, typer.Option(help="Output root given to `run`")] = Path("bench-out"),
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
) -> None:
    """Shards done / failed / pending, examples written, ETA."""
    from pipeline.build import build_status

    try:
        st = build_status(benchmark, out)
    except (FileNotFoundError, ValueError) as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(code=2) from None
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
def verify(version_dir: Annotated[Path, typer.Argument(help="OUT/<benchmark>/<version>")]) -> None:
    """Re-check every shard of a built version against its manifest (rows, bytes, sha256)."""
    from manifests.manifest import ManifestError, verify_version

    try:
        report = verify_version(version_dir)
    except ManifestError as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(code=2) from None
    for p in report.problems:
        out_console.print(f"[red]BAD[/red] {p}")
    if not report.ok:
        out_console.print(f"{len(report.problems)} of {report.checked} files failed verification")
        raise typer.Exit(code=1)
    out_console.print(f"OK: {report.checked} files verified")


@app.command()
def export(
    version_dir: Annotated[Path, typer.Argument(help="OUT/<benchmark>/<version>")],
    out: Annotated[Path, typer.Argument(help="Directory for the KITTI-layout copy")],
    *,
    corruption: Annotated[str, typer.Option(help="Corruption name, or clean")],
    severity: Annotated[int, typer.Option(help="Severity (0 = clean)")],
) -> None:
    """Write one corruption × severity of a built version as KITTI files (velodyne, label_2, calib)."""
    from pipeline.reader import export_kitti

    try:
        n = export_kitti(version_dir, out, corruption=corruption, severity=severity)
    except (KeyError, ValueError) as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(code=2) from None
    out_console.print(f"wrote {n} frames to {out}/training")


@app.command("list")
def list_benchmarks() -> None:
    """Built-in benchmarks: corruptions × severities and example counts."""
    from manifests.recipe import builtin_recipes, load_recipe

    for name in sorted(builtin_recipes()):
        r = load_recipe(name)
        names = f" ({', '.join(r.severity_names)})" if r.severity_names else ""
        out_console.print(f"[bold]{name}[/bold] {r.version}: source {r.source}, {len(r.corruptions)} corruptions × "
                          f"severities 0–{r.severities}{names}; per frame {r.examples_defined(1)} examples defined, "
                          f"{r.examples_stored(1)} stored (clean once)")
        out_console.print("  " + ", ".join(c.name for c in r.corruptions))


@app.command("demo-data")
def demo_data(
    out: Annotated[Path, typer.Argument(help="Directory to write the KITTI-layout demo dataset to")],
    *,
    frames: Annotated[int, typer.Option(help="Number of frames")] = 8,
    seed: Annotated[int, typer.Option(help="Generator seed")] = 1729,
) -> None:
    """Write the deterministic demo dataset (ray-cast HDL-64E-like scans) in KITTI layout."""
    from pipeline.sources.demo import write_demo_dataset

    write_demo_dataset(out, frames, seed=seed)
    out_console.print(f"wrote {frames} frames to {out}")


@app.command()
def bench(
    *,
    frames: Annotated[int, typer.Option(help="Demo frames to measure on")] = 4,
    builds: Annotated[bool, typer.Option(help="Also time whole demo builds at 1 and 2 workers")] = True,
) -> None:
    """Print per-stage cost per example, the Parquet I/O floor, and whole-build examples/s."""
    from pipeline.bench import run_bench

    run_bench(frames=frames, builds=builds)


if __name__ == "__main__":
    app()
