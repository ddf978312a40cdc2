"""Your own data through the CLI's analysis: the predictive mixture's CDF and quantiles against
scipy, prediction tables with quantiles and passed-through columns, the figures for k classes
and for regression with several features, and the input errors of compare / sweep / evaluate
on a file. Fitting commands end to end are ``slow`` (XLA compile time)."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from scipy import optimize, stats

from bnnpp import data, evaluation, plots, tables
from bnnpp.cli import main
from bnnpp.posterior import Prediction


def _write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def _mixture(seed=0, s=7, n=5):
    rng = np.random.default_rng(seed)
    return Prediction("regression", draws=rng.normal(0, 2, (s, n)), noise=rng.uniform(0.3, 1.5, (s, n)))


# --------------------------------------------------------------- the predictive mixture


def test_quantiles_of_one_draw_are_the_likelihoods():
    mu, sd, df = np.array([[0.0, 1.5, -3.0]]), np.array([[1.0, 0.2, 4.0]]), np.array([[3.0, 10.0, 1.5]])
    q = [0.05, 0.5, 0.975]
    normal = evaluation.predictive_quantiles(Prediction("regression", draws=mu, noise=sd), q)
    np.testing.assert_allclose(normal, stats.norm.ppf(np.array(q)[:, None], mu, sd), rtol=1e-9, atol=1e-9)
    student = evaluation.predictive_quantiles(Prediction("regression", draws=mu, noise=sd, likelihood="student_t", df=df), q)
    np.testing.assert_allclose(student, stats.t.ppf(np.array(q)[:, None], df, mu, sd), rtol=1e-9, atol=1e-9)
    rate = np.array([[0.5, 4.0, 30.0]])
    counts = evaluation.predictive_quantiles(Prediction("regression", draws=rate, likelihood="poisson"), q)
    np.testing.assert_array_equal(counts, stats.poisson.ppf(np.array(q)[:, None], rate))


def test_mixture_quantiles_and_cdf_match_scipy():
    pred = _mixture()
    mu, sd = pred.draws, pred.noise

    def cdf(y, i):  # the mixture over draws at row i, by scipy
        return stats.norm.cdf(y, mu[:, i], sd[:, i]).mean()

    levels = [0.01, 0.3, 0.5, 0.9]
    got = evaluation.predictive_quantiles(pred, levels)
    for k, q in enumerate(levels):
        for i in range(mu.shape[1]):
            want = optimize.brentq(lambda y: cdf(y, i) - q, -50, 50, xtol=1e-12)
            assert got[k, i] == pytest.approx(want, abs=1e-8)
    y = np.array([-1.0, 0.0, 0.5, 2.0, 10.0])
    np.testing.assert_allclose(evaluation.predictive_cdf(pred, y), [cdf(v, i) for i, v in enumerate(y)], rtol=1e-12)
    assert evaluation.predictive_quantiles(pred, 0.5).shape == (5,)
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        evaluation.predictive_quantiles(pred, [0.5, 1.0])


def test_calibration_curve_of_targets_drawn_from_the_predictive_is_the_diagonal():
    rng = np.random.default_rng(1)
    pred = _mixture(seed=2, s=5, n=4000)
    pick = rng.integers(0, 5, 4000)  # y from the mixture itself: its PIT is uniform
    y = pred.draws[pick, np.arange(4000)] + pred.noise[pick, np.arange(4000)] * rng.standard_normal(4000)
    check = evaluation.regression_checks(pred, y, level=0.9)
    # 4000 rows: each share has sd ≤ √(0.25/4000) = 0.008; 0.03 is almost 4 sd
    np.testing.assert_allclose(check["coverage"], check["levels"], atol=0.03)
    inside = np.mean((y >= check["lower"]) & (y <= check["upper"]))
    assert inside == pytest.approx(0.9, abs=0.03)
    # exact: of PIT values 0.1, 0.4, 0.6, 0.9, the central 30% and 70% intervals hold 2, the 90% one all 4
    np.testing.assert_allclose(evaluation.central_interval_coverage([0.1, 0.4, 0.6, 0.9], [0.3, 0.7, 0.9]), [0.5, 0.5, 1.0])


def test_original_units_shift_and_scale_the_quantiles():
    pred = _mixture()
    scaled = evaluation.in_original_units(pred, 100.0, 3.0)
    np.testing.assert_allclose(evaluation.predictive_quantiles(scaled, [0.1, 0.8]),
                               100 + 3 * evaluation.predictive_quantiles(pred, [0.1, 0.8]), rtol=1e-9)


def test_prediction_table_quantiles_and_intervals():
    pred = _mixture()
    t = data.FileTransform(("a",), "y", "regression", np.zeros(1), np.ones(1), y_shift=10.0, y_scale=2.0)
    table = tables.prediction_table(pred, t, quantiles=(0.05, 0.5), intervals=(0.9,))
    assert list(table) == ["mean", "sd", "epistemic_sd", "aleatoric_sd", "q_0.05", "q_0.5", "lower_90", "upper_90"]
    np.testing.assert_allclose(table["lower_90"], table["q_0.05"], rtol=1e-12)
    np.testing.assert_allclose(table["q_0.5"], 10 + 2 * evaluation.predictive_quantiles(pred, 0.5), rtol=1e-9)
    probs = Prediction("classification", probs=np.full((2, 3, 2), 0.5))
    with pytest.raises(ValueError, match="for regression runs"):
        tables.prediction_table(probs, t, quantiles=(0.5,))
    with pytest.raises(ValueError, match="names a level twice"):
        tables.check_levels((0.5, 0.5), "--quantiles")


# --------------------------------------------------------------- figures


def _three_classes(n=90, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    return (np.array([[0, 0], [3, 0], [1.5, 2.5]])[y] + rng.normal(0, 0.5, (n, 2))).astype(np.float32), y


def _softmax_predict(centres):
    def predict(grid):
        logits = -((grid[None, :, None, :] - centres[None, None]) ** 2).sum(-1)
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        return Prediction("classification", probs=np.stack([p[0], 0.9 * p[0] + 0.1 / centres.shape[0]]))
    return predict


def test_decision_map_draws_every_class_with_its_name():
    x, y = _three_classes()
    names = ("setosa", "versicolor", "virginica")
    fig = plots.decision_map(_softmax_predict(np.array([[0, 0], [3, 0], [1.5, 2.5]])), x, y, class_names=names, resolution=20)
    left, right = fig.axes[0], fig.axes[1]  # then the colour bar's axes
    assert [t.get_text() for t in left.get_legend().get_texts()] == list(names)
    for ax in (left, right):  # every point of every class is drawn
        assert sum(len(c.get_offsets()) for c in ax.collections if hasattr(c, "get_offsets") and c.get_label() in names) == len(x)
    assert "mutual information" in right.get_title()
    maps = plots.decision_maps({"a": _softmax_predict(np.array([[0, 0], [3, 0], [1.5, 2.5]]))}, x, y, class_names=names, resolution=20)
    assert [t.get_text() for t in maps.axes[0].get_legend().get_texts()] == list(names)
    with pytest.raises(ValueError, match="3 class names for 2 classes"):
        plots.decision_map(_softmax_predict(np.array([[0, 0], [3, 0]])), x, y % 2, class_names=names, resolution=10)


def test_regression_figures_show_the_features_with_structure_left():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 6))
    y = x[:, 0] + np.sin(3 * x[:, 4])  # the prediction misses the sine of feature 4
    pred = Prediction("regression", draws=np.stack([x[:, 0], x[:, 0] + 0.1]), noise=np.full((2, 200), 0.7))
    check = evaluation.regression_checks(pred, y)
    assert plots.top_features(x, [check["residual"]], 2)[0] == 4
    names = [f"f{j}" for j in range(6)]
    fig = plots.regression_diagnostics(check, y, x, names, max_features=3)
    labels = [ax.get_xlabel() for ax in fig.axes]
    assert labels[:2] == ["observed", "nominal level of the central interval"] and "f4" in labels and len(labels) == 5
    assert len(plots.residuals_by_feature({"a": check, "b": check}, x, names, max_features=2).axes) == 4
    assert len(plots.predicted_vs_observed({"a": check, "b": check}, y).axes) == 2
    assert len(plots.calibration_curve({"a": check}).axes[0].lines) == 2


# --------------------------------------------------------------- the CLI on a file


@pytest.fixture
def houses(tmp_path):
    rng = np.random.default_rng(0)
    area, rooms, age = rng.normal(50, 10, 90), rng.uniform(0, 5, 90), rng.uniform(0, 40, 90)
    price = 3 * area + 20 * rooms - 0.02 * (age - 20) ** 2 + rng.normal(0, 5, 90)
    return _write_csv(tmp_path / "houses.csv", ["area", "rooms", "age", "price"], zip(area, rooms, age, price, strict=True))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["compare", "--data", "food.txt"], "not a built-in set"),
        (["compare", "--data", "missing.csv", "--target", "y"], "no such file"),
        (["compare", "--data", "HOUSES"], "needs --target COLUMN"),
        (["compare", "--data", "HOUSES", "--target", "price", "--data-noise", "0.1"], "--data-noise applies to the built-in sets"),
        (["compare", "--target", "price"], "--target applies to your own .csv/.npz file"),
        (["compare", "--data", "mnist"], "compare takes moons, circles, sinusoid or a .csv/.npz file"),
        (["sweep", "--data", "HOUSES", "--target", "price"], "sweep scores classifiers"),
        (["sweep", "--data", "moons", "--task", "regression"], "--task applies to your own"),
    ],
)
def test_file_input_errors_are_one_line_and_compile_nothing(argv, message, houses, tmp_path, capsys, compile_counter):
    out = tmp_path / "out"
    before = compile_counter()
    argv = [str(houses) if a == "HOUSES" else a for a in argv]
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not out.exists() and compile_counter() == before


@pytest.mark.slow  # three fits: mostly XLA compile time
def test_compare_on_a_csv_end_to_end(houses, tmp_path, capsys):
    out = tmp_path / "cmp"
    code = main(["compare", "--data", str(houses), "--target", "price", "--methods", "advi,ensemble,laplace", "--quick",
                 "--quiet", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    results = json.loads((out / "compare.json").read_text())
    assert set(results["methods"]) == {"advi", "ensemble", "laplace"} and results["task"] == "regression"
    assert results["data_file"]["target"] == "price" and len(results["data_file"]["sha256"]) == 64
    # scores in the target's units: the price sd is about 40, so an RMSE in standardised units would be < 1
    assert all(row["rmse"] > 1 for row in results["methods"].values())
    for name in ("predicted_vs_observed.png", "calibration.png", "residuals.png"):
        assert name in results["figures"] and (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow  # a fit
def test_predict_keeps_id_columns_and_writes_quantiles_evaluate_scores_new_rows(houses, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["fit", "--data", str(houses), "--target", "price", "--method", "map", "--num-steps", "300", "--quiet",
                 "--out", str(run)]) == 0
    assert (run / "uncertainty.png").exists()  # predicted vs observed, calibration, residuals: not loss.png
    rows = [r for r in csv.reader(open(houses))]
    new = _write_csv(tmp_path / "new.csv", ["house_id", *rows[0], "mean"], [[f"h{i}", *r, "m"] for i, r in enumerate(rows[1:6])])
    out = tmp_path / "pred.csv"
    assert main(["predict", str(run), "--data", str(new), "--quantiles", "0.05,0.5,0.95", "--intervals", "0.9", "--out", str(out)]) == 0
    got = list(csv.DictReader(open(out)))
    # the other columns first, as written; one named like an output column gets input_
    assert list(got[0])[:4] == ["house_id", "price", "input_mean", "mean"] and [r["house_id"] for r in got] == [f"h{i}" for i in range(5)]
    assert {r["input_mean"] for r in got} == {"m"}
    for r in got:  # map: one draw, a Normal: the 5% quantile is mean − 1.645 sd
        assert float(r["q_0.05"]) == pytest.approx(float(r["mean"]) - 1.6449 * float(r["sd"]), rel=1e-3)
        assert float(r["lower_90"]) == pytest.approx(float(r["q_0.05"]), rel=1e-5)
        assert float(r["upper_90"]) == pytest.approx(float(r["q_0.95"]), rel=1e-5)
    assert main(["evaluate", str(run), "--data", str(new)]) == 0
    report = json.loads((run / "evaluation.json").read_text())
    assert report["test"]["n"] == 5 and report["figures"] == ["regression.png", "selective.png"]
    assert set(report["selective"]) == {"predictive sd", "epistemic sd", "oracle"}
    assert main(["evaluate", str(run), "--num-samples", "1"]) == 0  # the run's own test split
    assert json.loads((run / "evaluation.json").read_text())["test"]["n"] == 18


def test_regression_figures_draw_at_most_figure_rows():
    from bnnpp import runs

    x = np.arange(5000, dtype=np.float32)[:, None].repeat(2, 1)
    ds = data.Dataset(x[:10], x[:10, 0], x, x[:, 0], "regression", None, "big")
    shown = runs.figure_rows(ds)
    assert len(shown.x_test) == runs.FIGURE_ROWS and shown.y_test[0] == 0 and shown.y_test[-1] == 4999
    assert np.array_equal(shown.x_test[:, 0], shown.y_test) and runs.figure_rows(shown) is shown


@pytest.mark.slow  # a vmapped fit: XLA compile time
def test_sweep_on_a_classification_csv(tmp_path, capsys):
    x, y = _three_classes()
    path = _write_csv(tmp_path / "kinds.csv", ["a", "b", "kind"], [(*r, ("cat", "dog", "eel")[k]) for r, k in zip(x, y, strict=True)])
    out = tmp_path / "sw"
    code = main(["sweep", "--quiet", "--data", str(path), "--target", "kind", "--priors", "normal", "--hyperpriors", "fixed",
                 "--fixed-scales", "1", "--method", "map", "--steps", "30", "--seeds", "0", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    result = json.loads((out / "sweep.json").read_text())
    assert [r["data"] for r in result["table"]] == ["kinds"] and result["meta"]["data_files"][0]["target"] == "kind"
    assert 0 <= result["table"][0]["accuracy_mean"] <= 1
