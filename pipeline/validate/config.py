"""What one naturalness validation needs: the corruption, the real data, and the protocol's knobs."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from bench_build.errors import BenchBuildError
from bench_build.validate.preprocess import Preprocess

REAL_FORMATS = ("auto", "stf", "boreas", "kitti", "wads")
DUPLICATE_CHOICES = ("keep", "drop")
VERDICT_SPACES = ("raw", "tsne", "both")


class ValidationError(BenchBuildError, ValueError):
    """Unusable validation input (missing real data, unknown corruption, ...), raised before training."""


@dataclass(frozen=True)
class ValidateConfig:
    corruption: str
    real_weather: Path  # real scans in this weather (label 1)
    real_clean: Path  # real clear-weather scans of the same sensor (label 0)
    real_format: str = "auto"  # stf | boreas | kitti | wads | auto (from the path name, else the record size)
    # format of the real clean scans; None: real_format, except after "wads" (WADS has no clear scans) → auto
    real_clean_format: str | None = None
    real_duplicates: str = "keep"  # WADS's exact duplicate rows: keep (as recorded) or drop
    severities: tuple[int, ...] | None = None  # simulated partitions tested (None: all severities)
    sample: int | None = None  # build frames tested (None: all), a seeded random subset
    max_real: int | None = None  # real scans per class (None: all), a seeded random subset
    balance: bool = True  # subsample the larger real class to the size of the smaller (≈ 50 % each)
    points: int = 16384
    min_range: float = 1.0
    max_range: float = 70.0
    epochs: int = 80
    batch_size: int = 32
    patience: int | None = None  # early stopping after this many epochs without a better val accuracy
    width: float = 1.0  # PointNet width multiplier (1.0 = 64-64-64-128-1024, FC 512-256)
    seed: int = 0
    max_embed: int = 500  # samples per group for t-SNE and MMD
    permutations: int = 500  # MMD permutation test
    accuracy_threshold: float = 0.8  # accuracy on simulated needed for "natural"
    min_val_accuracy: float = 0.7  # below: the classifier cannot tell real weather → inconclusive
    min_clean_accuracy: float = 0.5  # below: the build's clean frames look like weather → inconclusive
    verdict_space: str = "raw"  # MMD condition on raw features, on t-SNE features, or both
    threads: int | None = None
    device: str = "auto"
    extra: dict[str, Any] = field(default_factory=dict)  # free-form notes recorded in the report

    def __post_init__(self) -> None:
        if self.real_format not in REAL_FORMATS:
            raise ValidationError(f"real_format must be one of {REAL_FORMATS}, got {self.real_format!r}")
        if self.real_clean_format is not None and self.real_clean_format not in REAL_FORMATS:
            raise ValidationError(f"real_clean_format must be one of {REAL_FORMATS}, got {self.real_clean_format!r}")
        if self.real_duplicates not in DUPLICATE_CHOICES:
            raise ValidationError(f"real_duplicates must be one of {DUPLICATE_CHOICES}, got {self.real_duplicates!r}")
        if self.verdict_space not in VERDICT_SPACES:
            raise ValidationError(f"verdict_space must be one of {VERDICT_SPACES}, got {self.verdict_space!r}")
        for name in ("points", "epochs", "batch_size", "max_embed"):
            if getattr(self, name) < 1:
                raise ValidationError(f"{name} must be ≥ 1, got {getattr(self, name)}")
        if self.batch_size < 2:
            raise ValidationError("batch_size must be ≥ 2 (batch norm)")
        if self.width <= 0:
            raise ValidationError(f"width must be > 0, got {self.width}")
        for name in ("sample", "max_real", "patience"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ValidationError(f"{name} must be ≥ 1, got {v}")

    @property
    def clean_format(self) -> str:
        """The real clean scans' format (see ``real_clean_format``)."""
        if self.real_clean_format is not None:
            return self.real_clean_format
        return "auto" if self.real_format == "wads" else self.real_format

    @property
    def preprocess(self) -> Preprocess:
        return Preprocess(points=self.points, min_range=self.min_range, max_range=self.max_range)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["real_weather"], d["real_clean"] = str(self.real_weather), str(self.real_clean)
        d["severities"] = None if self.severities is None else list(self.severities)
        return d


#: Keys of a recipe's [validate] table that map one-to-one onto ValidateConfig fields.
RECIPE_SCALAR_KEYS = {f.name for f in fields(ValidateConfig)} - {
    "corruption", "real_weather", "real_clean", "severities", "extra"}


def configs_from_recipe(table: dict[str, Any], *, base: Path | None = None) -> list[tuple[ValidateConfig | None, str]]:
    """One (config, problem) per corruption of a recipe's validated ``[validate]`` table.

    The config is None when its real data is not configured; ``problem`` then says why (the build
    skips that validation with the message). Relative paths are taken from ``base`` (default: cwd).
    """
    out: list[tuple[ValidateConfig | None, str]] = []
    real = table.get("real", {})
    clean = table.get("real_clean", {})
    kwargs = {k: v for k, v in table.items() if k in RECIPE_SCALAR_KEYS}
    if "severities" in table:
        kwargs["severities"] = tuple(table["severities"])
    for corruption in table["corruptions"]:
        weather_dir = real.get(corruption)
        clean_dir = clean.get(corruption) if isinstance(clean, dict) else clean
        if weather_dir is None or clean_dir is None:
            out.append((None, f"{corruption}: no real data configured ([validate] real.{corruption} and real_clean)"))
            continue
        out.append((ValidateConfig(corruption=corruption, real_weather=_resolve(weather_dir, base),
                                   real_clean=_resolve(clean_dir, base), **kwargs), ""))
    return out


def _resolve(p: str, base: Path | None) -> Path:

    path = Path(os.path.expandvars(os.path.expanduser(p)))
    return path if path.is_absolute() or base is None else base / path


def parse_real_options(corruptions: list[str], real: list[str], real_clean: list[str]) -> dict[str, tuple[Path, Path]]:
    """``--real`` / ``--real-clean`` values (``corruption=DIR``, or a bare ``DIR`` for every corruption)
    → {corruption: (real weather dir, real clean dir)}; ValidationError on anything missing or unknown."""
    def parse(values: list[str], what: str) -> dict[str, Path]:
        named: dict[str, str] = {}  # a corruption's own value wins over a bare DIR; each is given once
        bare: str | None = None
        for v in values:
            name, sep, path = v.partition("=")
            if not sep:
                if bare is not None:
                    raise ValidationError(f"{what} {v!r}: a directory for every corruption is already given "
                                          f"({bare!r}); give one, and CORRUPTION=DIR for the others")
                bare = v
                continue
            if name not in corruptions:
                raise ValidationError(f"{what} {v!r}: {name!r} is not one of the --corruption values {corruptions}")
            if not path:
                raise ValidationError(f"{what} {v!r}: empty directory")
            if name in named:
                raise ValidationError(f"{what} {v!r}: {name} is already given ({what} {name}={named[name]}); give "
                                      "each corruption's directory once")
            named[name] = path
        out = {c: Path(bare) for c in corruptions} if bare is not None else {}
        return out | {c: Path(d) for c, d in named.items()}

    if not corruptions:
        raise ValidationError("give at least one --corruption")
    weather, clean = parse(real, "--real"), parse(real_clean, "--real-clean")
    out = {}
    for c in corruptions:
        if c not in weather:
            raise ValidationError(f"no real data for {c}: pass --real {c}=DIR (real scans in that weather)")
        if c not in clean:
            raise ValidationError(f"no real clean data for {c}: pass --real-clean DIR "
                                  "(clear-weather scans of the same sensor)")
        out[c] = (weather[c], clean[c])
    return out
