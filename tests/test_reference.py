"""How far an approximation is from a reference posterior: the distances against closed
forms, ``diagnostics.reference`` on real fits, and ``bnnpp compare --reference``."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from scipy.stats import norm

import bnnpp
from bnnpp import diagnostics, metrics
from bnnpp.cli import main


def test_total_variation_and_agreement_by_hand():
    p = np.array([[0.7, 0.2, 0.1], [0.1, 0.5, 0.4]])
    q = np.array([[0.6, 0.3, 0.1], [0.2, 0.3, 0.5]])
    np.testing.assert_allclose(metrics.total_variation(p, q), [0.1, 0.2], atol=1e-12)
    np.testing.assert_array_equal(metrics.top1_agreement(p, q), [1.0, 0.0])
    np.testing.assert_allclose(metrics.total_variation(p, p), 0.0, atol=1e-15)


@pytest.mark.parametrize(("m1", "s1", "m2", "s2"), [(0.0, 1.0, 0.0, 1.0), (0.0, 1.0, 2.0, 1.0), (1.0, 0.5, -1.0, 3.0)])
def test_wasserstein2_of_gaussians_matches_the_closed_form(m1, s1, m2, s2):
    # W2(N(m1, s1²), N(m2, s2²)) = sqrt((m1 − m2)² + (s1 − s2)²). One draw each; the error is the
    # quantile grid's (midpoint rule on 2000 levels of 4000 stratified points), well under 1%
    qa = metrics.predictive_quantiles(np.full((1, 1), m1), np.full((1, 1), s1), num_levels=2000, per_draw=4000)
    qb = metrics.predictive_quantiles(np.full((1, 1), m2), np.full((1, 1), s2), num_levels=2000, per_draw=4000)
    exact = np.hypot(m1 - m2, s1 - s2)
    np.testing.assert_allclose(metrics.wasserstein2(qa, qb)[0], exact, atol=0.01 * max(1.0, exact))


def test_predictive_quantiles_of_a_mixture():
    # equal mixture of N(-1, 0.5²) and N(1, 0.5²): its median is 0 and its 0.5 + Φ-based quantiles are symmetric
    loc, scale = np.array([[-1.0], [1.0]]), np.full((2, 1), 0.5)
    q = metrics.predictive_quantiles(loc, scale, num_levels=101, per_draw=2000)[:, 0]
    assert abs(q[50]) < 1e-6 and np.allclose(q, -q[::-1], atol=1e-6)
    # the 0.25 quantile of the mixture solves ½Φ((t+1)/0.5) + ½Φ((t−1)/0.5) = 0.25
    levels = (np.arange(101) + 0.5) / 101
    t = q[25]
    cdf = 0.5 * norm.cdf((t + 1) / 0.5) + 0.5 * norm.cdf((t - 1) / 0.5)
    assert abs(cdf - levels[25]) < 2e-3


@pytest.fixture(scope="module")
def regression_fits():
    data = bnnpp.data.sinusoid(n=24, seed=0, n_test=40)
    model = bnnpp.models.mlp((8,), activation="tanh", likelihood="gaussian", noise=1.0, prior=bnnpp.priors.normal(1.0))
    nuts = bnnpp.fit(model, data, method="nuts", seed=0, progress=False, num_chains=2, num_warmup=100, num_samples=100)
    advi = bnnpp.fit(model, data, method="advi", seed=0, progress=False, num_steps=400, num_samples=200)
    mapped = bnnpp.fit(model, data, method="map", seed=0, progress=False, num_steps=500)
    return data, nuts, advi, mapped


def test_reference_of_a_posterior_against_itself_is_exact(regression_fits):
    data, nuts, _, _ = regression_fits
    with warnings.catch_warnings():  # a short reference may warn about its R-hat: not the point here
        warnings.simplefilter("ignore", UserWarning)
        r = diagnostics.reference(nuts, nuts, data.x_test)
    assert r["task"] == "regression" and r["num_points"] == 40
    assert r["w2"] == pytest.approx(0.0, abs=1e-9)
    assert r["sd_ratio"] == pytest.approx(1.0) and r["epistemic_sd_ratio"] == pytest.approx(1.0)
    assert len(r["per_point"]["w2"]) == 40
    assert r["reference"]["num_chains"] == 2 and r["reference"]["max_r_hat"] is not None


def test_reference_sees_that_map_has_no_epistemic_uncertainty(regression_fits):
    data, nuts, advi, mapped = regression_fits
    check = diagnostics.reference_check(nuts, data.x_test)
    m = diagnostics.reference(mapped, nuts, data.x_test, check=check)
    a = diagnostics.reference(advi, nuts, data.x_test, check=check)
    # MAP's predictive is the known noise alone: its epistemic sd is 0, its total sd 1 < NUTS's
    assert m["epistemic_sd_ratio"] < 1e-6
    assert m["sd_ratio"] < 1.0
    assert a["epistemic_sd_ratio"] > m["epistemic_sd_ratio"]
    assert np.isfinite(a["w2"]) and a["w2"] > 0


def test_reference_needs_two_chains(regression_fits):
    data, _, advi, _ = regression_fits
    with pytest.raises(ValueError, match="num_chains=4"):
        diagnostics.reference(advi, advi, data.x_test)
    with pytest.raises(ValueError, match="non-empty"):
        diagnostics.reference(advi, regression_fits[1], data.x_test[:0])


def test_classification_reference_against_itself():
    data = bnnpp.data.moons(n=120, seed=1)
    model = bnnpp.models.mlp((4,), activation="tanh", num_classes=2, prior=bnnpp.priors.normal(1.0))
    nuts = bnnpp.fit(model, data, method="nuts", seed=0, progress=False, num_chains=2, num_warmup=100, num_samples=100)
    check = {**diagnostics.reference_check(nuts, data.x_test), "converged": False, "max_r_hat": 1.2}
    with pytest.warns(UserWarning, match="R-hat 1.2"):
        r = diagnostics.reference(nuts, nuts, data.x_test, check=check)
    assert r["agreement"] == 1.0 and r["total_variation"] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.slow
def test_compare_cli_with_reference_on_the_sinusoid(tmp_path, capsys):
    out = tmp_path / "cmp"
    rc = main(["compare", "--data", "sinusoid", "--methods", "map,advi", "--quick", "--quiet", "--reference", "nuts",
               "--hidden", "8", "--noise", "1", "--out", str(out)])
    assert rc == 0
    res = json.loads((out / "compare.json").read_text())
    assert res["task"] == "regression" and res["reference"]["method"] == "nuts"
    for m in ("map", "advi"):
        row = res["methods"][m]
        assert row["ref_w2"] > 0 and row["ref_sd_ratio"] > 0 and "rmse" in row and "coverage_95" in row
    md = (out / "compare.md").read_text()
    assert "Agreement with the reference posterior" in md and "W2 to reference" in md
    assert (out / "reference.png").stat().st_size > 0 and (out / "bands.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--reference", "nope"], "unknown method"),
        (["--set-reference", "num_samples=10"], "needs --reference"),
        (["--reference", "nuts", "--set-reference", "steps=3"], "nuts takes"),
        (["--noise", "1"], "--noise is the known observation sd"),
    ],
)
def test_compare_reference_errors_before_any_fit(tmp_path, capsys, argv, message):
    out = tmp_path / "cmp"
    rc = main(["compare", "--data", "moons", "--methods", "map", "--quick", "--out", str(out), *argv])
    assert rc != 0
    assert message in capsys.readouterr().err
    assert not out.exists()
