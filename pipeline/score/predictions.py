"""Reading and checking prediction files.

Per-example predictions are JSON Lines (one object per line) or Parquet (one row per example), keyed
by the example key ``benchmark/frame_id/corruption/severity`` of the version being scored:

| field    | type            | benchmarks                                | meaning                                   |
|----------|-----------------|-------------------------------------------|-------------------------------------------|
| key      | string          | all                                       | example key (required)                    |
| probs    | list<float>[K]  | ModelNet-C, ModelNet40-E                  | class probabilities (softmax), K classes  |
| pred     | int             | ModelNet-C (instead of probs)             | predicted class id                        |
| score    | float           | 3DOS                                      | normality score, higher = more likely known |
| labels   | list<int>[N]    | Robo3D segmentation                       | predicted label of each of the N points   |

Detection predictions are KITTI result files instead (see `bench_build.score.detection`).
Every problem raises `PredictionError` naming the file and the key or line: a file that is not UTF-8
text, and a JSON ``true``/``false`` where a number is expected (``"pred": true`` is not class 1), are
refused on reading; the values of the fields a metric reads are checked element by element (types, NaN/inf,
ranges) in `bench_build.score.validate`.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from bench_build.manifests import jsontext
from bench_build.score.validate import PredictionError, class_ids, numbers, probabilities

FIRST = 5  # how many offending keys an error lists
#: the fields whose values are numbers (or lists of numbers): a boolean there is refused, not read as 0/1
NUMERIC_FIELDS = ("probs", "pred", "score", "labels")




PARQUET = (".parquet", ".pq")
JSON_LINES = (".jsonl", ".json", ".ndjson")
#: what a prediction path may be, said where a folder is not one
ACCEPTED = "predictions are a .jsonl, .json or .ndjson file, or .parquet (a file, or a folder of Parquet files)"
#: what a JSON prediction file holds, said where a line is not one JSON object (a pretty-printed file is not)
ONE_PER_LINE = ("predictions are JSON Lines: one JSON object per line (a pretty-printed file spreads one object "
                "over several lines)")


class Predictions(dict):
    """``{key: row}``, plus ``where[key]``: the line (JSON Lines) or row (Parquet) it came from, for errors."""

    where: dict[str, str]


def read_predictions(path: str | Path) -> Predictions:
    """``{key: row}`` from a ``.jsonl`` / ``.json`` (lines) or ``.parquet`` file (or a folder of Parquet files);
    rejects duplicate keys.

    Values are checked element by element where a metric reads them (`bench_build.score.validate`)."""
    path = Path(path)
    if not path.exists():
        raise PredictionError(f"{path}: no such prediction file")
    if path.is_dir():
        _check_folder(path)
    if path.suffix in PARQUET:
        rows, where = _parquet_rows(path)
    elif path.suffix in JSON_LINES:
        rows, where = _jsonl_rows(path)
    else:
        raise PredictionError(f"{path}: unknown prediction format {path.suffix!r} (use .jsonl or .parquet)")
    out = Predictions()
    first_seen: dict[str, str] = {}
    for row, at in zip(rows, where, strict=True):
        key = row.get("key")
        if not isinstance(key, str) or not key:
            raise PredictionError(f"{path}: {at}: no string 'key' field")
        if key in out:
            raise PredictionError(f"{path}: {at}: duplicate key {key!r} (first at {first_seen[key]})")
        _check_not_bool(path, at, key, row)
        out[key] = row
        first_seen[key] = at
    out.where = first_seen
    return out


def _check_folder(path: Path) -> None:
    """A folder is read only as one Parquet table in several files (``preds.parquet/part-0.parquet``, as Spark and
    pyarrow write one). One holding no data file (pyarrow, too, skips names starting with ``.`` or ``_``) read as
    a table of no columns ("no 'key' column"), or as a format named by no suffix: it is refused as what it is. A
    folder named like a JSON Lines file is one where a file was expected, whatever it holds."""
    if path.suffix not in JSON_LINES and not any(
            f.is_file() and not any(n.startswith((".", "_")) for n in f.relative_to(path).parts)
            for f in path.rglob("*")):
        raise PredictionError(f"{path}: the directory holds no prediction files; {ACCEPTED}")
    if path.suffix not in PARQUET:
        raise PredictionError(f"{path}: is a directory where a file was expected; {ACCEPTED}")


def _jsonl_rows(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The JSON objects of a JSON Lines file. A UTF-8 byte-order mark opening it (Windows PowerShell's ``Out-File
    -Encoding utf8`` writes one) is skipped, as RFC 8259 lets a parser do; a UTF-16 one (PowerShell's ``>``) names
    the encoding, where its bytes would be read as "not UTF-8" at an unexplained 0xff."""
    rows, where = [], []
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, 1):
            if lineno == 1:
                if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
                    raise PredictionError(f"{path}: UTF-16 text (it starts with a UTF-16 byte-order mark); "
                                          "predictions are UTF-8 JSON Lines: save the file as UTF-8")
                raw = raw.removeprefix(codecs.BOM_UTF8)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise PredictionError(f"{path}: line {lineno}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column "
                                      f"{e.start + 1}); predictions are UTF-8 JSON Lines") from None
            if not line.strip():
                continue
            try:
                row = loads(path, line, lineno)
            except json.JSONDecodeError as e:
                raise PredictionError(f"{path}: line {lineno}: not JSON: {e.msg}; {ONE_PER_LINE}") from None
            if not isinstance(row, dict):
                raise PredictionError(f"{path}: line {lineno}: expected a JSON object, found "
                                      f"{_json_kind(row)}; {ONE_PER_LINE}")
            rows.append(row)
            where.append(f"line {lineno}")
    return rows, where


def loads(path: str | Path, text: str, lineno: int | None = None) -> Any:
    """``json.loads(text)``: line ``lineno`` of ``path``, or (None) the whole file. Text that is not JSON raises
    its ``JSONDecodeError`` (each reader says what it expected); what ``json.loads`` raises on valid JSON is a
    `PredictionError` naming the file and the line: an integer of more digits than Python's int() converts and
    arrays or objects nested deeper than its parser recurses (`bench_build.manifests.jsontext`)."""
    return jsontext.loads(path, text, lineno, error=PredictionError)


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    return "null" if value is None else "a boolean" if isinstance(value, bool) else "a number"


def _parquet_rows(path: Path) -> tuple[list[dict[str, Any]], list[str]]:

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


def check_keys(path: str | Path, predicted: Iterable[str], expected: Sequence[str], benchmark: str) -> None:
    """Every expected key predicted once, none from another benchmark, none unknown.

    A file holding nothing, or keys of another version of the benchmark (none of them an example here), is said as
    such, with a key of this version to compare; where examples lack a prediction and the file has keys this version
    lacks, both are said: either alone would send the user looking for predictions the model never wrote."""
    predicted = set(predicted)
    expected_set = set(expected)
    if not predicted:
        raise PredictionError(f"{path}: the file holds no predictions; this version has {len(expected)} "
                              f"example{'s' * (len(expected) != 1)} to score, e.g. {expected[0]}")
    foreign = sorted(k for k in predicted if k.split("/", 1)[0] != benchmark)
    if foreign:
        other = sorted({k.split("/", 1)[0] for k in foreign})
        are = "keys are" if len(foreign) != 1 else "key is"
        raise PredictionError(f"{path}: {len(foreign)} {are} from another benchmark ({', '.join(other)}), "
                              f"this version is {benchmark!r}: {_first(foreign)}")
    unknown = sorted(predicted - expected_set)
    if len(unknown) == len(predicted):
        like = f"; this version's keys are like {expected[0]}" if expected else ""
        raise PredictionError(f"{path}: none of its {len(unknown)} keys is an example of this version (predictions "
                              f"for another version or build?): {unknown[0]}{like}")
    missing = [k for k in expected if k not in predicted]
    are = "keys are not examples" if len(unknown) != 1 else "key is not an example"
    if missing:
        also = f"; and {len(unknown)} {are} of this version: {_first(unknown)}" if unknown else ""
        raise PredictionError(f"{path}: {len(missing)} of {len(expected)} examples have no prediction, "
                              f"e.g. {_first(missing)}{also}")
    if unknown:
        raise PredictionError(f"{path}: {len(unknown)} {are} of this version: {_first(unknown)}")


def _first(keys: Sequence[str]) -> str:
    return ", ".join(keys[:FIRST]) + (f", … ({len(keys) - FIRST} more)" if len(keys) > FIRST else "")


def class_probs(path: str | Path, preds: dict[str, dict[str, Any]], keys: Sequence[str], num_classes: int,
                *, allow_pred: bool = False, distribution: bool = False, k_from: str | None = None) -> np.ndarray:
    """(len(keys), num_classes) probabilities in ``keys`` order, every value checked (`validate.probabilities`;
    ``distribution``: rows sum to 1); with ``allow_pred`` a ``pred`` class id stands for a one-hot row.
    ``k_from`` names the option that set num_classes (``--num-classes``), said in the errors it causes."""
    has_probs = np.array([preds[k].get("probs") is not None for k in keys], bool)
    has_pred = np.array([allow_pred and not h and "pred" in preds[k] for k, h in zip(keys, has_probs, strict=True)],
                        bool)
    if not (has_probs | has_pred).all():
        k = keys[int(np.argmin(has_probs | has_pred))]
        want = "'probs' (or 'pred')" if allow_pred else "'probs'"
        where = getattr(preds, "where", {}).get(k)
        raise PredictionError(f"{path}: {where + ': ' if where else ''}key {k!r}: no {want} field")
    out = np.zeros((len(keys), num_classes))
    idx = np.nonzero(has_probs)[0]
    out[idx] = probabilities(path, preds, [keys[i] for i in idx], num_classes, distribution=distribution,
                             k_from=k_from)
    # a row with both: the class it names must be the probabilities' argmax, else which one was meant is a guess
    both = [i for i in idx if preds[keys[i]].get("pred") is not None]
    if both:
        said = class_ids(path, preds, [keys[i] for i in both], num_classes, k_from)
        if (wrong := np.flatnonzero(said != out[both].argmax(axis=1))).size:
            k = keys[both[int(wrong[0])]]
            where = getattr(preds, "where", {}).get(k)
            raise PredictionError(f"{path}: {where + ': ' if where else ''}key {k!r}: 'pred' {int(said[wrong[0]])} is "
                                  f"not the argmax of its 'probs' ({int(out[both[int(wrong[0])]].argmax())}); give one "
                                  "of them, or both agreeing")
    idx = np.nonzero(has_pred)[0]
    out[idx, class_ids(path, preds, [keys[i] for i in idx], num_classes, k_from)] = 1.0
    return out


def scalar(path: str | Path, preds: dict[str, dict[str, Any]], keys: Sequence[str], field: str) -> np.ndarray:
    """The finite number ``field`` of every key (booleans and strings refused)."""
    return numbers(path, preds, keys, field)
