"""Reading and checking prediction files.

Per-example predictions are JSON Lines (one object per line) or Parquet (one row per example), keyed
by the example key ``benchmark/frame_id/corruption/severity`` of the version being scored:

| field    | type            | benchmarks                                | meaning                                   |
|----------|-----------------|-------------------------------------------|-------------------------------------------|
| key      | string          | all                                       | example key (required)                    |
| probs    | list<float>[K]  | ModelNet-C, ModelNet40-E, 3DOS            | class probabilities (softmax), K classes  |
| pred     | int             | ModelNet-C (instead of probs)             | predicted class id                        |
| score    | float           | 3DOS                                      | normality score, higher = more likely known |
| labels   | list<int>[N]    | Robo3D segmentation                       | predicted label of each of the N points   |

Detection predictions are KITTI result files instead (see `pipeline.score.detection`).
Every problem raises `PredictionError` naming the file and the key or line: a file that is not UTF-8
text, and a JSON ``true``/``false`` where a number is expected (``"pred": true`` is not class 1).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

FIRST = 5  # how many offending keys an error lists
#: the fields whose values are numbers (or lists of numbers): a boolean there is refused, not read as 0/1
NUMERIC_FIELDS = ("probs", "pred", "score", "labels")


class PredictionError(ValueError):
    pass


def read_predictions(path: str | Path) -> dict[str, dict[str, Any]]:
    """``{key: row}`` from a ``.jsonl`` / ``.json`` (lines) or ``.parquet`` file; rejects duplicate keys."""
    path = Path(path)
    if not path.exists():
        raise PredictionError(f"{path}: no such prediction file")
    if path.suffix in (".parquet", ".pq"):
        rows, where = _parquet_rows(path)
    elif path.suffix in (".jsonl", ".json", ".ndjson"):
        rows, where = _jsonl_rows(path)
    else:
        raise PredictionError(f"{path}: unknown prediction format {path.suffix!r} (use .jsonl or .parquet)")
    out: dict[str, dict[str, Any]] = {}
    first_seen: dict[str, str] = {}
    for row, at in zip(rows, where, strict=True):
        key = row.get("key")
        if not isinstance(key, str) or not key:
            raise PredictionError(f"{path}: {at}: no string 'key' field")
        if key in out:
            raise PredictionError(f"{path}: {at}: duplicate key {key!r} (first at {first_seen[key]})")
        _check_not_bool(path, at, key, row)
        _check_finite(path, at, key, row)
        out[key] = row
        first_seen[key] = at
    return out


def _jsonl_rows(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    rows, where = [], []
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise PredictionError(f"{path}: line {lineno}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column "
                                      f"{e.start + 1}); predictions are UTF-8 JSON Lines") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise PredictionError(f"{path}: line {lineno}: not JSON: {e.msg}") from None
            if not isinstance(row, dict):
                raise PredictionError(f"{path}: line {lineno}: expected a JSON object")
            rows.append(row)
            where.append(f"line {lineno}")
    return rows, where


def _parquet_rows(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as e:  # any pyarrow failure means a bad file
        raise PredictionError(f"{path}: not a readable Parquet file: {e}") from None
    if "key" not in table.column_names:
        raise PredictionError(f"{path}: no 'key' column (columns: {', '.join(table.column_names)})")
    rows = table.to_pylist()
    return rows, [f"row {i}" for i in range(len(rows))]


def _check_not_bool(path: Path, at: str, key: str, row: dict[str, Any]) -> None:
    """Refuse a boolean in a numeric field: Python reads True as 1, so ``"pred": true`` would score as class 1."""
    for field in NUMERIC_FIELDS:
        value = row.get(field)
        if isinstance(value, bool):
            raise PredictionError(f"{path}: {at}: key {key!r}: {field} is a boolean ({str(value).lower()}), "
                                  "not a number")
        if isinstance(value, list) and bool in set(map(type, value)):
            i = next(i for i, v in enumerate(value) if isinstance(v, bool))
            raise PredictionError(f"{path}: {at}: key {key!r}: {field}[{i}] is a boolean "
                                  f"({str(value[i]).lower()}), not a number")


def _check_finite(path: Path, at: str, key: str, row: dict[str, Any]) -> None:
    for field, value in row.items():
        if field == "key":
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise PredictionError(f"{path}: {at}: key {key!r}: {field} is {value} (NaN/inf)")
        if isinstance(value, list) and value and isinstance(value[0], float | int):
            arr = np.asarray(value, dtype=np.float64)
            if not np.isfinite(arr).all():
                i = int(np.nonzero(~np.isfinite(arr))[0][0])
                raise PredictionError(f"{path}: {at}: key {key!r}: {field}[{i}] is {arr[i]} (NaN/inf)")


def check_keys(path: str | Path, predicted: Iterable[str], expected: Sequence[str], benchmark: str) -> None:
    """Every expected key predicted once, none from another benchmark, none unknown."""
    predicted = set(predicted)
    expected_set = set(expected)
    foreign = sorted(k for k in predicted if k.split("/", 1)[0] != benchmark)
    if foreign:
        other = sorted({k.split("/", 1)[0] for k in foreign})
        raise PredictionError(f"{path}: {len(foreign)} keys are from another benchmark ({', '.join(other)}), "
                              f"this version is {benchmark!r}: {_first(foreign)}")
    missing = [k for k in expected if k not in predicted]
    if missing:
        raise PredictionError(f"{path}: {len(missing)} of {len(expected)} examples have no prediction, "
                              f"e.g. {_first(missing)}")
    unknown = sorted(predicted - expected_set)
    if unknown:
        raise PredictionError(f"{path}: {len(unknown)} keys are not examples of this version: {_first(unknown)}")


def _first(keys: Sequence[str]) -> str:
    return ", ".join(keys[:FIRST]) + (f", … ({len(keys) - FIRST} more)" if len(keys) > FIRST else "")


def class_probs(path: str | Path, preds: dict[str, dict[str, Any]], keys: Sequence[str], num_classes: int,
                *, allow_pred: bool = False) -> np.ndarray:
    """(len(keys), num_classes) probabilities in ``keys`` order; with ``allow_pred`` a ``pred`` class id
    stands for a one-hot row."""
    out = np.zeros((len(keys), num_classes))
    for i, k in enumerate(keys):
        row = preds[k]
        if "probs" in row and row["probs"] is not None:
            p = row["probs"]
            if not isinstance(p, list) or len(p) != num_classes:
                n = len(p) if isinstance(p, list) else type(p).__name__
                raise PredictionError(f"{path}: key {k!r}: probs has {n} classes, the benchmark has {num_classes}")
            out[i] = p
        elif allow_pred and "pred" in row:
            c = row["pred"]
            if not isinstance(c, int) or not 0 <= c < num_classes:
                raise PredictionError(f"{path}: key {k!r}: pred {c!r} is not a class id in 0…{num_classes - 1}")
            out[i, c] = 1.0
        else:
            want = "'probs' (or 'pred')" if allow_pred else "'probs'"
            raise PredictionError(f"{path}: key {k!r}: no {want} field")
    return out


def scalar(path: str | Path, preds: dict[str, dict[str, Any]], keys: Sequence[str], field: str) -> np.ndarray:
    out = np.zeros(len(keys))
    for i, k in enumerate(keys):
        v = preds[k].get(field)
        if not isinstance(v, float | int) or isinstance(v, bool):
            raise PredictionError(f"{path}: key {k!r}: no numeric {field!r} field")
        out[i] = v
    return out
