"""A user's own data: ``bnnpp.data.from_file`` (CSV / npz), ``bnnpp fit --data FILE``,
``bnnpp predict`` and ``--config`` files, on small CSVs generated in ``tmp_path``."""

from __future__ import annotations

import csv
import json
import re

import numpy as np
import pytest

from bnnpp import config, data, runs
from bnnpp.cli import main

N = 150


def _write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def _houses(n=N, seed=0):
    """price = 3·area + 20·rooms + noise (sd 5): a linear target a small net learns."""
    rng = np.random.default_rng(seed)
    area, rooms = rng.normal(50, 10, n), rng.uniform(0, 5, n)
    return area, rooms, 3 * area + 20 * rooms + rng.normal(0, 5, n)


@pytest.fixture
def houses(tmp_path):
    area, rooms, price = _houses()
    return _write_csv(tmp_path / "my.csv", ["area", "rooms", "price"], zip(area, rooms, price, strict=True))


# ----------------------------------------------------------------------------- from_file


def test_csv_regression_is_standardised_on_the_training_rows(houses):
    ds = data.from_file(houses, "price", test_fraction=0.2, seed=3)
    area, rooms, price = _houses()
    assert ds.task == "regression" and ds.num_classes is None
    assert ds.x_train.shape == (120, 2) and ds.x_test.shape == (30, 2) and ds.x_train.dtype == np.float32
    # training inputs and targets have mean 0 and sd 1 (float32 rounding: 1e-5)
    np.testing.assert_allclose(ds.x_train.mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(ds.x_train.std(0), 1, atol=1e-5)
    np.testing.assert_allclose([ds.y_train.mean(), ds.y_train.std()], [0, 1], atol=1e-5)
    # the split is a seeded partition of the rows: train ∪ test back in original units = the file
    back = np.concatenate([ds.y_train, ds.y_test]) * ds.y_scale + ds.y_shift
    np.testing.assert_allclose(np.sort(back), np.sort(price), rtol=1e-5)
    t = ds.transform
    assert t.features == ("area", "rooms") and t.target == "price"
    np.testing.assert_allclose(t.inputs(np.c_[area, rooms])[:3], ((np.c_[area, rooms] - t.x_mean) / t.x_sd)[:3], rtol=1e-6)
    same = data.from_file(houses, "price", test_fraction=0.2, seed=3)
    other = data.from_file(houses, "price", test_fraction=0.2, seed=4)
    assert np.array_equal(same.x_test, ds.x_test) and not np.array_equal(other.y_test, ds.y_test)
    assert data.FileTransform.from_dict(json.loads(json.dumps(t.to_dict()))).to_dict() == t.to_dict()


def test_task_is_inferred_or_given(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 2))
    ints = _write_csv(tmp_path / "ints.csv", ["a", "b", "label"], [(*r, k % 3 + 1) for k, r in enumerate(x)])
    ds = data.from_file(ints, "label")
    assert ds.task == "classification" and ds.num_classes == 3 and ds.transform.classes == (1, 2, 3)
    assert set(np.unique(np.r_[ds.y_train, ds.y_test])) == {0, 1, 2} and ds.y_train.dtype == np.int32
    text = _write_csv(tmp_path / "text.csv", ["a", "b", "kind"], [(*r, "cat" if r[0] > 0 else "dog") for r in x])
    assert data.from_file(text, "kind").transform.classes == ("cat", "dog")
    assert data.from_file(ints, "label", task="regression").task == "regression"
    many = _write_csv(tmp_path / "many.csv", ["a", "b", "count"], [(*r, k) for k, r in enumerate(x)])
    assert data.from_file(many, "count").task == "regression"  # 40 distinct integers: not classes


def test_npz_with_its_own_test_split(tmp_path):
    rng = np.random.default_rng(0)
    x, xt = rng.normal(size=(30, 3)), rng.normal(size=(7, 3))
    path = tmp_path / "d.npz"
    np.savez(path, x=x, y=x.sum(1), x_test=xt, y_test=xt.sum(1))
    ds = data.from_file(path)
    assert ds.x_train.shape == (30, 3) and ds.x_test.shape == (7, 3) and ds.task == "regression"
    np.testing.assert_allclose(ds.x_test, (xt - x.mean(0)) / x.std(0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "rows, target, match",
    [
        ([("1", "red", "2"), ("2", "blue", "3"), ("3", "red", "4")], "y", "column 'b' is not numeric \\(line 2: 'red'\\)"),
        ([("1", "2", "2"), ("2", "", "3"), ("3", "1", "4")], "y", "column 'b' has a missing value .* on line 3"),
        ([("1", "2", "2"), ("2", "nan", "3"), ("3", "1", "4")], "y", "column 'b' has a missing value"),
        ([("1", "2", "2"), ("2", "1", "3"), ("3", "1", "4")], "price", "no column 'price'; its columns are a, b, y"),
        ([("1", "2", "2"), ("2", "1", "NA"), ("3", "1", "4")], "y", "column 'y' has a missing value on line 3"),
    ],
)
def test_bad_files_are_one_line_errors(tmp_path, rows, target, match):
    path = _write_csv(tmp_path / "bad.csv", ["a", "b", "y"], rows)
    with pytest.raises(ValueError, match=match) as e:
        data.from_file(path, target)
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------- fit / predict / config


def test_csv_round_trip_fit_predict_config(houses, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BNNPP_CACHE_DIR", str(tmp_path / "cache"))  # the second fit loads the programs
    run = tmp_path / "R"
    flags = ["--method", "bbb", "--hidden", "10", "--epochs", "300", "--num-samples", "50", "--quiet"]
    assert main(["fit", "--data", str(houses), "--target", "price", *flags, "--out", str(run)]) == 0
    report = json.loads((run / "metrics.json").read_text())
    assert report["preprocessing"]["features"] == ["area", "rooms"] and report["sha256"] == data.file_sha256(houses)
    assert set(report["test"]) >= {"rmse", "nll", "coverage_95"}
    assert {"config.toml", "uncertainty.png"} <= {p.name for p in run.iterdir()}  # predicted vs observed, calibration, residuals
    # new rows with the columns in another order and no target
    area, rooms, price = _houses(20, seed=9)
    new = _write_csv(tmp_path / "new.csv", ["rooms", "area"], zip(rooms, area, strict=True))
    assert main(["predict", str(run), "--data", str(new), "--out", str(tmp_path / "p.csv")]) == 0
    with open(tmp_path / "p.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 20 and list(table[0]) == ["mean", "sd", "epistemic_sd", "aleatoric_sd"]
    mean = np.array([float(r["mean"]) for r in table])
    sd = np.array([float(r["sd"]) for r in table])
    # in price units: the net learnt the linear map (error well under the targets' sd of ~35)
    assert np.sqrt(np.mean((mean - price) ** 2)) < 0.3 * price.std()
    assert np.all(sd > 0)
    # the same through the library, and by position (--x: no header)
    lib = runs.dataset_from_record(report)
    np.testing.assert_array_equal(lib.x_train, data.from_file(houses, "price", test_fraction=0.2, seed=0).x_train)
    with open(tmp_path / "x.csv", "w") as f:
        f.writelines(f"{a},{r}\n" for a, r in zip(area, rooms, strict=True))
    assert main(["predict", str(run), "--x", str(tmp_path / "x.csv"), "--out", str(tmp_path / "p.npz")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "p.npz")["mean"], mean, rtol=1e-4)
    # the stored config repeats the run
    again = tmp_path / "again"
    assert main(["fit", "--config", str(run / "config.toml"), "--out", str(again)]) == 0
    assert json.loads((again / "metrics.json").read_text())["test"] == report["test"]
    # a hand-written config, relative data path, and a flag that overrides it
    (tmp_path / "run.toml").write_text('data = "my.csv"\ntarget = "price"\nmethod = "bbb"\nhidden = [10]\n'
                                       "[inference]\nepochs = 300\nnum_samples = 50\n")
    third = tmp_path / "third"  # (the same programs as the first fit: loaded from the cache)
    assert main(["fit", "--config", str(tmp_path / "run.toml"), "--seed", "1", "--quiet", "--out", str(third)]) == 0
    third_report = json.loads((third / "metrics.json").read_text())
    assert (third_report["seed"], third_report["steps_run"], third_report["options"]["num_samples"]) == (1, 300, 50)
    capsys.readouterr()


def test_classification_predict_columns(tmp_path, monkeypatch):
    monkeypatch.setenv("BNNPP_CACHE_DIR", str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 2))
    path = _write_csv(tmp_path / "kinds.csv", ["a", "b", "kind"], [(*r, "cat" if r[0] + r[1] > 0 else "dog") for r in x])
    run = tmp_path / "R"
    assert main(["fit", "--data", str(path), "--target", "kind", "--method", "map", "--num-steps", "300", "--quiet",
                 "--out", str(run)]) == 0
    assert main(["predict", str(run), "--data", str(path), "--out", str(tmp_path / "p.csv")]) == 0
    with open(tmp_path / "p.csv") as f:
        table = list(csv.DictReader(f))
    # the file's other columns (here the label) come first, as written
    assert list(table[0]) == ["kind", "prob_cat", "prob_dog", "predicted", "entropy", "mutual_information"]
    assert [r["kind"] for r in table] == ["cat" if a + b > 0 else "dog" for a, b in x]
    p = np.array([[float(r["prob_cat"]), float(r["prob_dog"])] for r in table])
    np.testing.assert_allclose(p.sum(1), 1, atol=1e-5)
    entropy = np.array([float(r["entropy"]) for r in table])
    np.testing.assert_allclose(entropy, -(p * np.log(np.maximum(p, 1e-30))).sum(1), atol=1e-4)  # 6 printed digits
    predicted = np.array([r["predicted"] for r in table])
    truth = np.where(x[:, 0] + x[:, 1] > 0, "cat", "dog")
    assert np.mean(predicted == truth) > 0.9  # a linear boundary
    assert all(float(r["mutual_information"]) == 0 for r in table)  # one MAP draw: no epistemic part


@pytest.mark.parametrize(
    "argv, match",
    [
        (["fit", "--data", "{csv}", "--out", "{out}"], "needs --target COLUMN"),
        (["fit", "--data", "{csv}", "--target", "nope", "--out", "{out}"], "no column 'nope'"),
        (["fit", "--data", "nowhere.csv", "--target", "y", "--out", "{out}"], "no such file"),
        (["fit", "--data", "moons", "--target", "y", "--out", "{out}"], "--target applies to your own"),
        (["fit", "--data", "{csv}", "--target", "price", "--data-noise", "1", "--out", "{out}"], "--data-noise applies"),
        (["fit", "--config", "{toml}", "--out", "{out}"], "config key 'stepz' is not an option of bnnpp fit"),
        (["fit", "--data", "{csv}", "--target", "price", "--method", "nuts", "--epochs", "3", "--out", "{out}"],
         "nuts is not trained in epochs.*num_warmup"),
        (["predict", "{tmp}", "--data", "{csv}", "--out", "{tmp}/p.csv"], "holds no posterior.nc"),
    ],
)
def test_bad_input_is_one_line(houses, tmp_path, capsys, argv, match):
    (tmp_path / "bad.toml").write_text("stepz = 3\n")
    fill = {"csv": str(houses), "out": str(tmp_path / "out"), "toml": str(tmp_path / "bad.toml"), "tmp": str(tmp_path)}
    assert main([a.format(**fill) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(match, err), err
    assert not (tmp_path / "out").exists()


def test_fit_sizes_the_run_folder_for_the_chains_it_will_run(tmp_path, capsys, monkeypatch):
    """mclmc's num_chains is unset (by device) until its options are resolved: the free-space
    check before the fit counts the resolved chains (it failed on None)."""
    from bnnpp import files

    seen = []

    def refuse(path, nbytes, what):
        seen.append(nbytes)
        raise ValueError("no room (test)")

    monkeypatch.setattr(files, "check_free_space", refuse)
    argv = ["fit", "--data", "moons", "--method", "mclmc", "--num-samples", "5", "--hidden", "2", "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    assert "no room (test)" in capsys.readouterr().err and len(seen) == 1


def test_predict_missing_column_names_the_cli_flag(houses, tmp_path, capsys, monkeypatch):
    """bnnpp predict's hint names its own flag (--x), not read_inputs' Python argument."""
    monkeypatch.setenv("BNNPP_CACHE_DIR", str(tmp_path / "cache"))
    run = tmp_path / "R"
    assert main(["fit", "--data", str(houses), "--target", "price", "--method", "map", "--num-steps", "20", "--quiet",
                 "--out", str(run)]) == 0
    capsys.readouterr()
    rows = _write_csv(tmp_path / "rows.csv", ["area"], [(1.0,), (2.0,)])
    assert main(["predict", str(run), "--data", str(rows), "--out", str(tmp_path / "p.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no column 'rooms'" in err and "--x FILE" in err and "by_name" not in err, err
    assert not (tmp_path / "p.csv").exists()
    from bnnpp import tables

    with pytest.raises(ValueError, match="no column 'rooms'.*by_name=False"):  # the Python API names its argument
        tables.predict_run(run, rows)


def test_config_to_argv_matches_the_flags(tmp_path):
    from bnnpp.cli import build_parser

    parser = build_parser()
    (tmp_path / "empty.toml").write_text("")
    argv = config.expand_argv(parser, ["fit", "--config", str(tmp_path / "empty.toml"), "--out", "x"])  # no flags
    assert argv == ["fit", "--out", "x"]
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices["fit"]
    flags = config.to_argv(sub, {"num_steps": 5, "hidden": [4, 4], "learn_prior": True, "method": "bbb"})
    assert flags == ["--num-steps", "5", "--hidden", "4,4", "--learn-prior", "--method", "bbb"]
    # a switch some method has on by default: false gives its --no- form, which parses to False
    flags = config.to_argv(sub, {"method": "mclmc", "noncentered": False, "learn_prior": False})
    assert flags == ["--method", "mclmc", "--no-noncentered"]
    assert sub.parse_args([*flags, "--out", "x"]).noncentered is False
    assert not hasattr(sub.parse_args(["--method", "mclmc", "--out", "x"]), "noncentered")  # not given: the method's default
    compare = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices["compare"]
    flags = config.to_argv(compare, {"methods": "map,nuts", "nuts": {"num_samples": 5}}, command="compare")
    assert flags == ["--set", "nuts.num_samples=5", "--methods", "map,nuts"]
    text = config.dumps({"a": 1, "b": [1.5, 2.0], "c": "x\"y", "d": None, "e": False})
    import tomllib

    assert tomllib.loads(text) == {"a": 1, "b": [1.5, 2.0], "c": 'x"y', "e": False}


@pytest.mark.parametrize("command", ["fit", "predict", "compare", "sweep", "evaluate", "prune"])
def test_help_prints_each_default_once(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "(default: None)" not in text
    for entry in re.split(r"\s(?=--[a-z])", text):  # one flag's help at a time
        assert entry.count("default") <= 1 or "(default:" not in entry, entry
