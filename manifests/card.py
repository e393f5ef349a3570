"""The dataset card (``README.md`` beside ``manifest.json``), rendered from the manifest and recipe.

It opens with a YAML header in the Hugging Face dataset-card format, so ``datasets.load_dataset(<version>,
"fog_3")`` finds one config per partition (``clean`` and ``<corruption>_<severity>``) with the build's split,
and stays readable Markdown below it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict
from typing import Any, NamedTuple

from bench_build.manifests.partial import held_partitions, parts_text
from bench_build.manifests.recipe import Recipe
from bench_build.stages.registry import get_stage

VALIDATION_BEGIN = "<!-- bench-build:validation -->"
VALIDATION_END = "<!-- /bench-build:validation -->"


def validation_section(link: str) -> str:
    """The card's "Naturalness validation" section, pointing at ``link`` (e.g. validation/summary.md)."""
    return "\n".join([
        VALIDATION_BEGIN,
        "## Naturalness validation",
        "",
        f"A PointNet weather classifier trained on real adverse-weather scans was tested on this build's simulated "
        f"corruptions (accuracy on simulated, t-SNE and MMD of its features): see [{link}]({link}).",
        VALIDATION_END,
    ])


def card_with_validation(card: str, link: str) -> str:
    """``card`` with its validation section added (before "How to load") or replaced."""
    section = validation_section(link)
    if VALIDATION_BEGIN in card and VALIDATION_END in card:
        head, rest = card.split(VALIDATION_BEGIN, 1)
        return head + section + rest.split(VALIDATION_END, 1)[1]
    marker = "\n## How to load"
    if marker in card:
        head, rest = card.split(marker, 1)
        return head + "\n" + section + "\n" + marker + rest
    return card.rstrip("\n") + "\n\n" + section + "\n"


class SourceLicence(NamedTuple):
    """A source dataset's licence, which the corrupted data inherits."""

    #: Hugging Face card vocabulary for the YAML header; "other" where no single id fits (SemanticKITTI mixes
    #: 3.0 scans and 4.0 labels, Waymo has its own agreement) and the card's Licence section says which.
    hf_id: str
    #: The sentence the card's Licence section quotes.
    text: str


#: One licence table for every source kind (a kind missing here gets "other" and no Licence sentence).
SOURCE_LICENCES: dict[str, SourceLicence] = {
    "kitti": SourceLicence("cc-by-nc-sa-3.0", "KITTI: CC BY-NC-SA 3.0"),
    "semantickitti": SourceLicence(
        "other", "SemanticKITTI labels and KITTI Odometry scans: CC BY-NC-SA 3.0 / 4.0"),
    "nuscenes": SourceLicence(
        "cc-by-nc-sa-4.0", "nuScenes and nuScenes-lidarseg: CC BY-NC-SA 4.0, nuScenes terms of use"),
    "waymo": SourceLicence(
        "other", "Waymo Open Dataset: Waymo Open Dataset License Agreement for Non-Commercial Use"),
    "wads": SourceLicence(
        "other", "WADS (Winter Adverse Driving dataSet, Michigan Tech; Kurup and Bos): CC BY-NC-SA 4.0"),
}


def licence_id(kind: str | None) -> str:
    """The YAML header's ``license:`` value of a source kind."""
    lic = SOURCE_LICENCES.get(kind or "")
    return lic.hf_id if lic else "other"


def licence_text(kind: str | None) -> str | None:
    """The Licence section's sentence for a source kind, or None when the table has none."""
    lic = SOURCE_LICENCES.get(kind or "")
    return lic.text if lic else None


_SPLITS = {"training": "train", "train": "train", "val": "validation", "validation": "validation",
           "testing": "test", "test": "test"}


def split_name(source_split: str | None) -> str:
    """The Hugging Face split name of a build: its source split (KITTI ``training`` → ``train``, ``val`` →
    ``validation``), any other name made a word (``[A-Za-z0-9_]``); no split → ``train``."""
    if not source_split:
        return "train"
    return _SPLITS.get(source_split, re.sub(r"\W+", "_", source_split).strip("_") or "train")


def size_category(n: int) -> str:
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
                        (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M")):
        if n < limit:
            return name
    return "100M<n<1B"


def files_digest(manifest: dict[str, Any], partition_path: str) -> str:
    """The first 16 hex digits of the sha256 over the paths and sha256s of the manifest's files of one partition
    (its folder ``data/corruption=<c>/severity=<s>``): another build, or a rebuild, gives another digest."""
    prefix = partition_path.rstrip("/") + "/"
    listed = sorted(f"{s['path']} {s['sha256']}\n" for s in manifest.get("shards", [])
                    if str(s.get("path", "")).startswith(prefix))
    return hashlib.sha256("".join(listed).encode()).hexdigest()[:16]


def config_description(manifest: dict[str, Any], key: str, partition: dict[str, Any]) -> str:
    """A Hugging Face config's ``description``: the partition and the digest of its files. ``datasets`` names
    its cache folder after the version folder's name, the config name and a hash of the YAML configs, never
    the files; without this digest two builds of one version (another frame list, ``--overwrite``, another
    encoding, another output root) share that folder and ``load_dataset`` returns the first one's rows."""
    return (f"{manifest['dataset']} {manifest['version']} {key}: files digest "
            f"{files_digest(manifest, str(partition['path']))}")


def yaml_header(manifest: dict[str, Any]) -> str:
    """The card's YAML front matter: licence, pretty name, size category and one config per partition.

    Strings are written as JSON strings (valid YAML double-quoted scalars), so no YAML library is needed."""
    kind = str(manifest["source"].get("kind") or "")
    split = split_name(manifest["source"].get("split"))
    q = json.dumps
    lines = ["---", f"pretty_name: {q(manifest['dataset'] + ' ' + manifest['version'])}",
             f"license: {licence_id(kind)}",
             "size_categories:", f"- {q(size_category(manifest['counts']['examples_stored']))}",
             # objects (no intensity: normalised CAD or scanned shapes, `points_units`) are not LiDAR scans
             "tags:", "- point-cloud", "- lidar" if is_scan(manifest) else "- 3d-shapes", "- robustness",
             "- corruption", "configs:"]
    parts = manifest.get("partitions", {})
    stored = manifest["counts"].get("by_partition", {})
    for key, p in parts.items():
        if key not in stored:  # e.g. a partial pull holds only some partitions
            continue
        lines += [f"- config_name: {q(p['config'])}", "  data_files:",
                  f"  - split: {q(split)}", f"    path: {q(p['path'] + '/*.parquet')}",
                  f"  description: {q(config_description(manifest, key, p))}"]
    lines.append("---")
    return "\n".join(lines)


def card_with_header(card: str, manifest: dict[str, Any]) -> str:
    """``card`` with its YAML header regenerated from ``manifest`` (e.g. a partial pull's: only the configs of
    the partitions it holds); a card without a header gets one. The card's own licence line is kept (a demo
    build's is not its source's), and a partial pull's card says, under its title, what it holds."""
    body, old_header = card, ""
    if card.startswith("---\n"):
        end = card.find("\n---\n", 4)
        if end != -1:
            body, old_header = card[end + len("\n---\n"):], card[:end]
    header = yaml_header(manifest)
    licence = next((line for line in old_header.splitlines() if line.startswith("license: ")), None)
    if licence is not None:
        header = "\n".join(licence if line.startswith("license: ") else line for line in header.splitlines())
    return header + "\n\n" + partial_note(body.lstrip("\n"), manifest)


PARTIAL_NOTE = "> **A partial pull.**"


def partial_note(body: str, manifest: dict[str, Any]) -> str:
    """``body`` with, under its title, a note that this copy holds part of the version (a partial pull's manifest);
    the card's counts and tables stay the whole version's. An earlier note is replaced, so pulls compose."""
    lines = [line for line in body.split("\n") if not line.startswith(PARTIAL_NOTE)]
    partial = manifest.get("partial")
    if partial:
        held = sorted(held_partitions(manifest))
        note = (f"{PARTIAL_NOTE} This folder holds {len(manifest.get('shards', []))} of the version's "
                f"{partial.get('files_in_version', '?')} files ({len(held)} partition{'s' * (len(held) != 1)}: "
                f"{parts_text(held)}); the counts and tables below are the whole "
                "version's. `bench-build pull` without --corruption/--severity fetches the rest.")
        at = next((i + 1 for i, line in enumerate(lines) if line.startswith("# ")), 0)
        lines[at:at] = ["", note] if at else [note, ""]
    return "\n".join(lines)


def numeric_profile_line(profile: dict[str, Any] | None) -> str | None:
    """The card's line on what the shards were computed under (manifest ``numeric_profile``; None: no line)."""
    if not profile:
        return None
    libs = profile.get("libraries") or {}
    cores = sorted(set((profile.get("openblas") or {}).values()))
    simd = profile.get("simd") or []
    numba_cpu = (profile.get("env") or {}).get("NUMBA_CPU_NAME")  # unset: each process compiled for its own CPU
    return (f"- Numeric profile ({profile.get('pin', '?')}): {profile.get('arch')}, NumPy {libs.get('numpy')} "
            f"dispatching up to {simd[-1] if simd else 'its baseline'}, OpenBLAS {'/'.join(cores) or '?'} kernels, "
            f"SciPy {libs.get('scipy')}, numba {libs.get('numba')} compiling for "
            f"{numba_cpu or 'the CPU of each node'}, pyarrow {libs.get('pyarrow')}, "
            f"{profile.get('libc')}; every node that built it matched it")


def lock_line(profile: dict[str, Any] | None) -> str | None:
    """The card's line on the lock the build's packages came from (manifest ``numeric_profile.lock``)."""
    lock = (profile or {}).get("lock")
    if not lock:
        return None
    head = f"- Environment: bench-build's lock `manifests/lock.txt` sha256 `{lock['sha256']}`"
    if lock.get("matches"):
        return (f"{head}; every package that computes or encodes the shards was installed at its locked version, so "
                "installing bench-build with that lock as pip constraints rebuilds these files bit for bit")
    return f"{head}; installed at other versions than locked: {', '.join(lock.get('differs') or [])}"


def render_card(manifest: dict[str, Any], recipe: Recipe, *, validation: str | None = None) -> str:
    """The card; ``validation`` is the relative link of a validation summary to mention, if any."""
    counts = manifest["counts"]
    src = manifest["source"]
    first = recipe.corruptions[0].name if recipe.corruptions else "clean"
    first_config = f"{first}_3" if recipe.corruptions else "clean"
    split = split_name(src.get("split"))
    lines = [
        yaml_header(manifest),
        "",
        f"# {manifest['dataset']} {manifest['version']}",
        "",
        recipe.description or "",
        "",
        f"- Specification: {recipe.paper}" if recipe.paper else "",
        f"- Source: `{src.get('kind')}` ({src.get('split') or src.get('split_note') or 'all frames'}), "
        f"{_frames(manifest['frames'])}, "
        f"point fields {', '.join(manifest['fields'])}"
        + (f", intensity scale `{manifest['intensity_scale']}`" if is_scan(manifest) else ""),
        f"- **Not the benchmark's split:** built from split `{src.get('split')}` (`--split`); the benchmark is "
        f"defined on `{src['benchmark_split']}`, so its numbers are not comparable with the paper's"
        if src.get("benchmark_split") else "",
        f"- Recipe: `{recipe.origin}`, seed {recipe.seed}, fingerprint `{manifest['fingerprint']}`",
        f"- Built by bench-build {manifest['code_version']} on {manifest['created']}",
        numeric_profile_line(manifest.get("numeric_profile")),
        lock_line(manifest.get("numeric_profile")),
        f"- Examples defined by the benchmark: {counts['examples_defined']:,} "
        + (f"({_frames(manifest['frames'])} × {len(recipe.corruptions)} "
           f"corruption{'s' if len(recipe.corruptions) > 1 else ''} × {recipe.severities + 1} severities, "
           "severity 0 = clean)" if recipe.corruptions else
           f"({_frames(manifest['frames'])}, each once as it is: this benchmark has no corruptions)"),
        f"- Examples stored: {counts['examples_stored']:,} (each clean frame once, in "
        "`data/corruption=clean/severity=0/`), "
        f"{counts['bytes'] / 1e6:,.1f} MB in {len(manifest['shards'])} Parquet files",
        "- Encoding: compact — corrupted rows store `point_ref` (index of the byte-identical clean point, or -1) "
        "and only their other points; bench-build's reader, loaders and export materialise them, plain "
        "pandas/DuckDB/HF readers see them as stored" if manifest.get("encoding") == "compact" else "",
        "",
        "## Corruptions",
        "",
        *(["| corruption | stage | severities 1…S | notes |", "| --- | --- | --- | --- |"] if recipe.corruptions else
          ["None: every example is a source frame as it is, after the preprocessing below."]),
    ]
    for c in recipe.corruptions:
        stage = get_stage(c.stage)
        params = "; ".join(_fmt_params(p) for p in c.params)
        lines.append(f"| {c.name} | `{c.stage}` v{c.stage_version}: {stage.summary} | {params} | {c.notes} |")
    lines += differences_section(recipe)
    lines += object_sections(recipe, src)
    lines += source_section(src)
    lines += ["", "## Counts per corruption × severity", "", "| partition | examples | MB |", "| --- | --- | --- |"]
    for key, v in sorted(counts["by_partition"].items()):
        lines.append(f"| {key} | {v['examples']} | {v['bytes'] / 1e6:.1f} |")
    lines += [
        "",
        "## How to load",
        "",
        "Every reader opens the one hive tree `data/corruption=<c>/severity=<s>/` (clean is "
        "`corruption=clean/severity=0`) and gets `points` as N×C rows, no reshape:",
        "",
        "```python",
        "import pandas as pd; df = pd.read_parquet('data', filters=[('corruption', '=', '" + first + "')])",
        "import pyarrow.dataset as pads; t = pads.dataset('data', partitioning='hive').to_table()",
        "import duckdb; duckdb.sql(\"SELECT corruption, severity, count(*) FROM "
        "read_parquet('data/**/*.parquet', hive_partitioning=true) GROUP BY ALL\")",
        "import datasets, os; d = datasets.load_dataset(os.getcwd(), '" + first_config + "', split='" + split
        + "')  # see configs",
        "from bench_build.loaders import PointCloudDataset  # PyTorch, with bench-build installed",
        "```",
        "",
        "## Row schema",
        "",
        "| column | type | meaning |",
        "| --- | --- | --- |",
        "| `key` | string | `benchmark/frame_id/corruption/severity` |",
        "| `frame_id` | string | source frame id |",
        "| `corruption`, `severity` | partition keys (directory names, not in the files) | `clean`/0 = the clean "
        "scan |",
        "| `num_points` | int32 | N |",
        f"| `points` | list<fixed_size_list<float32, {len(manifest['fields'])}>> | N×C, columns "
        f"{', '.join(manifest['fields'])}; {points_units(manifest)} |",
        "| `point_tag` | list<uint8> | 0 clean, 1 attenuated, 2 fog, 3 snow, 4 rain, 5 crosstalk, 6 jitter, "
        "7 synthetic |",
        "| `boxes` | list<struct> | " + ("`cls, x, y, z, dx, dy, dz, heading` (+ KITTI `truncated, occluded, alpha, "
                                         "bbox2d`; `track_id, vx, vy`)" if src.get("kind") in BOX_SOURCES
                                         else "null: this source has no boxes") + " |",
        "| `calib` | struct | " + ("KITTI calibration, row-major matrices" if src.get("kind") in CALIB_SOURCES
                                   else "null: this source has no camera calibration") + " |",
        *[f"| `{c}` | {COLUMN_MEANINGS[c][0]} | {COLUMN_MEANINGS[c][1]} |" if c in COLUMN_MEANINGS
          else f"| `{c}` | optional column declared by the source | |" for c in manifest.get("columns", [])],
        "| `info` | string (JSON) | per-example facts a stage recorded |",
        "",
        ("Boxes follow OpenPCDet's `gt_boxes_lidar`: geometric centre (x, y, z) in the LiDAR frame, "
         "dx/dy/dz = length/width/height in metres, heading = yaw about +z in radians, 0 = facing +x. "
         if src.get("kind") in BOX_SOURCES else "")
        + "The manifest's `partitions` and each file's footer (`bench_build` JSON) hold the stage and parameters of "
        "that partition.",
        "",
        "## Licence",
        "",
        "The corrupted data inherits the licence of the source dataset"
        + (f" ({licence_text(src.get('kind'))})." if licence_text(src.get("kind")) else "."),
        "",
    ]
    card = "\n".join(line for line in lines if line is not None)
    return card_with_validation(card, validation) if validation else card


def object_sections(recipe: Recipe, src: dict[str, Any]) -> list[str]:
    """Object benchmarks: the preprocessing every shape goes through, and 3DOS's known/unknown counts."""
    lines: list[str] = []
    if recipe.preprocess is not None:
        p = recipe.preprocess
        lines += ["", "## Preprocessing (every shape, before the clean copy)", "",
                  f"`{p.stage}` v{p.stage_version}: {_fmt_params(p.params[0])}. {p.notes}"]
        if src.get("kind") == "3dos":
            sn = src.get("shapenet", {})
            lines += ["", f"ShapeNet shapes: mesh → {sn.get('sampling', 'area-weighted surface samples → FPS 4,096')}"
                      " → a seeded 1,024 per example (`object_sample`) → centred, divided by the largest norm."]
    if recipe.source_options:
        lines += ["", "## Example membership (source options)", "",
                  *(f"- `{k}` = {v}: {recipe.source_notes.get(k, '')}".rstrip(": ")
                    for k, v in recipe.source_options.items())]
    counts = src.get("counts")
    if isinstance(counts, dict) and counts:
        lines += ["", "## Scenarios: known / unknown examples per split", "",
                  "| scenario | split | known | unknown |", "| --- | --- | --- | --- |"]
        for scenario, splits in counts.items():
            for split, c in splits.items():
                lines.append(f"| {scenario} | {split} | {c['known']} | {c['unknown']} |")
    return lines


def source_section(src: dict[str, Any]) -> list[str]:
    """The source's sensor and label conventions (label maps of segmentation sets), when the reader gives them."""
    lines: list[str] = []
    sensor = src.get("sensor")
    if sensor:
        lines.append(f"- Sensor: `{sensor['name']}`, {sensor['beams']} beams, max range {sensor['max_range']} m")
    if src.get("semantic"):
        lines.append(f"- `semantic` column: {src['semantic']}; 0 = unlabelled, also given to points a stage adds")
    for key, title in (("learning_map", "learning map (raw label → train id; `score` maps ground truth through it, "
                                        "0 = ignored)"),
                       ("train_classes", "train classes (id order)"),
                       ("categories", "lidarseg categories (index → name)"), ("classes", "classes (id order)"),
                       ("label_names", "classes (raw id → name)")):
        if src.get(key):
            value = src[key]
            if isinstance(value, dict):
                items = sorted(value.items(), key=lambda kv: (len(str(kv[0])), str(kv[0])))  # numeric keys in order
                text = ", ".join(f"{k}→{v}" for k, v in items)
            else:
                text = ", ".join(map(str, value))
            lines.append(f"- {title}: {text}")
        if key == "learning_map" and src.get("learning_map_source"):
            lines.append(f"- learning map source: {src['learning_map_source']}")
    return ["", "## Source", "", *lines] if lines else []


#: Source kinds whose examples carry boxes / a KITTI camera calibration (the others leave the columns null).
BOX_SOURCES = frozenset({"kitti", "nuscenes", "waymo"})
CALIB_SOURCES = frozenset({"kitti"})

#: The card's row-schema line of every optional column a source or stage may declare: (type, meaning).
COLUMN_MEANINGS: dict[str, tuple[str, str]] = {
    "semantic": ("list<uint32>", "per point: the source's raw semantic label id (not remapped; the card's label "
                                 "map names them)"),
    "mask": ("list<uint8>", "per point: ScanObjectNN's object (1) / background (0) mask"),
    "instance": ("list<uint32>", "per point: instance id (0: none)"),
    "sigma": ("list<float32>", "per point: ModelNet40-E's noise σ along the sensor ray"),
    "mu": ("list<float32>", "per point: ModelNet40-E's noise mean μ along the sensor ray"),
    "class_name": ("string", "per example: object class"),
    "class_id": ("int32", "per example: class index of the benchmark's label set (−1: an unknown class)"),
    "split": ("string", "per example: the source's split (train, val, test)"),
    "track": ("string", "per example: 3DOS track"),
    "scenario": ("string", "per example: 3DOS scenario"),
    "known": ("bool", "per example: a known (in-distribution) class of the scenario"),
    "unknown_set": ("string", "per example: the 3DOS set an unknown example comes from"),
    "synset": ("string", "per example: ShapeNetCore synset id"),
    "model_id": ("string", "per example: ShapeNetCore model id"),
    "domain": ("string", "per example: `synthetic` or `real` (3DOS synthetic-to-real)"),
    "sequence": ("string", "per example: the drive / scene / segment the frame belongs to"),
    "timestamp_us": ("int64", "per example: sensor timestamp (µs)"),
}


def is_scan(manifest: dict[str, Any]) -> bool:
    """A build of LiDAR scans (points with intensity), not of an object benchmark's normalised shapes."""
    return "intensity" in (manifest.get("fields") or [])


def points_units(manifest: dict[str, Any]) -> str:
    """What a point's coordinates are: metres in the sensor frame (scans), or shape units (object benchmarks'
    normalised shapes, which have no intensity)."""
    if not is_scan(manifest):
        return "shape coordinates (normalised by the preprocessing above), no intensity"
    scale = manifest["intensity_scale"]
    what = {"unit": " (0…1)", "byte": " (0…255)"}.get(scale, "")
    return f"metres in the LiDAR frame; intensity scale `{scale}`{what}"


def differences_section(recipe: Recipe) -> list[str]:
    """The card's "Differences from the paper" table: for every variant of the recipe (e.g. kitti-c's
    ``text`` = the paper's appendix), every corruption it changes, with both values and both notes. The
    data is the recipe's [variants] tables, so the card can never disagree with what was built."""
    if not recipe.variants:
        return []
    built = recipe.variant or "default"
    shipped = recipe.origin.startswith("built-in")  # a paper's recipe: its default follows the released generator
    lines = ["", "## Differences from the paper" if shipped else "## Variants of this recipe", ""]
    for v in recipe.variants.values():
        lines += [
            f"This build is the **{built}** {'variant' if recipe.variant else 'recipe'}. "
            f"Variant `{v.name}` ({v.description}; build it with `bench-build run "
            f"{v.base if shipped else '<recipe.toml>'}:{v.name}`, "
            f"benchmark `{v.benchmark}`) differs from the default in {_changed(v.changes)}:",
            "",
            f"| {'corruption' if _only_corruptions(v.changes) else 'what'} | "
            f"{'default (released generator)' if shipped else 'default'} | `{v.name}` |",
            "| --- | --- | --- |",
        ]
        for corruption, changes in v.changes.items():
            default = "; ".join(f"{k} = {_fmt_value(a)}" for k, (a, _) in changes.items())
            variant = "; ".join(f"{k} = {_fmt_value(b)}" for k, (_, b) in changes.items())
            n_default, n_variant = v.notes.get(corruption, ("", ""))
            lines.append(f"| {corruption} | {_cell(default, n_default)} | {_cell(variant, n_variant)} |")
        lines.append("")
    return lines


def _cell(values: str, note: str) -> str:
    """A table cell of the variants table: the values, then the note when there is one."""
    return f"{values}. {note}" if note else f"{values}."


def _frames(n: int) -> str:
    return f"{n:,} frame{'s' if n != 1 else ''}"


def _only_corruptions(changes: dict[str, Any]) -> bool:
    """Does a variant change corruptions only (its table's first column then names them), not the preprocessing
    or a source option?"""
    return not any(c == "preprocess" or c.startswith("source_options.") for c in changes)


def _changed(changes: dict[str, Any]) -> str:
    """What a variant changes, in words: "3 corruptions", "the preprocessing", "the source options"."""
    opts = [c.split(".", 1)[1] for c in changes if c.startswith("source_options.")]
    n = sum(1 for c in changes if c != "preprocess" and not c.startswith("source_options."))
    parts = [f"{n} corruption{'s' if n != 1 else ''}"] if n else []
    parts += ["the preprocessing"] if "preprocess" in changes else []
    parts += [f"source option{'s' if len(opts) > 1 else ''} {', '.join(f'`{o}`' for o in opts)}"] if opts else []
    return " and ".join(parts) or "nothing"


def _fmt_value(v: Any) -> str:
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_fmt_value(x) for x in v) + "]" if v else "[] (default set)"
    return str(v)


def _fmt_params(p: Any) -> str:
    return ", ".join(f"{k}={v}" for k, v in asdict(p).items())


RENDERS_BEGIN = "<!-- bench-build:renders -->"
RENDERS_END = "<!-- /bench-build:renders -->"


def renders_section(sheet: dict[str, Any]) -> str:
    """The card's "See the corruptions" section: the contact sheet ``sheet`` (path, frame_id, panels, ...)."""
    colour = "provenance tag" if sheet.get("color_by", "tag") == "tag" else "height"
    return "\n".join([
        RENDERS_BEGIN,
        "## See the corruptions",
        "",
        (f"Frame `{sheet['frame_id']}` under every corruption × severity ({sheet['panels']} panels, clean first; "
         f"same extent in every panel; points coloured by {colour}). " if sheet["panels"] > 1 else
         f"Frame `{sheet['frame_id']}` as stored (one panel: the build has no corruption; points coloured by "
         f"{colour}). ")
        + _panels_text(sheet)
        + "`bench-build render` draws any other frame or partition.",
        "",
        f"![contact sheet: every corruption × severity of frame {sheet['frame_id']}]({sheet['path']})",
        RENDERS_END,
    ])


def _panels_text(sheet: dict[str, Any]) -> str:
    """What the sheet's panels show besides the points: views of a shape, or a scene's scale and zoom
    (``sheet["zoom"]``: "box", "instance:<class>" / "cluster:<class>" for an object found by labels, or None: no
    zoom; a sheet recorded before it was told means "box")."""
    if sheet.get("objects"):
        return "Each panel shows the shape from three sides (top, front, side), its axes named in the panel. "
    zoom = sheet.get("zoom", "box")
    if zoom is None:
        return "Scene panels have a metre scale (no inset: no object in this frame has the points to zoom on). "
    how, _, cls = zoom.partition(":")
    what = {"box": "one object",
            "instance": f"the `{cls}` with the most points, found by its semantic and instance labels since the scans "
                        "have no boxes",
            "cluster": f"the largest cluster of `{cls}` points, found by their semantic labels since the scans have "
                       "no boxes"}.get(how, f"`{zoom}`")
    dashed = "the clean box" if zoom == "box" else "its clean bounding box"
    return (f"Scene panels have a metre scale and, right of each, an inset zoomed on {what} (grey unchanged, "
            f"black moved or added, pink removed; dashed: {dashed}), so object-level corruptions show at every "
            "severity. ")


def card_with_renders(card: str, sheet: dict[str, Any]) -> str:
    """``card`` with its contact-sheet section added (before "Counts", else "How to load") or replaced."""
    section = renders_section(sheet)
    if RENDERS_BEGIN in card and RENDERS_END in card:
        head, rest = card.split(RENDERS_BEGIN, 1)
        return head + section + rest.split(RENDERS_END, 1)[1]
    for marker in ("\n## Counts", "\n## How to load"):
        if marker in card:
            head, rest = card.split(marker, 1)
            return head + "\n" + section + "\n" + marker + rest
    return card.rstrip("\n") + "\n\n" + section + "\n"
