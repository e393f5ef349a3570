"""Prediction values are checked element by element: every bad value anywhere in a file is refused (exit 2)
naming the file, the line or row, the key and the index — not only the first element of a list."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from bench_build.cli import app
from bench_build.score import PredictionError, score_version
from bench_build.score.predictions import class_probs, read_predictions
from tests.pipeline.score.test_score_cli import write_object_version

runner = CliRunner()
KEYS = [f"modelnet-c/test/{i:05d}/clean/0" for i in range(6)]


@pytest.fixture
def mnc(tmp_path) -> Path:
    rows = [{"key": k, "corruption": "clean", "severity": 0, "class_id": i % 3} for i, k in enumerate(KEYS)]
    return write_object_version(tmp_path / "modelnet-c" / "0.1.0", "modelnet-c", rows)


@pytest.fixture
def m40e(tmp_path) -> Path:
    rows = [{"key": k.replace("modelnet-c", "modelnet40-e"), "corruption": "noise", "severity": 1,
             "class_id": i % 3, "sigma": [0.01 * (i + 1)] * 2} for i, k in enumerate(KEYS)]
    return write_object_version(tmp_path / "modelnet40-e" / "0.1.0", "modelnet40-e", rows)


def write(path: Path, values: list, field: str = "probs", bench: str = "modelnet-c") -> Path:
    """One line per key; a value given as a str is written as raw JSON text."""
    lines = []
    for k, v in zip(KEYS, values, strict=True):
        k = k.replace("modelnet-c", bench)
        lines.append(f'{{"key": "{k}", "{field}": {v if isinstance(v, str) else json.dumps(v)}}}')
    path.write_text("\n".join(lines) + "\n")
    return path


GOOD = [0.2, 0.3, 0.5]


@pytest.mark.parametrize(("bad", "message"), [
    ("[0.2, null, 0.8]", r"probs\[1\] is null, expected a number"),
    ("[null, 0.5, 0.5]", r"probs\[0\] is null, expected a number"),  # the case: null first
    ("[0.2, 0.3, \"0.5\"]", r"probs\[2\] is a string \('0.5'\), expected a number"),
    ("[true, false, false]", r"probs\[0\] is a boolean \(true\)"),
    ("[0.2, 0.3, NaN]", r"probs\[2\] is nan \(NaN/inf\)"),
    ("[0.2, 1.3, -0.5]", r"probs\[1\] is 1.3 outside \[0, 1\]"),
    ("[0.6, 0.6, -0.2]", r"probs\[2\] is -0.2 outside \[0, 1\]"),
    ("0.5", r"probs is a float, expected a list of numbers"),
    ("[0.2, 1e400, 0.5]", r"probs\[1\] is inf \(NaN/inf\)"),
    ("[0.2, 0.3, 1" + "0" * 400 + "]", r"probs\[2\] is an integer beyond ±1.8e308, not a finite number"),
])
def test_every_probability_is_checked(mnc, tmp_path, bad, message):
    # the bad value sits in the 5th row, after four good ones
    p = write(tmp_path / "bad.jsonl", [GOOD] * 4 + [bad, GOOD])
    with pytest.raises(PredictionError, match=rf"bad.jsonl: line 5: key '{KEYS[4]}': {message}"):
        score_version(mnc, p, num_classes=3)
    res = runner.invoke(app, ["score", str(mnc), str(p), "--num-classes", "3"])
    assert res.exit_code == 2 and KEYS[4] in res.output and "bad.jsonl" in res.output


@pytest.mark.parametrize(("bad", "message"), [
    ("true", r"pred is a boolean \(true\)"),
    ("1.0", r"pred is a float, expected a class id 0…2"),
    ("\"1\"", r"pred is a string \('1'\), expected a class id 0…2"),
    ("3", r"pred 3 is not a class id in 0…2"),
    ("-1", r"pred -1 is not a class id in 0…2"),
])
def test_every_class_id_is_checked(mnc, tmp_path, bad, message):
    p = write(tmp_path / "bad.jsonl", [0, 1, 2, bad, 0, 1], field="pred")
    with pytest.raises(PredictionError, match=rf"line 4: key '{KEYS[3]}': {message}"):
        score_version(mnc, p, num_classes=3)


def test_modelnet_c_reads_only_the_argmax_so_rows_need_not_sum_to_one(tmp_path):
    rows = [[0.9, 0.9, 0.1], [0.1, 0.8, 0.0], [0, 0, 1], [1, 0, 0], [0.3, 0.9, 0.2], [0.0, 0.0, 1.0]]
    p = write(tmp_path / "p.jsonl", rows)
    got = class_probs(p, read_predictions(p), KEYS, 3, allow_pred=True)
    np.testing.assert_array_equal(got, rows)
    with pytest.raises(PredictionError, match=r"line 1: .*probs sum to 1.9"):
        class_probs(p, read_predictions(p), KEYS, 3, distribution=True)


def test_modelnet40_e_needs_a_distribution(m40e, tmp_path):
    ok = [[0.8, 0.1, 0.1]] * 6
    assert score_version(m40e, write(tmp_path / "ok.jsonl", ok, bench="modelnet40-e"), num_classes=3).summary
    # written with 3 decimals: off by 0.001, within the tolerance
    assert score_version(m40e, write(tmp_path / "r.jsonl", [[0.333, 0.333, 0.333]] * 6, bench="modelnet40-e"),
                         num_classes=3).summary
    p = write(tmp_path / "logits.jsonl", [*ok[:2], [0.9, 0.9, 0.0], *ok[3:]], bench="modelnet40-e")
    with pytest.raises(PredictionError, match=r"line 3: key 'modelnet40-e/test/00002/clean/0': probs sum to 1.8"):
        score_version(m40e, p, num_classes=3)


def test_parquet_nulls_and_booleans(mnc, tmp_path):
    p = tmp_path / "p.parquet"
    pq.write_table(pa.table({"key": KEYS, "probs": [GOOD] * 5 + [[0.2, None, 0.8]]}), p)
    with pytest.raises(PredictionError, match=rf"row 5: key '{KEYS[5]}': probs\[1\] is null"):
        score_version(mnc, p, num_classes=3)
    pq.write_table(pa.table({"key": KEYS, "pred": [True, False, True, False, True, False]}), p)
    with pytest.raises(PredictionError, match=rf"row 0: key '{KEYS[0]}': pred is a boolean \(true\)"):
        score_version(mnc, p, num_classes=3)


def _three_dos(tmp_path: Path) -> Path:
    base = {"corruption": "clean", "severity": 0, "scenario": "SN1", "split": "test"}
    rows = [{"key": f"3dos/SN1/test/k{i}/clean/0", **base, "class_id": 0, "known": True, "unknown_set": None}
            for i in range(2)]
    rows += [{"key": f"3dos/SN1/test/u{i}/clean/0", **base, "class_id": -1, "known": False, "unknown_set": "SN2"}
             for i in range(2)]
    return write_object_version(tmp_path / "3dos" / "1", "3dos", rows)


@pytest.mark.parametrize(("bad", "message"), [
    ("true", r"score is a boolean \(true\)"),
    ("\"0.5\"", r"score is a string \('0.5'\), expected a number"),
    ("null", r"score is null, expected a number"),
    ("Infinity", r"score is inf \(NaN/inf\)"),
    ("-1e400", r"score is -inf \(NaN/inf\)"),
    # JSON has no bound on an integer's digits: one past the float range was an OverflowError traceback
    ("1" + "0" * 400, r"score is an integer beyond ±1.8e308, not a finite number"),
])
def test_open_set_scores_are_checked(tmp_path, bad, message):
    v = _three_dos(tmp_path)
    keys = ["3dos/SN1/test/k0/clean/0", "3dos/SN1/test/k1/clean/0", "3dos/SN1/test/u0/clean/0",
            "3dos/SN1/test/u1/clean/0"]
    p = tmp_path / "o.jsonl"
    p.write_text("".join(f'{{"key": "{k}", "score": {s}}}\n' for k, s in zip(keys, ["-3.5", "2", bad, "0.1"],
                                                                            strict=True)))
    with pytest.raises(PredictionError, match=rf"line 3: key '{keys[2]}': {message}"):
        score_version(v, p)
    res = runner.invoke(app, ["score", str(v), str(p)])
    assert res.exit_code == 2 and res.output.startswith(f"error: {p}: line 3: key"), res.output
    assert len(res.output.strip().splitlines()) == 1 and re.search(message, res.output), res.output
    # any real number is a normality score (energy and max logit can be negative)
    p.write_text("".join(f'{{"key": "{k}", "score": {s}}}\n' for k, s in zip(keys, ["-3.5", "2", "-9", "0.1"],
                                                                            strict=True)))
    assert score_version(v, p).summary["SN1"]["SN2"]["AUROC"] == pytest.approx(75)  # percent


@pytest.mark.parametrize(("bad", "message"), [
    ("[1, 2, true, 0]", r"labels\[2\] is a boolean \(true\)"),
    ("[1, 2, 2.0, 0]", r"labels\[2\] is a float, expected an integer"),
    ("[1, 2, null, 0]", r"labels\[2\] is null, expected an integer"),
    ("[1, 2, \"2\", 0]", r"labels\[2\] is a string \('2'\), expected an integer"),
    ("[1, 2, 0, -1]", r"labels\[3\] is -1: labels must be non-negative integers"),
])
def test_segmentation_labels_are_checked(tmp_path, bad, message):
    key = "robo3d-semantickitti-c/000000/clean/0"
    rows = [{"key": key, "corruption": "clean", "severity": 0, "class_id": 0, "semantic": [0, 1, 2, 2]}]
    v = write_object_version(tmp_path / "s" / "1", "robo3d-semantickitti-c", rows)
    p = tmp_path / "seg.jsonl"
    p.write_text(f'{{"key": "{key}", "labels": {bad}}}\n')
    with pytest.raises(PredictionError, match=rf"line 1: key '{key}': {message}"):
        score_version(v, p)


def test_validation_refuses_booleans_on_its_own():
    """read_predictions refuses booleans while reading; the value checks do too, for rows from anywhere."""
    from bench_build.score.validate import class_ids, numbers, point_labels, probabilities

    rows = {"k": {"probs": [0.5, True], "pred": True, "score": False, "labels": [1, False]}}
    with pytest.raises(PredictionError, match=r"f: key 'k': probs\[1\] is a boolean \(true\), expected a number"):
        probabilities("f", rows, ["k"], 2, distribution=False)
    with pytest.raises(PredictionError, match=r"pred is a boolean \(true\), expected a class id 0…1"):
        class_ids("f", rows, ["k"], 2)
    with pytest.raises(PredictionError, match=r"score is a boolean \(false\), expected a number"):
        numbers("f", rows, ["k"], "score")
    with pytest.raises(PredictionError, match=r"labels\[1\] is a boolean \(false\), expected an integer"):
        point_labels("f", rows, "k", None)
