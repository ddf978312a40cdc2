"""``bnnpp compare`` and ``bnnpp sweep`` end to end with tiny step counts, and their input errors."""

from __future__ import annotations

import json

import pytest

from bnnpp.cli import main

COMPARE_KEYS = {
    "accuracy", "nll", "brier", "ece", "mean_entropy", "mean_mutual_information", "max_r_hat", "min_ess_bulk",
    "psis_khat", "loo_elpd", "loo_se", "seconds",
}


def _compare(tmp_path, methods: str) -> dict:
    out = tmp_path / "cmp"
    assert main(["compare", "--quick", "--quiet", "--methods", methods, "--out", str(out)]) == 0
    results = json.loads((out / "compare.json").read_text())
    assert set(results["methods"]) == set(methods.split(","))
    for row in results["methods"].values():
        assert COMPARE_KEYS <= set(row) and 0 <= row["accuracy"] <= 1
    for name in ("compare.md", "decision_maps.png", "reliability.png", "forest_scales.png", *results["figures"]):
        assert (out / name).stat().st_size > 0
    return results


def test_compare_vi_and_map_end_to_end(tmp_path):
    results = _compare(tmp_path, "map,advi")
    assert results["methods"]["advi"]["psis_khat"] is not None and results["methods"]["map"]["loo_elpd"] is None
    assert results["ranking"] == []  # az.compare needs two fits with several draws


@pytest.mark.slow
def test_compare_every_method_end_to_end(tmp_path):
    results = _compare(tmp_path, "map,advi,bbb,nuts,sgld")
    assert {r["method"] for r in results["ranking"]} == {"advi", "bbb", "nuts", "sgld"}
    assert results["methods"]["nuts"]["max_r_hat"] is not None
    assert {"trace_nuts.png", "trace_sgld.png"} <= set(results["figures"])


def test_sweep_end_to_end(tmp_path):
    out = tmp_path / "sw"
    argv = ["sweep", "--quiet", "--data", "moons", "--priors", "normal,flat", "--hyperpriors", "fixed,inverse-gamma",
            "--fixed-scales", "0.3,3", "--method", "map", "--steps", "30", "--seeds", "0,1", "--out", str(out)]
    assert main(argv) == 0
    result = json.loads((out / "sweep.json").read_text())
    assert result["meta"]["runs"] == 2 * 4 and result["meta"]["compiled_groups"] == 3
    labels = {(r["weight_prior"], r["hyperprior"]) for r in result["table"]}
    assert labels == {("normal", "fixed"), ("normal", "inverse-gamma"), ("flat", "fixed")}
    assert "test accuracy" in (out / "sweep.md").read_text()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["compare", "--methods", "map,hmc"], "unknown method(s) hmc"),
        (["compare", "--methods", ","], "give at least one method"),
        (["compare", "--methods", "map", "--set", "advi.num_steps=5"], "not in --methods"),
        (["compare", "--methods", "map", "--set", "map.num_warmup=5"], "map takes"),
        (["compare", "--methods", "map", "--set", "map.num_steps=-5"], "num_steps must be"),
        (["sweep", "--priors", "flat", "--hyperpriors", "half-cauchy"], "grid is empty"),
        (["sweep", "--data", "sinusoid"], "--data takes moons"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(argv, message, tmp_path, capsys, compile_counter):
    out = tmp_path / "out"
    before = compile_counter()
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not out.exists() and compile_counter() == before
