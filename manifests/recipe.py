"""Benchmark recipes: TOML files that say what a benchmark is, validated on load.

A recipe names its source kind, version, seed and number of severities, and for each corruption the
stage that implements it and one parameter set per severity (severity 0 is always the clean frame
and is not listed). A parameter given as a scalar applies to every severity; a list must have one
value per severity. For a tuple-valued parameter (e.g. a set of choices) a list of lists is per
severity, a flat list is shared. Example::

    [benchmark]
    name = "kitti-c"
    version = "1.0.0"
    seed = 20230115
    source = "kitti"
    severities = 5

    [corruptions.gaussian_rad]
    stage = "gaussian_rad"
    sigma = [0.04, 0.06, 0.08, 0.10, 0.12]   # m, Li et al. Appendix C-A

The fingerprint hashes the canonical JSON of the recipe (stage names, stage versions, every
parameter of every severity) plus the list of source frames.

A corruption may say ``origin = "lidar"``: its stage then measures ranges and angles from the LiDAR's
position (`Sensor.origin`) rather than from the origin of the points' frame (`bench_build.stages.origin`;
Waymo's points are in the vehicle frame). The default, ``"points"``, is left out of the canonical JSON, so
recipes without the key keep their fingerprint.

An optional ``[validate]`` table asks `run` to validate the naturalness of some corruptions at the
end of the build (``bench-build validate``; keys in `VALIDATE_KEYS`). It describes a check of the
output, not the output, so it is not part of the canonical JSON and never changes the fingerprint::

    [validate]
    corruptions = ["fog"]
    real = { fog = "/data/stf/fog" }      # real adverse-weather scans per corruption
    real_clean = "/data/stf/clear"        # or a table per corruption
    sample = 500                          # build frames tested (default: all)
    epochs = 80

Preprocessing. An optional ``[preprocess]`` table names one stage (scalar parameters) applied to every
source frame before the clean copy is stored — ModelNet-C keeps the first 1,024 points of each shape,
3DOS draws a seeded 1,024 and scales into the unit sphere. It draws from the clean example's RNG and is
part of the fingerprint. A recipe with ``severities = 0`` and no corruptions stores only that clean copy
(3DOS). A variant may override ``[preprocess]`` keys with a ``[variants.<name>.preprocess]`` table.

Source options. An optional ``[source_options]`` table chooses how a source lists its examples where the
benchmark's published code and an alternative differ (3DOS: ``cellphone``, ``r2r_val``; the keys and their
allowed values per source kind are `SOURCE_OPTIONS`). It changes which frames exist, so it is part of the
canonical JSON (only when present: recipes without it keep their fingerprint). A variant overrides its keys
with ``[variants.<name>.source_options]``; the card lists both values like any other variant change.

Names and sizes. Every name that becomes a path or a partition key follows the one safe-name rule of
`bench_build.manifests.names` (1–128 characters of ``A–Z a–z 0–9 _ - . +``, starting with a letter or digit, no
``..``; so no ``/``, ``\\``, ``=``, whitespace or control characters): the benchmark's name and version (the
build goes to ``OUT/<name>/<version>``), every corruption name (``data/corruption=<name>/``), every stage
name and every severity name. A recipe is also bounded so a typo cannot ask for a build the size of a
disk: ``severities`` ≤ `MAX_SEVERITIES` (20; the built-ins have at most 5), and in a corruption's or
``[preprocess]``'s parameters every list (at any depth) has ≤ `MAX_PARAM_ITEMS` (256; built-ins ≤ 12)
entries and every string ≤ `MAX_PARAM_CHARS` (256; built-ins ≤ 22) characters (``notes`` is free text
and not bounded). The ``seed`` is an integer in 0 … 2**63 − 1 (`MAX_SEED`): TOML 1.0's integer range, which other
TOML readers enforce (Python's does not); NumPy's ``SeedSequence``, which takes it with each example's key hash, takes
any non-negative integer, so TOML is the bound. A stage's own seed (``seed`` or ``*_seed``: snow's ``pool_seed``)
has the same bound, checked per severity. Free text (``description``, ``paper``, a table's ``notes``) must be
a TOML string: a number or table there is refused rather than printed through ``str()``. Each violation is a
`RecipeError` naming the recipe and the field, raised at load.

Variants. A recipe may define named variants that override some parameters of some corruptions,
without repeating the table. ``load_recipe("kitti-c:text")`` loads the variant ``text``; its
benchmark name becomes ``<name>-<variant>`` (unless the variant sets ``name``), so it builds into
its own directory with its own fingerprint. The overrides are also what the dataset card lists as
the differences between the default build and the variant::

    [variants.text]
    description = "Li et al.'s Appendix C text, where it differs from their released generator"
    [variants.text.corruptions.gaussian_rad]
    rule = "text"                         # replaces only this key of corruptions.gaussian_rad
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
import tomllib
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from bench_build.errors import BenchBuildError, UsageError
from bench_build.manifests.manifest import is_version_dir, versions_in
from bench_build.manifests.names import check_safe_name
from bench_build.manifests.threedos import SOURCE_OPTIONS
from bench_build.stages.geometry import RULES
from bench_build.stages.origin import ORIGINS, in_lidar_frame
from bench_build.stages.registry import Stage, get_stage

VARIANT_KEYS = {"name", "description", "corruptions", "preprocess", "source_options"}
BENCHMARK_KEYS = {
    "name", "version", "seed", "source", "split", "severities", "description", "paper", "severity_names",
    "paper_frames",
}
#: A recipe's top-level tables, and the keys of its [options] table: anything else is refused with the nearest
#: known name, since a misspelt table ([preprocesss]) or option would otherwise be ignored and change the build.
RECIPE_TABLES = ("benchmark", "corruptions", "preprocess", "options", "validate", "source_options", "variants")
OPTION_KEYS = ("frames_per_shard",)
#: Upper bounds of a recipe (documented in the module docstring; well above every built-in recipe).
MAX_SEVERITIES = 20
MAX_PARAM_ITEMS = 256
MAX_PARAM_CHARS = 256
#: The largest recipe seed: TOML 1.0's integer range (a signed 64-bit integer; TOML readers other than Python's
#: refuse a larger one). NumPy's SeedSequence, which takes the seed with each example's key hash, has no bound.
MAX_SEED = 2**63 - 1
SHARD_DEFAULT_FRAMES = 64  # ≈ 64 real KITTI scans per file: 100–150 MB of zstd Parquet
#: Keys of the optional [validate] table and their types (see bench_build.validate.config.ValidateConfig).
VALIDATE_KEYS: dict[str, Any] = {
    "corruptions": list, "real": dict, "real_clean": (str, dict), "real_format": str, "severities": list,
    "real_clean_format": str, "real_duplicates": str,
    "sample": int, "max_real": int, "balance": bool, "points": int, "min_range": float, "max_range": float,
    "epochs": int, "batch_size": int, "patience": int, "width": float, "seed": int, "max_embed": int,
    "permutations": int, "accuracy_threshold": float, "min_val_accuracy": float, "min_clean_accuracy": float,
    "verdict_space": str, "threads": int, "device": str,
}
VALIDATE_CHOICES = {"real_format": ("auto", "stf", "boreas", "kitti", "wads"),
                    "real_clean_format": ("auto", "stf", "boreas", "kitti"), "real_duplicates": ("keep", "drop"),
                    "verdict_space": ("raw", "tsne", "both")}


class RecipeError(BenchBuildError, ValueError):
    """A recipe that cannot be used; the message names the recipe and the offending entry."""


@dataclass(frozen=True)
class Corruption:
    """One corruption of a benchmark: its stage and one params instance per severity 1..S."""

    name: str
    stage: str
    stage_version: int
    params: tuple[Any, ...]
    notes: str = ""
    #: where the stage computes ranges and angles from: "points" (their frame's origin) or "lidar" (the sensor's
    #: position, `bench_build.stages.origin`; for points given in another frame, e.g. Waymo's vehicle frame)
    origin: str = "points"

    def params_for(self, severity: int) -> Any:
        return self.params[severity - 1]

    def apply(self, frame: Any, severity: int, rng: Any) -> Any:
        """The stage at ``severity`` on ``frame`` (a `Frame`), measured from the LiDAR when ``origin`` says so."""
        stage, params = get_stage(self.stage), self.params_for(severity)
        if self.origin == "lidar":
            return in_lidar_frame(frame, lambda f: stage.apply(f, params, rng))
        return stage.apply(frame, params, rng)


@dataclass(frozen=True)
class Recipe:
    name: str
    version: str
    seed: int
    source: str
    severities: int
    corruptions: tuple[Corruption, ...]
    split: str | None = None
    description: str = ""
    paper: str = ""
    severity_names: tuple[str, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    origin: str = ""  # where it was loaded from (for messages)
    validate: dict[str, Any] | None = None  # the [validate] table, checked; not part of the fingerprint
    variant: str | None = None  # the variant this recipe was loaded as (None: the default build)
    #: per variant: its description and, per overridden corruption, {key: (default value, variant value)}
    variants: dict[str, VariantInfo] = field(default_factory=dict)
    paper_frames: int | None = None  # source frames of the full-size benchmark (descriptive; not fingerprinted)
    preprocess: Corruption | None = None  # one stage applied to every frame before the clean copy
    #: the [source_options] table without its notes: how the source lists its frames (e.g. 3DOS's cellphones)
    source_options: dict[str, Any] = field(default_factory=dict)
    source_notes: dict[str, str] = field(default_factory=dict)  # option → why this value (card)

    def corruption(self, name: str) -> Corruption:
        for c in self.corruptions:
            if c.name == name:
                return c
        raise KeyError(f"recipe {self.name}: no corruption {name!r}")

    def label_stages(self) -> list[str]:
        """Corruptions whose stage reads per-point semantic labels (params' ``needs_point_labels``)."""
        return [c.name for c in self.corruptions
                if any(getattr(p, "needs_point_labels", False) for p in c.params)]

    @property
    def frames_per_shard(self) -> int:
        return int(self.options.get("frames_per_shard", SHARD_DEFAULT_FRAMES))

    def canonical_source(self) -> dict[str, Any]:
        """The part of `canonical` that says how the source is read: ``preprocess`` and ``source_options``, each
        only where the recipe has one (what a partition's fingerprint needs, without every corruption's
        parameters: `canonical` converts all of them, ≈ 2 ms for KITTI-C's, once per partition file)."""
        return {
            **({"preprocess": {"stage": self.preprocess.stage, "stage_version": self.preprocess.stage_version,
                               "params": jsonable(dataclasses.asdict(self.preprocess.params[0]))}}
               if self.preprocess is not None else {}),
            **({"source_options": dict(sorted(self.source_options.items()))} if self.source_options else {}),
        }

    def canonical(self) -> dict[str, Any]:
        """Everything that determines the output bytes, as plain JSON-able data."""
        return {
            "name": self.name,
            "version": self.version,
            "seed": self.seed,
            "source": self.source,
            "split": self.split,
            "severities": self.severities,
            **self.canonical_source(),
            "corruptions": [
                {
                    "name": c.name,
                    "stage": c.stage,
                    "stage_version": c.stage_version,
                    "params": [jsonable(dataclasses.asdict(p)) for p in c.params],
                    **({"origin": c.origin} if c.origin != "points" else {}),
                }
                for c in self.corruptions
            ],
        }

    def fingerprint(self, frame_ids: Sequence[str]) -> str:
        payload = {"recipe": self.canonical(), "frames": list(frame_ids)}
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)
        return hashlib.sha256(text.encode()).hexdigest()

    def examples_defined(self, n_frames: int) -> int:
        """Examples the benchmark defines: every frame × corruption × (severities + clean)."""
        return n_frames * max(1, len(self.corruptions)) * (self.severities + 1)

    def examples_stored(self, n_frames: int) -> int:
        """Examples actually written: the clean frame once, plus each corruption × severity."""
        return n_frames * (1 + len(self.corruptions) * self.severities)


@dataclass(frozen=True)
class VariantInfo:
    """A named variant of a recipe: what it is and every value it changes, with the default beside it."""

    name: str
    base: str  # the default's benchmark name
    benchmark: str  # the benchmark name a build of the variant uses
    description: str
    #: corruption -> {key: (default value, variant value)}; a key absent from the default is (None, value)
    changes: dict[str, dict[str, tuple[Any, Any]]]
    #: corruption -> (default notes, variant notes), for every corruption the variant changes
    notes: dict[str, tuple[str, str]] = field(default_factory=dict)


def jsonable(v: Any) -> Any:
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if isinstance(v, tuple | list):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {k: jsonable(x) for k, x in v.items()}
    return v


def builtin_recipes() -> dict[str, resources.abc.Traversable]:
    folder = resources.files(__package__) / "recipes"
    return {p.name[: -len(".toml")]: p for p in folder.iterdir() if p.name.endswith(".toml")}


def refuse_output_folder(path: Path, command: str, *, with_out: bool = True) -> None:
    """A version folder, a benchmark's folder or an output root given where ``command`` (`run`, `status`, `plan`)
    takes a benchmark: `UsageError` naming the command it meant, with the name and --out read off the path
    (``OUT/<benchmark>/<version>``; for an output root, the first benchmark built there). ``with_out``: the command
    has an --out option (`plan` has none: the benchmark name alone)."""

    def meant(name: str, out: Path) -> str:
        return (f"`{command}` takes the benchmark name (or its recipe file){' and --out' if with_out else ''}: "
                f"bench-build {command} {name}{f' --out {out}' if with_out else ''}")

    if str(path) in builtin_recipes() or not path.is_dir():  # a built-in's name wins over a folder of that name
        return
    if is_version_dir(path):
        up = 1
    elif versions_in(path):
        up = 0
    else:
        try:
            benches = sorted(d.name for d in path.iterdir() if d.is_dir() and versions_in(d))
        except OSError:
            benches = []
        if not benches:  # some other folder: the recipe's own line says it is not a recipe file
            return
        raise UsageError(f"{path} is an output root (builds of {', '.join(benches)}): {meant(benches[0], path)}")
    full = path.resolve()
    lexical = len(path.parts) > up + 1 and ".." not in path.parts  # else the folder's parents are read resolved
    name = (path if lexical else full).parents[up - 1].name if up else full.name
    out = (path if lexical else full).parents[up]
    what = "a version folder" if up else f"{name}'s folder"
    raise UsageError(f"{path} is {what}: {meant(name, out)}")


def load_recipe(name_or_path: str | Path) -> Recipe:
    """Load a built-in recipe by name (``kitti-c``) or a user's TOML file by path; a ``:variant`` suffix
    (``kitti-c:text``, ``my.toml:text``) loads that variant of it."""
    builtins = builtin_recipes()
    spec, variant = str(name_or_path), None
    if not spec.strip():  # Path("") is ".", which was "recipe file . is a directory"
        raise RecipeError(f"an empty benchmark name: give a built-in ({', '.join(sorted(builtins))}) or a recipe "
                          ".toml file")
    if spec not in builtins and not Path(spec).exists() and ":" in spec:
        spec, variant = spec.rsplit(":", 1)
    text_path = Path(spec)
    if spec in builtins:
        res = builtins[spec]
        return parse_recipe(res.read_text(), origin=f"built-in recipe {spec}", variant=variant)
    if text_path.suffix == ".toml" or text_path.exists():
        if text_path.is_dir():
            raise RecipeError(f"recipe file {text_path} is a directory, not a recipe .toml file")
        if not text_path.is_file():
            raise RecipeError(f"recipe file {text_path} does not exist")
        try:
            text = text_path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            line = e.object[:e.start].count(b"\n") + 1
            raise RecipeError(f"{text_path}: not UTF-8 text (line {line}, byte {e.object[e.start:e.start + 1]!r}); "
                              "a TOML recipe must be UTF-8") from None
        except OSError as e:  # no permission, an I/O error, a special file (/proc/self/mem)
            raise RecipeError(f"recipe file {text_path}: cannot read it ({e.strerror or e})") from None
        return parse_recipe(text, origin=str(text_path), variant=variant)
    raise RecipeError(
        f"unknown benchmark {name_or_path!r}: not a built-in ({', '.join(sorted(builtins))}) nor a .toml file"
    )


def parse_recipe(text: str, *, origin: str = "<string>", variant: str | None = None) -> Recipe:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise RecipeError(f"{origin}: not valid TOML: {e}") from None
    _refuse_unknown(origin, "", data, RECIPE_TABLES)
    variants = _parse_variants(origin, data)
    if variant is not None:
        if variant not in variants:
            raise RecipeError(f"{origin}: no variant {variant!r} (it has {sorted(variants) or 'none'})")
        raw = data.get("corruptions", {})
        overrides = data["variants"][variant].get("corruptions", {})
        data = {**data, "corruptions": {k: {**v, **overrides.get(k, {})} for k, v in raw.items()},
                "benchmark": {**data.get("benchmark", {}), "name": variants[variant].benchmark}}
        if "preprocess" in data["variants"][variant]:
            data["preprocess"] = {**data.get("preprocess", {}), **data["variants"][variant]["preprocess"]}
        if "source_options" in data["variants"][variant]:
            base_opts, over = data.get("source_options", {}), data["variants"][variant]["source_options"]
            data["source_options"] = {**base_opts, **over,  # per-option notes merge too: the others keep theirs
                                      "notes": {**_notes_table(base_opts), **_notes_table(over)}}
        origin = f"{origin}, variant {variant}"
    bench = data.get("benchmark")
    if not isinstance(bench, dict):
        raise RecipeError(f"{origin}: missing [benchmark] table")
    unknown = set(bench) - BENCHMARK_KEYS
    if unknown:
        raise RecipeError(f"{origin}: [benchmark] has unknown keys {sorted(unknown)}")
    for key in ("name", "version", "seed", "source", "severities"):
        if key not in bench:
            raise RecipeError(f"{origin}: [benchmark] is missing {key!r}")
    severities = bench["severities"]
    if not isinstance(severities, int) or isinstance(severities, bool) or severities < 0:
        raise RecipeError(f"{origin}: [benchmark] severities must be a non-negative integer, got {severities!r}")
    if severities > MAX_SEVERITIES:
        raise RecipeError(f"{origin}: [benchmark] severities = {severities} is more than {MAX_SEVERITIES}, the most a "
                          "recipe may have (each severity is a full copy of every corrupted frame)")
    for key in ("name", "version"):
        check_safe_name(bench[key], f"{origin}: [benchmark] {key}", RecipeError)
    seed = bench["seed"]
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= MAX_SEED:
        raise RecipeError(f"{origin}: [benchmark] seed must be a non-negative integer of at most 2**63 - 1 "
                          f"({MAX_SEED}, TOML's largest integer), got {seed!r}")
    for key in ("description", "paper"):
        _check_text(f"{origin}: [benchmark]", key, bench.get(key, ""))
    split = bench.get("split")
    if split is not None and (not isinstance(split, str) or not split):  # its value is checked by the build's reader
        raise RecipeError(f"{origin}: [benchmark] split must be a split name in quotes (e.g. \"test\"), got "
                          f"{split!r}")
    paper_frames = bench.get("paper_frames")
    if paper_frames is not None and (not isinstance(paper_frames, int) or isinstance(paper_frames, bool)
                                     or paper_frames < 1):
        raise RecipeError(f"{origin}: [benchmark] paper_frames must be a positive integer, got {paper_frames!r}")
    sev_names = bench.get("severity_names", ())
    if not isinstance(sev_names, list | tuple):
        raise RecipeError(f"{origin}: [benchmark] severity_names must be a list of names, got {sev_names!r}")
    sev_names = tuple(sev_names)
    for sev_name in sev_names:
        check_safe_name(sev_name, f"{origin}: [benchmark] severity_names entry", RecipeError)
    if sev_names and len(sev_names) != severities:
        raise RecipeError(f"{origin}: severity_names has {len(sev_names)} entries, severities is {severities}")
    raw = data.get("corruptions", {} if severities == 0 else None)
    if severities == 0:
        if raw:
            raise RecipeError(f"{origin}: severities = 0 (clean only) but [corruptions.*] entries are given")
    elif not isinstance(raw, dict) or not raw:
        raise RecipeError(f"{origin}: no [corruptions.*] entries")
    corruptions = tuple(_parse_corruption(origin, name, entry, severities) for name, entry in raw.items())
    preprocess = None
    if "preprocess" in data:
        if not isinstance(data["preprocess"], dict):
            raise RecipeError(f"{origin}: [preprocess] must be a table")
        preprocess = _parse_corruption(origin, "preprocess", data["preprocess"], 1, what="[preprocess]")
    options = data.get("options", {})
    if not isinstance(options, dict):
        raise RecipeError(f"{origin}: [options] must be a table")
    _refuse_unknown(origin, "[options] ", options, OPTION_KEYS)
    fps = options.get("frames_per_shard", SHARD_DEFAULT_FRAMES)
    if not isinstance(fps, int) or isinstance(fps, bool) or fps < 1:  # true is an int in Python: 1 frame a shard
        raise RecipeError(f"{origin}: [options] frames_per_shard must be a positive integer, got {fps!r}")
    validate = _parse_validate(origin, data.get("validate"), corruptions, severities)
    source_options, source_notes = _parse_source_options(origin, str(bench["source"]), data.get("source_options"))
    for v in variants if variant is None else ():  # a typo in a variant fails the default's load too
        parse_recipe(text, origin=origin, variant=v)
    return Recipe(
        name=str(bench["name"]),
        version=str(bench["version"]),
        seed=int(bench["seed"]),
        source=str(bench["source"]),
        split=split,
        severities=severities,
        corruptions=corruptions,
        description=bench.get("description", ""),
        paper=bench.get("paper", ""),
        severity_names=sev_names,
        options=dict(options),
        origin=origin,
        validate=validate,
        variant=variant,
        variants=variants,
        paper_frames=paper_frames,
        preprocess=preprocess,
        source_options=source_options,
        source_notes=source_notes,
    )


def _refuse_unknown(origin: str, where: str, table: dict[str, Any], known: tuple[str, ...]) -> None:
    """A key of ``table`` not in ``known`` is an error naming it and, when one is close, the key meant."""
    for key in table:
        if key not in known:
            near = difflib.get_close_matches(str(key), known, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f" (known: {', '.join(known)})"
            raise RecipeError(f"{origin}: {where or 'top level: '}unknown {'key' if where else 'table or key'} "
                              f"{key!r}{hint}")


def _parse_variants(origin: str, data: dict[str, Any]) -> dict[str, VariantInfo]:
    """Check the [variants.*] tables (known keys, corruptions of this recipe) and list their changes."""
    table = data.get("variants", {})
    if not isinstance(table, dict):
        raise RecipeError(f"{origin}: [variants] must be a table of named variants")
    base_name = str(data.get("benchmark", {}).get("name", ""))
    raw = data.get("corruptions", {}) if isinstance(data.get("corruptions"), dict) else {}
    out: dict[str, VariantInfo] = {}
    for vname, v in table.items():
        where = f"{origin}: [variants.{vname}]"
        if not isinstance(v, dict):
            raise RecipeError(f"{where} must be a table")
        unknown = set(v) - VARIANT_KEYS
        if unknown:
            raise RecipeError(f"{where} has unknown keys {sorted(unknown)} (known: {sorted(VARIANT_KEYS)})")
        overrides = v.get("corruptions", {})
        if not isinstance(overrides, dict) or not all(isinstance(e, dict) for e in overrides.values()):
            raise RecipeError(f"{where}: corruptions must be tables of parameter overrides")
        missing = sorted(set(overrides) - set(raw))
        if missing:
            raise RecipeError(f"{where}: corruptions {missing} are not in the recipe")
        changes = {
            c: {k: (raw[c].get(k), val) for k, val in entry.items() if k != "notes" and raw[c].get(k) != val}
            for c, entry in overrides.items()
        }
        pre, pre_over = data.get("preprocess", {}), v.get("preprocess", {})
        if not isinstance(pre_over, dict) or (pre_over and not isinstance(pre, dict)):
            raise RecipeError(f"{where}: preprocess must be a table overriding keys of [preprocess]")
        if pre_over:
            defaults = _stage_defaults(pre.get("stage"))
            changes["preprocess"] = {k: (pre.get(k, defaults.get(k)), val) for k, val in pre_over.items()
                                     if k != "notes" and pre.get(k, defaults.get(k)) != val}
        opts, opts_over = data.get("source_options", {}), v.get("source_options", {})
        if not isinstance(opts_over, dict) or (opts_over and not isinstance(opts, dict)):
            raise RecipeError(f"{where}: source_options must be a table overriding keys of [source_options]")
        # each changed table's notes: the default's, and the variant's own (none when it gives none: the default's
        # describe the default's values, which the variant changes)
        tables = {**{c: (raw[c], overrides[c]) for c in overrides}, "preprocess": (pre, pre_over)}
        if opts_over:
            # a variant only re-chooses options the default states, so the card can show both values
            missing = sorted(set(opts_over) - set(opts) - {"notes"})
            if missing:
                raise RecipeError(f"{where}: source_options {missing} are not in the recipe's [source_options]")
            # one row per option (source_options.<key>), each with its own notes
            notes_a, notes_b = _notes_table(opts), _notes_table(opts_over)
            for k, val in opts_over.items():
                if k != "notes" and opts[k] != val:
                    changes[f"source_options.{k}"] = {k: (opts[k], val)}
                    tables[f"source_options.{k}"] = ({"notes": notes_a.get(k, "")},
                                                      {"notes": notes_b.get(k, "")})
        benchmark = v.get("name", f"{base_name}-{vname}")
        if not isinstance(benchmark, str) or not benchmark:  # str() made 5 a benchmark "5", true one "True"
            raise RecipeError(f"{where}: name must be the variant's benchmark name in quotes (e.g. "
                              f"\"{base_name}-{vname}\"), got {benchmark!r}")
        out[vname] = VariantInfo(name=vname, base=base_name, benchmark=benchmark,
                                 description=_check_text(where, "description", v.get("description", "")),
                                 changes={c: ch for c, ch in changes.items() if ch},
                                 notes={c: _variant_notes(origin, vname, c, c in raw, *tables[c])
                                        for c, ch in changes.items() if ch})
    return out


def _variant_notes(origin: str, variant: str, table: str, corruption: bool, default: dict[str, Any],
                   override: dict[str, Any]) -> tuple[str, str]:
    """The notes of a table a variant changes (a corruption, ``preprocess``, ``source_options.<key>``): the
    default's and the variant's, each checked to be text."""
    path = f"corruptions.{table}" if corruption else table
    return (_check_text(f"{origin}: corruption {table!r}:" if corruption else f"{origin}: [{table}]", "notes",
                        default.get("notes", "")),
            _check_text(f"{origin}: [variants.{variant}.{path}]", "notes", override.get("notes", "")))


def _source_option_choices(source: str) -> dict[str, tuple[Any, ...]]:
    """The [source_options] keys a source kind takes, each with its allowed values (none for most kinds)."""
    if source == "3dos":

        return SOURCE_OPTIONS
    if source == "wads":  # bench_build.sources.wads: what to do with the exact duplicate rows of raw WADS scans
        return {"duplicates": ("keep", "drop")}
    return {}


def _parse_source_options(origin: str, source: str, table: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """Check a recipe's [source_options] (keys and values the source kind takes); return it and its notes."""
    if table is None:
        return {}, {}
    where = f"{origin}: [source_options]"
    if not isinstance(table, dict):
        raise RecipeError(f"{where} must be a table")
    table = dict(table)
    notes = _notes_table(table, where)
    table.pop("notes", None)
    choices = _source_option_choices(source)
    unknown = sorted(set(table) - set(choices))
    if unknown:
        raise RecipeError(f"{where}: source kind {source!r} takes no option(s) {unknown} "
                          f"(it takes {sorted(choices) or 'none'})")
    for key, value in table.items():
        if value not in choices[key]:
            raise RecipeError(f"{where}: {key} must be one of {list(choices[key])}, got {value!r}")
    stray = sorted(set(notes) - set(table))
    if stray:
        raise RecipeError(f"{where}: notes for {stray}, which the table does not set")
    return table, notes


def _notes_table(options: dict[str, Any], where: str = "[source_options]") -> dict[str, str]:
    """The per-option notes of a [source_options] table (its ``notes`` sub-table: option → text)."""
    notes = options.get("notes", {})
    if not isinstance(notes, dict) or not all(isinstance(v, str) for v in notes.values()):
        raise RecipeError(f"{where}: notes must be a table of option = \"text\"")
    return dict(notes)


def _stage_defaults(name: Any) -> dict[str, Any]:
    """The default parameter values of stage ``name`` ({} if it is not a known stage)."""
    try:
        fields = get_stage(str(name)).param_fields()
    except KeyError:
        return {}
    return {k: f.default for k, f in fields.items() if f.default is not dataclasses.MISSING}


def _parse_validate(origin: str, table: Any, corruptions: tuple[Corruption, ...],
                    severities: int) -> dict[str, Any] | None:
    """Check a recipe's [validate] table: known keys, types, corruptions of this recipe, severities in range."""
    if table is None:
        return None
    where = f"{origin}: [validate]"
    if not isinstance(table, dict):
        raise RecipeError(f"{where} must be a table")
    unknown = set(table) - set(VALIDATE_KEYS)
    if unknown:
        raise RecipeError(f"{where} has unknown keys {sorted(unknown)} (known: {sorted(VALIDATE_KEYS)})")
    for key, value in table.items():
        tp = VALIDATE_KEYS[key]
        ok = isinstance(value, tp) and not (tp in (int, float) and isinstance(value, bool))
        if tp is float and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if not ok:
            raise RecipeError(f"{where}: {key} has the wrong type ({type(value).__name__}: {value!r})")
        if key in VALIDATE_CHOICES and value not in VALIDATE_CHOICES[key]:
            raise RecipeError(f"{where}: {key} must be one of {VALIDATE_CHOICES[key]}, got {value!r}")
        if tp is int and value < (0 if key == "seed" else 1):
            raise RecipeError(f"{where}: {key} must be a positive integer, got {value!r}")
    names = {c.name for c in corruptions}
    chosen = table.get("corruptions")
    if not chosen or not all(isinstance(c, str) for c in chosen):
        raise RecipeError(f"{where}: corruptions must be a non-empty list of corruption names")
    missing = [c for c in chosen if c not in names]
    if missing:
        raise RecipeError(f"{where}: corruptions {missing} are not in the recipe (it has {sorted(names)})")
    for key in ("real", "real_clean"):
        value = table.get(key)
        if isinstance(value, dict):
            bad = [k for k, v in value.items() if k not in chosen or not isinstance(v, str)]
            if bad:
                raise RecipeError(f"{where}: {key} entries {bad} must be paths of corruptions listed in "
                                  "'corruptions'")
    sev = table.get("severities")
    if sev is not None and (not sev or not all(isinstance(s, int) and 1 <= s <= severities for s in sev)):
        raise RecipeError(f"{where}: severities must be a non-empty list of integers in 1..{severities}, got {sev!r}")
    out = dict(table)
    for key in ("min_range", "max_range", "width", "accuracy_threshold", "min_val_accuracy", "min_clean_accuracy"):
        if key in out:
            out[key] = float(out[key])
    return out


def _parse_corruption(origin: str, name: str, entry: Any, severities: int, what: str = "") -> Corruption:
    where = f"{origin}: {what or f'corruption {name!r}'}"
    if not what:  # a corruption's name is a partition directory: data/corruption=<name>/
        check_safe_name(name, f"{origin}: [corruptions] name", RecipeError)
    if name == "clean":
        raise RecipeError(f"{where}: 'clean' is reserved for severity 0")
    if not isinstance(entry, dict):
        raise RecipeError(f"{where}: must be a table")
    entry = dict(entry)
    stage_name = entry.pop("stage", None)
    notes = _check_text(f"{where}:", "notes", entry.pop("notes", ""))
    origin = entry.pop("origin", "points")
    if origin not in ORIGINS:
        raise RecipeError(f"{where}: 'origin' must be one of {', '.join(map(repr, ORIGINS))} (where ranges and "
                          f"angles are measured from), got {origin!r}")
    if not isinstance(stage_name, str):
        raise RecipeError(f"{where}: missing 'stage'")
    check_safe_name(stage_name, f"{where}: stage", RecipeError)
    for key, value in entry.items():
        _check_size(where, key, value)
    try:
        stage = get_stage(stage_name)
    except KeyError as e:
        raise RecipeError(f"{where}: {e.args[0]}") from None
    fields = stage.param_fields()
    unknown = set(entry) - set(fields)
    if unknown:
        raise RecipeError(f"{where}: unknown parameter(s) {sorted(unknown)} for stage {stage_name} "
                          f"(it takes {sorted(fields)})")
    per_severity: list[dict[str, Any]] = [{} for _ in range(severities)]
    for fname, f in fields.items():
        if fname not in entry:
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
                continue
            raise RecipeError(f"{where}: missing parameter {fname!r} of stage {stage_name}")
        values = _per_severity(where, fname, entry[fname], _field_type(stage, fname), severities)
        for s, v in enumerate(values):
            per_severity[s][fname] = v
    for s, kw in enumerate(per_severity, 1):
        _check_seeds(where, stage_name, s, kw)
        _check_values(where, s, kw)
        # every stage with a `rule` switch takes RULES; the stage checks it only when it runs, in a worker
        if "rule" in fields and kw.get("rule", fields["rule"].default) not in RULES:
            raise RecipeError(f"{where}: parameter 'rule' (severity {s}) must be one of {RULES}, got {kw['rule']!r}")
    try:
        params = tuple(stage.params(**kw) for kw in per_severity)
    except (TypeError, ValueError) as e:
        raise RecipeError(f"{where}: {e}") from None
    return Corruption(name=name, stage=stage_name, stage_version=stage.version, params=params, notes=notes,
                      origin=origin)


def _check_text(where: str, key: str, value: Any) -> str:
    """``value`` if it is a string: free text (``notes``, ``description``, ``paper``) the card prints as given, so a
    number or a table there is a mistake to refuse, not a value to print through ``str()``."""
    if not isinstance(value, str):
        raise RecipeError(f"{where} {key} must be a string (text in quotes), got a TOML "
                          f"{_TOML_TYPES.get(type(value), type(value).__name__)}: {value!r}")
    return value


_TOML_TYPES = {int: "integer", float: "float", bool: "boolean", list: "array", dict: "table"}


def _check_size(where: str, key: str, value: Any) -> None:
    """Refuse a parameter with a list longer than MAX_PARAM_ITEMS or a string longer than MAX_PARAM_CHARS (at
    any depth), before it is expanded per severity: a stray paste must not become a huge build or recipe JSON."""
    if isinstance(value, str) and len(value) > MAX_PARAM_CHARS:
        raise RecipeError(f"{where}: parameter {key!r} is a string of {len(value)} characters (at most "
                          f"{MAX_PARAM_CHARS})")
    if isinstance(value, list):
        if len(value) > MAX_PARAM_ITEMS:
            raise RecipeError(f"{where}: parameter {key!r} is a list of {len(value)} values (at most "
                              f"{MAX_PARAM_ITEMS})")
        for v in value:
            _check_size(where, key, v)
    if isinstance(value, dict):
        for v in value.values():
            _check_size(where, key, v)


#: Parameters that may legitimately be negative (every other number of a stage is a magnitude, a count,
#: a rate or a distance: ≥ 0). Empty today; a stage with a signed parameter names it here.
SIGNED_PARAMS: frozenset[str] = frozenset()
#: (low, high) name patterns of parameter pairs that must satisfy low ≤ high.
_PAIRS = (("min_", "max_", "prefix"), ("_min", "_max", "suffix"), ("_low", "_high", "suffix"),
          ("_start", "_stop", "suffix"))


def _numbers(value: Any) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [value]
    if isinstance(value, tuple | list):
        return [x for v in value for x in _numbers(v)]
    return []


def _check_seeds(where: str, stage: str, severity: int, kw: dict[str, Any]) -> None:
    """A stage's own seed (a parameter named ``seed`` or ``*_seed``: snow's ``pool_seed``) is bounded like the
    recipe's: an integer in 0 … `MAX_SEED`, TOML's integer range, which Python's TOML reader does not enforce."""
    for name, value in kw.items():
        seed = name == "seed" or name.endswith("_seed")
        if seed and isinstance(value, int) and not isinstance(value, bool) and not 0 <= value <= MAX_SEED:
            raise RecipeError(f"{where}: parameter {name!r} of stage {stage} (severity {severity}) must be an "
                              f"integer in 0 … 2**63 - 1 ({MAX_SEED}, TOML's largest integer), got {value!r}")


def _check_values(where: str, severity: int, kw: dict[str, Any]) -> None:
    """Values a stage would only choke on inside a worker, refused at load: NaN anywhere, a negative
    magnitude/count, a zero divisor, a pair with min > max. The message names the key and severity."""
    for name, value in kw.items():
        for x in _numbers(value):
            if isinstance(x, float) and math.isnan(x):
                raise RecipeError(f"{where}: parameter {name!r} (severity {severity}) is NaN")
            if x < 0 and name not in SIGNED_PARAMS:
                raise RecipeError(f"{where}: parameter {name!r} (severity {severity}) is {x!r}; it must be ≥ 0")
            if x == 0 and name.endswith("_divisor"):
                raise RecipeError(f"{where}: parameter {name!r} (severity {severity}) is 0; a divisor must be > 0")
    for low, high, kind in _PAIRS:
        for name in kw:
            if kind == "prefix" and name.startswith(low):
                other = high + name[len(low):]
            elif kind == "suffix" and name.endswith(low):
                other = name[: -len(low)] + high
            else:
                continue
            a, b = kw[name], kw.get(other)
            if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool) and a > b:
                raise RecipeError(f"{where}: {name} = {a!r} > {other} = {b!r} (severity {severity})")


def _field_type(stage: Stage, fname: str) -> Any:
    return _type_hints(stage.params)[fname]


@cache
def _type_hints(params: type) -> dict[str, Any]:
    """A stage's parameter types, resolved once per process: `typing.get_type_hints` evaluates every annotation
    again on each call, and was over half of parsing a recipe (a build's driver parses its recipe ≈ 9 times)."""
    return typing.get_type_hints(params)


def _is_tuple_type(tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_is_tuple_type(a) for a in typing.get_args(tp) if a is not type(None))
    return origin is tuple or tp is tuple


def _per_severity(where: str, fname: str, value: Any, tp: Any, severities: int) -> list[Any]:
    if _is_tuple_type(tp):
        if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
            values = [tuple(_coerce(where, fname, x, float) for x in v) for v in value]
        elif isinstance(value, list):
            return [tuple(value)] * severities
        else:
            raise RecipeError(f"{where}: parameter {fname!r} must be a list, got {value!r}")
    elif isinstance(value, list):
        values = [_coerce(where, fname, v, tp) for v in value]
    else:
        return [_coerce(where, fname, value, tp)] * severities
    if len(values) != severities:
        raise RecipeError(
            f"{where}: parameter {fname!r} has {len(values)} values, the recipe has {severities} severities"
        )
    return values


def _coerce(where: str, fname: str, v: Any, tp: Any) -> Any:
    if isinstance(v, str) and v in ("inf", "+inf") and tp is float:
        return math.inf
    if tp is float and isinstance(v, int | float) and not isinstance(v, bool):
        if math.isnan(v):
            raise RecipeError(f"{where}: parameter {fname!r} is NaN")
        return float(v)
    if tp is int and isinstance(v, int) and not isinstance(v, bool):
        return v
    if tp is bool and isinstance(v, bool):
        return v
    if tp is str and isinstance(v, str):
        return v
    if tp in (float, int, bool, str):
        raise RecipeError(f"{where}: parameter {fname!r} must be {tp.__name__}, got {v!r}")
    return v


def severity_names(manifest: dict[str, Any]) -> list[str]:
    """The recipe's severity names (light, moderate, heavy): the manifest's recipe holds only what determines
    the bytes, so a built-in recipe of the same name and version is asked; [] when unnamed or unknown."""
    names = (manifest.get("recipe") or {}).get("severity_names")
    if names:
        return list(names)
    name = (manifest.get("recipe") or {}).get("name") or manifest.get("dataset")
    if name in builtin_recipes():
        try:
            r = load_recipe(name)
        except RecipeError:
            return []
        if r.version == manifest.get("version") and r.severities == (manifest.get("recipe") or {}).get("severities"):
            return list(r.severity_names)
    return []
