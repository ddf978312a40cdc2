"""Split-conformal intervals and sets and temperature scaling (bnnpp.calibrate) against truth:
the conformal rank ⌈(n+1)(1−α)⌉, finite-sample coverage on synthetic problems whose predictive
is deliberately wrong, a known over-confidence factor recovered by temperature scaling (NLL or
Brier), the Brier temperature's indifference to a few confidently wrong rows, and a
calibrated posterior that saves, reloads in a fresh process and predicts identically."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import bnnpp
from bnnpp import calibrate, models
from bnnpp.posterior import Prediction

ROOT = Path(__file__).parent.parent


def test_conformal_rank_and_quantile():
    # n = 19, alpha = 0.1: rank ⌈20 · 0.9⌉ = 18 (not 18.000000000000004 → 19)
    assert calibrate.conformal_rank(19, 0.1) == 18
    scores = np.random.default_rng(0).permutation(np.arange(1.0, 20.0))
    assert calibrate.conformal_quantile(scores, 0.1) == 18.0
    assert calibrate.conformal_rank(100, 0.1) == 91  # ⌈101 · 0.9⌉ = ⌈90.9⌉
    assert calibrate.conformal_quantile(np.arange(100.0), 0.1) == 90.0
    # too few points for the level: no finite threshold has the guarantee
    assert calibrate.conformal_quantile(np.arange(8.0), 0.1) == np.inf
    # per-column thresholds for (n, K) scores
    q = calibrate.conformal_quantile(np.stack([np.arange(19.0), 2 * np.arange(19.0)], axis=1), 0.1)
    np.testing.assert_array_equal(q, [17.0, 34.0])
    with pytest.raises(ValueError, match="alpha"):
        calibrate.conformal_quantile(scores, 1.0)


def _coverage_repeats(make, alpha=0.1, repeats=200, n_cal=100, n_test=2000, seed=0, **kw):
    """Mean test coverage of the conformalised intervals over ``repeats`` fresh calibration/test draws."""
    rng = np.random.default_rng(seed)
    covered, raw = [], []
    for _ in range(repeats):
        pred_cal, y_cal = make(rng, n_cal)
        pred_test, y_test = make(rng, n_test)
        cal = calibrate.fit(pred_cal, y_cal, alpha, **kw)
        out = cal.apply(pred_test)
        covered.append(np.mean((y_test >= out.interval_lo) & (y_test <= out.interval_hi)))
        lo, hi = pred_test.quantiles([alpha / 2, 1 - alpha / 2])
        raw.append(np.mean((y_test >= lo) & (y_test <= hi)))
    return float(np.mean(covered)), float(np.mean(raw))


# Tolerance: each repeat's coverage given q̂ is ~Beta(k, n+1−k) with mean in [1−α, 1−α+1/(n+1)]
# and sd ≈ sqrt(α(1−α)/(n+2)) ≈ 0.030 for n = 100, plus the binomial sd of 2,000 test points
# (0.0067); over 200 repeats the mean's sd is ≈ 0.0022, so ±0.008 is over 3.5 sd.
TOL = 0.008


def _gaussian_problem(rng, n):
    """y ~ N(sin 3x, (0.2 + x²)²) but the predictive claims sd 0.3 (too narrow where |x| > 0.3)
    and a 0.1 bias: raw 90% intervals under-cover."""
    x = rng.uniform(-1, 1, n)
    y = np.sin(3 * x) + (0.2 + x**2) * rng.standard_normal(n)
    draws = (np.sin(3 * x) + 0.1)[None] + 0.05 * rng.standard_normal((4, n))
    return Prediction("regression", draws=draws, noise=np.full((4, n), 0.3)), y


def test_normalized_residual_intervals_cover():
    covered, raw = _coverage_repeats(_gaussian_problem)
    assert raw < 0.85  # the predictive is wrong: the raw intervals under-cover
    assert 0.9 - TOL <= covered <= 0.9 + 1 / 101 + TOL


def _student_problem(rng, n):
    """Heavy-tailed targets and a Student-t predictive twice too wide: CQR narrows it."""
    x = rng.uniform(-1, 1, n)
    y = x + 0.5 * rng.standard_t(3, n)
    draws = np.broadcast_to(x, (3, n)) + 0.02 * rng.standard_normal((3, n))
    return Prediction("regression", draws=draws, noise=np.ones((3, n)), likelihood="student_t", df=np.full((3, n), 3.0)), y


def test_cqr_narrows_an_over_wide_predictive():
    cal = calibrate.fit(*_student_problem(np.random.default_rng(1), 500), 0.1)
    assert cal.score == "cqr" and cal.threshold[0] < 0  # the intervals shrink


@pytest.mark.slow
def test_cqr_intervals_cover():
    covered, raw = _coverage_repeats(_student_problem, repeats=60, n_test=1000)
    assert raw > 0.97  # over-wide raw intervals
    # 60 repeats of n = 100 and 1,000 test points: the mean's sd ≈ 0.0041, tolerance ≈ 3.5 sd
    assert 0.9 - 0.014 <= covered <= 0.9 + 1 / 101 + 0.014


def _class_problem(rng, n, classes=10, sharpen=3.0):
    """True class probabilities from a Dirichlet; the predictive is over-confident (p³ renormalised)."""
    true = rng.dirichlet(np.full(classes, 0.5), n)
    y = (rng.random((n, 1)) > np.cumsum(true, axis=1)).sum(1).clip(max=classes - 1)
    sharp = true**sharpen
    return Prediction("classification", probs=(sharp / sharp.sum(1, keepdims=True))[None]), y


@pytest.mark.parametrize(("score", "randomized"), [("aps", False), ("aps", True), ("raps", False)])
def test_aps_sets_hold_their_rate(score, randomized):
    rng = np.random.default_rng(2)
    covered, sizes = [], []
    for r in range(200):
        pred_cal, y_cal = _class_problem(rng, 100)
        pred_test, y_test = _class_problem(rng, 2000)
        cal = calibrate.fit(pred_cal, y_cal, 0.1, score=score, randomized=randomized, temperature_scaling=False, seed=r)
        sets = cal.apply(pred_test, seed=r).sets
        covered.append(sets[np.arange(len(y_test)), y_test].mean())
        sizes.append(sets.sum(1).mean())
    # the guarantee is ≥ 1 − α (with u = 1 the sets are conservative, so only a lower bound there);
    # tolerance as for the intervals (200 repeats of n = 100 and 2,000 test points)
    assert np.mean(covered) >= 0.9 - TOL
    if randomized:
        assert np.mean(covered) <= 0.9 + 1 / 101 + TOL
    assert 1 < np.mean(sizes) < 10  # informative: neither singletons that under-cover nor every class


def _softmax(z):
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def _labels(rng, probs):
    """One label a row drawn from ``probs`` ``(n, classes)``."""
    return (rng.random((len(probs), 1)) > np.cumsum(probs, axis=1)).sum(1).clip(max=probs.shape[1] - 1)


def test_temperature_recovers_overconfidence_factor():
    rng = np.random.default_rng(3)
    n, classes = 20_000, 10
    logits = rng.normal(0, 1.5, (n, classes))
    true = _softmax(logits)
    y = _labels(rng, true)
    over = _softmax(3 * logits)
    t = calibrate.fit_temperature(over[None], y)
    # the NLL minimiser's sampling error at n = 20,000 is about 1%; 5% leaves room
    assert abs(t - 3.0) < 0.15
    np.testing.assert_allclose(calibrate.scale_probs(over, t), true, atol=0.03)
    # identical draws: the same T as one draw (the draw average of equal draws is that draw)
    assert calibrate.fit_temperature(np.stack([over, over]), y) == pytest.approx(t, rel=1e-4)


def test_brier_temperature_is_the_brier_minimiser_and_recovers_overconfidence():
    from bnnpp import metrics

    rng = np.random.default_rng(3)
    n, classes = 20_000, 10
    logits = rng.normal(0, 1.5, (n, classes))
    y = _labels(rng, _softmax(logits))
    over = _softmax(3 * logits)
    # the Brier score is proper too: its minimiser recovers the factor 3 (sampling error ~1-2% at this n)
    assert abs(calibrate.fit_temperature(over, y, "brier") - 3.0) < 0.15
    # two different draws: the objective is the Brier score of the draw-averaged scaled predictive
    draws = np.stack([over, np.roll(over, 1, axis=1)])[:, :2000]
    grid = np.exp(np.linspace(np.log(0.5), np.log(10.0), 400))
    brute = grid[np.argmin([metrics.brier(calibrate.scale_probs(draws, t).astype(np.float64).mean(0), y[:2000]) for t in grid])]
    assert calibrate.fit_temperature(draws, y[:2000], "brier") == pytest.approx(brute, rel=0.01)  # grid step 0.75%


def test_brier_temperature_is_not_dragged_by_a_few_confidently_wrong_rows():
    """A predictive that is right (T = 1) on 98% of the rows and gives the label 1e-6 on 2%: those
    rows carry most of the NLL, so the NLL-optimal T softens every row; the Brier-optimal T stays
    near 1 (the mechanism of the deep ensemble's ECE in benchmarks/README.md)."""
    rng = np.random.default_rng(4)
    n, classes = 20_000, 10
    logits = rng.normal(0, 3.0, (n, classes))
    true = _softmax(logits)
    y = _labels(rng, true)
    wrong = rng.random(n) < 0.02
    probs = true.copy()
    probs[wrong] = 1e-6
    probs[wrong, (y[wrong] + 1) % classes] = 1 - 1e-6 * (classes - 1)
    t_nll, t_brier = calibrate.fit_temperature(probs, y), calibrate.fit_temperature(probs, y, "brier")
    assert t_nll > 1.2 and abs(t_brier - 1.0) < 0.05, (t_nll, t_brier)  # 1.28 and 0.998 at this seed
    cal = calibrate.fit(Prediction("classification", probs=probs[None]), y, None, temperature_loss="brier")
    assert cal.temperature == pytest.approx(t_brier) and cal.temperature_loss == "brier"
    assert calibrate.Calibration.from_dict(cal.to_dict()) == cal


def test_bad_arguments_are_one_line_errors():
    pred, y = _gaussian_problem(np.random.default_rng(0), 50)
    with pytest.raises(ValueError, match="miscoverage"):
        calibrate.fit(pred, y, 0.0)
    with pytest.raises(ValueError, match="not one of regression's"):
        calibrate.fit(pred, y, 0.1, score="aps")
    with pytest.raises(ValueError, match="temperature scaling is for classifiers"):
        calibrate.fit(pred, y, 0.1, temperature_scaling=True)
    with pytest.raises(ValueError, match="shape"):
        calibrate.fit(pred, y[:10], 0.1)
    cpred, cy = _class_problem(np.random.default_rng(0), 50)
    with pytest.raises(ValueError, match="class indices"):
        calibrate.fit(cpred, cy + 10, 0.1)
    with pytest.raises(ValueError, match="damaged"):
        calibrate.Calibration.from_dict({"task": "classification"})
    with pytest.raises(ValueError, match="temperature_loss must be one of auto, nll, brier"):
        calibrate.fit(cpred, cy, 0.1, temperature_loss="ece")
    with pytest.raises(ValueError, match="temperature_loss chooses how a classifier's temperature"):
        calibrate.fit(pred, y, 0.1, temperature_loss="brier")
    with pytest.raises(ValueError, match="temperature_loss chooses"):
        calibrate.fit(cpred, cy, 0.1, temperature_scaling=False, temperature_loss="brier")
    with pytest.raises(ValueError, match="unknown temperature_loss"):
        calibrate.Calibration.from_dict({"task": "classification", "n": 5, "temperature_loss": "ece"})
    with pytest.raises(ValueError, match="temperature_loss must be one of nll, brier"):
        calibrate.fit_temperature(cpred.probs, cy, "auto")  # "auto" chooses between the losses in fit
    # a calibration saved before temperature_loss existed loads as Guo et al.'s NLL fit, with
    # u = 1 sets (the former default) and no cross-validation record
    old = calibrate.Calibration.from_dict({"task": "classification", "n": 5, "temperature": 1.5, "alpha": 0.1, "score": "aps"})
    assert old.temperature_loss == "nll" and not old.randomized and old.temperature_cv_ece == ()


@pytest.mark.parametrize("factor", [3.0, 0.5])
def test_auto_temperature_recovers_a_known_over_or_under_confidence(factor):
    """Labels drawn from softmax(z), the predictive softmax(factor · z): both losses are proper, so
    whichever "auto" picks, T recovers the factor (sampling error ~1-2% at n = 20,000)."""
    rng = np.random.default_rng(5)
    logits = rng.normal(0, 1.5, (20_000, 10))
    y = _labels(rng, _softmax(logits))
    cal = calibrate.fit(Prediction("classification", probs=_softmax(factor * logits)[None]), y, None)
    assert cal.temperature_loss in calibrate.TEMPERATURE_LOSSES and len(cal.temperature_cv_ece) == 2
    assert abs(cal.temperature - factor) < 0.05 * factor
    assert calibrate.Calibration.from_dict(cal.to_dict()) == cal


def test_auto_temperature_picks_brier_where_a_few_confidently_wrong_rows_drag_the_nll():
    """The predictive is right (T = 1) on 98% of the rows and gives the label 1e-6 on 2%: the NLL
    temperature softens every row for them and its out-of-fold ECE is the higher, so "auto" takes
    the Brier temperature, and on fresh rows of the same kind it has the lower ECE too. Below
    AUTO_MIN_ROWS rows "auto" is the NLL, with nothing cross-validated."""
    from bnnpp import metrics

    def problem(rng, n, classes=10):
        true = _softmax(rng.normal(0, 3.0, (n, classes)))
        y = _labels(rng, true)
        wrong = rng.random(n) < 0.02
        probs = true.copy()
        probs[wrong] = 1e-6
        probs[wrong, (y[wrong] + 1) % classes] = 1 - 1e-6 * (classes - 1)
        return probs, y

    rng = np.random.default_rng(4)
    probs, y = problem(rng, 5_000)
    cal = calibrate.fit(Prediction("classification", probs=probs[None]), y, None)
    nll_ece, brier_ece = cal.temperature_cv_ece
    assert cal.temperature_loss == "brier" and brier_ece < nll_ece
    assert cal.temperature == pytest.approx(calibrate.fit_temperature(probs, y, "brier"))
    fresh, y_fresh = problem(rng, 20_000)
    t_nll = calibrate.fit_temperature(probs, y, "nll")
    assert metrics.ece(calibrate.scale_probs(fresh, cal.temperature), y_fresh) < metrics.ece(calibrate.scale_probs(fresh, t_nll), y_fresh)
    few = calibrate.fit(Prediction("classification", probs=probs[None, :99]), y[:99], None)
    assert few.temperature_loss == "nll" and few.temperature_cv_ece == ()


def test_default_sets_of_a_confident_classifier_hold_their_rate_with_about_one_class():
    """A calibrated but confident predictive (softmax of logits with sd 20: top-class accuracy
    0.95, as MNIST's MLPs): with u = 1 the threshold lies just below 1, so the most confident rows
    get empty sets (9%) and the rest many classes (3.2 on average); the default (randomised) sets
    hold 1 − α with about one class each (1.04). Exchangeable rows, 200 repeats of n = 100
    (tolerance as TOL)."""
    rng = np.random.default_rng(6)
    covered, sizes, deterministic_sizes, empty = [], [], [], []
    for r in range(200):
        rows = [_softmax(rng.normal(0, 20.0, (m, 10))) for m in (100, 2000)]
        (p_cal, y_cal), (p_test, y_test) = [(p, _labels(rng, p)) for p in rows]
        pred_cal, pred_test = (Prediction("classification", probs=p[None]) for p in (p_cal, p_test))
        sets = calibrate.fit(pred_cal, y_cal, 0.1, temperature_scaling=False, seed=r).apply(pred_test, seed=r).sets
        covered.append(sets[np.arange(len(y_test)), y_test].mean())
        sizes.append(sets.sum(1).mean())
        fixed = calibrate.fit(pred_cal, y_cal, 0.1, temperature_scaling=False, randomized=False).apply(pred_test).sets
        deterministic_sizes.append(fixed.sum(1).mean())
        empty.append((fixed.sum(1) == 0).mean())
    assert 0.9 - TOL <= np.mean(covered) <= 0.9 + 1 / 101 + TOL
    assert np.mean(sizes) < 1.1
    assert np.mean(deterministic_sizes) > 2.5 and np.mean(empty) > 0.05, (np.mean(deterministic_sizes), np.mean(empty))


FRESH = """
import sys
import numpy as np
import bnnpp
post = bnnpp.load(sys.argv[1])
x = np.load(sys.argv[2])
p = post.predict(x, seed=5)
np.savez(sys.argv[3], **{k: getattr(p, k) for k in ("probs", "draws", "interval_lo", "interval_hi", "sets") if getattr(p, k) is not None})
"""


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::bnnpp.inference.health.FitHealthWarning")
@pytest.mark.parametrize("task", ["regression", "classification"])
def test_calibrated_posterior_round_trips_in_a_fresh_process(tmp_path, task):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(240, 2)).astype(np.float32)
    if task == "regression":
        y = (x[:, 0] + 0.3 * rng.normal(size=240)).astype(np.float32)
        model = models.mlp((4,), likelihood="gaussian")
        kw = {}
    else:
        y = (x[:, 0] + 0.5 * rng.normal(size=240) > 0).astype(np.int32)
        model = models.mlp((4,), num_classes=2)
        kw = {"randomized": True, "score": "raps", "temperature_loss": "brier"}
    post = bnnpp.fit(model, (x[:120], y[:120]), method="advi", progress=False, num_steps=100, num_samples=10)
    cal = post.calibrate(x[120:200], y[120:200], alpha=0.2, **kw)
    assert post.calibration is None and cal.calibration.n == 80
    mine = cal.predict(x[200:], seed=5)
    if task == "regression":
        assert np.all(mine.interval_lo < mine.interval_hi)
        raw = post.predict(x[200:], seed=5)
        np.testing.assert_array_equal(raw.draws, mine.draws)
    else:
        assert mine.sets.shape == (40, 2) and cal.calibration.temperature != 1.0 and cal.calibration.temperature_loss == "brier"
    path = tmp_path / "cal.nc"
    cal.save(path)
    np.save(tmp_path / "x.npy", x[200:])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    proc = subprocess.run([sys.executable, "-c", FRESH, str(path), str(tmp_path / "x.npy"), str(tmp_path / "out.npz")],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with np.load(tmp_path / "out.npz") as z:
        for k in z.files:
            np.testing.assert_array_equal(z[k], getattr(mine, k), err_msg=k)
        assert set(z.files) >= ({"interval_lo", "interval_hi"} if task == "regression" else {"sets", "probs"})


def _csv(path, header, rows):
    with open(path, "w") as f:
        f.write(",".join(header) + "\n")
        f.writelines(",".join(map(str, r)) + "\n" for r in rows)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::bnnpp.inference.health.FitHealthWarning")
def test_cli_calibrate_then_predict_writes_conformal_columns(tmp_path, capsys):
    from bnnpp.cli import main

    rng = np.random.default_rng(0)
    x = rng.normal(size=(260, 2))
    y = 2 * x[:, 0] + 0.5 * rng.normal(size=260)
    _csv(tmp_path / "train.csv", ["a", "b", "y"], np.c_[x[:150], y[:150]])
    _csv(tmp_path / "cal.csv", ["b", "a", "y"], np.c_[x[150:250, 1], x[150:250, 0], y[150:250]])
    _csv(tmp_path / "new.csv", ["a", "b"], x[250:])
    run = str(tmp_path / "run")
    assert main(["fit", "--data", str(tmp_path / "train.csv"), "--target", "y", "--method", "map", "--num-steps", "200", "--out", run]) == 0
    assert main(["calibrate", run, "--data", str(tmp_path / "cal.csv"), "--alpha", "1.5"]) == 2
    assert "miscoverage" in capsys.readouterr().err
    assert main(["calibrate", run, "--data", str(tmp_path / "cal.csv"), "--alpha", "0.2"]) == 0
    assert "normalized at 80%" in capsys.readouterr().out
    out = str(tmp_path / "p.csv")
    assert main(["predict", run, "--data", str(tmp_path / "new.csv"), "--out", out]) == 0
    with open(out) as f:
        header, *rows = [line.split(",") for line in f.read().splitlines()]
    assert header[-2:] == ["conformal_lower_80", "conformal_upper_80"] and len(rows) == 10
    mean = np.array([float(r[header.index("mean")]) for r in rows])
    lo = np.array([float(r[-2]) for r in rows])
    hi = np.array([float(r[-1]) for r in rows])
    np.testing.assert_allclose(mean - lo, hi - mean, rtol=1e-4)  # mean ± q·sd in the target's units
    with open(os.path.join(run, "metrics.json")) as f:
        assert '"score": "normalized"' in f.read()


def test_cli_calibrate_refuses_a_temperature_loss_without_a_temperature(tmp_path, capsys):
    from bnnpp.cli import main

    # refused before the run folder is read (it does not exist here)
    assert main(["calibrate", str(tmp_path / "run"), "--data", "x.csv", "--no-temperature", "--temperature-loss", "brier"]) == 2
    assert "--temperature-loss with --no-temperature" in capsys.readouterr().err


def test_selective_prediction_curve_by_hand():
    from bnnpp import evaluation

    loss = np.array([1.0, 0.0, 0.0, 1.0])
    uncertainty = np.array([0.9, 0.1, 0.2, 0.5])  # kept in the order 1, 2, 3, 0
    coverage, risk = evaluation.selective_curve(loss, uncertainty)
    np.testing.assert_allclose(coverage, [0.25, 0.5, 0.75, 1.0])
    np.testing.assert_allclose(risk, [0.0, 0.0, 1 / 3, 0.5])
    report = evaluation.selective_prediction(loss, {"u": uncertainty, "flat": np.zeros(4)})
    assert report["u"]["area"] == pytest.approx((1 + 1 + 2 / 3 + 0.5) / 4)
    assert report["u"]["at"] == {"50%": 1.0, "80%": 0.5, "90%": 0.5, "95%": 0.5, "100%": 0.5}
    assert report["flat"]["constant"] and not report["u"]["constant"]
    assert report["oracle"]["area"] >= report["u"]["area"]
    squared = np.array([4.0, 0.0, 1.0, 9.0])
    rmse = evaluation.selective_prediction(squared, {"u": uncertainty}, score="rmse")["u"]
    assert rmse["at"]["50%"] == pytest.approx(np.sqrt(0.5)) and rmse["at"]["100%"] == pytest.approx(np.sqrt(3.5))
    with pytest.raises(ValueError, match="same shape|one shape"):
        evaluation.selective_curve(loss, uncertainty[:3])
