"""Step 1 of `bench-build validate` (no Ray, no torch): the version's manifest (LiDAR scans with intensity), the
corruption and severities, the files it tests and the report folder, and the real-data directories (present,
non-empty, of a known format, WADS with its labels), every problem reported as a `ValidationError` naming it
before any training starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench_build.format.reader import Version, open_version
from bench_build.manifests.manifest import CLEAN, ManifestError
from bench_build.sources import OBJECT_KINDS
from bench_build.sources.base import SourceError
from bench_build.sources.records import list_scans
from bench_build.storage import in_the_way
from bench_build.validate.config import ValidateConfig, ValidationError
from bench_build.validate.extract import FORMATS, SIZE_FORMATS
from bench_build.validate.realism import snow_like_corruptions

FORMAT_HINTS = {"boreas": "boreas", "stf": "stf", "seeingthroughfog": "stf", "dense": "stf",
                "hdl64": "stf"}


def detect_format(root: Path, files: list[Path], requested: str, option: str = "--real-format") -> str:
    """The real-data format: as requested, else from the path name, else from the record size; ``option`` is the
    flag that sets it (``--real-format`` for the weather data, ``--real-clean-format`` for the clean data)."""
    if requested != "auto":
        return requested
    parts = [p.lower() for p in root.resolve().parts]
    # WADS has KITTI's record size: it needs its name in the path *and* its labelled layout (velodyne/ beside
    # labels/), so a clear KITTI folder that merely sits under a "wads" folder is not taken for it
    if any("wads" in p for p in parts) and any(
            f.parent.name == "velodyne" and (f.parent.parent / "labels").is_dir() for f in files[:50]):
        return "wads"
    for part in parts:
        for hint, fmt in FORMAT_HINTS.items():
            if hint in part:
                return fmt
    sizes = [f.stat().st_size for f in files[:50]]
    fits = [fmt for fmt in SIZE_FORMATS if all(s % (4 * FORMATS[fmt]["width"]) == 0 for s in sizes)]
    if len(fits) == 1:
        return fits[0]
    choices = "stf|boreas|kitti|wads" if option == "--real-format" else "stf|boreas|kitti"
    raise ValidationError(f"{root}: cannot tell the scan format from the path or the file sizes "
                          f"(consistent with: {', '.join(fits) or 'none'}); pass {option} {choices}")


def _check_wads_labels(root: Path, files: list[Path]) -> None:
    """Refuse a WADS directory whose scans lack their labels/ files (the realism report needs them)."""
    for f in files:
        label = f.parent.parent / "labels" / f"{f.stem}.label"
        if f.parent.name != "velodyne" or not label.is_file():
            raise ValidationError(f"{label}: label file missing for WADS scan {f} (WADS layout: "
                                  "sequences/NN/velodyne/F.bin with sequences/NN/labels/F.label)")


def _check_scans(root: Path, version: Version) -> None:
    """Refuse a version whose examples are not LiDAR scans with intensity: the classifier reads x, y, z, intensity
    of scans cropped to 1–70 m, which an object benchmark's unit-sphere shapes (x, y, z only) never give."""
    kind = (version.manifest.get("source") or {}).get("kind")
    if kind in OBJECT_KINDS:
        raise ValidationError(f"{root}: a {version.manifest['dataset']} version holds object shapes ({kind}), not "
                              "LiDAR scans; validation compares a scene benchmark's weather (kitti-c, robo3d-…) "
                              "with real adverse-weather scans")
    if "intensity" not in version.fields:
        raise ValidationError(f"{root}: its scans have no intensity (fields {', '.join(version.fields)}); the "
                              "classifier reads x, y, z, intensity")


def _check_files(version: Version, entries: list[dict[str, Any]]) -> None:
    """Open every file validation will read, checked against the manifest (present, its size, rows, columns and
    footer), so a missing or damaged file is refused now and not as a traceback after training."""
    for entry in entries:
        try:
            version.open_file(entry["path"]).close()
        except ManifestError as e:  # IntegrityError, MissingFile: the message names the file and the remedy
            raise ValidationError(str(e)) from None


def preflight(version_dir: str | Path, cfg: ValidateConfig) -> dict[str, Any]:
    """Check everything that can be checked without training; raise ValidationError naming the problem."""

    root = Path(version_dir)
    try:  # opened absolute: its partition files travel to Ray workers (see the real data below)
        version = open_version(root.absolute())
    except ManifestError as e:
        raise ValidationError(f"{root}: not a built version ({e})") from None
    _check_scans(root, version)
    if cfg.corruption not in version.corruptions:
        raise ValidationError(f"{root}: no corruption {cfg.corruption!r}; it has {', '.join(version.corruptions)}")
    n_sev = int(version.manifest["recipe"]["severities"])
    severities = tuple(range(1, n_sev + 1)) if cfg.severities is None else tuple(cfg.severities)
    bad = [s for s in severities if not 1 <= s <= n_sev]
    if bad or not severities:
        raise ValidationError(f"{root}: severities {list(bad or severities)} out of range 1..{n_sev}")
    severities = tuple(sorted(set(severities)))  # `--severity 1 --severity 1` tests each partition once
    out_dir = root / "validation" / cfg.corruption  # said now, not after training when the report is written
    if (p := in_the_way(out_dir)) is not None:
        raise ValidationError(f"{out_dir}: {p} is {'a broken link' if p.is_symlink() else 'a file'}, not a "
                              "directory; validate writes its report there: move it away")
    if cfg.max_real is not None and cfg.max_real < 2:  # said now, not after Ray started and the scans were read
        raise ValidationError(f"--max-real {cfg.max_real}: the classifier's train/validation split and the MMD test "
                              "need at least 2 real scans of each kind (tens for a verdict worth reading)")
    real: dict[str, dict[str, Any]] = {}
    for role, given in (("weather", cfg.real_weather), ("clean", cfg.real_clean)):
        # absolute: the folders and files travel to Ray workers, whose working directory on a cluster the
        # command joined (--address) is not this one
        d = Path(given).absolute()
        try:
            files = list_scans(d)
        except SourceError as e:
            raise ValidationError(f"real {role} data for {cfg.corruption}: {e}") from None
        if len(files) < 2:  # said now, not after Ray started and the scans were read
            raise ValidationError(f"real {role} data {d}: {len(files)} scan(s); the classifier's train/validation "
                                  "split and the MMD test need at least 2 (tens for a verdict worth reading)")
        fmt = detect_format(d, files, cfg.real_format if role == "weather" else cfg.clean_format,
                            "--real-format" if role == "weather" else "--real-clean-format")
        if fmt == "wads" and role == "weather" and cfg.corruption not in snow_like_corruptions(version.manifest):
            raise ValidationError(f"real {cfg.corruption} data {d}: WADS was recorded in snowfall, it is real snow, "
                                  f"not real {cfg.corruption}; compare {cfg.corruption} with real {cfg.corruption} "
                                  "scans, or WADS with a snow corruption")
        if fmt == "wads" and role == "clean":
            raise ValidationError(f"real clean data {d}: WADS was recorded in snowfall, it has no clear scans; "
                                  "pass clear scans (KITTI, SemanticKITTI, STF clear) and --real-clean-format")
        if fmt == "wads":
            _check_wads_labels(d, files)
        real[role] = {"dir": d, "files": files, "format": fmt}
    if real["weather"]["dir"].resolve() == real["clean"]["dir"].resolve():
        raise ValidationError(f"real weather and real clean data are the same directory: {cfg.real_weather}")
    clean_files = version.files(CLEAN, 0)
    sim_files = [p for s in severities for p in version.files(cfg.corruption, s)]
    if not clean_files or not sim_files:
        raise ValidationError(f"{root}: manifest lists no files for clean or {cfg.corruption} {list(severities)}")
    _check_files(version, [*version.shards(CLEAN, 0),
                           *(e for s in severities for e in version.shards(cfg.corruption, s))])
    frames = int(version.manifest.get("frames") or 0)
    if frames < 2 or (cfg.sample is not None and cfg.sample < 2):
        # MMD and the t-SNE groups need two scans a side; said now, not after training
        raise ValidationError(f"{root}: {min(frames, cfg.sample or frames)} build frame(s) to test; validation "
                              "compares groups of scans and needs at least 2 (build more frames or raise --sample)")
    return {"version": version, "root": root, "severities": severities, "real": real,
            "clean_files": clean_files, "sim_files": sim_files}
