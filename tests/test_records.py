"""The typed records (:mod:`bnnpp.records`) write the JSON the dicts they replace wrote: same
keys, same order, same bytes; and read it back."""

import json

import pytest

from bnnpp import reports
from bnnpp.records import ABSENT, CompareResult, EvaluationReport, FitReport

METRICS = {  # a metrics.json of a synthetic-data run: the record's "seed" comes before "method"
    "data": "moons", "data_noise": None, "seed": 3, "method": "advi", "model": {"type": "mlp"}, "options": {"num_steps": 10},
    "steps_run": 10, "stopped_at": None, "test": {"accuracy": 0.9}, "fit_info": {"num_parameters": 27}, "health": [],
    "val_error": None, "curves": {"epoch": [1]}, "placement": {"devices": 1}, "seconds": {"fit": 1.0, "write": 0.1},
    "files": ["posterior.nc", "metrics.json"],
}
COMPARE = {
    "methods": {"map": {"accuracy": 0.9, "loo_elpd": None}}, "ranking": [], "seed": 0, "data": "moons",
    "task": "classification", "reference": {"method": "nuts"}, "model": {"type": "mlp"}, "quick": False,
    "figures": ["reliability.png"], "seconds_total": 2.5,
}
EVALUATION = {
    "run_dir": "runs/m", "data": "mnist", "method": "bbb", "num_samples": 10, "tau": 0.2, "test": {"error": 0.1},
    "selective": None, "ood": {}, "seconds": {"predict_and_score": 1.0, "load": 0.5}, "figures": [], "skipped": [],
}


@pytest.mark.parametrize(("record", "d"), [(FitReport, METRICS), (CompareResult, COMPARE), (EvaluationReport, EVALUATION)])
def test_json_round_trip_keeps_keys_order_and_bytes(record, d):
    r = record.from_json(d)
    assert json.dumps(r.to_json(), indent=2) == json.dumps(d, indent=2)
    assert r["data"] == d["data"] and r.get("nope") is None and ("data" in r) and dict(r) == d  # the dict view


def test_absent_entries_are_left_out_and_none_is_written():
    r = FitReport({"data": "toy"}, "map", {}, {}, 0, 5, None, {}, {}, [], seconds={"fit": 1.0})
    assert list(r.to_json()) == ["data", "method", "model", "options", "seed", "steps_run", "stopped_at", "test", "fit_info",
                                 "health", "seconds"]
    assert r.to_json()["stopped_at"] is None and r.files is ABSENT and not ABSENT
    e = EvaluationReport(num_samples=5, tau=0.2, test={}, ood={}, selective=None, seconds={})
    assert list(e.to_json()) == ["num_samples", "tau", "test", "selective", "ood", "seconds", "figures"]


def test_reports_render_a_record_as_its_dict():
    compare = dict(COMPARE, methods={"map": {"accuracy": 0.9, "nll": 0.3, "brier": 0.1, "ece": 0.05, "mean_entropy": 0.2,
                                             "mean_mutual_information": 0.0, "max_r_hat": None, "min_ess_bulk": None,
                                             "psis_khat": None, "loo_elpd": None, "seconds": 1.0}}, reference=ABSENT)
    compare = {k: v for k, v in compare.items() if v is not ABSENT}
    assert reports.compare_markdown(CompareResult.from_json(compare)) == reports.compare_markdown(compare)
    ev = dict(EVALUATION, test={"n": 1, "error": 0.0, "nll": 0.1, "brier": 0.0, "ece": 0.0, "rejected": 0.0, "mean_entropy": 0.1,
                                "mean_mutual_information": 0.0, "sure_but_wrong": [], "lowest_confidence": []})
    assert reports.evaluation_markdown(EvaluationReport.from_json(ev)) == reports.evaluation_markdown(ev)
    assert "# Evaluation of runs/m" in reports.evaluation_markdown(ev)


def test_unknown_keys_are_refused():
    with pytest.raises(ValueError, match="unknown keys"):
        CompareResult.from_json(dict(COMPARE, surprise=1))
