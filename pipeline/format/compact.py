"""Compact encoding (opt-in, ``--encoding compact``): a corrupted example as references into its clean scan.

Most corruptions keep most clean points bit for bit: density drops, beam/layer deletion, cutout,
cross-sensor and beam-missing keep a subset; background, upsample and local_inc append points;
object-level corruptions change only the points inside boxes; impulse noise changes a fraction. A compact
row stores, for each of its N output points, ``point_ref[i]`` = the index of a clean point whose row is
byte-identical (−1 if none), and in ``points`` only the rows with ``point_ref == -1`` (in output order).
Materialising is ``out[ref >= 0] = clean[ref[ref >= 0]]; out[ref < 0] = points``: byte-identical to the full
encoding by construction (rows are matched on their bytes, so NaN payloads and −0.0 survive too).

The match needs no help from the stages: clean rows are sorted by their bytes once per frame and each output
row is looked up by binary search, so any stage (present or future) that keeps clean rows benefits, and one
that changes every point (Gaussian noise, fog) just stores all its rows as literals (``point_ref`` all −1,
which Parquet's RLE stores in a few bytes). ``point_ref`` of increasing runs costs ~nothing with
DELTA_BINARY_PACKED.

Row r of a compact file refers to row r of the clean file of the same shard (both list the shard's frames in
the same order; the reader matches them by ``frame_id``).
"""

from __future__ import annotations

import numpy as np

NO_REF = -1


def _row_keys(points: np.ndarray) -> np.ndarray:
    """One opaque, totally ordered key per row: the row's bytes as a void scalar (C × 4 bytes)."""
    rows = np.ascontiguousarray(points)
    return rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()


_INDEX: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # (clean array, keys, order, sorted)
_INDEX_SIZE = 16  # ≥ the frames of one row group: a shard encodes every corruption of a frame against it


def _clean_index(clean: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row keys of ``clean``, their sort order and the sorted keys — computed once per clean scan (the shard
    writer encodes every corruption × severity of a frame against the same array)."""
    for arr, keys, order, sorted_keys in _INDEX:
        if arr is clean:
            return keys, order, sorted_keys
    keys = _row_keys(clean)
    order = np.argsort(keys, kind="stable")
    _INDEX.append((clean, keys, order, keys[order]))
    del _INDEX[:-_INDEX_SIZE]
    return _INDEX[-1][1:]


def encode_refs(points: np.ndarray, clean: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(point_ref (N,) int32, literal rows (M, C))`` of ``points`` against ``clean`` (same C, float32)."""
    if points.shape[1] != clean.shape[1] or points.dtype != clean.dtype:
        return np.full(len(points), NO_REF, np.int32), points
    if len(clean) == 0 or len(points) == 0:
        return np.full(len(points), NO_REF, np.int32), points
    ckeys, order, sorted_keys = _clean_index(clean)
    okeys = _row_keys(points)
    pos = np.searchsorted(sorted_keys, okeys)
    pos_c = np.minimum(pos, len(sorted_keys) - 1)
    hit = sorted_keys[pos_c] == okeys
    ref = np.where(hit, order[pos_c], NO_REF).astype(np.int32)
    # A kept point usually keeps its own index: prefer it (same bytes, so the same output) — it makes the
    # refs increasing runs, which is what makes them nearly free to store.
    same = np.arange(len(points)) < len(clean)
    idx = np.arange(len(points))
    if same.any():
        own = np.zeros(len(points), bool)
        own[same] = okeys[same] == ckeys[idx[same]]
        ref[own] = idx[own]
    return ref, np.ascontiguousarray(points[ref == NO_REF])


def materialize(ref: np.ndarray, literal: np.ndarray, clean: np.ndarray) -> np.ndarray:
    """The full N×C points of a compact row (writable, float32). Raises ValueError, saying which, on a row that
    does not fit ``clean`` (a reference past its end, or other than one literal row per unreferenced point):
    callers add the file, row and key (`bench_build.format.reader.rows_of`)."""
    out = np.empty((len(ref), clean.shape[1] if len(clean) else literal.shape[1]), dtype=np.float32)
    has = ref >= 0
    if has.any() and int(ref[has].max()) >= len(clean):
        bad = int(np.flatnonzero(has & (ref >= len(clean)))[0])
        raise ValueError(f"point {bad} refers to clean point {int(ref[bad])}, but the clean scan has {len(clean)} "
                         "points")
    out[has] = clean[ref[has]]
    n_lit = int((~has).sum())
    if n_lit != len(literal):
        raise ValueError(f"{n_lit} points have no reference into the clean scan but the row stores {len(literal)} "
                         "literal points")
    out[~has] = literal
    return out
