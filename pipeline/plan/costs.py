"""Cost model of a build, from stage costs that `bench-build bench` measures. Pure: no Ray, no I/O but reading
the shipped table.

A table (``pipeline/plan/cost_tables/<recipe>.json``, written by ``bench-build bench --costs-out``) holds, on one
core and full-resolution scans:

- ``read_ms``: reading and decoding one scan (per frame, paid by every task that holds the frame);
- ``prep_ms``: the per-frame caches stages share, by name (``kdtree``, ``box_index``, ``deletion_grid``,
  ``rings``: the ring ids of `stages.ring.frame_rings`): paid once per frame by a task only if one of its stages
  uses that cache; and ``derived:<corruption>``, what that corruption's stage keeps on the frame for its other
  severities (``Frame.derived``: ModelNet40-E's normals, ``upsample``'s search grid), paid once per frame by a
  task holding any of its severities;
- ``write_ms``: committing one clean example to a Parquet file as a task does (encode, compress, write, fsync,
  sha256, rename), paid by every partition;
- ``write_ms_by[corruption]``: the same for that corruption's output at severities 1..S (more points, or noise in
  the low bits that compresses worse, cost more: 10–25 ms against ≈ 12 for clean); a partition without a row
  pays ``write_ms`` (tables written before this field);
- ``stage_ms[corruption]``: compute per example at severities 1..S; ``needs[corruption]``: the caches it uses;
- ``scale``: what a real build's tasks cost over what the parts above predict for them (`bench` builds the demo
  and divides; 1.0 in a table measured without builds). Each part is timed alone on the same two frames, with
  hot caches and a warm allocator; a task interleaves them over fresh arrays and pays ≈ 30 % more. Every cost
  the table reports (`read`, `prep`, `partition_ms`) is scaled, so plans and CPU-hours are in real task
  seconds while the parts keep their measured ratios for balancing tasks.

The table is data, not a live measurement, so a plan is a pure function of (recipe, frames, table) and two
runs of the same command always cut the same tasks (resume depends on it). A variant without a table of its own
(``3dos:cellphone``) takes its base recipe's; a recipe with neither gets `default_costs`: every stage costs the
same, so tasks are still of equal *size*.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench_build.errors import BenchBuildError
from bench_build.manifests.recipe import Recipe


class CostTableError(BenchBuildError, ValueError):
    """A cost table that is missing, not a cost table, or measured for another recipe (refused: exit 2)."""


TABLES = Path(__file__).parent / "cost_tables"
#: the per-frame caches stages share: Frame's cached properties, and the ring ids `stages.ring.frame_rings` keeps
#: per frame (Robo3D's beam_missing, cross_sensor and snow)
CACHES = ("kdtree", "box_index", "deletion_grid", "rings")
DERIVED = "derived:"  # + a corruption's name: what its stage keeps in Frame.derived for its other severities


def derived_cache(corruption: str) -> str:
    """The name, in a table's ``prep_ms`` and ``needs``, of what ``corruption``'s stage keeps on the frame."""
    return DERIVED + corruption

# Defaults for a recipe without a measured table: the medians of the KITTI-C table on this project's machine.
DEFAULT_READ_MS = 5.0
DEFAULT_PREP_MS = {"kdtree": 60.0, "box_index": 1.5, "deletion_grid": 4.0}
DEFAULT_WRITE_MS = 10.0
DEFAULT_STAGE_MS = 10.0
#: `CostTable.measured` of `default_costs`: `plan` says its figures are placeholders when it sees this
DEFAULTS_MEASURED = "defaults (no measured table for this recipe)"


@dataclass(frozen=True)
class CostTable:
    recipe: str
    read_ms: float
    write_ms: float
    prep_ms: dict[str, float]
    stage_ms: dict[str, tuple[float, ...]]
    needs: dict[str, tuple[str, ...]]
    write_ms_by: dict[str, tuple[float, ...]] = field(default_factory=dict)
    scale: float = 1.0
    measured: str = ""  # how and where (command, machine, points per scan)
    extra: dict[str, Any] = field(default_factory=dict)

    def partition_ms(self, corruption: str, severity: int) -> float:
        """Cost of one example of a partition (compute + write), per frame."""
        if severity == 0:
            return self.scale * self.write_ms
        row = self.stage_ms.get(corruption)
        compute = DEFAULT_STAGE_MS if not row else row[min(severity, len(row)) - 1]
        out = self.write_ms_by.get(corruption)
        return self.scale * (compute + (self.write_ms if not out else out[min(severity, len(out)) - 1]))

    def read(self) -> float:
        """Cost of reading one frame (ms, scaled)."""
        return self.scale * self.read_ms

    def prep(self, cache: str) -> float:
        """Cost of one per-frame cache (ms, scaled; 0 for an unknown name)."""
        return self.scale * self.prep_ms.get(cache, 0.0)

    def needs_of(self, corruption: str) -> tuple[str, ...]:
        return self.needs.get(corruption, ())

    def to_json(self) -> str:
        return json.dumps({"recipe": self.recipe, "measured": self.measured, "read_ms": self.read_ms,
                           "write_ms": self.write_ms, "prep_ms": self.prep_ms,
                           "stage_ms": {k: list(v) for k, v in self.stage_ms.items()},
                           **({"write_ms_by": {k: list(v) for k, v in self.write_ms_by.items()}}
                              if self.write_ms_by else {}),
                           **({"scale": self.scale} if self.scale != 1.0 else {}),
                           "needs": {k: list(v) for k, v in self.needs.items()}, **self.extra},
                          indent=1, sort_keys=True)


def parse_costs(data: dict[str, Any], origin: str) -> CostTable:
    try:
        known = {"recipe", "measured", "read_ms", "write_ms", "prep_ms", "stage_ms", "needs", "write_ms_by", "scale"}
        table = CostTable(
            recipe=str(data["recipe"]), measured=str(data.get("measured", "")),
            read_ms=float(data["read_ms"]), write_ms=float(data["write_ms"]),
            prep_ms={str(k): float(v) for k, v in data["prep_ms"].items()},
            stage_ms={str(k): tuple(float(x) for x in v) for k, v in data["stage_ms"].items()},
            needs={str(k): tuple(str(x) for x in v) for k, v in data.get("needs", {}).items()},
            write_ms_by={str(k): tuple(float(x) for x in v) for k, v in data.get("write_ms_by", {}).items()},
            scale=float(data.get("scale", 1.0)),
            extra={k: v for k, v in data.items() if k not in known})
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CostTableError(f"{origin}: not a cost table ({type(e).__name__}: {e})") from None
    bad = [x for c, n in table.needs.items() for x in n if x not in CACHES and x != derived_cache(c)]
    writes = [x for row in table.write_ms_by.values() for x in row]
    if bad or any(v < 0 for v in (table.read_ms, table.write_ms, *table.prep_ms.values(), *writes)):
        raise CostTableError(f"{origin}: unknown cache or negative cost ({bad})")
    if not 0.2 <= table.scale <= 5.0:
        raise CostTableError(f"{origin}: scale {table.scale} is not a measured/predicted ratio (expected 0.2–5)")
    return table


def load_costs(recipe: Recipe, path: str | Path | None = None) -> CostTable:
    """The cost table of ``recipe``: ``path`` if given, else the shipped one (a variant without its own takes its
    base recipe's, said in ``measured``), else `default_costs`. A table must be measured for ``recipe`` (or, for a
    variant, its base) and price every corruption of it: another benchmark's table would price its own
    corruptions and leave the rest at the default, silently, or price them on other data (a Robo3D table of
    18k-point crops for 150k-point Waymo scans)."""
    base = recipe.variants[recipe.variant].base if recipe.variant in recipe.variants else None
    p = Path(path) if path else TABLES / f"{recipe.name}.json"
    if not path and not p.is_file() and base is not None:
        p = TABLES / f"{base}.json"
    if not p.is_file():
        if path:
            raise CostTableError(f"cost table {p} is a folder, not a JSON file" if p.is_dir() else
                                 f"cost table {p} does not exist")
        return default_costs(recipe)
    try:
        data = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CostTableError(f"{p}: not a cost table (not JSON: {e})") from None
    table = parse_costs(data, str(p))
    missing = [c.name for c in recipe.corruptions if c.name not in table.stage_ms]
    if missing:
        raise CostTableError(f"{p}: the cost table of {table.recipe} has no cost for {recipe.name}'s "
                         f"{', '.join(missing[:5])}{', …' if len(missing) > 5 else ''}: pass a table measured "
                         f"for {recipe.name}, or none for the defaults")
    if table.recipe not in (recipe.name, base):
        raise CostTableError(f"{p}: a cost table measured for {table.recipe}, not {recipe.name}: pass a table measured "
                         f"for {recipe.name} (`bench-build bench stages --recipe` measures one), or none for the "
                         "defaults")
    if table.recipe != recipe.name:
        table = replace(table, measured=f"{table.measured} (the table of {table.recipe}: {recipe.name} has none "
                                        "of its own)")
    return table


def default_costs(recipe: Recipe) -> CostTable:
    return CostTable(recipe=recipe.name, read_ms=DEFAULT_READ_MS, write_ms=DEFAULT_WRITE_MS,
                     prep_ms=dict(DEFAULT_PREP_MS),
                     stage_ms={c.name: (DEFAULT_STAGE_MS,) * recipe.severities for c in recipe.corruptions},
                     needs={}, measured=DEFAULTS_MEASURED)
