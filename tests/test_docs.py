"""Every code block of README.md and the guides (`git ls-files '*.md'`) is executed, exactly as written, so a
snippet cannot rot:

- ``bash``/``sh``/``console``: each command (``\\`` continuations joined, ``#`` comments dropped) must be a
  ``bench-build …`` command and exit 0. They run in one scratch directory, in file order, with the project's
  Python (``bench_build.cli.app`` called with the command's arguments, one process per block, the commands of a
  block in turn, as a user types them), after the README's quickstart block built ``bench-out/kitti-c/1.0.0``
  there — so snippets name the demo build's real path, not placeholders. That build is also checked as the
  README describes it: 2 demo frames, every corruption at severities 0–5, and a summary table.
  ``s3://bench/…`` is a SeaweedFS store on loopback, as `bench-build s3-local` starts one, with its
  credentials in the AWS environment variables the commands see.
- ``python``: every block of a file in one subprocess (one namespace, in order), in that directory.
- ``toml`` parsed with tomllib; ``jsonl`` every line parsed as JSON after its ``#`` comment.
- ``text``: a layout or output listing, not code; an untagged fence is an error (say what it is).

A block that cannot run here (real datasets, a cluster, a GPU, a large download, ``pip install``) carries
``<!-- doc-test: skip (why) -->`` on the line before its fence; skipped blocks are counted and listed in the
output (``pytest -s``), and a skip without a reason fails. An unmarked block that fails is a failure.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench_build.storage.seaweed import SeaweedServer

ROOT = Path(__file__).resolve().parents[1]
SHELL = ("bash", "sh", "console")
KINDS = (*SHELL, "python", "toml", "jsonl", "text")
SKIP = re.compile(r"<!--\s*doc-test:\s*skip\s*(?:\((?P<why>[^)]*)\))?\s*-->")
FENCE = re.compile(r"^```(?P<lang>[^\s`]*)\s*$")
#: runs one block's commands (argv lists, JSON in argv[1]) in turn in one process; stops at the first that fails
BLOCK = """
import json, shlex, sys
from bench_build.cli import app
for argv in json.loads(sys.argv[1]):
    try:
        app(args=argv[1:], prog_name="bench-build")
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else int(e.code is not None)
    if code:
        sys.exit(f"doc-test: `{shlex.join(argv)}` exited {code}")
"""
QUICKSTART = "bench-out/kitti-c/1.0.0"  # what README's first runnable bash block builds
README_MAX_BYTES = 26 * 1024
OUTSIDE = ("PHYSICS.md", "ARCHITECTURE.md", "../shared")


@dataclass(frozen=True)
class Block:
    path: str  # relative to the repository root
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    skip: str | None  # the reason, when marked

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def markdown_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return sorted(out.split())


def blocks_of(path: str) -> list[Block]:
    lines = (ROOT / path).read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m["lang"]
        j = i + 1
        while j < len(lines) and lines[j].rstrip() != "```":
            j += 1
        prev = next((lines[k] for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        mark = SKIP.search(prev)
        out.append(Block(path, start + 1, lang, "\n".join(lines[start + 1:j]) + "\n",
                         None if mark is None else (mark["why"] or "").strip()))
        i = j + 1
    return out


ALL = [b for f in markdown_files() for b in blocks_of(f)]


def shell_commands(code: str) -> list[list[str]]:
    cmds = []
    for cmd in code.replace("\\\n", " ").splitlines():
        argv = shlex.split(cmd, comments=True)
        if argv:
            cmds.append(argv)
    return cmds


def test_every_block_is_tagged_and_every_skip_says_why():
    bad = [f"{b.where}: untagged fence (use ```text for a listing)" for b in ALL if not b.lang]
    bad += [f"{b.where}: unknown language {b.lang!r} (one of {', '.join(KINDS)}, or skip it)"
            for b in ALL if b.lang and b.lang not in KINDS and b.skip is None]
    bad += [f"{b.where}: `doc-test: skip` without a reason in parentheses" for b in ALL if b.skip == ""]
    bad += [f"{b.where}: a {b.lang} block runs only bench-build commands; mark it skipped with a reason: {c[0]}"
            for b in ALL if b.lang in SHELL and b.skip is None for c in shell_commands(b.code)
            if c[0] != "bench-build"]
    assert not bad, "\n".join(bad)


def test_readme_is_a_guide_and_no_doc_points_outside_the_repository():
    size = (ROOT / "README.md").stat().st_size
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes; keep it a guide (≤ {README_MAX_BYTES})"
    bad = [f"{f}: mentions {o}" for f in markdown_files() for o in OUTSIDE if o in (ROOT / f).read_text()]
    assert not bad, "files a clone does not have:\n" + "\n".join(bad)


def test_toml_and_jsonl_blocks_parse():
    done = 0
    for b in ALL:
        if b.skip is not None:
            continue
        if b.lang == "toml":
            tomllib.loads(b.code)  # raises naming the line
            done += 1
        elif b.lang == "jsonl":
            for n, line in enumerate(b.code.splitlines(), 1):
                body = re.sub(r"\s+#.*$", "", line).strip()
                if body:
                    try:
                        json.loads(body)
                    except json.JSONDecodeError as e:
                        pytest.fail(f"{b.where} line {n}: not JSON: {e}")
            done += 1
    assert done, "no toml/jsonl block found: is the extraction broken?"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Iterator[tuple[Path, dict[str, str]]]:
    """The scratch directory every shell and Python block runs in (the demo data cache and HF's cache in it), and
    the environment: a loopback S3 store with bucket ``bench`` behind the AWS variables, as `bench-build s3-local`
    prints them."""
    wd = tmp_path_factory.mktemp("doc-test")
    weed = SeaweedServer(wd / ".s3", "doctest", "doctest-" + uuid.uuid4().hex, ("bench",))
    weed.start(timeout=60)
    aws = wd / ".aws"
    aws.mkdir()
    (aws / "config").write_text("")
    (aws / "credentials").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env |= {"AWS_ACCESS_KEY_ID": weed.access_key, "AWS_SECRET_ACCESS_KEY": weed.secret_key,
            "AWS_ENDPOINT_URL": weed.endpoint, "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": str(aws / "config"), "AWS_SHARED_CREDENTIALS_FILE": str(aws / "credentials")}
    env = {**env, "BENCH_BUILD_CACHE": str(wd / ".cache"), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(wd / ".hf"), "PYTHONPATH": str(ROOT), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "MPLBACKEND": "Agg"}
    try:
        yield wd, env
    finally:
        weed.stop()
        shutil.rmtree(wd, ignore_errors=True)  # the build is ≈ 370 MB: not left in pytest's kept temp dirs


def _run(argv: list[str], wd: Path, env: dict[str, str], where: str, timeout: float = 600) -> str:
    r = subprocess.run(argv, cwd=wd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{where}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


def check_quickstart(wd: Path, output: str) -> None:
    """The README's first block built what the README says: 2 demo frames (`--max-frames 2`), every corruption of
    the recipe at severities 0–5 (0 = the clean copy), and printed its summary table (the build name and
    version); `bench-build run kitti-c` without --max-frames is tests/pipeline/test_build.py's."""
    m = json.loads((wd / QUICKSTART / "manifest.json").read_text())
    assert m["frames"] == 2, m["frames"]
    assert m["counts"]["examples_defined"] == 2 * len(m["recipe"]["corruptions"]) * 6, m["counts"]
    assert "kitti-c 1.0.0" in output, output[-2000:]


def test_shell_and_python_blocks_run(workdir):
    wd, env = workdir
    runnable = [b for b in ALL if b.skip is None and b.lang in (*SHELL, "python")]
    readme_shell = [b for b in runnable if b.path == "README.md" and b.lang in SHELL]
    assert readme_shell, "README.md has no runnable bash block (the quickstart)"
    ran = []
    # shell first (the README's quickstart builds what the Python blocks read), README before the guides
    order = sorted({b.path for b in runnable}, key=lambda p: (p != "README.md", p))
    for path in order:
        for b in [b for b in runnable if b.path == path and b.lang in SHELL]:
            cmds = shell_commands(b.code)
            bad = [shlex.join(a) for a in cmds if a[0] != "bench-build"]
            assert not bad, f"{b.where}: not a bench-build command: {bad[0]}"
            out = _run([sys.executable, "-c", BLOCK, json.dumps(cmds)], wd, env, b.where)
            if b.path == "README.md" and not ran:
                check_quickstart(wd, out)
            ran.append(b.where)
    assert (wd / QUICKSTART / "manifest.json").is_file(), f"README's quickstart did not build {QUICKSTART}"
    for path in order:
        py = [b for b in runnable if b.path == path and b.lang == "python"]
        if not py:
            continue
        # one process per file: blocks share a namespace, in order, each named when it fails
        driver = "import sys, traceback\nns = {'__name__': '__main__'}\n" + "".join(
            f"try:\n    exec(compile({b.code!r}, {b.where!r}, 'exec'), ns)\n"
            f"except BaseException:\n    traceback.print_exc()\n    sys.exit('block {b.where} failed')\n"
            for b in py)
        _run([sys.executable, "-c", driver], wd, env, path)
        ran += [b.where for b in py]
    assert ran


def test_skipped_blocks_are_listed(record_property):
    """Every skipped block says why, and the suite's summary lists them (tests/conftest.py prints a test's
    ``summary`` property at the end of the run, from whichever process ran it)."""
    skipped = [b for b in ALL if b.skip is not None]
    executed = [b for b in ALL if b.skip is None and b.lang != "text"]
    record_property("summary", "\n".join([textwrap.dedent(f"""\
        doc blocks: {len(ALL)} in {len(markdown_files())} files; {len(executed)} executed or parsed,
        {sum(b.lang == 'text' for b in ALL)} text listings, {len(skipped)} skipped:"""),
        *(f"  skip {b.where} ({b.lang}): {b.skip}" for b in skipped)]))
    assert all(b.skip for b in skipped)


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (``-`` and ``_`` kept), spaces to ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_inside_the_docs_resolves():
    """Relative links point at tracked files, ``#anchors`` at a heading of the file they name."""
    bad = []
    for f in markdown_files():
        text = (ROOT / f).read_text()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+://", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (ROOT / f).parent / path if path else ROOT / f
            if not dest.exists():
                bad.append(f"{f}: {target}: no such file")
                continue
            if anchor and dest.is_file():
                heads = {_slug(h) for h in re.findall(r"(?m)^#+ (.+)$", dest.read_text())}
                if anchor not in heads:
                    bad.append(f"{f}: {target}: no such heading")
    assert not bad, "\n".join(bad)


def test_readme_names_the_hf_split_of_every_built_in_benchmark():
    """HF `load_dataset(v, config, split=…)` needs the build's split: "Load the data" names each built-in whose
    split is not the default ``train`` (a val build's ``validation``, modelnet-c's ``test``), with the benchmark."""
    from bench_build.manifests.card import split_name
    from bench_build.manifests.recipe import builtin_recipes, load_recipe

    para = next(p for p in (ROOT / "README.md").read_text().split("\n\n") if p.startswith("HF `load_dataset`"))
    for name in builtin_recipes():
        split = split_name(load_recipe(name).split)
        if split != "train":
            assert f"`{name}`" in para and f'"{split}"' in para, f"README's HF paragraph: {name} reads split {split}"


def test_readme_names_the_hf_split_of_a_demo_build_that_differs(tmp_path, monkeypatch):
    """A demo build (no ``--source``) records its demo source's split, the one HF `load_dataset` then needs: the
    KITTI demo is read whole (``training``) whatever ImageSets list a recipe names, and the nuScenes demo is
    v1.0-mini, whose ``val`` is ``mini_val``. "Load the data" said ``split="validation"`` for every val build, so a
    newcomer's demo robo3d-kitti-c failed to load; it names each built-in whose demo split differs, and no other.
    Object benchmarks' demos read the recipe's split as real data does (`bench_build.sources._open_objects`)."""
    pytest.importorskip("nuscenes")  # the nuScenes reader's extra (installed by .ci/install)
    from bench_build.build.run import DEMO_FRAMES
    from bench_build.manifests.card import split_name
    from bench_build.manifests.recipe import builtin_recipes, load_recipe
    from bench_build.sources import open_source
    from bench_build.sources.registry import READERS

    monkeypatch.setenv("BENCH_BUILD_CACHE", str(tmp_path))  # each demo dataset generated here, as a build does
    differs = {}
    for name in builtin_recipes():
        recipe = load_recipe(name)
        if READERS[recipe.source].objects:
            continue
        demo = split_name(open_source(recipe, None, demo_frames=DEMO_FRAMES).describe().get("split"))
        if demo != split_name(recipe.split):
            differs[name] = demo
    assert differs, "no demo build reads another split: drop the README's note and this test"
    para = " ".join(next(p for p in (ROOT / "README.md").read_text().split("\n\n")
                         if p.startswith("HF `load_dataset`")).split())
    note = re.search(r"demo builds \(no `--source`\) differ: ([^;]*);", para)
    assert note, "README's HF paragraph: no 'demo builds (no `--source`) differ: …;' note"
    assert dict(re.findall(r'`([\w-]+)` → `"(\w+)"`', note[1])) == differs, note[1]
