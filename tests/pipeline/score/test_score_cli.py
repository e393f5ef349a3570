"""`bench-build score` end to end: versions written in the real row schema, predictions in each format,
and every kind of bad prediction file rejected with the key or line named."""

from __future__ import annotations

import csv
import json
import re
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from bench_build.cli import app
from bench_build.format.schema import encode_rows, schema_with_metadata
from bench_build.manifests.manifest import MANIFEST_VERSION
from bench_build.score import PredictionError, score_version
from bench_build.score.kitti_boxes import parse_kitti_objects
from bench_build.score.kitti_c import overall_accuracy
from bench_build.score.kitti_eval import evaluate
from bench_build.score.predictions import class_probs, read_predictions
from bench_build.score.validate import ScoreError
from bench_build.sources.kitti import KittiSource, format_labels
from tests.pipeline.score.units import assert_units

runner = CliRunner()


def write_manifest(root: Path, dataset: str, shards: list[dict], severity_names=None) -> None:
    (root / "manifest.json").write_text(json.dumps({
        "manifest_version": MANIFEST_VERSION, "dataset": dataset, "version": "0.1.0", "source": {"kind": "test"},
        "recipe": {"name": dataset, "severity_names": severity_names or []}, "shards": shards}))


@pytest.fixture(scope="module")
def det_version(tmp_path_factory, demo_kitti_master) -> Path:
    """A kitti-c-style version of 4 demo frames: clean, gaussian_rad/1 (same boxes), beam_del/1."""
    root = tmp_path_factory.mktemp("det") / "kitti-c" / "0.1.0"
    src = KittiSource(demo_kitti_master)
    frames = [src.read(f) for f in src.list_frames()[:4]]
    shards = []
    for corruption, severity in (("clean", 0), ("gaussian_rad", 1), ("beam_del", 1)):
        rel = f"data/corruption={corruption}/severity={severity}/part-00000-of-00001.parquet"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        batch = encode_rows([(f"kitti-c/{f.frame_id}/{corruption}/{severity}", corruption, severity, f)
                             for f in frames])
        pq.write_table(pa.Table.from_batches([batch], schema=schema_with_metadata({"fields": list(frames[0].fields),
                                                                                  "intensity_scale": "unit"})),
                       root / rel)
        shards.append({"path": rel, "corruption": corruption, "severity": severity})
    write_manifest(root, "kitti-c", shards)
    return root


def _gt_text(demo_kitti_master, fid: str) -> str:
    frame = KittiSource(demo_kitti_master).read(fid)
    return format_labels(frame.boxes, frame.calib)


def write_results(root: Path, demo, version: Path, *, drop: dict | None = None, empty: set | None = None) -> Path:
    """Result files = the ground truth with score 0.9 (a perfect detector); ``empty`` partitions detect nothing."""
    fids = KittiSource(demo).list_frames()[:4]
    for part in ("clean", "gaussian_rad/1", "beam_del/1"):
        d = root / part
        d.mkdir(parents=True, exist_ok=True)
        for fid in fids:
            if drop and fid in drop.get(part, ()):
                continue
            text = "" if empty and part in empty else "".join(
                line + " 0.9\n" for line in _gt_text(demo, fid).splitlines() if not line.startswith("DontCare"))
            (d / f"{fid}.txt").write_text(text)
    return root


def test_detection_score_end_to_end(det_version, demo_kitti_master, tmp_path):
    preds = write_results(tmp_path / "pred", demo_kitti_master, det_version, empty={"beam_del/1"})
    res = runner.invoke(app, ["score", str(det_version), str(preds), "--out", str(tmp_path / "res" / "kitti")])
    assert res.exit_code == 0, res.output
    data = strict_json(tmp_path / "res" / "kitti.json")
    assert data["metric"] == "kitti-c"
    # the same numbers as the evaluator on the ground-truth text directly
    fids = KittiSource(demo_kitti_master).list_frames()[:4]
    gts = [parse_kitti_objects(_gt_text(demo_kitti_master, f), f, need_score=False) for f in fids]
    dts = [parse_kitti_objects((preds / "clean" / f"{f}.txt").read_text(), f, need_score=True) for f in fids]
    oa = overall_accuracy(evaluate(gts, dts, classes=("Car",))["Car"]["3d"])
    car = data["summary"]["Car/3d"]
    assert car["OA_clean"] == pytest.approx(oa) and oa > 0
    assert car["per_corruption"]["gaussian_rad"]["CE_AP"] == pytest.approx(0.0)  # same boxes, same detections
    assert car["per_corruption"]["beam_del"]["CE_AP"] == pytest.approx(oa)  # nothing detected: AP 0
    assert car["mCE_AP"] == pytest.approx(oa / 2)
    csv_rows = (tmp_path / "res" / "kitti.csv").read_text().splitlines()
    assert csv_rows[0] == "corruption,severity,metric,value,unit" and any("Car/3d/OA" in r for r in csv_rows)
    table = csv_table(tmp_path / "res" / "kitti.csv")  # the means as rows (a paper table is built from these)
    assert float(table[("all", "all", "Car/3d/mCE_AP")][0]) == pytest.approx(oa / 2)
    assert float(table[("gaussian_rad", "all", "Car/3d/CE_AP")][0]) == pytest.approx(0.0)
    assert float(table[("beam_del", "1", "Car/3d/CE")][0]) == pytest.approx(oa)
    assert float(table[("all", "all", "Car/3d/OA_clean")][0]) == pytest.approx(oa)
    assert table[("all", "all", "Car/mCR_TD")] == ("", "%")  # no detections in beam_del: undefined, empty
    assert float(table[("gaussian_rad", "all", "Car/CR_TD")][0]) == 0
    assert not any(k[2].endswith(("ground_truth", "/easy", "BR_clean")) for k in table)
    assert "mCE_AP" in res.output and "(values in %)" in " ".join(res.output.split())
    # not a terminal (a pipe, a CI log): the table keeps its natural width, no header or value cut to "…"
    assert "Car/3d/OA" in res.output and "…" not in res.output
    # the table shows OA; the APs it leaves out are said to be in the files, not dropped silently
    assert re.search(r"\(\d+ more metrics per partition, e\.g\. Car/3d/\w+/AP_R\d+: in --out's CSV and JSON\)",
                     " ".join(res.output.split()))
    assert_units(data)
    # Li et al.'s bug rates: a perfect detector's boxes are all true detections; no detections → no rate (null)
    rows = {(r["corruption"], r["severity"], r["metric"]): r["value"] for r in data["rows"]}
    assert rows[("clean", 0, "Car/BR_TD")] == 100 and rows[("clean", 0, "Car/BR_MD")] == 0
    assert rows[("clean", 0, "Car/N_det")] == sum(int((g.name == "Car").sum()) for g in gts) > 0
    assert rows[("beam_del", 1, "Car/N_det")] == 0 and rows[("beam_del", 1, "Car/BR_TD")] is None
    assert rows[("gaussian_rad", 1, "Car/CR_FD")] == 0
    bugs = data["summary"]["bug_rates"]["Car"]
    assert bugs["per_corruption"]["gaussian_rad"]["CR_TD"] == 0 and bugs["mCR_TD"] is None
    assert bugs["BR_clean"]["BR_TD"] == 100
    # AP with 11 recall points is in the files too (the README says so)
    assert ("clean", 0, "Car/3d/moderate/AP_R11") in rows
    assert "mCR_TD" in res.output and "bug rates" in res.output
    # score explains a small build's numbers: the ground-truth counts, and the R40 cap below 40 objects
    counts = data["summary"]["ground_truth"]["Car"]
    n_mod = counts["moderate"]
    assert 0 < n_mod < 40 and set(counts) == {"easy", "moderate", "hard"}
    assert rows[("clean", 0, "Car/3d/moderate/AP_R40")] <= 100 * (n_mod - 1) / 40 + 1e-9
    out = " ".join(res.output.split())
    assert "note: ground-truth objects (clean/0): Car easy" in out
    assert "fewer than 40 ground-truth objects cap AP_R40 at 100·(n − 1)/40" in out
    assert f"Car moderate ({n_mod}: at most {100 * (n_mod - 1) / 40:.1f})" in out


def test_damaged_or_missing_ground_truth_is_one_line_naming_the_file(det_version, demo_kitti_master, tmp_path):
    """Score read the version's ground truth with plain pyarrow: a flipped byte inside a data page of the boxes went
    into the scores as other boxes, and a missing file was a FileNotFoundError traceback. Both are one line naming
    the file (exit 2)."""
    import shutil

    from tests.pipeline.tamper import chunk_span, flip_file

    version = tmp_path / "kitti-c" / "0.1.0"
    shutil.copytree(det_version, version)
    preds = write_results(tmp_path / "pred", demo_kitti_master, version)
    rel = "data/corruption=gaussian_rad/severity=1/part-00000-of-00001.parquet"
    path = version / rel
    table = pq.read_table(path)
    pq.write_table(table, path, write_page_checksum=True)  # as builds write them
    md = pq.ParquetFile(path).metadata.row_group(0)
    boxes = next(md.column(j).path_in_schema for j in range(md.num_columns)
                 if md.column(j).path_in_schema.startswith("boxes") and chunk_span(path, md.column(j).path_in_schema))
    assert runner.invoke(app, ["score", str(version), str(preds)]).exit_code == 0
    flip_file(path, boxes)
    res = runner.invoke(app, ["score", str(version), str(preds)])
    out = " ".join(res.output.split())
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) <= 3, res.output
    assert out.startswith(f"error: {path}: a data page does not match its checksum"), out
    path.unlink()
    res = runner.invoke(app, ["score", str(version), str(preds)])
    out = " ".join(res.output.split())
    assert res.exit_code == 2 and out.startswith(f"error: {path}: ") and "Traceback" not in res.output, out
    assert "cannot be read" in out, out


def test_a_calibration_of_another_length_is_one_line_naming_the_file(det_version, demo_kitti_master, tmp_path):
    """A page header of a calib chunk (no page checksum covers it) damaged so that a matrix's list decodes with
    another length: scoring detections ended in "ValueError: cannot reshape array". It is refused as the reader
    refuses it, naming the file, row and matrix (exit 2)."""
    import shutil

    version = tmp_path / "kitti-c" / "0.1.0"
    shutil.copytree(det_version, version)
    preds = write_results(tmp_path / "pred", demo_kitti_master, version)
    path = version / "data/corruption=gaussian_rad/severity=1/part-00000-of-00001.parquet"
    table = pq.read_table(path)
    calib = table["calib"].to_pylist()
    calib[1]["P2"] = calib[1]["P2"][:8]
    i = table.schema.get_field_index("calib")
    pq.write_table(table.set_column(i, table.schema.field(i), pa.array(calib, table.schema.field(i).type)), path,
                   write_page_checksum=True)
    res = runner.invoke(app, ["score", str(version), str(preds)], terminal_width=400)
    out = " ".join(res.output.split())
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1 and "Traceback" not in out, res.output
    assert out.startswith(f"error: {path}: row 1 (frame {table['frame_id'][1]}): its calibration P2 has 8 values, "
                          "not 12; the file changed since the build"), out

def test_num_classes_where_no_class_probabilities_are_read_is_said_unused(det_version, demo_kitti_master, tmp_path):
    """--num-classes on a detection or 3DOS version was dropped without a word: the user believed it applied."""
    preds = write_results(tmp_path / "pred", demo_kitti_master, det_version)
    res = runner.invoke(app, ["score", str(det_version), str(preds), "--num-classes", "3"], terminal_width=400)
    assert res.exit_code == 0 and "note: --num-classes 3 is not used: kitti-c reads labels or boxes, not class " \
        "probabilities" in " ".join(res.output.split()), res.output

def test_detection_says_what_a_partial_version_or_stray_folder_leaves_out(det_version, demo_kitti_master, tmp_path):
    """A version pulled in part averages fewer corruptions than the paper's m-metrics; a prediction folder that
    names no partition is not scored; a class with no detections has no bug rate. Each is said, not silent."""
    import shutil

    version = tmp_path / "kitti-c" / "0.1.0"
    shutil.copytree(det_version, version)
    manifest = json.loads((version / "manifest.json").read_text())
    manifest["recipe"]["corruptions"] = [{"name": n} for n in ("gaussian_rad", "beam_del", "fog")]
    (version / "manifest.json").write_text(json.dumps(manifest))
    preds = write_results(tmp_path / "pred", demo_kitti_master, version, empty={"beam_del/1"})
    (preds / "fgo" / "1").mkdir(parents=True)  # a typo: no partition of the version
    # a severity the version lacks, and a partition one level too deep beside the one read: were silently unscored
    shutil.copytree(preds / "gaussian_rad" / "1", preds / "gaussian_rad" / "6")
    shutil.copytree(preds / "beam_del" / "1", preds / "beam_del" / "1" / "1")
    (preds / "clean" / "0").mkdir()  # accepted places, empty: nothing unread there
    (preds / "gaussian_rad" / "1" / "data").mkdir()
    # a result file in a corruption's folder, beside its severities: read by no partition, was not named either
    stray = next((preds / "gaussian_rad" / "1").glob("*.txt"))
    shutil.copyfile(stray, preds / "gaussian_rad" / stray.name)
    res = runner.invoke(app, ["score", str(version), str(preds)], terminal_width=400)
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert ("2 of the benchmark's 3 corruptions are in this version (beam_del, gaussian_rad): the m-metrics average "
            "those only") in out
    assert (f"{preds}: prediction folder(s) beam_del/1/1, fgo, gaussian_rad/6 name no partition of this version and "
            f"were not scored; file(s) gaussian_rad/{stray.name} lie outside every partition's folder and were not "
            "read") in out
    assert "Car: no detections in 1 partition(s) (beam_del/1): a bug rate is per detection" in out


def test_detection_partitions_in_parallel_processes_score_the_same(det_version, demo_kitti_master, tmp_path):
    from bench_build.score.run import _strict

    preds = write_results(tmp_path / "pred", demo_kitti_master, det_version, empty={"beam_del/1"})
    one, two = score_version(det_version, preds, workers=1), score_version(det_version, preds, workers=2)
    assert _strict(two.rows) == _strict(one.rows) and _strict(two.summary) == _strict(one.summary)


def strict_json(path: Path):
    """Parse as a strict JSON parser does: NaN / Infinity literals are errors."""
    def refuse(name):
        raise ValueError(f"{path}: non-standard JSON constant {name}")

    return json.loads(path.read_text(), parse_constant=refuse)


def test_detection_missing_and_foreign_result_files(det_version, demo_kitti_master, tmp_path):
    fids = KittiSource(demo_kitti_master).list_frames()[:4]
    preds = write_results(tmp_path / "p1", demo_kitti_master, det_version, drop={"gaussian_rad/1": fids[1:3]})
    with pytest.raises(PredictionError, match=rf"2 of 4 frames have no result file, e.g. {fids[1]}.txt, {fids[2]}.txt"):
        score_version(det_version, preds)
    preds = write_results(tmp_path / "p2", demo_kitti_master, det_version)
    (preds / "clean" / "007480.txt").write_text("")
    with pytest.raises(PredictionError, match=r"1 result files are not frames of this version .*007480.txt"):
        score_version(det_version, preds)
    (preds / "clean" / "007480.txt").unlink()
    (preds / "beam_del" / "1" / f"{fids[0]}.txt").write_text("Car 0 0 0 1 2 3 4 1.5 1.6 3.9 0 1.5 20 0\n")
    res = runner.invoke(app, ["score", str(det_version), str(preds)])
    assert res.exit_code == 2 and f"{fids[0]}.txt: line 1: 15 fields, expected 16" in res.output


@pytest.mark.parametrize(("line", "says"), [
    ("Car 0 0 x.63 1 2 3 4 1.5 1.6 3.9 0 1.5 20 0 0.9", "line 3: field 4 (alpha) is 'x.63', not a number"),
    ("Car 0 0 0 1 2 3 4 1.5 1.6 3.9 0 1.5 20 0 0.9x", "line 3: field 16 (score) is '0.9x', not a number"),
    ("Car 0 0 0 1 2 3 4 1.5 1.6 3.9 0 1.5 20 0 nan", "line 3: NaN/inf value"),  # was line 2: blank lines uncounted
])
def test_a_bad_result_line_is_named_by_its_line(det_version, demo_kitti_master, tmp_path, line, says):
    """A non-numeric field was "non-numeric field: could not convert string to float: 'x.63'", no line named."""
    preds = write_results(tmp_path / "pred", demo_kitti_master, det_version)
    bad = preds / "beam_del" / "1" / f"{KittiSource(demo_kitti_master).list_frames()[0]}.txt"
    bad.write_text(f"Car 0 0 0 1 2 3 4 1.5 1.6 3.9 0 1.5 20 0 0.9\n\n{line}\n")
    res = runner.invoke(app, ["score", str(det_version), str(preds)], terminal_width=400)
    assert res.exit_code == 2, res.output
    assert res.output.strip() == f"error: {bad}: {says}", res.output


@pytest.mark.parametrize(("second", "first"), [("clean/0", "clean"), ("beam_del/1/data", "beam_del/1")])
def test_detection_results_in_two_places_are_refused(det_version, demo_kitti_master, tmp_path, second, first):
    """``clean/`` and ``clean/0/`` (or a folder and its ``data/``) are both accepted layouts; with result files in
    both, the first found was scored and the other ignored without a word: stale empty files in ``clean/0/``
    gave OA_clean 0 and a negative mCE_AP, exit 0."""
    preds = write_results(tmp_path / "pred", demo_kitti_master, det_version)
    (preds / second).mkdir(parents=True)
    for f in (preds / first).glob("*.txt"):
        (preds / second / f.name).write_text("")
    res = runner.invoke(app, ["score", str(det_version), str(preds), "--out", str(tmp_path / "res" / "k")],
                        terminal_width=400)
    assert res.exit_code == 2, res.output
    part = "clean/0" if first == "clean" else "beam_del/1"
    assert (f"{preds}: result files for {part} in 2 places ({preds / second}, {preds / first}): keep one of them"
            in " ".join(res.output.split())), res.output
    assert not (tmp_path / "res").exists()


def test_nuscenes_results_in_two_places_are_refused(tmp_path):
    from bench_build.score.nuscenes_det import RESULT_NAME, find_results
    from bench_build.score.truth import Partition

    for d in ("clean", "clean/0"):
        (tmp_path / d).mkdir(parents=True, exist_ok=True)
        (tmp_path / d / RESULT_NAME).write_text("{}")
    with pytest.raises(PredictionError, match=r"results for clean/0 in 2 places \(.*clean/0/results_nusc.json, "
                                              r".*clean/results_nusc.json\): keep one"):
        find_results(tmp_path, Partition("clean", 0), [])
    (tmp_path / "clean" / RESULT_NAME).unlink()
    assert find_results(tmp_path, Partition("clean", 0), []) == tmp_path / "clean" / "0" / RESULT_NAME


# ---- object benchmarks ------------------------------------------------------------------------------

def write_object_version(root: Path, dataset: str, rows: list[dict]) -> Path:
    """Object rows {key, corruption, severity, class_id, [sigma], [known], [unknown_set]} as hive files."""
    parts: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        parts.setdefault((r["corruption"], r["severity"]), []).append(r)
    shards = []
    for (c, s), rs in parts.items():
        rel = f"data/corruption={c}/severity={s}/part-00000-of-00001.parquet"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        cols = {k: [r[k] for r in rs] for k in rs[0] if k not in ("corruption", "severity")}
        pq.write_table(pa.table(cols), root / rel)
        shards.append({"path": rel, "corruption": c, "severity": s})
    write_manifest(root, dataset, shards)
    return root


MNC = ("scale", "jitter", "rotate", "dropout_global", "dropout_local", "add_global", "add_local")


def test_modelnet_c_from_jsonl(tmp_path):
    rows, preds = [], []
    for c, sevs in [("clean", [0]), *[(c, [1, 2, 3, 4, 5]) for c in MNC]]:
        for s in sevs:
            for i in range(10):
                key = f"modelnet-c/{i:04d}/{c}/{s}"
                rows.append({"key": key, "corruption": c, "severity": s, "class_id": i % 4})
                # jitter: 6 of 10 right at every level, everything else 9 of 10 right
                right = i < (6 if c == "jitter" else 9)
                preds.append({"key": key, "pred": i % 4 if right else (i + 1) % 4})
    v = write_object_version(tmp_path / "modelnet-c" / "0.1.0", "modelnet-c", rows)
    p = tmp_path / "preds.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in preds))
    rep = score_version(v, p, num_classes=4)
    m = rep.summary
    # eval.py's fractions (rounded to 3 decimals), reported in percent
    assert m["OA_clean"] == 90.0 and m["per_corruption"]["jitter"]["OA"] == 60.0
    assert m["per_corruption"]["jitter"]["CE"] == round(100 * round(0.4 / (1 - 0.684), 3), 1)
    assert m["per_corruption"]["scale"]["CE"] == round(100 * round(0.1 / (1 - 0.906), 3), 1)
    assert_units(rep)
    res = runner.invoke(app, ["score", str(v), str(p), "--num-classes", "4"])
    assert res.exit_code == 0 and "mCE" in res.output and "(values in %)" in " ".join(res.output.split())
    assert m["mCE"] > 1 and f"mCE {m['mCE']:.2f}" in " ".join(res.output.split())  # printed in percent too
    # the CSV carries the paper table's numbers too, not only the partitions
    res = runner.invoke(app, ["score", str(v), str(p), "--num-classes", "4", "--out", str(tmp_path / "r" / "mnc")])
    assert res.exit_code == 0, res.output
    table = csv_table(tmp_path / "r" / "mnc.csv")
    assert table[("all", "all", "mCE")] == (str(m["mCE"]), "%") and table[("all", "all", "RmCE")][0] == str(m["RmCE"])
    assert table[("all", "all", "mOA")][0] == str(m["mOA"]) and table[("all", "all", "OA_clean")][0] == "90.0"
    assert table[("jitter", "all", "CE")][0] == str(m["per_corruption"]["jitter"]["CE"])
    assert table[("jitter", "all", "OA")][0] == "60.0" and ("jitter", "3", "OA") in table


def csv_table(path: Path) -> dict[tuple[str, str, str], tuple[str, str]]:
    """A score CSV as {(corruption, severity, metric): (value, unit)}; each triple once."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    table = {(r["corruption"], r["severity"], r["metric"]): (r["value"], r["unit"]) for r in rows}
    assert len(table) == len(rows), "a (corruption, severity, metric) twice"
    return table


def test_modelnet40_e_and_3dos_from_parquet(tmp_path):
    probs = [[0.88, 0.12], [0.62, 0.38], [0.33, 0.67], [0.56, 0.44]]
    labels = [0, 1, 1, 0]
    sig = [[0.01, 0.01], [0.02, 0.04], [0.02, 0.02], [0.05, 0.03]]
    rows = [{"key": f"modelnet40-e/{i}/noise/1", "corruption": "noise", "severity": 1, "class_id": labels[i],
             "sigma": sig[i]} for i in range(4)]
    v = write_object_version(tmp_path / "modelnet40-e" / "1", "modelnet40-e", rows)
    p = tmp_path / "p.parquet"
    pq.write_table(pa.table({"key": [r["key"] for r in rows], "probs": probs}), p)
    rep = score_version(v, p, num_classes=2)
    assert_units(rep)
    m = rep.summary["noise/1"]  # percent, the correlations as they are
    assert m["accuracy"] == 75.0 and m["AUROC_error"] == pytest.approx(100 * 2 / 3)
    assert m["ECE"] == pytest.approx(100 * (0.12 / 4 + 2 / 4 * abs(0.645 - 0.5) + 0.44 / 4))
    unc = 1 - np.max(probs, axis=1)
    assert m["pearson_all"] == pytest.approx(0.75 * np.corrcoef([0.01, 0.03, 0.02, 0.04], unc)[0, 1])
    # 3DOS: per scenario, known test shapes vs each unknown set and their union; train shapes are not scored
    known = [0.9, 0.8, 0.7, 0.6]
    base = {"corruption": "clean", "severity": 0}
    rows = [{"key": f"3dos/SN1/test/k{i}/clean/0", **base, "class_id": i, "known": True, "unknown_set": None,
             "scenario": "SN1", "split": "test"} for i in range(4)]
    rows += [{"key": f"3dos/SN1/test/u{i}/clean/0", **base, "class_id": -1, "known": False, "unknown_set": s,
              "scenario": "SN1", "split": "test"} for i, s in enumerate(["SN2", "SN2", "SN3", "SN3"])]
    rows += [{"key": f"3dos/SN1/train/k{i}/clean/0", **base, "class_id": i, "known": True, "unknown_set": None,
              "scenario": "SN1", "split": "train"} for i in range(3)]
    rows += [{"key": f"3dos/SR1/test/{n}/clean/0", **base, "class_id": 0, "known": n == "k", "unknown_set":
              None if n == "k" else "SR3", "scenario": "SR1", "split": "test"} for n in ("k", "u")]
    v = write_object_version(tmp_path / "3dos" / "1", "3dos", rows)
    p = tmp_path / "o.jsonl"
    scores = [*known, 0.6, 0.2, 0.95, 0.1]
    p.write_text("".join(json.dumps({"key": r["key"], "score": s}) + "\n" for r, s in zip(rows, scores, strict=False))
                 + json.dumps({"key": "3dos/SR1/test/k/clean/0", "score": 0.3}) + "\n"
                 + json.dumps({"key": "3dos/SR1/test/u/clean/0", "score": 0.7}) + "\n")
    rep = score_version(v, p)
    assert_units(rep)
    m = rep.summary
    assert m["SN1"]["SN2"]["AUROC"] == pytest.approx(100 * 7.5 / 8) and m["SN1"]["SN2"]["FPR95"] == pytest.approx(40)
    assert m["SN1"]["union"]["AUROC"] == pytest.approx(100 * 11.5 / 16)
    assert m["SN1"]["union"]["FPR95"] == pytest.approx(45)
    assert m["SN1"]["union"]["n_known"] == 4  # counts stay counts
    assert m["SR1"]["SR3"]["AUROC"] == 0.0 and "union" not in m["SR1"]  # one unknown set: no union
    res = runner.invoke(app, ["score", str(v), str(p)])
    assert res.exit_code == 0 and "known (positive) vs unknown" in res.output and "union" in res.output
    assert "AUROC, FPR95 in %" in " ".join(res.output.split())


def test_predictions_for_train_examples_are_ignored_with_a_note(tmp_path):
    base = {"corruption": "clean", "severity": 0, "scenario": "SN1", "class_id": 0, "unknown_set": None}
    rows = [{"key": f"3dos/SN1/{sp}/{n}/clean/0", **base, "known": n.startswith("k"), "split": sp,
             "unknown_set": None if n.startswith("k") else "SN2"}
            for sp, names in (("test", ("k0", "k1", "u0")), ("train", ("k2", "k3")), ("val", ("k4",)))
            for n in names]
    v = write_object_version(tmp_path / "3dos" / "1", "3dos", rows)
    p = tmp_path / "o.jsonl"
    p.write_text("".join(json.dumps({"key": r["key"], "score": 0.9 - 0.1 * i}) + "\n" for i, r in enumerate(rows)))
    rep = score_version(v, p)
    assert rep.summary["SN1"]["SN2"]["AUROC"] == 100.0 and rep.summary["SN1"]["SN2"]["n_known"] == 2
    assert rep.notes == [f"{p}: 3 predictions for train/val examples were ignored (only the test split is scored), "
                         "e.g. 3dos/SN1/train/k2/clean/0"]
    res = runner.invoke(app, ["score", str(v), str(p), "--out", str(tmp_path / "r")])
    assert res.exit_code == 0 and "3 predictions for train/val examples were ignored" in " ".join(res.output.split())
    assert strict_json(tmp_path / "r.json")["notes"] == rep.notes
    # a key that is in no split of the build is still refused
    with p.open("a") as f:
        f.write(json.dumps({"key": "3dos/SN1/test/k9/clean/0", "score": 0.5}) + "\n")
    with pytest.raises(PredictionError, match="1 key is not an example of this version: 3dos/SN1/test/k9/clean/0"):
        score_version(v, p)
    # a file of train/val predictions only: said as such, not as a file holding no predictions
    _jsonl(p, [{"key": r["key"], "score": 0.5} for r in rows if r["split"] != "test"])
    with pytest.raises(PredictionError, match=r"o.jsonl: all 3 predictions are for train/val examples; only the test "
                                              r"split is scored, and none of its 3 examples has one, e.g. "
                                              r"3dos/SN1/test/k0/clean/0$"):
        score_version(v, p)


def test_3dos_says_when_every_scenario_ranks_unknown_above_known(tmp_path):
    """An anomaly score (energy, a distance: higher = unknown) written as 3DOS's normality score scored AUROC
    100 − AUROC in every scenario with no word: a sign the user can fix, said once; one scenario below 50 is not."""
    base = {"corruption": "clean", "severity": 0, "class_id": 0, "split": "test"}
    rows = [{"key": f"3dos/{sc}/test/{n}{i}/clean/0", **base, "scenario": sc, "known": n == "k",
             "unknown_set": None if n == "k" else u} for sc, u in (("SN1", "SN2"), ("SR1", "SR2"))
            for n in ("k", "u") for i in range(3)]
    v = write_object_version(tmp_path / "3dos" / "1", "3dos", rows)
    anomaly = [0.1, 0.2, 0.3, 0.7, 0.8, 0.9] * 2  # known first: an anomaly score ranks them low
    p = _jsonl(tmp_path / "o.jsonl", [{"key": r["key"], "score": a} for r, a in zip(rows, anomaly, strict=True)])
    rep = score_version(v, p)
    assert rep.summary["SN1"]["SN2"]["AUROC"] == 0.0 and rep.summary["SR1"]["SR2"]["AUROC"] == 0.0
    said = ("AUROC is below 50 in every scenario (2): 3DOS reads 'score' as a normality score, higher = known (MSP, "
            "max logit, negative energy); an anomaly score (higher = unknown: energy, a distance) must be negated, "
            "which turns each AUROC into 100 − AUROC")
    assert rep.notes == [said]
    res = runner.invoke(app, ["score", str(v), str(p)], terminal_width=400)
    assert res.exit_code == 0 and said in " ".join(res.output.split()), res.output
    negated = _jsonl(tmp_path / "n.jsonl", [{"key": r["key"], "score": -a} for r, a in zip(rows, anomaly, strict=True)])
    rep = score_version(v, negated)
    assert rep.summary["SN1"]["SN2"]["AUROC"] == 100.0 and rep.notes == []
    mixed = _jsonl(tmp_path / "m.jsonl", [{"key": r["key"], "score": a if r["scenario"] == "SN1" else -a}
                                          for r, a in zip(rows, anomaly, strict=True)])
    assert score_version(v, mixed).notes == []  # one scenario below chance is a model's, not a sign's
    res = runner.invoke(app, ["score", str(v), str(mixed), "--num-classes", "5"], terminal_width=400)
    assert res.exit_code == 0 and "--num-classes 5 is not used: 3dos reads one normality score per example" in \
        " ".join(res.output.split()), res.output


def test_3dos_says_where_fpr95_lies_on_a_flat_stretch_of_the_roc(tmp_path):
    """19 of 20 known shapes score high, unknowns lie between them and the last one: the ROC is flat at exactly 95 %
    TPR from FPR 0 to 83.3 %. FPR95 stays 3D_OS's 83.3 (parity), and a note gives the range, so 0 is not a surprise."""
    base = {"corruption": "clean", "severity": 0, "class_id": 0, "split": "test", "scenario": "SN1"}
    rows = [{"key": f"3dos/SN1/test/{n}{i}/clean/0", **base, "known": n == "k", "unknown_set": None if n == "k"
             else "SN2"} for n, count in (("k", 20), ("u", 6)) for i in range(count)]
    v = write_object_version(tmp_path / "3dos" / "1", "3dos", rows)
    scores = [10.0] * 19 + [0.0] + [5.0, 4.0, 3.0, 2.0, 1.0, -1.0]
    p = _jsonl(tmp_path / "o.jsonl", [{"key": r["key"], "score": x} for r, x in zip(rows, scores, strict=True)])
    rep = score_version(v, p)
    assert rep.summary["SN1"]["SN2"]["FPR95"] == pytest.approx(100 * 5 / 6)
    said = ("FPR95 is a range where the ROC runs flat at exactly 95 % TPR (SN1/SN2 0.0–83.3 %): FPR95 is its high "
            "end, as 3D_OS's evaluator computes it (np.interp on the ROC), kept for parity with published numbers; "
            "the first threshold that accepts 95 % of the known shapes gives the low end")
    assert rep.notes == [said]
    res = runner.invoke(app, ["score", str(v), str(p)], terminal_width=400)
    assert res.exit_code == 0 and said in " ".join(res.output.split()), res.output
    moved = _jsonl(tmp_path / "m.jsonl", [{"key": r["key"], "score": 6.0 if x == 0.0 else x}
                                          for r, x in zip(rows, scores, strict=True)])
    assert score_version(v, moved).notes == []  # no unknown between the 19th and 20th known: one value



@pytest.mark.parametrize(("dataset", "splits"), [("modelnet40-e", ("train",)), ("3dos", ("train", "val"))])
def test_a_version_without_its_test_split_is_refused(tmp_path, dataset, splits):
    """Only test examples are scored: a build of the train split alone (``run modelnet40-e --split train``) scored
    as an empty table with exit 0, its predictions ignored with a note, which reads as a score of nothing."""
    rows = [{"key": f"{dataset}/{s}/{i}/clean/0", "corruption": "clean", "severity": 0, "class_id": 0,
             "sigma": [0.01], "known": True, "split": s} for s in splits for i in range(2)]
    v = write_object_version(tmp_path / dataset / "1", dataset, rows)
    p = _jsonl(tmp_path / "p.jsonl", [{"key": r["key"], "probs": [1.0, 0.0], "score": 0.5} for r in rows])
    res = runner.invoke(app, ["score", str(v), str(p), "--num-classes", "2", "--out", str(tmp_path / "res" / "s")],
                        terminal_width=400)
    assert res.exit_code == 2, res.output
    assert res.output.strip() == (f"error: {v}: no test examples to score: the version holds only the "
                                  f"{', '.join(splits)} split{'s' * (len(splits) > 1)}; score a build that holds "
                                  "the test split"), res.output
    assert not (tmp_path / "res").exists()


def test_segmentation_miou_and_bad_label_count(tmp_path):
    rows = [{"key": "robo3d-semantickitti-c/000000/clean/0", "corruption": "clean", "severity": 0, "class_id": 0,
             "semantic": [0, 1, 1, 2, 2, 2, 0]}]
    v = write_object_version(tmp_path / "s" / "1", "robo3d-semantickitti-c", rows)
    p = tmp_path / "seg.jsonl"
    p.write_text(json.dumps({"key": rows[0]["key"], "labels": [0, 1, 2, 2, 2, 1, 2]}) + "\n")
    rep = score_version(v, p)
    assert rep.metric == "robo3d-seg" and rep.rows[0]["value"] == pytest.approx(100 * (1 / 3 + 1 / 2) / 2)
    assert_units(rep)
    p.write_text("\n" + json.dumps({"key": rows[0]["key"], "labels": [0, 1]}) + "\n")
    with pytest.raises(PredictionError, match=rf"^{p}: line 2: key '{rows[0]['key']}': 2 labels for 7 points$"):
        score_version(v, p)


def test_semantickitti_ground_truth_goes_through_the_learning_map(tmp_path):
    rows = [{"key": "robo3d-semantickitti-c/000000/clean/0", "corruption": "clean", "severity": 0, "class_id": 0,
             "semantic": [10, 10, 40, 40, 52, 0]}]  # raw ids: car, car, road, road, "other-structure" → 0, unlabelled
    v = write_object_version(tmp_path / "s" / "1", "robo3d-semantickitti-c", rows)
    m = json.loads((v / "manifest.json").read_text())
    m["source"]["learning_map"] = {"0": 0, "10": 1, "40": 9, "52": 0}
    (v / "manifest.json").write_text(json.dumps(m))
    p = tmp_path / "seg.jsonl"
    p.write_text(json.dumps({"key": rows[0]["key"], "labels": [1, 9, 9, 9, 5, 1]}) + "\n")  # train ids
    # car: tp 1, fn 1 → 1/2; road: tp 2, fp 1 → 2/3; the two ignored points do not count
    assert score_version(v, p).rows[0]["value"] == pytest.approx(100 * (1 / 2 + 2 / 3) / 2)


def test_wod_c_labels_are_the_recorded_classes(tmp_path):
    """WOD-C records no learning map (labels are Segmentation.Type ids 0…22), so every id was a class: the fog,
    snow and crosstalk points' Robo3D labels (23, 24, 25; the paper maps them to ignore) were classes no model
    predicts, and a model right on every real class scored below 100 mIoU there; and any predicted label was
    taken and sized the confusion matrix (a label of 10⁹ ended in a MemoryError traceback). Now the ground truth
    past the recorded classes is ignored, and a prediction past them is refused naming the key and the point."""
    from bench_build.sources.waymo import SEG_CLASSES

    key = "robo3d-wod-c/ctx-0/fog/1"
    rows = [{"key": key, "corruption": "fog", "severity": 1, "class_id": 0, "semantic": [1, 1, 18, 18, 0, 23, 23]}]
    v = write_object_version(tmp_path / "w" / "1", "robo3d-wod-c", rows)
    m = json.loads((v / "manifest.json").read_text())
    m["source"] = {"kind": "waymo", "classes": list(SEG_CLASSES)}
    (v / "manifest.json").write_text(json.dumps(m))
    p = tmp_path / "seg.jsonl"
    p.write_text(json.dumps({"key": key, "labels": [1, 1, 18, 18, 5, 0, 18]}) + "\n")
    assert score_version(v, p).rows[0]["value"] == 100.0  # the undefined point and the two fog points do not count
    p.write_text(json.dumps({"key": key, "labels": [1, 22, 18, 18, 5, 0, 0]}) + "\n")
    # car: tp 1, fn 1 → 1/2; road 2/2; sidewalk: fp 1 → 0
    assert score_version(v, p).rows[0]["value"] == pytest.approx(100 * (1 / 2 + 1 + 0) / 3)
    p.write_text(json.dumps({"key": key, "labels": [1, 1, 18, 10**9, 0, 0, 0]}) + "\n")
    res = runner.invoke(app, ["score", str(v), str(p), "--out", str(tmp_path / "res" / "w")])
    assert res.exit_code == 2, res.output
    assert (f"{p}: line 1: key '{key}': label 1000000000 (point 3) is not a class id 0…22 of the 23 classes the "
            "build records") in " ".join(res.output.split())
    assert not (tmp_path / "res").exists()


def test_nuscenes_ground_truth_goes_through_the_lidarseg_16_class_map(tmp_path):
    pytest.importorskip("nuscenes", reason="the lidarseg map is the devkit's: the nuscenes extra")
    from bench_build.sources.nuscenes import FINE_CLASSES, FINE_INDEX, lidarseg_learning_map

    fine = ["human.pedestrian.adult", "human.pedestrian.child", "human.pedestrian.police_officer",  # → pedestrian 7
            "vehicle.bus.bendy", "vehicle.bus.rigid", "vehicle.car",                               # → bus 3, car 4
            "noise", "animal", "vehicle.ego", "flat.driveable_surface"]                            # → 0, 0, 0, 11
    key = "robo3d-nuscenes-c/" + "a" * 32 + "/clean/0"
    rows = [{"key": key, "corruption": "clean", "severity": 0, "class_id": 0,
             "semantic": [FINE_INDEX[n] for n in fine]}]
    v = write_object_version(tmp_path / "n" / "1", "robo3d-nuscenes-c", rows)
    m = json.loads((v / "manifest.json").read_text())
    categories = {str(i): n for i, n in enumerate(FINE_CLASSES)}
    m["source"] = {"kind": "nuscenes", "categories": categories,
                   "learning_map": {str(k): c for k, c in lidarseg_learning_map(FINE_INDEX)[0].items()}}
    (v / "manifest.json").write_text(json.dumps(m))
    p = tmp_path / "seg.jsonl"
    p.write_text(json.dumps({"key": key, "labels": [7, 7, 4, 3, 3, 4, 5, 9, 16, 11]}) + "\n")  # the 16 train ids
    # pedestrian: tp 2, fn 1 → 2/3; bus: 2/2; car: tp 1, fp 1 → 1/2; driveable surface 1/1; the three ignored
    # points (noise, animal, ego) and their predictions 5, 9, 16 do not count
    expected = 100 * (2 / 3 + 1 + 1 / 2 + 1) / 4
    assert score_version(v, p).rows[0]["value"] == pytest.approx(expected)
    m["source"] = {"kind": "nuscenes", "categories": categories}  # a build from before the map was recorded
    (v / "manifest.json").write_text(json.dumps(m))
    assert score_version(v, p).rows[0]["value"] == pytest.approx(expected)
    p.write_text(json.dumps({"key": key, "labels": [7, 7, 17, 3, 3, 4, 0, 0, 0, 11]}) + "\n")  # a raw index
    with pytest.raises(PredictionError, match=rf"key '{key}': label 17 \(point 2\) is not a train id 0…16"):
        score_version(v, p)
    res = runner.invoke(app, ["score", str(v), str(p)])
    assert res.exit_code == 2 and key in res.output


@pytest.fixture
def small_mnc(tmp_path) -> Path:
    rows = [{"key": f"modelnet-c/{i:04d}/clean/0", "corruption": "clean", "severity": 0, "class_id": 0}
            for i in range(8)]
    return write_object_version(tmp_path / "modelnet-c" / "0.1.0", "modelnet-c", rows)


def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


@pytest.mark.parametrize(("rows", "message"), [
    ([{"key": f"modelnet-c/{i:04d}/clean/0", "probs": [1, 0]} for i in range(5)],
     r"3 of 8 examples have no prediction, e.g. modelnet-c/0005/clean/0, modelnet-c/0006/clean/0"),
    ([{"key": f"modelnet-c/{i:04d}/clean/0", "probs": [1, 0]} for i in range(8)]
     + [{"key": "modelnet-c/0003/clean/0", "probs": [0, 1]}],
     r"line 9: duplicate key 'modelnet-c/0003/clean/0' \(first at line 4\)"),
    ([{"key": f"modelnet-c/{i:04d}/clean/0", "probs": [1, 0]} for i in range(7)]
     + ['{"key": "modelnet-c/0007/clean/0", "probs": [NaN, 1.0]}'],
     r"line 8: key 'modelnet-c/0007/clean/0': probs\[0\] is nan \(NaN/inf\)"),
    ([{"key": f"modelnet-c/{i:04d}/clean/0", "probs": [0.2, 0.3, 0.5]} for i in range(8)],
     r"key 'modelnet-c/0000/clean/0': probs has 3 classes, --num-classes is 2"),
    ([{"key": f"kitti-c/{i:06d}/fog/1", "probs": [1, 0]} for i in range(8)],
     r"8 keys are from another benchmark \(kitti-c\), this version is 'modelnet-c': kitti-c/000000/fog/1"),
    ([{"key": f"modelnet-c/{i:04d}/clean/0", "probs": [1, 0]} for i in range(9)],
     r"1 key is not an example of this version: modelnet-c/0008/clean/0"),
    # an empty file, or keys of another version: said as such, not as "8 of 8 examples have no prediction"
    ([], r"bad.jsonl: the file holds no predictions; this version has 8 examples to score, "
         r"e.g. modelnet-c/0000/clean/0$"),
    (["", "  "], r"bad.jsonl: the file holds no predictions"),
    ([{"key": f"modelnet-c/test/{i:05d}/clean/0", "pred": 0} for i in range(8)],
     r"bad.jsonl: none of its 8 keys is an example of this version \(predictions for another version or build\?\): "
     r"modelnet-c/test/00000/clean/0; this version's keys are like modelnet-c/0000/clean/0$"),
    # a typo'd key: the example it should name lacks a prediction, and the file has a key this version lacks
    ([{"key": f"modelnet-c/{i:04d}/clean/0", "pred": 0} for i in range(7)] + [{"key": "modelnet-c/007/clean/0",
                                                                                "pred": 0}],
     r"1 of 8 examples have no prediction, e.g. modelnet-c/0007/clean/0; and 1 key is not an example of this "
     r"version: modelnet-c/007/clean/0$"),
    ([{"key": f"modelnet-c/{i:04d}/clean/0", "pred": 0} for i in range(8)] + [{"key": "kitti-c/000000/fog/1"}],
     r"1 key is from another benchmark \(kitti-c\), this version is 'modelnet-c': kitti-c/000000/fog/1$"),
    (['{"key": "modelnet-c/0000/clean/0", "probs": [1, 0]', "x"], r"line 1: not JSON"),
    # past int()'s digit limit json.loads raises a plain ValueError: it was a traceback
    (['{"key": "modelnet-c/0000/clean/0", "probs": [1' + "0" * 5000 + ", 0]}"],
     r"line 1: an integer of more than \d+ digits, not a finite number"),
    # nested deeper than json.loads recurses: a RecursionError traceback
    ([{"key": "modelnet-c/0000/clean/0", "probs": [1, 0]},
      '{"key": "x", "probs": ' + "[" * 100_000 + "]" * 100_000 + "}"],
     r"line 2: JSON nested 100001 levels deep, deeper than Python's JSON parser reads"),
    ([{"probs": [1, 0]}], r"line 1: no string 'key' field"),
    ([{"key": f"modelnet-c/{i:04d}/clean/0", "probs": [1, 0], "pred": 0} for i in range(7)]  # both, agreeing: fine
     + [{"key": "modelnet-c/0007/clean/0", "probs": [0.9, 0.1], "pred": 1}],
     r"line 8: key 'modelnet-c/0007/clean/0': 'pred' 1 is not the argmax of its 'probs' \(0\)"),
])
def test_bad_prediction_files_are_named(small_mnc, tmp_path, rows, message):
    p = _jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(PredictionError, match=message):
        score_version(small_mnc, p, num_classes=2)
    res = runner.invoke(app, ["score", str(small_mnc), str(p), "--num-classes", "2"])
    assert res.exit_code == 2 and "bad.jsonl" in res.output


@pytest.mark.parametrize(("inserted", "says"), [
    # past int()'s digit limit json.loads raises a plain ValueError: score ended in a traceback
    ('"note": 1' + "0" * 5000, f"line 2: an integer of more than {sys.get_int_max_str_digits()} digits, not a "
                                "finite number"),
    # nested deeper than json.loads recurses: a RecursionError traceback
    ('"note": ' + "[" * 100_000 + "]" * 100_000, "line 2: JSON nested 100001 levels deep, deeper than Python's "
                                                 "JSON parser reads"),
])
def test_a_damaged_manifest_is_one_line_naming_it(small_mnc, tmp_path, inserted, says):
    """The manifest score reads goes through the parser prediction files go through: valid JSON that Python's
    parser refuses is one line naming the manifest and the line, exit 2."""
    manifest = small_mnc / "manifest.json"
    manifest.write_text("{\n" + inserted + ",\n" + manifest.read_text().lstrip()[1:])
    p = _jsonl(tmp_path / "p.jsonl", [{"key": f"modelnet-c/{i:04d}/clean/0", "pred": 0} for i in range(8)])
    res = runner.invoke(app, ["score", str(small_mnc), str(p)], terminal_width=400)
    assert res.exit_code == 2, res.output
    assert " ".join(res.output.split()) == f"error: {manifest}: {says}"


@pytest.mark.parametrize(("text", "says"), [
    ('{"tables": {', "not valid JSON: Expecting property name enclosed in double quotes"),
    ('{"tables": 1' + "0" * 5000 + "}", f"line 1: an integer of more than {sys.get_int_max_str_digits()} digits"),
])
def test_a_damaged_baseline_file_is_an_error_naming_it(tmp_path, monkeypatch, text, says):
    """The papers' baseline tables ship as JSON files; a damaged one (a botched install) was a JSONDecodeError or
    ValueError traceback. It is a ScoreError naming the file."""
    from types import SimpleNamespace

    from bench_build.score import baselines
    from bench_build.score.validate import ScoreError

    (tmp_path / "baselines").mkdir()
    (tmp_path / "baselines" / "robo3d.json").write_text(text)
    monkeypatch.setattr(baselines, "resources", SimpleNamespace(files=lambda package: tmp_path))
    baselines.load_baseline.cache_clear()
    try:
        with pytest.raises(ScoreError) as e:
            baselines.robo3d_baseline("kitti-c")
    finally:
        baselines.load_baseline.cache_clear()
    assert str(e.value).startswith(f"{tmp_path / 'baselines' / 'robo3d.json'}: {says}"), str(e.value)


@pytest.mark.parametrize(("dataset", "text", "says"), [
    ("modelnet-c", json.dumps({"key": "modelnet-c/0000/clean/0", "probs": [1, 0]}, indent=2),
     "line 1: not JSON: Expecting property name enclosed in double quotes"),
    ("modelnet-c", json.dumps([{"key": "modelnet-c/0000/clean/0", "probs": [1, 0]}]),
     "line 1: expected a JSON object, found an array"),
    # WOD-C: which task the file is for is read first, from its fields
    ("robo3d-wod-c", json.dumps([{"key": "robo3d-wod-c/f0/clean/0", "labels": [1]}], indent=1),
     "line 1: not JSON: Expecting value"),
])
def test_a_pretty_printed_json_file_is_told_the_format(tmp_path, dataset, text, says):
    """A .json file written with json.dump (indented, or a list of rows) was refused as "line 1: not JSON" or
    "expected a JSON object", without saying that predictions are one JSON object per line."""
    rows = [{"key": f"{dataset}/f0/clean/0", "corruption": "clean", "severity": 0, "class_id": 0, "semantic": [1]}]
    v = write_object_version(tmp_path / dataset / "1", dataset, rows)
    p = tmp_path / "preds.json"
    p.write_text(text + "\n")
    res = runner.invoke(app, ["score", str(v), str(p), "--num-classes", "2"], terminal_width=400)
    assert res.exit_code == 2, res.output
    assert res.output.strip() == (f"error: {p}: {says}; predictions are JSON Lines: one JSON object per line (a "
                                  "pretty-printed file spreads one object over several lines)"), res.output


@pytest.mark.parametrize(("dataset", "text", "says"), [
    # JSON Lines: the file as a whole is no JSON, so each line is read; the second holds the integer
    ("robo3d-wod-c", '{"key": "a", "labels": [1]}\n{"key": "b", "labels": [1' + "0" * 5000 + "]}\n",
     f"line 2: an integer of more than {sys.get_int_max_str_digits()} digits, not a finite number"),
    ("robo3d-wod-c", '{"key": "a", "labels": [1]}\n\n{"key": "b", "labels": ' + "[" * 50_000 + "]" * 50_000 + "}\n",
     "line 3: JSON nested 50001 levels deep, deeper than Python's JSON parser reads"),
    # one JSON document (a nuScenes results file): the line the integer or the nesting is on
    ("robo3d-nuscenes-c", '{\n "meta": {"note": "1' + "1" * 5000 + '"},\n "results": {\n  "t": [1' + "0" * 5000
     + "]}}\n", f"line 4: an integer of more than {sys.get_int_max_str_digits()} digits, not a finite number"),
    ("robo3d-nuscenes-c", '{\n "meta": {},\n "results": {"t": ' + "[" * 50_000 + "]" * 50_000 + "}}\n",
     "line 3: JSON nested 50002 levels deep, deeper than Python's JSON parser reads"),
])
def test_json_the_parser_cannot_read_is_one_line_naming_the_line(tmp_path, dataset, text, says):
    """Which task a nuScenes-C / WOD-C prediction file is for is read from its fields: an integer past Python's
    int() digit limit or nesting past its recursion limit there ended in a ValueError or RecursionError
    traceback (exit 1)."""
    rows = [{"key": f"{dataset}/f0/clean/0", "corruption": "clean", "severity": 0, "class_id": 0, "semantic": [1]}]
    v = write_object_version(tmp_path / dataset / "1", dataset, rows)
    p = tmp_path / "preds.json"
    p.write_text(text)
    res = runner.invoke(app, ["score", str(v), str(p), "--out", str(tmp_path / "res" / "s")], terminal_width=400)
    assert res.exit_code == 2, res.output
    assert res.output.strip() == f"error: {p}: {says}", res.output
    assert not (tmp_path / "res").exists()


@pytest.mark.parametrize("case", ["a KITTI result file", "a KITTI result file read by a worker process",
                                  "a JSON Lines file"])
def test_a_folder_where_a_file_goes_is_refused(case, det_version, demo_kitti_master, small_mnc, tmp_path):
    """A folder named like a prediction file (``preds.jsonl/``) or a result file (``clean/000000.txt/``) ended in
    the CLI's "Is a directory" with exit 1, which says work may have begun: scoring writes nothing before it is
    done, so it is a refusal (exit 2) naming the folder, wherever a reader meets it."""
    if case.startswith("a KITTI"):
        version, preds = det_version, write_results(tmp_path / "pred", demo_kitti_master, det_version)
        folder = preds / "clean" / f"{KittiSource(demo_kitti_master).list_frames()[1]}.txt"
        folder.unlink()
        folder.mkdir()
        args = ["--workers", "2"] if "worker" in case else []  # the error comes back through the process pool
    else:
        version, preds = small_mnc, tmp_path / "preds.jsonl"
        folder = preds
        (preds / "part-0").mkdir(parents=True)
        args = ["--num-classes", "2"]
    res = runner.invoke(app, ["score", str(version), str(preds), *args, "--out", str(tmp_path / "res" / "s")],
                        terminal_width=400)
    assert res.exit_code == 2, res.output
    assert len(res.output.strip().splitlines()) == 1, res.output
    assert res.output.startswith(f"error: {folder}: is a directory where a file was expected"), res.output
    assert not (tmp_path / "res").exists()


@pytest.mark.parametrize(("name", "files", "says"), [
    ("empty.parquet", [], "the directory holds no prediction files"),  # was: no 'key' column (columns: )
    ("empty", [], "the directory holds no prediction files"),  # was: unknown prediction format ''
    ("done.parquet", ["_SUCCESS", ".crc/x"], "the directory holds no prediction files"),  # pyarrow skips these
    ("preds", ["preds.jsonl"], "is a directory where a file was expected"),
    ("preds.jsonl", [], "is a directory where a file was expected"),  # its name says a file, empty or not
])
def test_a_folder_without_prediction_files_is_named(small_mnc, tmp_path, name, files, says):
    folder = tmp_path / name
    folder.mkdir()
    for f in files:
        (folder / f).parent.mkdir(parents=True, exist_ok=True)
        (folder / f).write_text("")
    res = runner.invoke(app, ["score", str(small_mnc), str(folder), "--num-classes", "2"], terminal_width=400)
    assert res.exit_code == 2, res.output
    assert res.output.strip() == (f"error: {folder}: {says}; predictions are a .jsonl, .json or .ndjson file, or "
                                  ".parquet (a file, or a folder of Parquet files)"), res.output


def test_a_folder_of_parquet_files_is_one_table(small_mnc, tmp_path):
    folder = tmp_path / "preds.parquet"
    folder.mkdir()
    keys = [f"modelnet-c/{i:04d}/clean/0" for i in range(8)]
    pq.write_table(pa.table({"key": keys[:5], "pred": [0] * 5}), folder / "part-0.parquet")
    pq.write_table(pa.table({"key": keys[5:], "pred": [1] * 3}), folder / "part-1.parquet")
    (folder / "_SUCCESS").write_text("")
    assert score_version(small_mnc, folder, num_classes=2).summary["OA_clean"] == 62.5


def test_bad_parquet_predictions(small_mnc, tmp_path):
    p = tmp_path / "p.parquet"
    pq.write_table(pa.table({"id": ["a"]}), p)
    with pytest.raises(PredictionError, match="no 'key' column"):
        score_version(small_mnc, p)
    pq.write_table(pa.table({"key": [f"modelnet-c/{i:04d}/clean/0" for i in range(8)],
                             "probs": [[1.0, float("inf")]] * 8}), p)
    with pytest.raises(PredictionError, match=r"row 0: key 'modelnet-c/0000/clean/0': probs\[1\] is inf"):
        score_version(small_mnc, p, num_classes=2)
    pq.write_table(pa.table({"key": pa.array([], pa.string()), "pred": pa.array([], pa.int64())}), p)
    with pytest.raises(PredictionError, match=r"p.parquet: the file holds no predictions; this version has 8 examples"):
        score_version(small_mnc, p, num_classes=2)
    (tmp_path / "p.txt").write_text("x")
    with pytest.raises(PredictionError, match="unknown prediction format"):
        score_version(small_mnc, tmp_path / "p.txt")


def test_robo3d_detection_reads_severity_name_dirs(det_version, demo_kitti_master, tmp_path):
    """Robo3D's layout names severities (light/moderate/heavy); results may sit in OpenPCDet's data/ subdir."""
    import shutil

    v = tmp_path / "robo3d-kitti-c" / "1.0.0"
    shutil.copytree(det_version, v)
    m = json.loads((v / "manifest.json").read_text())
    write_manifest(v, "robo3d-kitti-c", m["shards"], severity_names=["light", "moderate", "heavy"])
    preds = write_results(tmp_path / "pred", demo_kitti_master, v, empty={"beam_del/1"})
    (preds / "gaussian_rad" / "1").rename(preds / "gaussian_rad" / "light")
    (preds / "beam_del" / "1").rename(tmp_path / "bd")
    (preds / "beam_del" / "light").mkdir(parents=True)
    (tmp_path / "bd").rename(preds / "beam_del" / "light" / "data")
    (preds / "gaussian_rad" / "moderate").mkdir()  # a severity the version lacks: said, as for KITTI-C
    rep = score_version(v, preds)
    assert rep.metric == "robo3d-det"
    assert_units(rep)
    assert rep.notes[0] == f"{preds}: prediction folder(s) gaussian_rad/moderate name no partition of this version " \
                           "and were not scored"
    ap = {(r["corruption"], r["severity"]): r["value"] for r in rep.rows if r["metric"] == "Car/3d/moderate/AP_R40"}
    assert ap[("gaussian_rad", 1)] == ap[("clean", 0)] > 0 and ap[("beam_del", 1)] == 0.0
    # the Robo3D baseline has none of these corruptions: AP per partition, and the summary says why no mCE
    assert rep.summary["note"].startswith("no mCE/mRR: Robo3D kitti-c: no accuracy for corruption fog")


@pytest.mark.parametrize(("row", "message"), [
    ({"pred": True}, r"line 4: key 'modelnet-c/0003/clean/0': pred is a boolean \(true\), not a number"),
    ({"probs": [False, True]}, r"line 4: key 'modelnet-c/0003/clean/0': probs\[0\] is a boolean \(false\)"),
    ({"pred": 1, "score": False}, r"line 4: key 'modelnet-c/0003/clean/0': score is a boolean \(false\)"),
])
def test_booleans_are_not_class_ids_or_scores(small_mnc, tmp_path, row, message):
    rows = [{"key": f"modelnet-c/{i:04d}/clean/0", "pred": 0} for i in range(8)]
    rows[3] = {"key": rows[3]["key"], **row}
    p = _jsonl(tmp_path / "bools.jsonl", rows)
    with pytest.raises(PredictionError, match=rf"^{p}: {message}"):
        score_version(small_mnc, p, num_classes=2)
    res = runner.invoke(app, ["score", str(small_mnc), str(p), "--num-classes", "2"])
    assert res.exit_code == 2 and "bools.jsonl: line 4:" in " ".join(res.output.split()), res.output
    # the same row in Parquet (a bool column) is refused the same way, naming the row
    pq.write_table(pa.table({"key": [r["key"] for r in rows], "pred": [True] * 8}), tmp_path / "bools.parquet")
    with pytest.raises(PredictionError, match=r"bools.parquet: row 0: key '.*/0000/clean/0': pred is a boolean"):
        score_version(small_mnc, tmp_path / "bools.parquet", num_classes=2)


def test_non_utf8_predictions_are_named(small_mnc, det_version, demo_kitti_master, tmp_path):
    p = tmp_path / "latin1.jsonl"
    p.write_bytes(b'{"key": "modelnet-c/0000/clean/0", "pred": 0}\n{"key": "caf\xe9", "pred": 0}\n')
    res = runner.invoke(app, ["score", str(small_mnc), str(p), "--num-classes", "2"])
    assert res.exit_code == 2, res.output
    assert f"{p}: line 2: not UTF-8 text (byte 0xe9 at column 13)" in " ".join(res.output.split()), res.output
    preds = write_results(tmp_path / "det", demo_kitti_master, det_version)
    bad = preds / "clean" / f"{KittiSource(demo_kitti_master).list_frames()[0]}.txt"
    bad.write_bytes(b"Car\xff 0 0 0 1 2 3 4 1.5 1.6 3.9 0 1.5 20 0 0.9\n")
    res = runner.invoke(app, ["score", str(det_version), str(preds)])
    assert res.exit_code == 2 and f"{bad}: not UTF-8 text" in " ".join(res.output.split()), res.output


def test_a_byte_order_mark_is_read_or_named(small_mnc, tmp_path):
    """Windows PowerShell writes UTF-8 with a byte-order mark (``Out-File -Encoding utf8``) and UTF-16 with ``>``: the
    first was refused as "not JSON: Unexpected UTF-8 BOM (decode using utf-8-sig)", the second as a stray 0xff."""
    text = "".join(json.dumps({"key": f"modelnet-c/{i:04d}/clean/0", "pred": i % 2}) + "\n" for i in range(8))
    p = tmp_path / "bom.jsonl"
    p.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert score_version(small_mnc, p, num_classes=2).summary["OA_clean"] == 50.0
    p.write_bytes(text.encode("utf-16"))
    res = runner.invoke(app, ["score", str(small_mnc), str(p), "--num-classes", "2"], terminal_width=400)
    assert res.exit_code == 2 and res.output.strip() == (f"error: {p}: UTF-16 text (it starts with a UTF-16 byte-order "
                                                         "mark); predictions are UTF-8 JSON Lines: save the file as "
                                                         "UTF-8"), res.output
    second = text.index("\n") + 1  # a mark opens the file, not a line: one opening line 2 is not JSON there
    p.write_bytes(text[:second].encode() + b"\xef\xbb\xbf" + text[second:].encode())
    with pytest.raises(PredictionError, match=r"bom.jsonl: line 2: not JSON"):
        score_version(small_mnc, p, num_classes=2)


def test_the_class_count_defaults_to_the_sources(tmp_path):
    """--num-classes said "default: the manifest's", which no manifest records: it was always 40, and a
    ScanObjectNN build (15 classes) needed the option. The default now follows the source kind."""
    from bench_build.score.run import CLASS_COUNTS

    rows = [{"key": f"modelnet40-e/{i}/clean/0", "corruption": "clean", "severity": 0, "class_id": i % 15}
            for i in range(30)]
    v = write_object_version(tmp_path / "modelnet40-e" / "1", "modelnet40-e", rows)
    manifest = json.loads((v / "manifest.json").read_text())
    (v / "manifest.json").write_text(json.dumps({**manifest, "source": {"kind": "scanobjectnn"}}))
    p = tmp_path / "p.jsonl"
    p.write_text("".join(json.dumps({"key": r["key"], "probs": list(np.eye(15)[r["class_id"]])}) + "\n"
                         for r in rows))
    rep = score_version(v, p)  # no num_classes: ScanObjectNN's 15
    assert CLASS_COUNTS["scanobjectnn"] == 15 and rep.summary["clean/0"]["accuracy"] == 100.0
    with pytest.raises(PredictionError, match="15"):
        score_version(v, p, num_classes=40)


@pytest.mark.parametrize("dataset", ["modelnet-c", "modelnet40-e"])
def test_a_class_count_below_the_ground_truths_is_refused_naming_the_option(tmp_path, dataset):
    """--num-classes 15 on a 40-class version with probabilities of 15 classes scored: no prediction could name a
    class id ≥ 15, so those examples all counted as errors, an accuracy too low without a word. And a count that
    disagrees with the probabilities blamed "the benchmark", not the option that set it."""
    rows = [{"key": f"{dataset}/test/{i:05d}/clean/0", "corruption": "clean", "severity": 0, "class_id": i,
             "sigma": [0.0]} for i in range(40)]
    v = write_object_version(tmp_path / dataset / "1", dataset, rows)
    p = _jsonl(tmp_path / "p.jsonl", [{"key": r["key"], "probs": list(np.eye(15)[r["class_id"] % 15])} for r in rows])
    res = runner.invoke(app, ["score", str(v), str(p), "--num-classes", "15", "--out", str(tmp_path / "res" / "s")],
                        terminal_width=400)
    assert res.exit_code == 2, res.output
    assert res.output.strip() == (f"error: --num-classes 15: the ground truth of {v} has class ids up to 39, so it "
                                  "has at least 40 classes; give --num-classes the benchmark's class count")
    assert not (tmp_path / "res").exists()
    # the default (40 for an unknown source) is said as such when the ground truth goes past it
    rows41 = [*rows, {**rows[0], "key": f"{dataset}/test/00040/clean/0", "class_id": 40}]
    v41 = write_object_version(tmp_path / "41" / dataset / "1", dataset, rows41)
    with pytest.raises(ScoreError, match=r"^the default class count 40 \(source 'test'\): the ground truth of .* "
                                         r"has class ids up to 40"):
        score_version(v41, p)
    # probabilities of 40 classes with --num-classes 41 (or pred ids past it): the option is named, not the benchmark
    p40 = _jsonl(tmp_path / "p40.jsonl", [{"key": r["key"], "probs": list(np.eye(40)[r["class_id"]])} for r in rows])
    with pytest.raises(PredictionError, match=r"line 1: key .*: probs has 40 classes, --num-classes is 41$"):
        score_version(v, p40, num_classes=41)
    with pytest.raises(PredictionError, match=r"line 1: key .*: probs has 40 classes, the benchmark has 41$"):
        class_probs(p40, read_predictions(p40), [r["key"] for r in rows], 41)
    assert score_version(v, p40, num_classes=40).rows[0]["value"] == 100.0


def partial_copy(version: Path, dest: Path, keep: set[tuple[str, int]]) -> Path:
    """``version`` as `pull --corruption … --severity …` leaves it in ``dest`` (OUT/<dataset>/<version>): only the
    kept partitions' files, and a manifest listing just them with a ``partial`` entry."""
    import shutil

    manifest = json.loads((version / "manifest.json").read_text())
    shards = [s for s in manifest["shards"] if (s["corruption"], s["severity"]) in keep]
    for s in shards:
        (dest / s["path"]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(version / s["path"], dest / s["path"])
    (dest / "manifest.json").write_text(json.dumps({
        **manifest, "shards": shards, "partial": {"selections": [{"corruption": c, "severity": s} for c, s in keep],
                                                  "of_manifest_sha256": "0" * 64,
                                                  "files_in_version": len(manifest["shards"])}}))
    return dest


@pytest.mark.parametrize("keep", [{("gaussian_rad", 1)}, {("gaussian_rad", 1), ("beam_del", 1)}])
def test_detection_without_clean_scores_every_partition_and_says_how_to_add_clean(det_version, demo_kitti_master,
                                                                                 tmp_path, keep):
    """A partial pull without clean: one corrupted partition exited 0 with an empty OA_clean and no word of clean;
    two exited 2 ("KITTI-C metrics need the clean partition") with nothing scored. Both now score every partition
    and say which means need clean and the pull that adds it."""
    version = partial_copy(det_version, tmp_path / "pulled" / "kitti-c" / "0.1.0", keep)
    preds = write_results(tmp_path / "pred", demo_kitti_master, det_version)
    res = runner.invoke(app, ["score", str(version), str(preds), "--out", str(tmp_path / "res" / "k")],
                        terminal_width=400)
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    note = (f"no CE, CE_AP, mCE_AP or bug-rate CR/mCR: they need the clean partition, which {version} does not "
            f"hold (a partial pull of kitti-c 0.1.0: it holds ")
    pull = (f"`bench-build pull <publication root>/kitti-c --version 0.1.0 --out {tmp_path / 'pulled'} --corruption "
            "clean` adds it")
    assert note in out and pull in out
    data = strict_json(tmp_path / "res" / "k.json")
    assert data["summary"]["note"].startswith(note) and pull in data["summary"]["note"]
    assert not any("mCE_AP" in k or "OA_clean" in k for k in data["summary"])
    table = csv_table(tmp_path / "res" / "k.csv")
    assert not any(k[2].endswith(("OA_clean", "CE_AP", "/CE", "CR_TD")) for k in table)  # no empty means
    for c, s in keep:  # every partition scored, printed and written
        assert float(table[(c, str(s), "Car/3d/OA")][0]) > 0 and re.search(rf"│ {c} +│ +{s} │", res.output)
        assert (c, str(s), "Car/BR_TD") in table
    assert_units(data)


def test_modelnet_c_and_robo3d_without_clean_score_their_partitions_and_say_why_there_is_no_summary(
        det_version, demo_kitti_master, tmp_path):
    """ModelNet-C without clean exited 2 with nothing scored; Robo3D named no way to add clean. Both now score
    every partition and the summary says what needs clean and the pull that adds it."""
    rows, preds = [], []
    for c in MNC:
        for s in (1, 2, 3, 4, 5):
            for i in range(4):
                key = f"modelnet-c/{i:04d}/{c}/{s}"
                rows.append({"key": key, "corruption": c, "severity": s, "class_id": i % 2})
                preds.append({"key": key, "pred": i % 2 if i else 1 - i % 2})
    full = write_object_version(tmp_path / "full" / "modelnet-c" / "0.1.0", "modelnet-c", rows)
    v = partial_copy(full, tmp_path / "p" / "modelnet-c" / "0.1.0", {(c, s) for c in MNC for s in range(1, 6)})
    p = _jsonl(tmp_path / "mnc.jsonl", preds)
    res = runner.invoke(app, ["score", str(v), str(p), "--num-classes", "2"], terminal_width=400)
    assert res.exit_code == 0, res.output
    rep = score_version(v, p, num_classes=2)
    assert {r["value"] for r in rep.rows if r["metric"] == "OA"} == {75.0} and len(rep.rows) == 35
    assert rep.summary["note"].startswith("no CE/RCE/mCE/RmCE/mOA: they need the clean partition, which ")
    assert (f"`bench-build pull <publication root>/modelnet-c --version 0.1.0 --out {tmp_path / 'p'} --corruption "
            "clean` adds it") in rep.summary["note"] and "note: no CE/RCE/mCE/RmCE/mOA" in " ".join(res.output.split())
    assert_units(rep)
    robo = tmp_path / "r" / "robo3d-kitti-c" / "0.1.0"
    robo.mkdir(parents=True)
    m = json.loads((det_version / "manifest.json").read_text())
    write_manifest(robo, "robo3d-kitti-c", m["shards"])
    for s in m["shards"]:
        (robo / s["path"]).parent.mkdir(parents=True, exist_ok=True)
        (robo / s["path"]).write_bytes((det_version / s["path"]).read_bytes())
    v = partial_copy(robo, tmp_path / "rp" / "robo3d-kitti-c" / "0.1.0", {("gaussian_rad", 1)})
    rep = score_version(v, write_results(tmp_path / "pred", demo_kitti_master, det_version))
    assert [r["corruption"] for r in rep.rows if r["metric"] == "Car/3d/moderate/AP_R40"] == ["gaussian_rad"]
    assert rep.summary["note"].startswith("no mCE/mRR: they need the clean partition")
    assert "/robo3d-kitti-c --version 0.1.0 --out " in rep.summary["note"]
    assert rep.summary["note"].endswith("--corruption clean` adds it")
