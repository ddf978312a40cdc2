"""Calibration on hostile input: too few rows for the conformal level, a temperature that runs
to a bound of its search, fractional or empty labels and missing columns in ``--data``.

Each is refused (or warned about) in one line that names the minimum, the bound, or the file's
line and column and a flag the command line takes; the coverage guarantee is stated wherever
a calibration is reported. Fast: numpy for the numerics, and run folders built by hand from a
linear model (no fit), so the command-line cases read a posterior but compile at most a
prediction."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from bnnpp import calibrate, models
from bnnpp.calibrate import TemperatureBoundWarning
from bnnpp.cli import main
from bnnpp.data import FileTransform, MissingColumnError
from bnnpp.data import tables as data_tables
from bnnpp.posterior import Posterior, Prediction

S = 4


def _softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _gaussian(n, seed=0):
    rng = np.random.default_rng(seed)
    mu = rng.normal(size=(S, n))
    return Prediction("regression", draws=mu, noise=np.ones((S, n)), likelihood="gaussian"), mu.mean(0) + rng.normal(size=n)


def _classes(n, seed=0, classes=3, draws=S):
    rng = np.random.default_rng(seed)
    probs = _softmax(2 * rng.normal(size=(draws, n, classes)))
    y = np.array([rng.choice(classes, p=p) for p in probs.mean(0)])
    return Prediction("classification", probs=probs), y


# -- too few rows for alpha -----------------------------------------------------------------


def test_min_rows_is_the_rank_formula_and_the_issues_closed_form():
    """⌈(n+1)(1−α)⌉ ≤ n ⇔ n ≥ 1/α − 1: the minimum is ⌈1/α⌉ − 1, except where 1/α is a whole
    number only up to float rounding (α = 1/k), where float ⌈1/α⌉ can be one too many."""
    assert [calibrate.conformal_min_rows(a) for a in (0.1, 0.05, 0.01, 0.001, 0.2, 0.5, 0.9)] == [9, 19, 99, 999, 4, 1, 1]
    for alpha in [*np.linspace(0.0011, 0.99, 700), *(1 / k for k in range(2, 400))]:
        m = calibrate.conformal_min_rows(alpha)
        assert calibrate.conformal_rank(m, alpha) <= m and (m == 1 or calibrate.conformal_rank(m - 1, alpha) > m - 1)
        closed = max(1, math.ceil(1 / alpha) - 1)
        assert m == closed or (m == closed - 1 and abs(1 / alpha - round(1 / alpha)) < 1e-9), alpha
        assert np.isfinite(calibrate.conformal_quantile(np.arange(float(m)), alpha))
        if m > 1:
            assert np.isinf(calibrate.conformal_quantile(np.arange(float(m - 1)), alpha))
    assert calibrate.conformal_min_rows(1 / 3) == 2  # (2+1)(1 − 1/3) = 2 ≤ 2, though float ⌈1/α⌉ − 1 = 3
    assert calibrate.conformal_rank(1, 1 - 1e-12) == 1  # never rank 0 (the largest score by wrap-around)


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("task", ["regression", "classification"])
def test_one_to_three_rows_are_refused_naming_the_minimum(task, n):
    pred, y = _gaussian(n) if task == "regression" else _classes(n)
    with pytest.raises(ValueError) as e:
        calibrate.fit(pred, y, 0.1)
    msg = str(e.value)
    assert "\n" not in msg and "at least 9 calibration rows" in msg and f"got {n}" in msg, msg
    assert f"alpha ≥ 1/(n+1) = {1 / (n + 1):.3g}" in msg, msg


def test_alpha_0_001_on_60_rows_is_refused_and_the_smallest_alpha_is_stated():
    pred, y = _gaussian(60)
    with pytest.raises(ValueError, match=r"alpha 0\.001 needs at least 999 calibration rows .*got 60.*alpha ≥ 1/\(n\+1\) = 0\.0164"):
        calibrate.fit(pred, y, 0.001)
    cal = calibrate.fit(pred, y, 0.0164)  # the level stated is one 60 rows allow: a finite threshold
    assert np.isfinite(cal.threshold).all()
    cpred, cy = _classes(998)
    with pytest.raises(ValueError, match="at least 999"):
        calibrate.fit(cpred, cy, 0.001)
    assert np.isfinite(calibrate.fit(*_classes(999), 0.001, temperature_scaling=False).threshold).all()
    # a stated smallest alpha is rounded up, never to a level the rows do not allow
    with pytest.raises(ValueError, match=r"= 0\.3334"):
        calibrate.check_rows(2, 0.2)
    with pytest.raises(ValueError, match="at least one labelled row"):
        calibrate.check_rows(0, None)
    assert calibrate.check_rows(1, None) == 1  # a temperature alone has no minimum


def test_an_old_infinite_threshold_warns_when_applied():
    old = calibrate.Calibration.from_dict({"task": "regression", "n": 3, "alpha": 0.1, "score": "normalized", "threshold": ["inf"]})
    assert "no guarantee, the threshold is infinite" in old.guarantee() and "9" in old.guarantee()
    with pytest.warns(UserWarning, match="threshold is infinite"):
        old.apply(_gaussian(5)[0])


# -- a temperature at a bound ---------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3])
def test_temperature_on_one_to_three_rows_warns_at_the_lower_bound(n):
    pred, _ = _classes(n, seed=n, draws=1)  # a MAP fit, as in the issue
    y = pred.probs.mean(0).argmax(1)  # a few rows, all classified right: the NLL falls as T → 0
    with pytest.warns(TemperatureBoundWarning, match=r"lower bound T = 0\.01 .*too few rows") as rec:
        cal = calibrate.fit(pred, y, None)
    assert len(rec) == 1 and "\n" not in str(rec[0].message) and issubclass(rec[0].category, UserWarning)
    assert cal.temperature < 0.1


def test_one_class_rows_warn_at_the_upper_bound():
    rng = np.random.default_rng(0)
    probs = _softmax(np.stack([np.zeros(50), 2 + rng.random(50)], axis=1))[None]  # class 1 favoured everywhere
    with pytest.warns(TemperatureBoundWarning, match=r"upper bound T = 100 .*a single class \(index 0 of 2\)"):
        cal = calibrate.fit(Prediction("classification", probs=probs), np.zeros(50, int), None)
    assert cal.temperature == pytest.approx(100, rel=1e-3)


def test_an_interior_temperature_does_not_warn():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(2000, 5))
    y = np.array([rng.choice(5, p=p) for p in _softmax(z)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for loss in ("nll", "brier"):
            cal = calibrate.fit(Prediction("classification", probs=_softmax(2 * z)[None]), y, 0.1, temperature_loss=loss)
            assert 1.5 < cal.temperature < 2.5


# -- the coverage guarantee is stated ---------------------------------------------------------


def test_guarantee_is_in_the_summary():
    cal = calibrate.fit(*_gaussian(100), 0.1)
    text = cal.guarantee()
    assert "marginal coverage ≥ 1−α = 0.9" in text and "1−α + 1/(n+1) = 0.9099" in text and "n = 100" in text
    assert "Vovk" in text and "Angelopoulos & Bates 2021" in text and "exchangeable" in text
    assert text in str(cal) and text in cal.summary() and cal.summary().startswith("regression calibration on 100 rows")
    cls = calibrate.fit(*_classes(200), 0.2)
    assert "= 0.8" in cls.guarantee() and "temperature was fitted on the same rows" in cls.guarantee()
    assert calibrate.fit(*_classes(200), 0.2, temperature_scaling=False).guarantee().count("temperature") == 0
    temp_only = calibrate.fit(*_classes(50), None)
    assert temp_only.guarantee() is None and "no coverage guarantee" in temp_only.summary()
    rng = np.random.default_rng(0)
    two = Prediction("regression", draws=rng.normal(size=(S, 30, 2)), noise=np.ones((S, 30, 2)), likelihood="gaussian")
    assert "each of the 2 target elements" in calibrate.fit(two, rng.normal(size=(30, 2)), 0.1).guarantee()


# -- labelled rows: fractional and empty labels, missing columns --------------------------------

CLS = FileTransform(("a", "b"), "y", "classification", np.zeros(2), np.ones(2), classes=(0, 1))
REG = FileTransform(("a", "b"), "y", "regression", np.zeros(2), np.ones(2), y_shift=0.0, y_scale=1.0)


def _csv(path, header, rows, blank_after=None):
    lines = [",".join(header), *(",".join(map(str, r)) for r in rows)]
    if blank_after is not None:
        lines.insert(blank_after, "")
    path.write_text("\n".join(lines) + "\n")
    return path


def _rows(labels):
    return [(0.5 * i, -0.25 * i, lab) for i, lab in enumerate(labels)]


def test_fractional_label_names_line_column_and_value(tmp_path):
    path = _csv(tmp_path / "c.csv", ["a", "b", "y"], _rows([0, 1, 0, 2.5, 1]))
    with pytest.raises(ValueError, match=r"column 'y' on line 5 holds 2\.5, not a class label: .*whole numbers 0, 1$"):
        data_tables.read_labelled(path, CLS)
    path = _csv(tmp_path / "n.csv", ["a", "b", "y"], _rows([0, -0.5, 1]))  # once read as class 0, silently
    with pytest.raises(ValueError, match=r"line 3 holds -0\.5"):
        data_tables.read_labelled(path, CLS)
    path = _csv(tmp_path / "u.csv", ["a", "b", "y"], _rows([0, 1, 3, -1, 3]))
    with pytest.raises(ValueError, match=r"line 4 holds '3', a label the run was not fitted on \(and 1 other unknown label\(s\): -1\)"):
        data_tables.read_labelled(path, CLS)
    _, y = data_tables.read_labelled(_csv(tmp_path / "ok.csv", ["y", "b", "a"], [(1.0, 0, 0), (0, 1, 1)]), CLS)
    assert y.tolist() == [1, 0]  # 1.0 is the class 1
    np.savez(tmp_path / "f.npz", x=np.zeros((3, 2)), y=np.array([0.0, 1.0, 0.5]))
    with pytest.raises(ValueError, match=r"array 'y' at index 2 holds 0\.5, not a class label"):
        data_tables.read_labelled(tmp_path / "f.npz", CLS)


def test_empty_label_names_its_line_counting_blank_lines(tmp_path):
    path = _csv(tmp_path / "e.csv", ["a", "b", "y"], _rows([0, 1, "", 1]), blank_after=2)  # a blank line 3
    with pytest.raises(ValueError, match=r"column 'y' on line 5 has no label \(''\)"):
        data_tables.read_labelled(path, CLS)
    path = _csv(tmp_path / "r.csv", ["a", "b", "y"], _rows([0.5, "NA", 1.5]), blank_after=1)
    with pytest.raises(ValueError, match=r"column 'y' has a missing value \('NA'\) on line 4"):
        data_tables.read_labelled(path, REG)
    path = _csv(tmp_path / "fit.csv", ["a", "b", "y"], _rows([0, 1, 0, 1, "", 0]), blank_after=1)
    with pytest.raises(ValueError, match="column 'y' has a missing value on line 7"):
        data_tables.from_file(path, "y")


def test_missing_columns_name_the_python_arguments(tmp_path):
    path = _csv(tmp_path / "m.csv", ["a", "c", "y"], _rows([0, 1]))
    with pytest.raises(MissingColumnError, match="no column 'b'.*labelled rows need a CSV header") as e:
        data_tables.read_labelled(path, CLS)
    assert e.value.column == "feature" and "by_name" not in str(e.value)
    with pytest.raises(MissingColumnError, match="no column 'b'.*by_name=False"):  # new inputs: read header-less with by_name=False
        data_tables.read_inputs(path, CLS)
    path = _csv(tmp_path / "t.csv", ["a", "b", "label"], _rows([0, 1]))
    with pytest.raises(MissingColumnError, match="no column 'y'.*target=COLUMN .*the run's target is 'y'") as e:
        data_tables.read_labelled(path, CLS)
    assert e.value.column == "target"


# -- the command line ---------------------------------------------------------------------------


def _run(folder, task):
    """A run folder like ``bnnpp fit`` writes for a CSV with features a, b and target y, holding
    a linear model by hand: classification p(1 | x) ≈ sigmoid(8a); regression y ≈ 2a."""
    from bnnpp.introspection import latent_sites

    rng = np.random.default_rng(0)
    x0 = np.zeros((1, 2), np.float32)
    if task == "classification":
        model, y0 = models.mlp((), num_classes=2), np.zeros(1, np.int32)
        w = np.array([[-4.0, 4.0], [0.0, 0.0]]) + 0.1 * rng.normal(size=(1, S, 2, 2))
        samples = {"dense_0.w": w, "dense_0.b": np.zeros((1, S, 2))}
        transform = CLS
    else:
        model, y0 = models.mlp((), likelihood="gaussian"), np.zeros(1, np.float32)
        w = np.array([[2.0], [0.0]]) + 0.1 * rng.normal(size=(1, S, 2, 1))
        samples = {"dense_0.w": w, "dense_0.b": np.zeros((1, S, 1)), "noise": np.full((1, S), 0.5)}
        transform = REG
    samples = {k: np.asarray(v, np.float32) for k, v in samples.items()}
    post = Posterior(samples, {"method": "map", "seed": 0, "options": {}}, model, x0[:0], y0[:0], latent_sites(model, x0, y0))
    folder.mkdir()
    post.save(folder / "posterior.nc")
    (folder / "metrics.json").write_text(
        json.dumps({"data": "train.csv", "target": "y", "method": "map", "preprocessing": transform.to_dict()})
    )
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    return {task: _run(root / task, task) for task in ("classification", "regression")}


def _one_line_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("bnnpp calibrate: error: "), err
    return err


def test_cli_refuses_too_few_rows_before_predicting(runs, tmp_path, capsys, monkeypatch):
    def no_prediction(*a, **k):
        raise AssertionError("the posterior predicted before the rows were counted")

    monkeypatch.setattr(Posterior, "_predict_uncalibrated", no_prediction)
    rng = np.random.default_rng(1)
    for n in (1, 2, 3):
        path = _csv(tmp_path / f"r{n}.csv", ["a", "b", "y"], np.c_[rng.normal(size=(n, 2)), rng.normal(size=n)])
        err = _one_line_error(capsys, ["calibrate", str(runs["regression"]), "--data", str(path)])
        assert "needs at least 9 calibration rows" in err and f"got {n}" in err, err
    path = _csv(tmp_path / "r60.csv", ["a", "b", "y"], np.c_[rng.normal(size=(60, 2)), rng.normal(size=60)])
    err = _one_line_error(capsys, ["calibrate", str(runs["regression"]), "--data", str(path), "--alpha", "0.001"])
    assert "alpha 0.001 needs at least 999 calibration rows" in err and "got 60" in err, err
    labels = _csv(tmp_path / "c3.csv", ["a", "b", "y"], _rows([0, 1, 1]))
    err = _one_line_error(capsys, ["calibrate", str(runs["classification"]), "--data", str(labels)])
    assert "needs at least 9" in err
    metrics = json.loads((runs["regression"] / "metrics.json").read_text())
    assert "calibration" not in metrics  # nothing was written


def test_cli_label_and_column_messages(runs, tmp_path, capsys):
    run = str(runs["classification"])
    frac = _csv(tmp_path / "frac.csv", ["a", "b", "y"], _rows([0, 1, 1.5, 0, 2.5]))
    err = _one_line_error(capsys, ["calibrate", run, "--data", str(frac)])
    assert "column 'y' on line 4 holds 1.5, not a class label" in err and "label(s) -1" not in err, err
    empty = _csv(tmp_path / "empty.csv", ["a", "b", "y"], _rows([0, 1, 0, "", 1]))
    err = _one_line_error(capsys, ["calibrate", run, "--data", str(empty)])
    assert "column 'y' on line 5 has no label" in err, err
    nofeature = _csv(tmp_path / "nofeature.csv", ["a", "c", "y"], _rows([0, 1]))
    err = _one_line_error(capsys, ["calibrate", run, "--data", str(nofeature)])
    assert "no column 'b'" in err and "--data needs a header row" in err and "by_name" not in err, err
    notarget = _csv(tmp_path / "notarget.csv", ["a", "b", "label"], _rows([0, 1]))
    err = _one_line_error(capsys, ["calibrate", run, "--data", str(notarget)])
    assert "no column 'y'" in err and "--target COLUMN" in err and "target=" not in err, err


def test_cli_warns_at_a_temperature_bound_and_states_the_coverage(runs, tmp_path, capsys):
    run = runs["classification"]
    rng = np.random.default_rng(2)
    a = -1 - rng.random(40)  # every row predicted class 0 with confidence, every label 1
    one_class = _csv(tmp_path / "one.csv", ["a", "b", "y"], [(v, 0.0, 1) for v in a])
    with pytest.warns(TemperatureBoundWarning, match=r"upper bound T = 100 .*a single class \(index 1 of 2\).*no row classified right"):
        assert main(["calibrate", str(run), "--data", str(one_class)]) == 0
    out = capsys.readouterr()
    assert "coverage: split conformal (aps): marginal coverage ≥ 1−α = 0.9" in out.out, out.out
    recorded = json.loads((run / "metrics.json").read_text())["calibration"]
    assert recorded["coverage"].startswith("split conformal (aps): marginal coverage ≥ 1−α = 0.9") and recorded["n"] == 40
    with pytest.warns(TemperatureBoundWarning):
        assert main(["calibrate", str(run), "--data", str(one_class), "--no-conformal"]) == 0
    assert "no coverage guarantee" in capsys.readouterr().out
    assert json.loads((run / "metrics.json").read_text())["calibration"]["coverage"] is None
