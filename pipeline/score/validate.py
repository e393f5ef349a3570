"""Element-by-element checks of prediction values, vectorised (a full benchmark has millions of values).

Each field is checked for what its metric assumes, every element of it, and the first offending element is
named with the file, the line (JSON Lines) or row (Parquet), the key and the index:

| field   | elements                                   | where the range comes from                         |
|---------|--------------------------------------------|----------------------------------------------------|
| probs   | numbers (JSON ints or floats, never        | probabilities: in [0, 1]; where the metric reads   |
|         | ``true``/``false``, strings or ``null``),  | them as a distribution (ModelNet40-E: ECE bins and |
|         | finite, in [0, 1]                          | 1 − p_max as confidence) each row sums to 1 ± 0.01 |
| pred    | an integer class id 0 … K − 1              | the benchmark's K classes                          |
| score   | a finite number                            | any real: MSP, max logit, energy, … (3DOS ranks it)|
| labels  | integers ≥ 0 (≤ the largest train id when  | the learning map the build recorded                |
|         | the build records a learning map)          |                                                    |

JSON booleans are refused although Python counts them as integers (``"pred": true`` would score as class 1).
JSON integers have any number of digits: one beyond ±1.8e308 has no float and is not a finite number either.
The sum tolerance 0.01 admits probabilities written with 3 decimals for up to 20 classes and with 4 decimals
for up to 200; a model that writes logits or unnormalised scores is refused rather than given a
calibration error of numbers that are not probabilities.

The type test is ``set(map(type, values))`` over each field's flattened values (about 20 ns a value; the
JSON parse itself costs about 1.2 µs a value), then NumPy does the numeric checks on the converted array.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

from bench_build.errors import BenchBuildError


class PredictionError(BenchBuildError, ValueError):
    """A predictions file the scorer cannot use: names the file, the key and what is wrong."""


class ScoreError(BenchBuildError, ValueError):
    """The version cannot be scored as asked: another benchmark's metric, a missing partition or column."""


NUMBER = frozenset({float, int})
INTEGER = frozenset({int})
#: |Σ probs − 1| allowed where a metric reads probabilities as a distribution
SUM_TOLERANCE = 0.01
#: what an integer too large for a float64 is called (JSON integers have any number of digits)
HUGE_INTEGER = "an integer beyond ±1.8e308"
BEYOND_FLOAT = f"{HUGE_INTEGER}, not a finite number"


def _at(preds: Mapping[str, Any], key: str) -> str:
    where = getattr(preds, "where", {}).get(key)
    return f"{where}: " if where else ""


def fail(path: str | Path, preds: Mapping[str, Any], key: str, message: str) -> PredictionError:
    return PredictionError(f"{path}: {_at(preds, key)}key {key!r}: {message}")


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"a boolean ({str(v).lower()})"
    if isinstance(v, str):
        return f"a string ({v!r})"
    return f"a {type(v).__name__}"


def number_lists(path: str | Path, preds: Mapping[str, Any], keys: Sequence[str], field: str,
                 allowed: frozenset[type] = NUMBER, length: int | None = None,
                 k_from: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(values, offsets)``: the ``field`` list of every key, flattened and checked for element types
    (``allowed``), finiteness and (with ``length``) the length of each list; ``k_from`` names the option that set
    ``length`` (``--num-classes``), said instead of "the benchmark" in the error."""
    lists = [preds[k].get(field) for k in keys]
    for k, v in zip(keys, lists, strict=True):
        if not isinstance(v, list):
            raise fail(path, preds, k, f"{field} is {_kind(v)}, expected a list of numbers")
    lens = np.fromiter(map(len, lists), np.int64, len(lists))
    if length is not None and (lens != length).any():
        i = int(np.nonzero(lens != length)[0][0])
        has = f"the benchmark has {length}" if k_from is None else f"{k_from} is {length}"
        raise fail(path, preds, keys[i], f"{field} has {lens[i]} classes, {has}")
    off = np.r_[0, np.cumsum(lens)]
    flat = list(chain.from_iterable(lists))
    if not set(map(type, flat)) <= allowed:
        j = next(j for j, v in enumerate(flat) if type(v) not in allowed)
        i = int(np.searchsorted(off, j, side="right") - 1)
        want = "an integer" if allowed == INTEGER else "a number"
        raise fail(path, preds, keys[i], f"{field}[{j - off[i]}] is {_kind(flat[j])}, expected {want}")
    try:
        values = np.array(flat, dtype=np.int64 if allowed == INTEGER else np.float64)
    except OverflowError:
        if allowed == INTEGER:
            j = next(j for j, v in enumerate(flat) if abs(v) > np.iinfo(np.int64).max)
            what = f"= {flat[j]} is out of range"
        else:  # JSON allows an integer of any length: one past ±1.8e308 has no float
            j = next(j for j, v in enumerate(flat) if not _fits_float(v))
            what = f"is {BEYOND_FLOAT}"
        i = int(np.searchsorted(off, j, side="right") - 1)
        raise fail(path, preds, keys[i], f"{field}[{j - off[i]}] {what}") from None
    if values.dtype.kind == "f":
        _in_range(path, preds, keys, field, values, off, ~np.isfinite(values), "(NaN/inf): write finite numbers")
    return values, off


def _in_range(path, preds, keys, field, values, off, bad: np.ndarray, what: str) -> None:
    if bad.any():
        j = int(np.nonzero(bad)[0][0])
        i = int(np.searchsorted(off, j, side="right") - 1)
        raise fail(path, preds, keys[i], f"{field}[{j - off[i]}] is {values[j]} {what}")


def probabilities(path: str | Path, preds: Mapping[str, Any], keys: Sequence[str], num_classes: int, *,
                  distribution: bool, k_from: str | None = None) -> np.ndarray:
    """``(len(keys), num_classes)`` probabilities, every one a finite number in [0, 1]; with
    ``distribution`` every row sums to 1 within `SUM_TOLERANCE`; ``k_from`` as in `number_lists`."""
    values, off = number_lists(path, preds, keys, "probs", NUMBER, num_classes, k_from)
    _in_range(path, preds, keys, "probs", values, off, (values < 0) | (values > 1),
              "outside [0, 1]: write probabilities (softmax), not logits")
    probs = values.reshape(len(keys), num_classes)
    if distribution and len(keys):
        err = np.abs(probs.sum(axis=1) - 1)
        if (err > SUM_TOLERANCE).any():
            i = int(np.argmax(err > SUM_TOLERANCE))
            raise fail(path, preds, keys[i], f"probs sum to {probs[i].sum():.6g}, not 1 (± {SUM_TOLERANCE}): "
                                              "the metric reads them as a distribution; write the softmax")
    return probs


def class_ids(path: str | Path, preds: Mapping[str, Any], keys: Sequence[str], num_classes: int,
              k_from: str | None = None) -> np.ndarray:
    """The integer ``pred`` of every key, a class id 0 … num_classes − 1 (``k_from``: the option that set
    num_classes, named in the error)."""
    vals = [preds[k].get("pred") for k in keys]
    if not set(map(type, vals)) <= INTEGER:
        i = next(i for i, v in enumerate(vals) if type(v) is not int)
        raise fail(path, preds, keys[i], f"pred is {_kind(vals[i])}, expected a class id 0…{num_classes - 1}")
    ids = np.array(vals, dtype=object)
    bad = np.array([not 0 <= v < num_classes for v in vals], bool) if len(vals) else np.zeros(0, bool)
    if bad.any():
        i = int(np.argmax(bad))
        said = f" ({k_from} {num_classes})" if k_from else ""
        raise fail(path, preds, keys[i], f"pred {vals[i]} is not a class id in 0…{num_classes - 1}{said}")
    return ids.astype(np.int64)


def numbers(path: str | Path, preds: Mapping[str, Any], keys: Sequence[str], field: str) -> np.ndarray:
    """The finite number ``field`` of every key."""
    vals = [preds[k].get(field) for k in keys]
    if not set(map(type, vals)) <= NUMBER:
        i = next(i for i, v in enumerate(vals) if type(v) not in NUMBER)
        what = f"no numeric {field!r} field" if field not in preds[keys[i]] else \
            f"{field} is {_kind(vals[i])}, expected a number"
        raise fail(path, preds, keys[i], what)
    try:
        out = np.array(vals, dtype=np.float64)
    except OverflowError:  # JSON allows an integer of any length: one past ±1.8e308 has no float
        i = next(i for i, v in enumerate(vals) if not _fits_float(v))
        raise fail(path, preds, keys[i], f"{field} is {BEYOND_FLOAT}") from None
    bad = ~np.isfinite(out)
    if bad.any():
        i = int(np.argmax(bad))
        raise fail(path, preds, keys[i], f"{field} is {out[i]} (NaN/inf): write finite numbers")
    return out


def finite_number(v: Any) -> bool:
    """``v`` is a JSON number with a finite float value: no boolean, and no integer past ±1.8e308 (on one,
    ``math.isfinite`` and ``float`` raise ``OverflowError``)."""
    return isinstance(v, int | float) and not isinstance(v, bool) and _fits_float(v) and math.isfinite(v)


def shown(v: Any) -> str:
    """``repr(v)`` for an error, except an integer too large for a float: said as such, not in its digits."""
    return HUGE_INTEGER if isinstance(v, int) and not _fits_float(v) else repr(v)


def _fits_float(v: float | int) -> bool:
    try:
        float(v)
    except OverflowError:
        return False
    return True


def point_labels(path: str | Path, preds: Mapping[str, Any], key: str, max_label: int | None,
                 ids: str = "a train id 0…{max} of the benchmark's learning map") -> np.ndarray:
    """The ``labels`` of one example: integers ≥ 0, at most ``max_label`` when the build records a map (or its
    classes); ``ids`` says what the labels are, in the error."""
    values, _ = number_lists(path, preds, [key], "labels", INTEGER)
    if len(values) and values.min() < 0:
        j = int(np.argmax(values < 0))
        raise fail(path, preds, key, f"labels[{j}] is {values[j]}: labels must be non-negative integers")
    if max_label is not None and len(values) and values.max() > max_label:
        j = int(np.argmax(values > max_label))
        raise fail(path, preds, key, f"label {values[j]} (point {j}) is not {ids.format(max=max_label)}")
    return values
