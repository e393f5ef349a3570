"""Building: run (and its summary) and status."""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
from typing import Annotated

import typer
from rich.table import Table

from bench_build.cli.app import (
    PANEL_BUILD,
    Encoding,
    EndpointOpt,
    ProfileOpt,
    Recheck,
    app,
    console,
    counted,
    fail,
    out_console,
)
from bench_build.errors import refuse_empty_path


def validate_after_build(*args, **kwargs):
    """`bench_build.validate.validate_after_build`, imported when a recipe with ``[validate]`` has been built:
    validation loads PyTorch (≈ 1.3 s), which every other `run` would pay before its first task."""
    from bench_build.validate.hook import validate_after_build as validate

    return validate(*args, **kwargs)


@app.command(rich_help_panel=PANEL_BUILD)
def run(
    benchmark: Annotated[str, typer.Argument(help="Built-in benchmark name (see `list`) or a recipe .toml file")],
    *,
    source: Annotated[str | None, typer.Option(help="Source dataset root; omitted: generated demo data",
                                               callback=refuse_empty_path)] = None,
    out: Annotated[str, typer.Option(
        help="Output root (path, file:// or s3://bucket/prefix); the build goes to OUT/<benchmark>/<version>",
        callback=refuse_empty_path)
    ] = "bench-out",
    workers: Annotated[int | None, typer.Option(min=1, help="CPUs of the local Ray instance (default: all)")] = None,
    address: Annotated[str | None, typer.Option(help="Join an existing Ray cluster (e.g. auto, ray://host:10001)")]
    = None,
    max_frames: Annotated[int | None, typer.Option(min=1, help="Only the first N frames (smoke runs)")] = None,
    split: Annotated[str | None, typer.Option(
        help="Build another split of the source than the benchmark's (default: the recipe's). What a reader "
             "takes is its registry entry's `splits` (bench_build.sources.registry); e.g. KITTI: training or an "
             "ImageSets list (val), nuScenes: a devkit split or VERSION:SPLIT")] = None,
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
    source_shapenet: Annotated[str | None, typer.Option(help="3dos: ShapeNetCore.v2 root (default: --source)",
                                                        callback=refuse_empty_path)]
    = None,
    source_modelnet40: Annotated[str | None, typer.Option(
        help="3dos: modelnet40_ply_hdf5_2048 root (default: --source)", callback=refuse_empty_path)] = None,
    source_scanobjectnn: Annotated[str | None, typer.Option(help="3dos: ScanObjectNN root (default: --source)",
                                                            callback=refuse_empty_path)]
    = None,
    version: Annotated[str | None, typer.Option(
        help="nuScenes table version (v1.0-trainval, v1.0-mini; default: trainval if present); same as "
             "--split VERSION:SPLIT")] = None,
    allow_empty_frames: Annotated[bool, typer.Option(
        help="Accept 0-byte scans as frames with no points (default: an error naming the file)")] = False,
    encoding: Annotated[Encoding, typer.Option(
        help="full, or compact: corrupted examples as references into the clean scan + changed rows (smaller; "
             "bench-build's reader, loaders and export materialise them)")] = Encoding.full,
    reuse: Annotated[str | None, typer.Option(
        help="An earlier version of this benchmark (its directory or URL): partitions whose fingerprint is "
             "unchanged are taken from it (hard link / server-side copy, sha256-checked), only the rest is built",
             callback=refuse_empty_path)
    ] = None,
) -> None:
    """Build (or resume) a benchmark: shards as Parquet, then manifest.json and a dataset card."""
    from bench_build.build.run import run_build
    from bench_build.manifests.recipe import RecipeError, load_recipe

    if version is not None:  # the nuScenes reader takes VERSION:SPLIT; without --split, the recipe's split
        try:
            recipe = load_recipe(benchmark)
            kind, recipe_split = recipe.source, recipe.split
        except RecipeError:
            kind, recipe_split = None, None  # said by run_build below, as without --version
        if kind is not None and kind != "nuscenes":
            raise fail(f"--version {version}: only nuScenes sources have table versions; {benchmark} reads {kind} "
                       "(leave out --version)")
        # "VERSION:" alone read as the reader's default (val) whatever the recipe's split, and was said to be
        # another split than the benchmark's
        split = f"{version}:{split if split is not None else recipe_split or ''}"
    from bench_build.build.shard import os_error_message
    from bench_build.errors import BenchBuildError, wrote_before
    from bench_build.runtime.ray import MAX_LOCAL_CPUS

    cpus = os.cpu_count() or 1
    if address is None and workers is not None and cpus < workers <= MAX_LOCAL_CPUS:  # more: refused, said once
        console.print(f"[yellow]note:[/yellow] --workers {workers} on this machine's {cpus} CPUs: the worker processes "
                      f"share them, so the build is no faster than with --workers {cpus} and holds more memory (the "
                      "bytes are the same); --address joins a cluster", highlight=False)
    # SIGTERM (a scheduler's stop, `kill`) takes the same path as Ctrl-C: Ray and upload threads are stopped by
    # run_build's own cleanup, and the user is told what was kept and how to resume
    previous_term = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        result = run_build(benchmark, source=source, out=out, workers=workers, address=address,
                           max_frames=max_frames, split=split, frames_per_shard=frames_per_shard, groups=groups,
                           overwrite=overwrite, recheck=recheck.value, progress=progress, endpoint_url=endpoint_url,
                           profile=profile,
                           roots={"shapenet": source_shapenet, "modelnet40": source_modelnet40,
                                  "scanobjectnn": source_scanobjectnn},
                           allow_empty_frames=allow_empty_frames, encoding=encoding.value, reuse=reuse,
                           after=validate_after_build)
    except BenchBuildError as e:  # exit 1 once the build began writing, never 2 ("nothing was written"); a bug
        # (any other exception) keeps its traceback
        raise fail(e, code=1 if wrote_before(e) else e.exit_code) from None
    except OSError as e:  # e.g. the disk filled up while the run wrote its ledger header
        raise fail(os_error_message(e), code=1) from None
    except KeyboardInterrupt:
        _interrupted(benchmark, out or "bench-out", endpoint_url, profile)
        raise typer.Exit(code=130) from None
    finally:
        signal.signal(signal.SIGTERM, previous_term)
    from rich.markup import escape

    if result.manifest:
        _summary_table(result.manifest)
    console.print(_counts_line(result))
    if result.reused is not None:
        console.print(_reuse_line(result), highlight=False)
    if result.failures:
        for shard, err in sorted(result.failures.items()):
            console.print(f"[red]FAILED[/red] {shard}: {escape(err.splitlines()[0] if err else '?')}",
                          highlight=False)
        for hint in failure_hints(result.failure_kinds, str(result.version_dir).rstrip("/")):
            console.print(hint, highlight=False, soft_wrap=True)
        raise typer.Exit(code=1)
    if result.kept:  # a re-run of a finished version: not a new build, so none of its bytes changed
        console.print("nothing to build: the version was complete, and its manifest, card and renders are kept as "
                      "they were", highlight=False)
    where = str(result.version_dir).rstrip("/")
    if result.strays:  # not this build's: never deleted here, but said (glob readers would read their rows)
        n = len(result.strays)
        console.print(f"[yellow]warning:[/yellow] {n} Parquet file{'s' * (n > 1)} in {where} "
                      f"{'are' if n > 1 else 'is'} not this build's: {escape(result.strays[0].split(':')[0])}"
                      f"{' …' if n > 1 else ''} "
                      "(pandas, DuckDB and pyarrow.dataset would read their rows, and `verify` fails): remove "
                      f"{'them' if n > 1 else 'it'}", highlight=False, soft_wrap=True)
    console.print(f"[green]done:[/green] {result.version_dir}")
    sheet = [r["path"] for r in (result.manifest or {}).get("renders", [])][:1]  # none if it failed to draw
    for what, value in (("dataset card", f"{where}/README.md"), *(("contact sheet", f"{where}/{p}") for p in sheet),
                        ("check it", f"bench-build verify {where}")):
        console.print(f"  {what + ':':<15}{value}", highlight=False, soft_wrap=True)


def failure_hints(failure_kinds: dict[str, str], version_dir: str) -> list[str]:
    """What to do about a run's failed shards ({shard: kind}, `build.task`'s kinds), one line per kind among them."""
    from bench_build.build.ledger import entry_key

    kinds = {k if k in ("input", "permission", "blocked", "environment", "internal") else "resource"
             for k in failure_kinds.values()}
    internal = sorted(s for s, k in failure_kinds.items() if k == "internal")
    trace = entry_key(internal[0] if len(internal) == 1 else "<shard>", failed=True)
    again = "then run the same command again: finished shards are kept"
    hints = {"input": "fix the input named above and run the same command again: finished shards are kept",
             "permission": "the input is not at fault: this user may not write the output file named above: check "
                           "the owner and mode of it and its folder (ls -l), whether it is immutable (lsattr; chattr "
                           "-i lifts it) and whether its file system is mounted read-only (on s3://: whether the "
                           f"credentials and the bucket's policy allow writing there), {again}",
             "blocked": "the input is not at fault: something stands in the way of the output named above (a file "
                        f"where a folder is needed, or a folder where a file goes): move or remove it, {again}",
             "resource": f"the input is not at fault: free disk space / memory or check the Ray cluster, {again}",
             "environment": "the input is not at fault: install bench-build with its dependencies in the Python the "
                            f"workers run (on every node of a cluster), {again}",
             "internal": "the input is not at fault: an unexpected error in bench-build itself (a bug). The worker's "
                         f"traceback is in {version_dir}/{trace} (\"traceback\"): please "
                         "report it with that file. Finished shards are kept"}
    return [hints[k] for k in hints if k in (kinds or {"input"})]


def raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _interrupted(benchmark: str, out: str, endpoint_url: str | None, profile: str | None) -> None:
    """What an interrupted run kept, and the command that resumes it (the same command: recorded shards are
    verified and skipped)."""

    from bench_build.build.status import build_status

    try:
        st = build_status(benchmark, out, endpoint_url=endpoint_url, profile=profile)
        kept = f"{st['done']} of {st['shards']} shards recorded in {st['version_dir']}"
    except Exception:  # nothing recorded yet, or the ledger is unreachable: say so, never crash
        kept = "no shard recorded yet"
    command = shlex.join(["bench-build", *sys.argv[1:]])
    console.print(f"interrupted: {kept}; every process this run started was stopped. Resume with the same "
                  f"command (recorded shards are checked and kept):\n  {command}", highlight=False)


def task_unit(tasks: int, groups: int) -> str:
    """What a count of ledger tasks is, in words: shards (one task per shard) or tasks of split shards."""
    return f"shard{'s' * (tasks != 1)}" if groups == 1 else \
        f"tasks ({counted(tasks // groups, 'shard')} × {groups} task groups)"


def _counts_line(result) -> str:
    """What the run did, in shards (one task per shard) or in tasks (several task groups per shard). The counts add
    up to the total: already done (the ledger's, before this run), reused (`--reuse`: every file of the task taken
    from the earlier version, nothing computed), built (computed by this run, some files possibly reused), failed."""
    total = result.shards_total
    unit = task_unit(total, result.groups)
    failed = len([k for k in result.failures if k != "manifest.json"])
    reused = f"{result.reused['tasks_skipped']} reused, " if result.reused is not None else ""
    return (f"{total} {unit}: {result.shards_skipped} already done, {reused}{len(result.shards_built)} built, "
            f"{failed} failed in {result.seconds:.1f} s")


def _partition_list(names: list[str], shown: int = 5) -> str:
    """The first few partitions, then "…"."""
    return ", ".join(names[:shown]) + (", …" if len(names) > shown else "")


def _reuse_line(result) -> str:
    """`run --reuse`: what the version took from the earlier one and what it computed. With a manifest (the build
    finished) the counts are the version's, as its manifest and card record them (files put in place by an
    earlier, interrupted run of it included); without one, this run's."""
    r = result.reused
    if result.manifest is None:
        return (f"reused {counted(r['files'], 'file')} ({r['bytes'] / 1e6:.1f} MB) from {r['from']} "
                f"so far; {counted(r['tasks_skipped'], 'task')} needed no computing")
    shards = result.manifest["shards"]
    taken = [s for s in shards if s.get("reused_from")]
    computed = [s for s in shards if not s.get("reused_from")]
    parts = list(dict.fromkeys(f"{s['corruption']}/{s['severity']}" for s in computed))
    by_run = "" if r["files"] == len(taken) else f" ({r['files']} put in place by this run, the rest by an earlier one)"
    what = (f"computed {counted(len(computed), 'file')}: {_partition_list(parts)}" if computed
            else "computed nothing (every partition's fingerprint is unchanged)")
    return (f"reused {counted(len(taken), 'file')} ({sum(s['bytes'] for s in taken) / 1e6:.1f} MB) "
            f"from {r['from']}{by_run}; {what}")


def _summary_table(manifest: dict) -> None:
    """One row per corruption (its severities' examples, MB and task seconds summed) and a total: a screen, not
    one row per partition (KITTI-C has 126; the card's counts matrix lists them all)."""
    table = Table(title=f"{manifest['dataset']} {manifest['version']}")
    for col in ("corruption", "severities", "examples", "MB", "seconds"):
        table.add_column(col, justify="right" if col != "corruption" else "left")
    rows: dict[str, list] = {}
    for key, v in manifest["counts"]["by_partition"].items():
        corruption, severity = key.split("/")
        row = rows.setdefault(corruption, [[], 0, 0, 0.0])
        row[0].append(int(severity))
        row[1] += v["examples"]
        row[2] += v["bytes"]
        row[3] += v["seconds"]
    order = ["clean", *[c["name"] for c in manifest.get("recipe", {}).get("corruptions", [])]]  # the card's order
    for corruption, (sevs, examples, nbytes, seconds) in sorted(
            rows.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order), kv[0])):
        sevs.sort()
        span = f"{sevs[0]}–{sevs[-1]}" if sevs == list(range(sevs[0], sevs[-1] + 1)) and len(sevs) > 1 else \
            ", ".join(map(str, sevs))
        table.add_row(corruption, span, f"{examples:,}", f"{nbytes / 1e6:,.1f}", f"{seconds:.1f}")
    total = [sum(r[i] for r in rows.values()) for i in (1, 2, 3)]
    table.add_section()
    n, parts = len(rows) - ("clean" in rows), sum(len(r[0]) for r in rows.values())
    label = "clean only" if n == 0 else counted(n, "corruption") + (" + clean" if "clean" in rows else "")
    table.add_row(label, counted(parts, "partition"), f"{total[0]:,}", f"{total[1] / 1e6:,.1f}",
                  f"{total[2]:.1f}")
    console.print(table)


@app.command(rich_help_panel=PANEL_BUILD)
def status(
    benchmark: Annotated[str, typer.Argument(help="Benchmark name or recipe file")],
    *,
    out: Annotated[str, typer.Option(help="Output root given to `run` (path or URL)",
                                     callback=refuse_empty_path)] = "bench-out",
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
    recheck: Annotated[Recheck, typer.Option(help=(
        "How finished tasks' files are checked: size (one listing, no read) or sha256 (re-hash every file, as "
        "`run` does)"))] = Recheck.size,
    endpoint_url: EndpointOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """Shards done / failed / pending, examples written, ETA."""
    from bench_build.build.ledger import LedgerMismatch, entry_key
    from bench_build.build.status import build_status
    from bench_build.errors import UsageError
    from bench_build.manifests.recipe import RecipeError
    from bench_build.storage import StorageError

    try:
        st = build_status(benchmark, out, endpoint_url=endpoint_url, profile=profile, recheck=recheck.value)
    except (RecipeError, UsageError, LedgerMismatch, StorageError) as e:
        raise fail(e) from None
    if as_json:
        out_console.print_json(json.dumps(st))
        return
    if not st["matches_recipe"]:  # what `run` with this recipe would say: it refuses the folder (exit 2)
        out_console.print(f"{st['version_dir']}: holds a build of another fingerprint ({st['fingerprint'][:12]}; "
                          f"{benchmark}'s is {st['recipe_fingerprint'][:12]}: recipe, stage versions or Parquet "
                          "writer options differ): `run` refuses to resume it — raise the recipe's version, or pass "
                          "--overwrite to replace it; the counts below are that build's", highlight=False)
    eta = "n/a" if st["eta_cpu_seconds"] is None else f"{st['eta_cpu_seconds']:.0f} CPU-s"
    unit = task_unit(st["shards"], st["task_groups"])
    out_console.print(f"{st['version_dir']}: {st['done']}/{st['shards']} {unit} done, {len(st['failed'])} failed, "
                      f"{st['pending']} pending; {st['examples_written']}/{st['examples_total']} examples; "
                      f"remaining ≈ {eta}; manifest: {'yes' if st['complete'] else 'no'}")
    for shard, err in sorted(st["failed"].items()):
        bug = st["failed_kinds"].get(shard) == "internal"  # where its traceback is, for the report
        out_console.print(f"  failed {shard}: {err.splitlines()[0]}" + (
            f" (a bug in bench-build; the worker's traceback is in {st['version_dir']}/"
            f"{entry_key(shard, failed=True)})" if bug else ""), highlight=False, soft_wrap=True)
    for shard, why in sorted(st["rebuild"].items()):  # counted pending: `run` checks the files and builds it again
        out_console.print(f"  to rebuild {shard}: recorded done, but {why}; `run` builds it again", highlight=False,
                          soft_wrap=True)
