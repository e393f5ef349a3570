"""3DOS category sets and class maps (Alliegro et al.'s released benchmark, antoalli/3D_OS), as typed data.

The paper shows the sets only in figures; these are the released benchmark's tables
(``antoalli/3D_OS: datasets/sncore_splits.py, modelnet.py, scanobject.py``), typed from that code and
checked by ``tests/manifests/test_object_tables.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Synthetic track: 18 ShapeNetCore synsets per set. Cellphone (02992529) is in none of them: the released
#: loader keeps a scenario's synsets first and only then merges cellphone into telephone, so by default no
#: cellphone enters any set (option ``cellphone``).
SN_SETS: dict[str, tuple[str, ...]] = {
    "SN1": ("03797390", "03636649", "02818832", "04554684", "03691459", "04401088", "03207941", "02942699",
            "02843684", "03593526", "02880940", "02871439", "04330267", "02828884", "03211117", "03085013",
            "03046257", "03928116"),
    "SN2": ("03261776", "03624134", "03001627", "03938244", "04379243", "03642806", "03710193", "02801938",
            "03337140", "02933112", "04256520", "04004475", "03991062", "03759954", "04460130", "02808440",
            "02773838", "02747177"),
    "SN3": ("02946921", "03761084", "04225987", "03325088", "04468005", "03467517", "03948459", "03513137",
            "04530566", "02691156", "02876657", "02954340", "04099429", "04090263", "04074963", "02958343",
            "02924116", "03790512"),
}
CELLPHONE, TELEPHONE = "02992529", "04401088"

#: Synthetic-to-Real, ModelNet40 side: class name → mapped id (desk and table share id 2 in SR2).
SR_MODELNET: dict[str, dict[str, int]] = {
    "SR1": {"chair": 0, "bookshelf": 1, "door": 2, "sink": 3, "sofa": 4},
    "SR2": {"bed": 0, "toilet": 1, "desk": 2, "monitor": 3, "table": 2},
}
#: ScanObjectNN side: original SONN label → mapped id. SR3 is always unknown (ids are its SONN labels).
SR_SCANOBJECTNN: dict[str, dict[int, int]] = {
    "SR1": {4: 0, 8: 1, 7: 2, 12: 3, 13: 4},  # chair, shelf, door, sink, sofa
    "SR2": {10: 0, 14: 1, 5: 2, 6: 3, 9: 2},  # bed, toilet, desk, display, table
    "SR3": {0: 0, 1: 1, 2: 2, 3: 3, 11: 4},  # bag, bin, box, cabinet, pillow
}


@dataclass(frozen=True)
class Scenario:
    """One open-set scenario: which sets are known (with their id offset) and which are unknown."""

    track: str  # synthetic | synth_to_real | real_to_real
    name: str
    known: tuple[str, ...]
    unknown: tuple[str, ...]


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("synthetic", "SN1", ("SN1",), ("SN2", "SN3")),
    Scenario("synthetic", "SN2", ("SN2",), ("SN1", "SN3")),
    Scenario("synthetic", "SN3", ("SN3",), ("SN1", "SN2")),
    Scenario("synth_to_real", "SR1", ("SR1",), ("SR2", "SR3")),
    Scenario("synth_to_real", "SR2", ("SR2",), ("SR1", "SR3")),
    # Real-to-Real: two SR sets known (relabelled 0..8/9, the second set's ids after the first's), one unknown
    Scenario("real_to_real", "SR12", ("SR1", "SR2"), ("SR3",)),
    Scenario("real_to_real", "SR13", ("SR1", "SR3"), ("SR2",)),
    Scenario("real_to_real", "SR23", ("SR2", "SR3"), ("SR1",)),
)


#: [source_options] of a 3dos recipe (bench_build.manifests.recipe checks them), each with its allowed values, the
#: default first:
#: ``cellphone``: ``exclude`` = the released loader (``datasets/sncore_4k.py`` filters by the scenario's
#: synsets before its cellphone→telephone merge, which therefore never runs: no cellphone in SN1/SN2/SN3);
#: ``telephone`` = cellphones join telephone in SN1 (known in SN1, SN1 unknowns in SN2 and SN3).
#: ``r2r_val``: ``authors`` = Real→Real holds out the released trainer's validation split of the known
#: classes' training scans (``classifiers/trainer_ddp_cla_r2r.py``, see `bench_build.sources.threedos`);
#: ``none`` = the whole training file is ``train``.
SOURCE_OPTIONS: dict[str, tuple[str, ...]] = {
    "cellphone": ("exclude", "telephone"),
    "r2r_val": ("authors", "none"),
}
DEFAULT_SOURCE_OPTIONS: dict[str, str] = {k: v[0] for k, v in SOURCE_OPTIONS.items()}


def synset_label_map(set_name: str, cellphone: str = "exclude") -> dict[str, int]:
    """ShapeNet synset → class id of a known SN set: the set's sorted synset ids numbered 0..17 (with
    ``cellphone="telephone"``, cellphone also maps to telephone's id)."""
    ids = {s: i for i, s in enumerate(sorted(SN_SETS[set_name]))}
    if cellphone == "telephone" and TELEPHONE in ids:
        ids[CELLPHONE] = ids[TELEPHONE]
    return ids


def sn_set_of(synset: str, cellphone: str = "exclude") -> str | None:
    """The SN set a ShapeNet synset belongs to (None: in no set). Cellphone is in none unless
    ``cellphone="telephone"`` folds it into telephone's set (SN1)."""
    if synset == CELLPHONE:
        if cellphone not in SOURCE_OPTIONS["cellphone"]:
            raise ValueError(f"cellphone must be one of {SOURCE_OPTIONS['cellphone']}, got {cellphone!r}")
        if cellphone == "exclude":
            return None
        synset = TELEPHONE
    return next((name for name, members in SN_SETS.items() if synset in members), None)


def sonn_label_map(known: tuple[str, ...]) -> dict[int, int]:
    """SONN label → class id for the union of known SR sets (second set offset by the first's class count)."""
    out: dict[int, int] = {}
    offset = 0
    for s in known:
        m = SR_SCANOBJECTNN[s]
        out.update({k: v + offset for k, v in m.items()})
        offset += len(set(m.values()))
    return out


def sonn_set_of(label: int) -> str | None:
    return next((name for name, m in SR_SCANOBJECTNN.items() if label in m), None)
