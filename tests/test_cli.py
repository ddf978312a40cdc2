"""The command line: one end-to-end run in a subprocess, and bad input in-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import arviz as az
import pytest

from bnnpp.cli import main
from bnnpp.inference.registry import command_line_options, get_method, registered


def test_fit_end_to_end(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "BNNPP_CACHE_DIR": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "bnnpp", "fit", "--data", "moons", "--method", "advi", "--hidden", "5,5",
           "--activation", "tanh", "--prior", "normal", "--hyperprior", "inverse-gamma", "--steps", "4000",
           "--seed", "0", "--out", str(out), "--quiet"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "test accuracy" in proc.stdout
    assert sorted(p.name for p in out.iterdir()) == ["config.toml", "metrics.json", "posterior.nc", "uncertainty.png"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".bnnpp-")]  # temp folder removed
    idata = az.from_netcdf(out / "posterior.nc")
    assert {"chain", "draw"} <= set(idata.posterior.dims)
    assert idata.posterior["dense_0.variance"].dims == ("chain", "draw")
    report = json.loads((out / "metrics.json").read_text())
    assert 0.8 <= report["test"]["accuracy"] <= 1.0
    assert set(report["seconds"]) >= {"import", "compile", "fit", "predict"}
    assert report["steps_run"] == 4000
    assert (out / "uncertainty.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# slow: advi's evidence start compiles and runs two fits; the fast set fits a regression through the CLI in
# tests/test_cli_data.py::test_csv_round_trip_fit_predict_config (bbb, the same test metrics checked there)
@pytest.mark.slow
def test_fit_sinusoid_regression(tmp_path):
    out = tmp_path / "sin"
    code = main(["fit", "--data", "sinusoid", "--hidden", "20", "--prior", "normal", "--hyperprior", "half-normal",
                 "--steps", "300", "--num-samples", "50", "--out", str(out), "--quiet", "--no-cache"])
    assert code == 0
    report = json.loads((out / "metrics.json").read_text())
    assert set(report["test"]) >= {"rmse", "nll", "coverage_95"}


# small settings per method so that `bnnpp fit --method M` runs end to end for every M
CHOICES = {  # the CLI run also exercises these choice flags, on top of the method's smoke settings
    "bbb": ["--estimator", "flipout"],
    "mc_dropout": ["--concrete"],
    "vd": ["--variant", "sparse"],
}


def cli_small(method: str) -> list[str]:
    """``bnnpp fit`` flags of ``method``'s smoke settings (``Method.smoke``), with its :data:`CHOICES`."""
    flag = {o.option: o.flag for o in command_line_options()}
    argv = []
    for name, value in get_method(method).smoke.items():
        argv += [flag[name]] if value is True else [] if value is False else [flag[name], str(value)]
    return argv + CHOICES.get(method, [])


CLI_SMALL = {m: cli_small(m) for m in registered()}


# map runs in the fast set; every other method's CLI run is slow (the registry's contract tests
# cover each method in the fast set, and test_fit_end_to_end is CI's end-to-end CLI run)
@pytest.mark.parametrize("method", [m if m == "map" else pytest.param(m, marks=pytest.mark.slow) for m in sorted(CLI_SMALL)])
def test_fit_every_method(method, tmp_path):
    out = tmp_path / method
    code = main(["fit", "--data", "moons", "--method", method, *CLI_SMALL[method], "--out", str(out), "--quiet", "--no-cache"])
    assert code == 0
    report = json.loads((out / "metrics.json").read_text())
    assert report["method"] == method and 0 <= report["test"]["accuracy"] <= 1
    idata = az.from_netcdf(out / "posterior.nc")
    assert idata.posterior["dense_0.w"].dims == ("chain", "draw", "dense_0.in", "dense_0.out")


def test_every_registered_method_has_small_cli_settings():
    import bnnpp

    assert set(bnnpp.registered()) == set(CLI_SMALL)
    assert all(CLI_SMALL.values())  # every method carries smoke settings


def test_help_lists_every_option(capsys):
    with pytest.raises(SystemExit) as e:
        main(["fit", "--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--data", "--method", "--hidden", "--activation", "--prior", "--hyperprior", "--steps", "--seed",
                 "--out", "--learning-rate", "--num-particles", "--guide", "--num-samples", "--per", "--scale"):
        assert flag in text
    from bnnpp.cli._fit_flags import _flag, method_flags

    flags = method_flags()  # the registry's now (METHOD_FLAGS is frozen at import: another test may have added a method then)

    # every option of every method is reachable from the command line, except the optimizer
    # object (Python API only)
    options = {opt for _, opt, _ in flags}
    import bnnpp
    from bnnpp.inference import get_method

    for m in bnnpp.registered():
        missing = set(get_method(m).defaults) - options - {"optimizer", "chunk_size", "validation_data"}
        assert not missing, (m, missing)
    for dest, _, _ in flags:
        assert _flag(dest) in text


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--hyperprior", "fixed", "--scale", "-1"], "positive"),
        (["--hyperprior", "inverse-gamma", "--hyperprior-params", "1,0"], "positive"),
        (["--steps", "0"], "num_steps"),
        (["--learning-rate", "-0.1"], "learning_rate"),
        (["--prior", "flat", "--hyperprior", "half-cauchy"], "no hyperprior"),
        (["--data-noise", "-1"], "noise"),
        (["--obs-noise", "1"], "regression"),
        (["--seed", "-3"], "seed"),
        (["--method", "bbb", "--num-warmup", "100"], "--num-warmup does not apply to --method bbb; it takes --epochs"),
        (["--method", "bbb", "--steps", "100", "--epochs", "3"], "pass either num_steps or epochs"),
        (["--method", "map", "--num-chains", "2"], "--num-chains does not apply to --method map"),
        (["--method", "nuts", "--num-chains", "0"], "num_chains"),
        (["--method", "bbb", "--batch-size", "5000"], "batch_size 5000 is larger than the 700 training rows"),
        (["--method", "sgld", "--step-size", "0"], "step_size"),
        (["--method", "advi", "--learn-prior"], "--learn-prior does not apply to --method advi"),
        (["--scale", "2"], "--scale 2 is the fixed prior scale and needs --hyperprior fixed"),  # not silently ignored
        (["--hyperprior", "fixed", "--per", "unit"], "per='unit' scopes a sampled scale"),
    ],
)
def test_bad_input_one_line_error_no_output(argv, match, tmp_path, capsys):
    out = tmp_path / "never"
    code = main(["fit", "--out", str(out), "--quiet", "--no-cache", *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("bnnpp fit: error:") and "\n" not in err and "Traceback" not in err
    assert match in err
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", [["--method", "sgd9"], ["--prior", "gauss"], ["--hidden", "5,x"], ["--guide", "diag"]])
def test_argparse_rejects_unknown_choices(argv, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["fit", "--out", str(tmp_path / "x"), *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "bnnpp fit: error: argument" in err and len(err.splitlines()) == 1, err  # one line, no usage block
    assert err.endswith("see bnnpp fit --help")


def test_a_bad_value_from_a_config_file_names_the_file(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text('method = "map"\nnum_steps = 3.5\n')
    with pytest.raises(SystemExit) as e:
        main(["fit", "--config", str(cfg), "--out", str(tmp_path / "x")])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "invalid int value: '3.5'" in err and f"--config {cfg}" in err, err
    assert not (tmp_path / "x").exists()


def test_fixed_scale_and_hyperprior_defaults_still_accepted(tmp_path):
    """1 and layer are the defaults a config.toml of an earlier run records: accepted with any hyperprior."""
    from bnnpp.priors import from_flags

    assert from_flags("normal", "inverse-gamma", None, 1.0, "layer") == from_flags("normal", "inverse-gamma", None, None, None)
    assert from_flags("normal", "fixed", None, None, "layer").scale == 1.0
    assert from_flags("normal", "fixed", None, 2.5, None).scale == 2.5
